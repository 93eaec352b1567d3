//! Hyperparameters read from GGUF metadata: every architecture difference is data here.
//!
//! One decoder (see `forward.rs`) runs `llama`, `qwen2` and `gemma3`; what differs between them
//! is a handful of flags and constants, chosen in [`ModelConfig::from_gguf`].

use crate::ModelError;
use statelm_gguf::GgufFile;

/// The supported architectures (`general.architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3 and Mistral-style models (GQA, SiLU-gated FFN, interleaved RoPE).
    Llama,
    /// Qwen2 / Qwen2.5: llama with q/k/v biases and NEOX-style RoPE.
    Qwen2,
    /// Gemma 3: embedding scaling, q/k RMS norms, pre/post norms, GELU FFN, sliding windows.
    Gemma3,
}

impl Arch {
    /// Parses `general.architecture`.
    pub fn parse(name: &str) -> Result<Arch, ModelError> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "gemma3" => Ok(Arch::Gemma3),
            other => Err(ModelError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// The GGUF key prefix (and `general.architecture` value).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` (original llama).
    Interleaved,
    /// Halves `(i, i + d/2)` (GPT-NeoX; Qwen2, Gemma).
    Neox,
}

/// The gate activation of the FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnActivation {
    /// `silu(gate) * up`.
    Silu,
    /// `gelu_tanh(gate) * up`.
    GeluTanh,
}

/// Everything the decoder needs to know about a model's shape and arithmetic.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The architecture.
    pub arch: Arch,
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Number of decoder blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Dimension of one query/key head.
    pub head_dim: usize,
    /// Dimension of one value head.
    pub v_head_dim: usize,
    /// Hidden width of the FFN.
    pub n_ff: usize,
    /// Vocabulary size (rows of the embedding).
    pub n_vocab: usize,
    /// Context length the model was trained for.
    pub context_length: usize,
    /// RMS norm epsilon.
    pub norm_eps: f32,
    /// RoPE base frequency of global-attention layers.
    pub rope_base: f32,
    /// RoPE base frequency of sliding-window layers.
    pub rope_base_swa: f32,
    /// RoPE frequency scale (1.0 = none; linear scaling divides positions by the factor).
    pub rope_freq_scale: f32,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// Sliding-window size of local layers, if any.
    pub sliding_window: Option<usize>,
    /// Every `swa_period`-th layer (the last of each group) is global; the others are local.
    pub swa_period: usize,
    /// Multiply token embeddings by this (Gemma: `sqrt(n_embd)`).
    pub embed_scale: Option<f32>,
    /// Per-head RMS norms on queries and keys (Gemma 3).
    pub qk_norm: bool,
    /// Norms after attention and after the FFN, before the residual add (Gemma 3).
    pub post_norms: bool,
    /// FFN gate activation.
    pub ffn_activation: FfnActivation,
    /// Scale applied to attention scores.
    pub attn_scale: f32,
    /// Final logit soft-capping (`cap * tanh(x / cap)`), if any.
    pub final_logit_softcap: Option<f32>,
}

impl ModelConfig {
    /// Reads the hyperparameters of a GGUF file, with errors naming the missing key.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch = Arch::parse(f.architecture()?)?;
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");
        let n_embd = f.get_u32(&key("embedding_length"))? as usize;
        let n_head = f.get_u32(&key("attention.head_count"))? as usize;
        let n_head_kv = f
            .opt_u32(&key("attention.head_count_kv"))?
            .map_or(n_head, |v| v as usize);
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::BadConfig(format!(
                "head counts {n_head}/{n_head_kv}: query heads must be a nonzero multiple of kv heads"
            )));
        }
        let head_dim = f
            .opt_u32(&key("attention.key_length"))?
            .map_or(n_embd / n_head, |v| v as usize);
        let v_head_dim = f
            .opt_u32(&key("attention.value_length"))?
            .map_or(head_dim, |v| v as usize);
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(ModelError::BadConfig(format!(
                "head dimension {head_dim} must be even"
            )));
        }
        let n_vocab = match f.tensor("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
            Some(_) => {
                return Err(ModelError::BadTensor {
                    name: "token_embd.weight".into(),
                    reason: "expected 2 dimensions".into(),
                })
            }
            None => return Err(ModelError::MissingTensor("token_embd.weight".into())),
        };
        let rope_base = f.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let rope_scale_factor = f.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0);
        let sliding_window = f
            .opt_u32(&key("attention.sliding_window"))?
            .map(|v| v as usize);
        let gemma = arch == Arch::Gemma3;
        let config = ModelConfig {
            arch,
            n_embd,
            n_layer: f.get_u32(&key("block_count"))? as usize,
            n_head,
            n_head_kv,
            head_dim,
            v_head_dim,
            n_ff: f.get_u32(&key("feed_forward_length"))? as usize,
            n_vocab,
            context_length: f
                .opt_u32(&key("context_length"))?
                .map_or(2048, |v| v as usize),
            norm_eps: f.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope_base,
            // Gemma 3's local layers use the original base of 10 000 (not stored in GGUF).
            rope_base_swa: if gemma { 10_000.0 } else { rope_base },
            rope_freq_scale: if rope_scale_factor > 0.0 {
                1.0 / rope_scale_factor
            } else {
                1.0
            },
            rope_style: if arch == Arch::Llama {
                RopeStyle::Interleaved
            } else {
                RopeStyle::Neox
            },
            sliding_window: if gemma { sliding_window } else { None },
            swa_period: if gemma { 6 } else { 1 },
            embed_scale: gemma.then(|| (n_embd as f32).sqrt()),
            qk_norm: gemma,
            post_norms: gemma,
            ffn_activation: if gemma {
                FfnActivation::GeluTanh
            } else {
                FfnActivation::Silu
            },
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            final_logit_softcap: f.opt_f32(&key("final_logit_softcapping"))?,
        };
        Ok(config)
    }

    /// Whether layer `il` uses sliding-window (local) attention.
    pub fn is_swa_layer(&self, il: usize) -> bool {
        self.sliding_window.is_some()
            && self.swa_period > 1
            && (il % self.swa_period) < self.swa_period - 1
    }

    /// The RoPE base of layer `il`.
    pub fn rope_base_of(&self, il: usize) -> f32 {
        if self.is_swa_layer(il) {
            self.rope_base_swa
        } else {
            self.rope_base
        }
    }

    /// The RoPE frequency scale of layer `il` (local layers are never scaled).
    pub fn rope_scale_of(&self, il: usize) -> f32 {
        if self.is_swa_layer(il) {
            1.0
        } else {
            self.rope_freq_scale
        }
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of all key heads together.
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of all value heads together.
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.v_head_dim
    }
}
