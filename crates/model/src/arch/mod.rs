//! The supported architectures, one short description each over the shared decoder blocks
//! (as llama.cpp's `src/models/*.cpp`): which RoPE, which norms, which scales. Each file sets
//! what its architecture changes in a [`ModelConfig`] that [`crate::config`] filled with what
//! all of them share; the weights loader (`weights.rs`) and the forward pass read the result.
//!
//! Every key under the architecture's prefix must be read by someone: [`Keys::finish`] turns a
//! key that no description read into [`ModelError::UnsupportedKey`], so a model feature that
//! statelm does not implement is refused at load, never computed wrongly.

mod gemma2;
mod gemma3;
mod granite;
mod lfm2;
mod llama;
mod mistral3;
mod phi3;
mod qwen;
mod smollm3;

use crate::config::{ModelConfig, RopeFactors};
use crate::ModelError;
use statelm_gguf::GgufFile;
use std::cell::RefCell;
use std::collections::BTreeSet;

/// The supported architectures (`general.architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama 2/3.x and Mistral-style models (GQA, SiLU-gated FFN, interleaved RoPE, llama3
    /// `rope_freqs` scaling).
    Llama,
    /// Qwen2 / Qwen2.5: llama with q/k/v biases and NEOX-style RoPE.
    Qwen2,
    /// Qwen3 (dense): per-head q/k RMS norms before NEOX RoPE, head size from the file.
    Qwen3,
    /// SmolLM3: llama whose every fourth layer has no RoPE.
    Smollm3,
    /// Gemma 2: attention and final logit soft-capping, sliding window on alternate layers,
    /// post-attention and post-FFN norms, GELU FFN.
    Gemma2,
    /// Gemma 3: embedding scaling, q/k RMS norms, pre/post norms, GELU FFN, sliding windows.
    Gemma3,
    /// Granite (3.x dense): llama with embedding, residual, attention and logit scales.
    Granite,
    /// Phi-3 / Phi-3.5 / Phi-4-mini: fused QKV and gate-up, partial rotary, LongRoPE.
    Phi3,
    /// Ministral 3 (dense `mistral3`): llama with YaRN RoPE and attention temperature.
    Mistral3,
    /// LFM2 / LFM2.5: gated short-convolution layers beside attention layers with q/k norms.
    Lfm2,
}

impl Arch {
    /// Every supported architecture, in the order `inspect` and `doctor` list them.
    pub const ALL: [Arch; 10] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Smollm3,
        Arch::Gemma2,
        Arch::Gemma3,
        Arch::Granite,
        Arch::Phi3,
        Arch::Mistral3,
        Arch::Lfm2,
    ];

    /// Parses `general.architecture`.
    pub fn parse(name: &str) -> Result<Arch, ModelError> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture(name.to_string()))
    }

    /// The GGUF key prefix (and `general.architecture` value).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Smollm3 => "smollm3",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Granite => "granite",
            Arch::Phi3 => "phi3",
            Arch::Mistral3 => "mistral3",
            Arch::Lfm2 => "lfm2",
        }
    }

    /// The names of every supported architecture, comma-separated (for messages).
    pub fn supported_list() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }

    /// Sets what this architecture changes in `c` (which holds what all of them share).
    pub(crate) fn describe(self, k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
        match self {
            Arch::Llama => llama::describe(k, c),
            Arch::Qwen2 => qwen::describe_qwen2(k, c),
            Arch::Qwen3 => qwen::describe_qwen3(k, c),
            Arch::Smollm3 => smollm3::describe(k, c),
            Arch::Gemma2 => gemma2::describe(k, c),
            Arch::Gemma3 => gemma3::describe(k, c),
            Arch::Granite => granite::describe(k, c),
            Arch::Phi3 => phi3::describe(k, c),
            Arch::Mistral3 => mistral3::describe(k, c),
            Arch::Lfm2 => lfm2::describe(k, c),
        }
    }
}

/// Reads the keys under one architecture's prefix and remembers which were read, so that
/// [`Keys::finish`] can refuse the rest.
pub(crate) struct Keys<'a> {
    file: &'a GgufFile,
    prefix: &'static str,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Keys<'a> {
    /// The keys of `file` under `prefix.`.
    pub(crate) fn new(file: &'a GgufFile, prefix: &'static str) -> Keys<'a> {
        Keys {
            file,
            prefix,
            read: RefCell::new(BTreeSet::new()),
        }
    }

    /// The full key name of `key`.
    pub(crate) fn full(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    fn mark(&self, key: &str) -> String {
        let full = self.full(key);
        self.read.borrow_mut().insert(full.clone());
        full
    }

    /// Marks keys that describe the model without changing its arithmetic.
    pub(crate) fn known(&self, keys: &[&str]) {
        for k in keys {
            self.mark(k);
        }
    }

    /// An optional integer key.
    pub(crate) fn u32(&self, key: &str) -> Result<Option<u32>, ModelError> {
        Ok(self.file.opt_u32(&self.mark(key))?)
    }

    /// A required integer key.
    pub(crate) fn req_u32(&self, key: &str) -> Result<u32, ModelError> {
        Ok(self.file.get_u32(&self.mark(key))?)
    }

    /// An optional float key.
    pub(crate) fn f32(&self, key: &str) -> Result<Option<f32>, ModelError> {
        Ok(self.file.opt_f32(&self.mark(key))?)
    }

    /// A required float key.
    pub(crate) fn req_f32(&self, key: &str) -> Result<f32, ModelError> {
        Ok(self.file.get_f32(&self.mark(key))?)
    }

    /// An optional integer key that may be one value for all `n_layer` layers or an array of
    /// them, one per layer.
    pub(crate) fn per_layer_u32(
        &self,
        key: &str,
        n_layer: usize,
    ) -> Result<Option<Vec<u32>>, ModelError> {
        let full = self.mark(key);
        match self.file.get(&full) {
            None => Ok(None),
            Some(statelm_gguf::Value::Array(_)) => {
                let v = self.file.get_i32_array(&full)?;
                let counts: Result<Vec<u32>, _> = v.iter().map(|&x| u32::try_from(x)).collect();
                counts
                    .map(Some)
                    .map_err(|_| ModelError::BadConfig(format!("{full}: negative count in {v:?}")))
            }
            Some(_) => Ok(Some(vec![self.file.get_u32(&full)?; n_layer])),
        }
    }

    /// An optional string key.
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, ModelError> {
        Ok(self.file.opt_str(&self.mark(key))?.map(str::to_string))
    }

    /// The RoPE frequency factors the file carries as tensors, `pairs` each.
    pub(crate) fn rope_factors(&self, pairs: usize) -> Result<RopeFactors, ModelError> {
        let read = |name: &str| -> Result<Option<Vec<f32>>, ModelError> {
            let Some(t) = self.file.tensor(name) else {
                return Ok(None);
            };
            if t.n_elements() != pairs as u64 || t.dims.len() != 1 {
                return Err(ModelError::BadTensor {
                    name: name.to_string(),
                    reason: format!(
                        "shape {:?}, expected [{pairs}] (one per rotated pair)",
                        t.dims
                    ),
                });
            }
            let mut out = vec![0.0; pairs];
            statelm_quant::dequantize_row(t.ty, self.file.tensor_data(t), &mut out).map_err(
                |e| ModelError::BadTensor {
                    name: name.to_string(),
                    reason: e.to_string(),
                },
            )?;
            Ok(Some(out))
        };
        if let Some(f) = read("rope_freqs.weight")? {
            return Ok(RopeFactors::Freqs(f));
        }
        let (long, short) = (
            read("rope_factors_long.weight")?,
            read("rope_factors_short.weight")?,
        );
        Ok(if long.is_some() || short.is_some() {
            RopeFactors::LongShort { long, short }
        } else {
            RopeFactors::None
        })
    }

    /// Refuses a key of the architecture that no description read.
    pub(crate) fn finish(&self) -> Result<(), ModelError> {
        let read = self.read.borrow();
        let dot = format!("{}.", self.prefix);
        for (key, _) in self.file.metadata() {
            if key.starts_with(&dot) && !read.contains(key) {
                return Err(ModelError::UnsupportedKey {
                    key: key.clone(),
                    reason: format!("statelm's {} does not implement it", self.prefix),
                });
            }
        }
        Ok(())
    }
}

/// What both Gemma generations share: embeddings × √n_embd, post norms, NEOX RoPE.
fn gemma_common(_k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.embed_scale = Some((c.n_embd as f32).sqrt());
    c.post_norms = true;
    Ok(())
}
