//! `Model`: the immutable, shareable half — weights in the memory map, hyperparameters, the
//! tokenizer and the worker threads. What a conversation holds lives in its [`State`]; the
//! forward pass's working buffers live in a [`Scratch`] that belongs to the computation.

use crate::config::ModelConfig;
use crate::forward::{forward_batch, BatchCtx, Trace};
use crate::scratch::Scratch;
use crate::state::{RetainMethod, RetainOutcome, State, StateOptions};
use crate::weights::Weights;
use crate::ModelError;
use sha2::{Digest, Sha256};
use statelm_gguf::GgufFile;
use statelm_quant::ThreadPool;
use statelm_tokenizer::Tokenizer;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// How to load a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Worker threads for matrix products (0: one per available core).
    pub threads: usize,
    /// Largest number of tokens a prefill processes at once (also the extra cells of a
    /// sliding-window ring).
    pub ubatch: usize,
    /// How prefill batches sum their products.
    pub numerics: Numerics,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: 0,
            ubatch: 512,
            numerics: Numerics::Fast,
        }
    }
}

/// How a forward pass orders its floating-point sums. Decode steps and batches below
/// 32 tokens are the same in both modes: every product sums in the order of llama.cpp's x86
/// AVX2 CPU backend (ggml's dot, softmax and quantized kernels). The modes differ in prefill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numerics {
    /// Batches of 32 tokens or more run f32 GEMMs (dequantized activations, cache-blocked
    /// attention): the same products in another order, several times faster.
    #[default]
    Fast,
    /// Every batch keeps llama.cpp's order, so logits can be compared with llama.cpp bit for
    /// bit (parity tests); prefill is slower, and sliding-window layers keep full-size caches
    /// as llama.cpp's default does (its cell order is part of its summation order).
    LlamaCpp,
}

/// Which logits a forward call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsMode {
    /// Only the last new token's (decode and ordinary prefill).
    Last,
    /// The last `n` new tokens' (teacher forcing, perplexity).
    LastN(usize),
    /// None (prefill only).
    None,
}

/// Options of one forward call.
#[derive(Default)]
pub struct ForwardOptions<'a> {
    /// Which logits to compute (default: the last token's).
    pub logits: Option<LogitsMode>,
    /// Receives intermediates layer by layer.
    pub trace: Option<&'a mut dyn Trace>,
    /// Checked between micro-batches; when set, the call stops with [`ModelError::Cancelled`]
    /// and the state keeps the tokens processed so far.
    pub cancel: Option<&'a AtomicBool>,
}

/// Logits of one or more positions: `rows × n_vocab`, row-major.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logits {
    n_vocab: usize,
    data: Vec<f32>,
}

impl Logits {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.data.len() / self.n_vocab.max(1)
    }

    /// Row `i` (in the order of the tokens they follow).
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// Row `i`, mutable (samplers work in place).
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.data[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// The last row (empty when no logits were requested).
    pub fn last(&self) -> &[f32] {
        match self.rows() {
            0 => &[],
            r => self.row(r - 1),
        }
    }

    /// The last row, mutable (samplers work in place; empty when no logits were requested).
    pub fn last_mut(&mut self) -> &mut [f32] {
        let rows = self.rows();
        match rows {
            0 => &mut [],
            r => &mut self.data[(r - 1) * self.n_vocab..r * self.n_vocab],
        }
    }

    /// Takes the buffer (rows × n_vocab).
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
}

/// Metadata arrays the tokenizer indexes at load and the model then releases.
const TOKENIZER_ARRAYS: [&str; 4] = [
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
];

/// A loaded model: immutable and `Send + Sync`; share it as `Arc<Model>`.
pub struct Model {
    file: GgufFile,
    config: Arc<ModelConfig>,
    weights: Weights,
    tokenizer: Tokenizer,
    pool: Mutex<ThreadPool>,
    n_threads: usize,
    ubatch: usize,
    numerics: Numerics,
    fingerprint: [u8; 32],
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("config", &self.config)
            .field("threads", &self.n_threads)
            .finish_non_exhaustive()
    }
}

/// The default number of worker threads: one per available core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Model {
    /// Opens a GGUF file and checks every tensor the architecture needs.
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Arc<Model>, ModelError> {
        let file = GgufFile::open(path.as_ref())?;
        Model::from_gguf(file, opts).map(Arc::new)
    }

    /// Builds a model from an opened GGUF file.
    pub fn from_gguf(mut file: GgufFile, opts: &LoadOptions) -> Result<Model, ModelError> {
        let config = ModelConfig::from_gguf(&file)?;
        let weights = Weights::load(&file, &config)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let fingerprint = fingerprint(&file);
        // The tokenizer has indexed these; the model does not keep a second copy (~16 MiB of
        // strings for Gemma 3's 262 K vocabulary).
        file.release_values(&TOKENIZER_ARRAYS);
        let n_threads = if opts.threads == 0 {
            default_threads()
        } else {
            opts.threads
        };
        Ok(Model {
            config: Arc::new(config),
            weights,
            tokenizer,
            pool: Mutex::new(ThreadPool::new(n_threads)),
            n_threads,
            ubatch: opts.ubatch.max(1),
            numerics: opts.numerics,
            fingerprint,
            file,
        })
    }

    /// Hyperparameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The tokenizer read from the same file.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The GGUF file (metadata, tensor index). The tokenizer's arrays (tokens, scores, token
    /// types, merges) are released once the tokenizer is built: they read as empty here; use
    /// [`Model::tokenizer`], or open the file again for the raw arrays.
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    /// Worker threads forward calls were given at load (the most [`Model::set_threads`]
    /// allows).
    pub fn threads(&self) -> usize {
        self.n_threads
    }

    /// Worker threads forward calls use now.
    pub fn threads_in_use(&self) -> usize {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .n_threads()
    }

    /// Lets forward calls use `n` threads from now on (clamped to 1..=[`Model::threads`]), as
    /// a hot phone asks: the pool is rebuilt between two calls (a call in progress finishes
    /// with the old one). Results do not depend on the thread count. Returns the count set.
    pub fn set_threads(&self, n: usize) -> usize {
        let n = n.clamp(1, self.n_threads.max(1));
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.n_threads() != n {
            *pool = ThreadPool::new(n);
        }
        n
    }

    /// SHA-256 of the file's header (metadata and tensor index) and size: identifies the
    /// model in snapshots without hashing the weights.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// Bytes of weights streamed per decoded token.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.weights.bytes_per_token()
    }

    /// Bytes of the memory-mapped file (weights and metadata).
    pub fn file_bytes(&self) -> u64 {
        self.file.file_size()
    }

    /// A new, empty state for up to `capacity` tokens with the default (f16) KV cache.
    pub fn new_state(&self, capacity: usize) -> State {
        self.new_state_with(StateOptions::new(capacity))
            .expect("f16 caches have no shape requirement")
    }

    /// A new, empty state.
    pub fn new_state_with(&self, opts: StateOptions) -> Result<State, ModelError> {
        // llama.cpp's default (`swa_full`) keeps full-size caches on sliding-window layers; its
        // numerics need its cell order, so `Numerics::LlamaCpp` does the same.
        let full_swa = self.numerics == Numerics::LlamaCpp;
        State::new(
            self.config.clone(),
            self.fingerprint,
            opts,
            self.ubatch,
            full_swa,
        )
    }

    /// Empty working buffers for forward calls, for micro-batches of the model's `ubatch`.
    /// Keep one per compute thread and pass it to [`Model::forward_into`]: it serves every
    /// State, so N conversations cost N KV caches and one set of buffers.
    pub fn new_scratch(&self) -> Scratch {
        Scratch::with_ubatch(self.ubatch)
    }

    /// How prefill batches sum their products (`LoadOptions::numerics`).
    pub fn numerics(&self) -> Numerics {
        self.numerics
    }

    /// The micro-batch of a prefill (`LoadOptions::ubatch`).
    pub fn ubatch(&self) -> usize {
        self.ubatch
    }

    /// Runs `tokens` after what `state` holds and returns the last token's logits. One-shot:
    /// the call makes its own buffers and frees them; a loop should keep a [`Scratch`] and use
    /// [`Model::forward_into`].
    pub fn forward(&self, state: &mut State, tokens: &[u32]) -> Result<Logits, ModelError> {
        self.forward_with(state, tokens, ForwardOptions::default())
    }

    /// [`Model::forward`] with options; one-shot as well (its own buffers, freed at return).
    pub fn forward_with(
        &self,
        state: &mut State,
        tokens: &[u32],
        opts: ForwardOptions<'_>,
    ) -> Result<Logits, ModelError> {
        let mut logits = Logits::default();
        let mut scratch = self.new_scratch();
        self.forward_into(&mut scratch, state, tokens, opts, &mut logits)?;
        Ok(logits)
    }

    /// Runs `tokens` after what `state` holds, in the buffers of `scratch` (prefill as batched
    /// matrix products in micro-batches of `min(scratch.ubatch(), model ubatch)` tokens, decode
    /// as matrix-vector products), writing the logits into `logits` (its allocation is
    /// reused): a decode loop that keeps one [`Scratch`] and one [`Logits`] allocates nothing
    /// once warm. Pending re-prefill tokens left by [`State::retain`] are recomputed first.
    pub fn forward_into(
        &self,
        scratch: &mut Scratch,
        state: &mut State,
        tokens: &[u32],
        opts: ForwardOptions<'_>,
        logits: &mut Logits,
    ) -> Result<(), ModelError> {
        self.check_input(state, tokens)?;
        let mode = opts.logits.unwrap_or(LogitsMode::Last);
        let want = match mode {
            LogitsMode::Last => tokens.len().min(1),
            LogitsMode::LastN(k) => k.min(tokens.len()),
            LogitsMode::None => 0,
        };
        state.tokens.extend_from_slice(tokens);
        let total = state.tokens.len();
        let first_logit = total - want; // index in state.tokens of the first row wanted
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = BatchCtx {
            file: &self.file,
            config: &self.config,
            weights: &self.weights,
            pool: &pool,
            numerics: self.numerics,
        };
        logits.n_vocab = self.config.n_vocab;
        logits.data.clear();
        let mut trace = opts.trace;
        // The token history is moved out while the batches run (they borrow the state
        // mutably and only read the history), and back in afterwards.
        let history = std::mem::take(&mut state.tokens);
        let ubatch = scratch.ubatch().min(self.ubatch);
        let result = (|| {
            while state.n_cached < total {
                if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    return Err(ModelError::Cancelled);
                }
                let start = state.n_cached;
                let end = (start + ubatch).min(total);
                let rows = start.max(first_logit) - start..end - start;
                let batch = &history[start..end];
                forward_batch(
                    &ctx,
                    scratch,
                    state,
                    batch,
                    rows,
                    &mut logits.data,
                    &mut trace,
                )?;
            }
            Ok(())
        })();
        state.tokens = history;
        if result.is_err() {
            state.tokens.truncate(state.n_cached);
        }
        result
    }

    fn check_input(&self, state: &State, tokens: &[u32]) -> Result<(), ModelError> {
        if state.fingerprint != self.fingerprint {
            return Err(ModelError::StateMismatch);
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
            return Err(ModelError::InvalidToken {
                token: bad,
                n_vocab: self.config.n_vocab,
            });
        }
        let len = state.tokens.len();
        if len + tokens.len() > state.capacity {
            return Err(ModelError::ContextFull {
                len,
                adding: tokens.len(),
                capacity: state.capacity,
            });
        }
        Ok(())
    }

    /// Recomputes everything from scratch for `tokens` (no state kept): the cost a stateless
    /// runtime pays for every generated token. Returns the last token's logits. Uses an f32 cache,
    /// so it is also the precise reference the stateful path is tested against.
    pub fn forward_stateless(&self, tokens: &[u32]) -> Result<Logits, ModelError> {
        let opts = StateOptions {
            capacity: tokens.len().max(1),
            kv_type: crate::KvType::F32,
        };
        let mut state = self.new_state_with(opts)?;
        self.forward(&mut state, tokens)
    }

    /// Context shift on `state` (see [`State::retain`]); when the shift needs a re-prefill,
    /// runs it now (in buffers of its own) instead of at the next forward call.
    pub fn retain(
        &self,
        state: &mut State,
        keep_prefix: usize,
        keep_suffix: usize,
    ) -> Result<RetainOutcome, ModelError> {
        self.retain_with(state, keep_prefix, keep_suffix, RetainMethod::Shift)
    }

    /// [`Model::retain`] with an explicit method.
    pub fn retain_with(
        &self,
        state: &mut State,
        keep_prefix: usize,
        keep_suffix: usize,
        method: RetainMethod,
    ) -> Result<RetainOutcome, ModelError> {
        let outcome = state.retain_with(keep_prefix, keep_suffix, method);
        if state.pending_reprefill() > 0 {
            self.forward_with(
                state,
                &[],
                ForwardOptions {
                    logits: Some(LogitsMode::None),
                    ..Default::default()
                },
            )?;
        }
        Ok(outcome)
    }
}

fn fingerprint(file: &GgufFile) -> [u8; 32] {
    let header_end = file
        .tensors()
        .iter()
        .map(|t| t.offset)
        .min()
        .unwrap_or(file.file_size()) as usize;
    let mut h = Sha256::new();
    h.update(&file.bytes()[..header_end.min(file.bytes().len())]);
    h.update(file.file_size().to_le_bytes());
    h.finalize().into()
}
