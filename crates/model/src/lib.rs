//! The model and its state, kept apart.
//!
//! A [`Model`] is immutable: weights stay in the memory-mapped GGUF file, and one
//! `Arc<Model>` serves every conversation. A [`State`] holds what one conversation holds — the
//! KV cache, the position, the token history — and persists across forward calls: the prompt
//! is prefilled once, then each new token costs one decode step. The forward pass's working
//! buffers are a [`Scratch`], which belongs to the computation (one per compute thread, as
//! llama.cpp's compute buffers belong to its context), not to a State: N conversations cost
//! N caches and one scratch.
//!
//! ```no_run
//! # use statelm_model::{Model, LoadOptions, Logits};
//! let model = Model::load("gemma-3-270m-q4_k_m.gguf", &LoadOptions::default())?;
//! let mut scratch = model.new_scratch();   // one per compute thread
//! let mut state = model.new_state(2048);    // one per conversation
//! let mut logits = Logits::default();
//! let prompt = model.tokenizer().encode("The capital of France is", true, false)?;
//! model.forward_into(&mut scratch, &mut state, &prompt, Default::default(), &mut logits)?;
//! let next = statelm_model::argmax(logits.last());
//! model.forward_into(&mut scratch, &mut state, &[next], Default::default(), &mut logits)?;
//! // One-shot calls may leave the buffers to the call: `model.forward(&mut state, &prompt)`.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod arch;
mod attention;
pub mod config;
mod conv;
pub mod files;
mod forward;
pub mod kv;
mod model;
mod names;
pub mod ops;
pub mod quantize;
pub mod registry;
pub mod rope;
mod scratch;
mod snapshot;
mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod weights;

pub use config::{Arch, ModelConfig};
pub use conv::CONV_ROLLBACK;
pub use files::{private_create_new, sync_dir, write_file_atomic};
pub use forward::Trace;
pub use kv::KvType;
pub use model::{
    default_threads, ForwardOptions, LoadOptions, Logits, LogitsMode, Model, Numerics,
};
pub use names::UnknownName;
pub use scratch::Scratch;
pub use snapshot::SnapshotError;
pub use state::{RetainMethod, RetainOutcome, State, StateOptions};
pub use weights::Weights;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] statelm_gguf::GgufError),
    /// A tensor could not be decoded or multiplied.
    #[error(transparent)]
    Quant(#[from] statelm_quant::QuantError),
    /// The tokenizer metadata is unusable.
    #[error(transparent)]
    Tokenizer(#[from] statelm_tokenizer::TokenizerError),
    /// Reading or writing a file failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A snapshot could not be read.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// `general.architecture` names an architecture statelm does not run.
    #[error("unsupported architecture {0:?} (supported: {list})", list = Arch::supported_list())]
    UnsupportedArchitecture(String),
    /// A metadata key of the architecture that changes the computation and that statelm does
    /// not implement (or a value of it that statelm does not implement).
    #[error("unsupported metadata key {key:?}: {reason}")]
    UnsupportedKey {
        /// The full key.
        key: String,
        /// Why it is refused.
        reason: String,
    },
    /// A tensor in the file that the architecture's description does not use: computing
    /// without it would be silently wrong.
    #[error("unsupported tensor {name:?}: statelm's {arch} does not use it")]
    UnsupportedTensor {
        /// The tensor's name.
        name: String,
        /// The architecture.
        arch: &'static str,
    },
    /// A tensor the architecture needs is absent.
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    /// A tensor has the wrong shape or type.
    #[error("tensor {name:?}: {reason}")]
    BadTensor {
        /// Tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Hyperparameters that contradict each other.
    #[error("bad model configuration: {0}")]
    BadConfig(String),
    /// The state cannot hold the new tokens; nothing was dropped.
    #[error("context full: {len} tokens in the state + {adding} new > capacity {capacity}")]
    ContextFull {
        /// Tokens already in the state.
        len: usize,
        /// Tokens being added.
        adding: usize,
        /// The state's capacity.
        capacity: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {token} is outside the vocabulary ({n_vocab} tokens)")]
    InvalidToken {
        /// The offending id.
        token: u32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// The state was made by another model.
    #[error("this state belongs to a different model")]
    StateMismatch,
    /// The call was cancelled; the state holds the tokens processed before.
    #[error("cancelled")]
    Cancelled,
}

/// Index of the largest value (ties: the lowest index), or 0 for an empty slice.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}
