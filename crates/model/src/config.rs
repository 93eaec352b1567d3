//! Hyperparameters read from GGUF metadata: every architecture difference is data here.
//!
//! One decoder (see `forward.rs`) runs every supported architecture over shared blocks
//! (attention, FFN, norms); what differs between them is a handful of flags and constants,
//! chosen by the architecture's own short description in `arch/` (one file each, as llama.cpp's
//! `src/models/*.cpp`). [`ModelConfig::from_gguf`] reads what all of them share, then lets the
//! architecture add its own; a metadata key under the architecture's prefix that nothing read
//! is an error naming it, never skipped.

use crate::arch::Keys;
use crate::rope::{yarn_corr_dims, RopeParams};
use crate::ModelError;
use statelm_gguf::GgufFile;

pub use crate::arch::Arch;

/// How rotary embeddings pair the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)` (original llama).
    Interleaved,
    /// Halves `(i, i + d/2)` of the rotated dimensions (GPT-NeoX; Qwen, Gemma, Phi-3).
    Neox,
}

/// Per-pair frequency factors that divide the rotary angles (tensors of the file, read at
/// load: they are part of the arithmetic, like the keys).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeFactors {
    /// None.
    None,
    /// `rope_freqs.weight` (Llama 3.x's llama3 scaling), one factor per rotated pair.
    Freqs(Vec<f32>),
    /// `rope_factors_long`/`rope_factors_short` (Phi-3 LongRoPE): the long ones when a
    /// state's capacity exceeds [`RopeConfig::n_ctx_orig`], as llama.cpp chooses by context.
    LongShort {
        /// `rope_factors_long.weight`.
        long: Option<Vec<f32>>,
        /// `rope_factors_short.weight`.
        short: Option<Vec<f32>>,
    },
}

impl RopeFactors {
    /// The factors a state of `capacity` tokens uses.
    pub fn for_capacity(&self, capacity: usize, n_ctx_orig: usize) -> Option<&[f32]> {
        match self {
            RopeFactors::None => None,
            RopeFactors::Freqs(f) => Some(f),
            RopeFactors::LongShort { long, short } => {
                if capacity > n_ctx_orig {
                    long.as_deref()
                } else {
                    short.as_deref()
                }
            }
        }
    }

    /// The names of the tensors these factors were read from.
    pub fn tensor_names(&self) -> &'static [&'static str] {
        match self {
            RopeFactors::None => &[],
            RopeFactors::Freqs(_) => &["rope_freqs.weight"],
            RopeFactors::LongShort { .. } => {
                &["rope_factors_long.weight", "rope_factors_short.weight"]
            }
        }
    }
}

/// How positions turn queries and keys: ggml's `rope_ext` with its YaRN terms.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    /// Pairing.
    pub style: RopeStyle,
    /// Rotated dimensions of a head (`rope.dimension_count`; fewer than the head's for
    /// partial rotary, the rest pass through).
    pub dim: usize,
    /// Base frequency of global-attention layers.
    pub base: f32,
    /// Base frequency of sliding-window layers.
    pub base_swa: f32,
    /// Frequency scale (`1 / rope.scaling.factor`; 1.0 = none).
    pub freq_scale: f32,
    /// YaRN's extrapolation mix (0 = plain interpolation; 1 with `rope.scaling.type = yarn`).
    pub ext_factor: f32,
    /// Magnitude of the rotation (`mscale`: YaRN's and LongRoPE's attention factor).
    pub attn_factor: f32,
    /// YaRN's fast and slow correction betas.
    pub beta_fast: f32,
    /// See `beta_fast`.
    pub beta_slow: f32,
    /// The context length the model was trained at before scaling.
    pub n_ctx_orig: usize,
    /// Every `n`-th layer (`(il + 1) % n == 0`) has no rotary embedding (SmolLM3's NoPE layers).
    pub no_rope_step: Option<usize>,
    /// The file's frequency factors.
    pub factors: RopeFactors,
}

/// The gate activation of the FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnActivation {
    /// `silu(gate) * up`.
    Silu,
    /// `gelu_tanh(gate) * up`.
    GeluTanh,
}

/// Llama 4-style attention temperature (Ministral 3): queries at position `p` are multiplied by
/// `1 + scale · ln(⌊p / floor⌋ + 1)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnTemperature {
    /// `attention.temperature_scale`.
    pub scale: f32,
    /// Positions per step (the original context length).
    pub floor: usize,
}

/// LFM2's gated short convolutions: layers that mix tokens by a causal depthwise convolution
/// over the last `l_cache` inputs instead of attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortConv {
    /// The kernel's length (`shortconv.l_cache`): each output sees this many inputs, so the
    /// state carries the last `l_cache - 1` of them from one call to the next.
    pub l_cache: usize,
}

impl ShortConv {
    /// Rows of input history the convolution state holds (`l_cache - 1`).
    pub fn d_conv(&self) -> usize {
        self.l_cache - 1
    }
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
    /// Key/value heads of the attention layers (GQA when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Whether each layer attends (`false`: `attention.head_count_kv` is 0 there, and the
    /// layer is a short convolution).
    pub attention_layers: Vec<bool>,
    /// The short convolutions of the layers that do not attend (LFM2).
    pub shortconv: Option<ShortConv>,
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
    /// Rotary embeddings.
    pub rope: RopeConfig,
    /// Sliding-window size of local layers, if any.
    pub sliding_window: Option<usize>,
    /// Every `swa_period`-th layer (the last of each group) is global; the others are local.
    pub swa_period: usize,
    /// Multiply token embeddings by this (Gemma: `sqrt(n_embd)`; Granite: `embedding_scale`).
    pub embed_scale: Option<f32>,
    /// Per-head RMS norms on queries and keys (Gemma 3, Qwen3).
    pub qk_norm: bool,
    /// Norms after attention and after the FFN, before the residual add (Gemma 2 and 3).
    pub post_norms: bool,
    /// FFN gate activation.
    pub ffn_activation: FfnActivation,
    /// Scale applied to attention scores.
    pub attn_scale: f32,
    /// Attention-logit soft-capping (`cap * tanh(s / cap)` of the scaled scores; Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Attention temperature by position (Ministral 3).
    pub attn_temperature: Option<AttnTemperature>,
    /// Each block's output is multiplied by this before its residual add (Granite).
    pub residual_scale: Option<f32>,
    /// Logits are divided by this (Granite's `logit_scale`).
    pub logit_scale: Option<f32>,
    /// Final logit soft-capping (`cap * tanh(x / cap)`), if any.
    pub final_logit_softcap: Option<f32>,
    /// The name of the final norm's tensor (`output_norm.weight`; LFM2's is
    /// `token_embd_norm.weight`).
    pub output_norm: &'static str,
}

impl ModelConfig {
    /// Reads the hyperparameters of a GGUF file, with errors naming the missing key, an
    /// unsupported architecture, or a key of the architecture that statelm does not implement.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch = Arch::parse(f.architecture()?)?;
        let k = Keys::new(f, arch.name());
        let mut config = common(&k, arch, f)?;
        arch.describe(&k, &mut config)?;
        config.check()?;
        k.finish()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::BadConfig(m));
        if self.n_head == 0 || self.n_head_kv == 0 || !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "head counts {}/{}: query heads must be a nonzero multiple of kv heads",
                self.n_head, self.n_head_kv
            ));
        }
        if self.attention_layers.len() != self.n_layer {
            return bad(format!(
                "attention.head_count_kv has {} entries for {} layers",
                self.attention_layers.len(),
                self.n_layer
            ));
        }
        if let Some(il) = (0..self.n_layer).find(|&il| self.is_conv_layer(il)) {
            match self.shortconv {
                None => {
                    return bad(format!(
                        "layer {il} has no key/value heads, and {} has no other kind of layer",
                        self.arch.name()
                    ))
                }
                Some(sc) if sc.l_cache < 2 => {
                    return bad(format!(
                        "shortconv.l_cache {} must be at least 2",
                        sc.l_cache
                    ))
                }
                Some(_) => {}
            }
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head dimension {} must be even", self.head_dim));
        }
        let d = self.rope.dim;
        if d == 0 || !d.is_multiple_of(2) || d > self.head_dim {
            return bad(format!(
                "rope.dimension_count {d} must be even and at most the head dimension {}",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// Whether layer `il` uses sliding-window (local) attention.
    pub fn is_swa_layer(&self, il: usize) -> bool {
        self.sliding_window.is_some()
            && self.swa_period > 1
            && (il % self.swa_period) < self.swa_period - 1
    }

    /// Whether layer `il` is a short convolution (LFM2) rather than attention: it holds no KV
    /// cells, only the convolution's last inputs.
    pub fn is_conv_layer(&self, il: usize) -> bool {
        !self.attention_layers.get(il).copied().unwrap_or(true)
    }

    /// Whether layer `il` turns its queries and keys by position.
    pub fn uses_rope(&self, il: usize) -> bool {
        self.rope
            .no_rope_step
            .is_none_or(|n| !(il + 1).is_multiple_of(n))
    }

    /// The RoPE base of layer `il`.
    pub fn rope_base_of(&self, il: usize) -> f32 {
        if self.is_swa_layer(il) {
            self.rope.base_swa
        } else {
            self.rope.base
        }
    }

    /// The RoPE frequency scale of layer `il` (Gemma 3's local layers are never scaled).
    pub fn rope_scale_of(&self, il: usize) -> f32 {
        if self.is_swa_layer(il) && self.arch == Arch::Gemma3 {
            1.0
        } else {
            self.rope.freq_scale
        }
    }

    /// Layer `il`'s rotary parameters in a state of `capacity` tokens.
    pub fn rope_params(&self, il: usize, capacity: usize) -> RopeParams<'_> {
        let r = &self.rope;
        let base = self.rope_base_of(il);
        RopeParams {
            dim: r.dim,
            base,
            freq_scale: self.rope_scale_of(il),
            ext_factor: r.ext_factor,
            attn_factor: r.attn_factor,
            corr_dims: yarn_corr_dims(r.dim, r.n_ctx_orig, base, r.beta_fast, r.beta_slow),
            factors: r.factors.for_capacity(capacity, r.n_ctx_orig),
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

/// What every architecture reads the same way (llama.cpp's `load_hparams` before the
/// architecture's own part): shapes, norms, and the RoPE keys.
fn common(k: &Keys<'_>, arch: Arch, f: &GgufFile) -> Result<ModelConfig, ModelError> {
    let n_embd = k.req_u32("embedding_length")? as usize;
    let n_head = k.req_u32("attention.head_count")? as usize;
    let n_layer = k.req_u32("block_count")? as usize;
    let (n_head_kv, attention_layers) = head_count_kv(k, n_head, n_layer)?;
    let head_dim = k
        .u32("attention.key_length")?
        .map_or(n_embd / n_head.max(1), |v| v as usize);
    let v_head_dim = k
        .u32("attention.value_length")?
        .map_or(head_dim, |v| v as usize);
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
    // Informational keys: they describe the model without changing its arithmetic.
    k.known(&["vocab_size", "rope.scaling.finetuned"]);
    let context_length = k.u32("context_length")?.map_or(2048, |v| v as usize);
    let rope = common_rope(k, head_dim, context_length)?;
    Ok(ModelConfig {
        arch,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        attention_layers,
        shortconv: None,
        head_dim,
        v_head_dim,
        n_ff: k.req_u32("feed_forward_length")? as usize,
        n_vocab,
        context_length,
        norm_eps: k.req_f32("attention.layer_norm_rms_epsilon")?,
        rope,
        sliding_window: None,
        swa_period: 1,
        embed_scale: None,
        qk_norm: false,
        post_norms: false,
        ffn_activation: FfnActivation::Silu,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: None,
        attn_temperature: None,
        residual_scale: None,
        logit_scale: None,
        final_logit_softcap: None,
        output_norm: "output_norm.weight",
    })
}

/// `attention.head_count_kv`: one count for every layer, or one per layer (LFM2, where 0 marks
/// a layer without attention). Returns the attention layers' count and which layers attend;
/// per-layer counts that differ between attention layers are refused by name.
fn head_count_kv(
    k: &Keys<'_>,
    n_head: usize,
    n_layer: usize,
) -> Result<(usize, Vec<bool>), ModelError> {
    let Some(counts) = k.per_layer_u32("attention.head_count_kv", n_layer)? else {
        return Ok((n_head, vec![true; n_layer]));
    };
    if counts.len() != n_layer {
        return Err(ModelError::BadConfig(format!(
            "{} has {} entries for {n_layer} layers",
            k.full("attention.head_count_kv"),
            counts.len()
        )));
    }
    let mut attending = counts.iter().filter(|&&c| c != 0);
    let first = attending.next().copied().unwrap_or(n_head as u32);
    if attending.any(|&c| c != first) {
        return Err(ModelError::UnsupportedKey {
            key: k.full("attention.head_count_kv"),
            reason: format!("per-layer counts {counts:?} differ (statelm: one count for all)"),
        });
    }
    Ok((first as usize, counts.iter().map(|&c| c != 0).collect()))
}

/// The RoPE keys as llama.cpp reads them for every architecture: base, scaling type and
/// factor (`linear` when the type is absent), YaRN's extrapolation and attention factor, the
/// original context, and the rotated dimensions.
fn common_rope(k: &Keys<'_>, head_dim: usize, ctx: usize) -> Result<RopeConfig, ModelError> {
    let base = k.f32("rope.freq_base")?.unwrap_or(10_000.0);
    let factor = match k.f32("rope.scaling.factor")? {
        Some(f) => Some(f),
        None => k.f32("rope.scale_linear")?,
    };
    let kind = k
        .string("rope.scaling.type")?
        .unwrap_or_else(|| "linear".into());
    let freq_scale = match factor {
        Some(f) if f != 0.0 => 1.0 / f,
        _ => 1.0,
    };
    let (freq_scale, ext_factor) = match kind.as_str() {
        "none" => (1.0, 0.0),
        "linear" | "longrope" => (freq_scale, 0.0),
        "yarn" => (freq_scale, 1.0),
        other => {
            return Err(ModelError::UnsupportedKey {
                key: k.full("rope.scaling.type"),
                reason: format!("scaling type {other:?} (statelm: none, linear, yarn, longrope)"),
            })
        }
    };
    // llama.cpp: YaRN's magnitude is mscale(factor) = 1 + 0.1·ln(factor), cancelled by the
    // 1 + 0.1·ln(factor) that its kernel multiplies back in; then the file's attention factor.
    let mut attn_factor = 1.0f32;
    if ext_factor != 0.0 {
        let f: f32 = 1.0 / freq_scale;
        let mscale = if f <= 1.0 { 1.0 } else { 0.1 * f.ln() + 1.0 };
        attn_factor = mscale * (1.0 / (1.0 + 0.1 * f.ln()));
    }
    attn_factor *= k.f32("rope.scaling.attn_factor")?.unwrap_or(1.0);
    let n_ctx_orig = k
        .u32("rope.scaling.original_context_length")?
        .map_or(ctx, |v| v as usize);
    let dim = k
        .u32("rope.dimension_count")?
        .map_or(head_dim, |v| v as usize);
    Ok(RopeConfig {
        style: RopeStyle::Neox,
        dim,
        base,
        base_swa: base,
        freq_scale,
        ext_factor,
        attn_factor,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig,
        no_rope_step: None,
        factors: RopeFactors::None,
    })
}
