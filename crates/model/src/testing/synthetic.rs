//! Small synthetic models written by tests: random weights, a tiny SentencePiece vocabulary,
//! any supported architecture. They exercise code paths the two real models do not (llama's
//! interleaved RoPE, sliding windows smaller than a prompt, every weight type).

use crate::config::Arch;
use crate::ModelError;
use statelm_gguf::{Array, GgmlType, GgufWriter, Value};
use std::path::Path;

/// Shape of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    /// Architecture to imitate.
    pub arch: Arch,
    /// Residual width.
    pub n_embd: usize,
    /// Decoder blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// FFN width.
    pub n_ff: usize,
    /// Type of the weight matrices.
    pub weight_type: GgmlType,
    /// Sliding window of local layers (Gemma 2 and 3).
    pub sliding_window: Option<usize>,
    /// Seed of the random weights.
    pub seed: u64,
    /// Rotated dimensions of a head (`rope.dimension_count`; 0: the whole head).
    pub rope_dim: usize,
    /// The architecture's RoPE factor tensors: Llama 3.x's `rope_freqs.weight` (llama, granite,
    /// mistral3), Phi-3's `rope_factors_long`/`_short`.
    pub rope_freqs: bool,
    /// The original context of RoPE scaling (Phi-3's LongRoPE switch, YaRN's range, Ministral's
    /// temperature steps); 0: none written.
    pub n_ctx_orig: usize,
    /// No `output.weight`: the output projection is the token embedding.
    pub tied_output: bool,
    /// The output projection's weights are multiplied by this (sharper logits for parity
    /// tests: fewer near-ties).
    pub output_gain: f32,
}

impl SyntheticSpec {
    /// A tiny model of `arch` (2 layers, 4 for architectures whose layers differ — SmolLM3's
    /// NoPE layer, Gemma 2's alternating windows — and 6 for Gemma 3 so one layer is global).
    pub fn tiny(arch: Arch) -> SyntheticSpec {
        let n_layer = match arch {
            Arch::Gemma3 => 6,
            Arch::Smollm3 | Arch::Gemma2 | Arch::Lfm2 => 4,
            _ => 2,
        };
        // Phi-3's fused QKV is n_embd wide for the queries: n_head · head_dim = n_embd.
        // LFM2's attention is n_embd wide too.
        let (n_embd, head_dim) = match arch {
            Arch::Phi3 => (128, 32),
            Arch::Qwen3 => (64, 48),
            Arch::Lfm2 => (64, 16),
            _ => (64, 32),
        };
        SyntheticSpec {
            arch,
            n_embd,
            n_layer,
            n_head: 4,
            n_head_kv: 2,
            head_dim,
            n_ff: 128,
            weight_type: GgmlType::Q8_0,
            sliding_window: matches!(arch, Arch::Gemma3 | Arch::Gemma2).then_some(8),
            seed: 7,
            rope_dim: if arch == Arch::Phi3 { head_dim / 2 } else { 0 },
            rope_freqs: false,
            n_ctx_orig: match arch {
                Arch::Phi3 => 4096,
                Arch::Mistral3 => 16,
                _ => 0,
            },
            tied_output: matches!(arch, Arch::Gemma3 | Arch::Gemma2 | Arch::Lfm2),
            output_gain: 1.0,
        }
    }

    /// A tiny model of `arch` that carries every RoPE factor tensor its architecture reads
    /// (Llama 3.x's `rope_freqs`, Phi-3's LongRoPE factors).
    pub fn tiny_with_rope_factors(arch: Arch) -> SyntheticSpec {
        SyntheticSpec {
            rope_freqs: matches!(
                arch,
                Arch::Llama | Arch::Granite | Arch::Mistral3 | Arch::Phi3
            ),
            ..SyntheticSpec::tiny(arch)
        }
    }

    /// The architecture parity files (`reference/synthetic/`): f32 weights (the comparison is
    /// of the architecture, not of the kernels, which the real models test) and sharp logits.
    pub fn parity(arch: Arch) -> SyntheticSpec {
        SyntheticSpec {
            weight_type: GgmlType::F32,
            output_gain: 4.0,
            seed: 11,
            rope_freqs: matches!(arch, Arch::Llama | Arch::Granite | Arch::Phi3),
            tied_output: matches!(arch, Arch::Llama | Arch::Gemma3 | Arch::Gemma2 | Arch::Lfm2),
            ..SyntheticSpec::tiny(arch)
        }
    }
}

struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The vocabulary: `<unk> <s> </s>`, 256 byte tokens, `▁`, letters and `▁letter` pieces.
fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    tokens.push("\u{2581}".into());
    types.push(1);
    for c in 'a'..='z' {
        tokens.push(c.to_string());
        tokens.push(format!("\u{2581}{c}"));
        types.extend([1, 1]);
    }
    let scores = tokens
        .iter()
        .map(|t| -(t.chars().count() as f32) * 0.1 + 1.0)
        .collect();
    (tokens, scores, types)
}

fn matrix(
    w: &mut GgufWriter,
    rng: &mut Rng,
    name: &str,
    rows: usize,
    cols: usize,
    ty: GgmlType,
) -> Result<(), ModelError> {
    matrix_gain(w, rng, name, [rows, cols], ty, 1.0)
}

fn matrix_gain(
    w: &mut GgufWriter,
    rng: &mut Rng,
    name: &str,
    [rows, cols]: [usize; 2],
    ty: GgmlType,
    gain: f32,
) -> Result<(), ModelError> {
    let scale = gain / (cols as f32).sqrt();
    let values: Vec<f32> = (0..rows * cols).map(|_| rng.next() * scale).collect();
    let row_bytes = ty
        .bytes_for(cols as u64)
        .ok_or_else(|| ModelError::BadConfig(format!("{cols} columns are not whole {ty} blocks")))?
        as usize;
    let mut data = vec![0u8; rows * row_bytes];
    for (src, dst) in values
        .chunks_exact(cols)
        .zip(data.chunks_exact_mut(row_bytes))
    {
        statelm_quant::quantize_row(ty, src, dst)?;
    }
    w.add_tensor(name, &[cols as u64, rows as u64], ty, data)?;
    Ok(())
}

fn vector(
    w: &mut GgufWriter,
    rng: &mut Rng,
    name: &str,
    len: usize,
    around: f32,
) -> Result<(), ModelError> {
    let values: Vec<f32> = (0..len).map(|_| around + 0.1 * rng.next()).collect();
    let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(name, &[len as u64], GgmlType::F32, data)?;
    Ok(())
}

/// RoPE frequency factors: one per rotated pair, from 1 (high frequencies) up to `top`.
fn factors(w: &mut GgufWriter, name: &str, pairs: usize, top: f32) -> Result<(), ModelError> {
    let values: Vec<f32> = (0..pairs)
        .map(|i| 1.0 + (top - 1.0) * i as f32 / (pairs.max(2) - 1) as f32)
        .collect();
    let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor(name, &[pairs as u64], GgmlType::F32, data)?;
    Ok(())
}

/// Writes a synthetic model to `path`.
pub fn write_synthetic_model(path: impl AsRef<Path>, s: &SyntheticSpec) -> Result<(), ModelError> {
    write_synthetic_model_with(path, s, |_| {})
}

/// Writes a synthetic model to `path`, letting `edit` add keys or tensors before it is written
/// (tests of what the loader refuses).
pub fn write_synthetic_model_with(
    path: impl AsRef<Path>,
    s: &SyntheticSpec,
    edit: impl FnOnce(&mut GgufWriter),
) -> Result<(), ModelError> {
    let mut w = GgufWriter::new();
    let n_vocab = write_metadata(&mut w, s);
    let mut rng = Rng(s.seed);
    let ty = s.weight_type;
    let e = s.n_embd;
    matrix(&mut w, &mut rng, "token_embd.weight", n_vocab, e, ty)?;
    let output_norm = if s.arch == Arch::Lfm2 {
        "token_embd_norm.weight"
    } else {
        "output_norm.weight"
    };
    vector(&mut w, &mut rng, output_norm, e, 1.0)?;
    if !s.tied_output {
        let shape = [n_vocab, e];
        matrix_gain(&mut w, &mut rng, "output.weight", shape, ty, s.output_gain)?;
    }
    for il in 0..s.n_layer {
        write_layer(&mut w, &mut rng, s, il)?;
    }
    let pairs = s.rope_dims() / 2;
    if s.rope_freqs && s.arch == Arch::Phi3 {
        factors(&mut w, "rope_factors_long.weight", pairs, 6.0)?;
        factors(&mut w, "rope_factors_short.weight", pairs, 1.5)?;
    } else if s.rope_freqs {
        factors(&mut w, "rope_freqs.weight", pairs, 8.0)?;
    }
    edit(&mut w);
    w.write_file_atomic(path)?;
    Ok(())
}

/// A thinking model's vocabulary: makes the last two tokens of a synthetic file `<think>` and
/// `</think>` (user-defined, as in Qwen3's), and sets `template` as its chat template if given.
pub fn make_thinking(w: &mut GgufWriter, template: Option<&str>) {
    let mut tokens = match w.remove("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(t))) => t,
        other => panic!("tokens: {other:?}"),
    };
    let mut types = match w.remove("tokenizer.ggml.token_type") {
        Some(Value::Array(Array::I32(t))) => t,
        other => panic!("types: {other:?}"),
    };
    let n = tokens.len();
    tokens[n - 2] = "<think>".into();
    tokens[n - 1] = "</think>".into();
    types[n - 2] = 4;
    types[n - 1] = 4;
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    if let Some(t) = template {
        w.set("tokenizer.chat_template", Value::String(t.into()));
    }
}

impl SyntheticSpec {
    /// Whether layer `il` is one of LFM2's short convolutions (two of every three layers, the
    /// third attends; every layer attends in the other architectures).
    pub fn is_conv_layer(&self, il: usize) -> bool {
        self.arch == Arch::Lfm2 && il % 3 != 2
    }

    fn rope_dims(&self) -> usize {
        if self.rope_dim == 0 {
            self.head_dim
        } else {
            self.rope_dim
        }
    }
}

/// One decoder block's tensors (in the order the first three architectures always had, so
/// their files stay the same).
fn write_layer(
    w: &mut GgufWriter,
    rng: &mut Rng,
    s: &SyntheticSpec,
    il: usize,
) -> Result<(), ModelError> {
    let (ty, e) = (s.weight_type, s.n_embd);
    let (qd, kd) = (s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    let n = |t: &str| format!("blk.{il}.{t}");
    vector(w, rng, &n("attn_norm.weight"), e, 1.0)?;
    if s.is_conv_layer(il) {
        return write_conv_layer(w, rng, s, il);
    }
    if s.arch == Arch::Phi3 {
        matrix(w, rng, &n("attn_qkv.weight"), qd + 2 * kd, e, ty)?;
    } else {
        matrix(w, rng, &n("attn_q.weight"), qd, e, ty)?;
        matrix(w, rng, &n("attn_k.weight"), kd, e, ty)?;
        matrix(w, rng, &n("attn_v.weight"), kd, e, ty)?;
    }
    matrix(w, rng, &n("attn_output.weight"), e, qd, ty)?;
    write_ffn(w, rng, s, il)?;
    if s.arch == Arch::Qwen2 {
        vector(w, rng, &n("attn_q.bias"), qd, 0.0)?;
        vector(w, rng, &n("attn_k.bias"), kd, 0.0)?;
        vector(w, rng, &n("attn_v.bias"), kd, 0.0)?;
    }
    if matches!(s.arch, Arch::Gemma3 | Arch::Qwen3 | Arch::Lfm2) {
        vector(w, rng, &n("attn_q_norm.weight"), s.head_dim, 1.0)?;
        vector(w, rng, &n("attn_k_norm.weight"), s.head_dim, 1.0)?;
    }
    if matches!(s.arch, Arch::Gemma3 | Arch::Gemma2) {
        vector(w, rng, &n("post_attention_norm.weight"), e, 1.0)?;
        vector(w, rng, &n("post_ffw_norm.weight"), e, 1.0)?;
    }
    Ok(())
}

/// LFM2's short-convolution block (after its `attn_norm`): `in_proj` (b, c, x), the kernel of
/// `L_CACHE` taps per channel, `out_proj`, and the FFN every layer has.
fn write_conv_layer(
    w: &mut GgufWriter,
    rng: &mut Rng,
    s: &SyntheticSpec,
    il: usize,
) -> Result<(), ModelError> {
    let (ty, e) = (s.weight_type, s.n_embd);
    let n = |t: &str| format!("blk.{il}.{t}");
    matrix(w, rng, &n("shortconv.in_proj.weight"), 3 * e, e, ty)?;
    let kernel: Vec<u8> = (0..L_CACHE * e)
        .flat_map(|_| (0.5 * rng.next()).to_le_bytes())
        .collect();
    let dims = [L_CACHE as u64, e as u64];
    w.add_tensor(n("shortconv.conv.weight"), &dims, GgmlType::F32, kernel)?;
    matrix(w, rng, &n("shortconv.out_proj.weight"), e, e, ty)?;
    write_ffn(w, rng, s, il)
}

/// The FFN's norm and matrices (Phi-3's gate and up fused in one `ffn_up`).
fn write_ffn(
    w: &mut GgufWriter,
    rng: &mut Rng,
    s: &SyntheticSpec,
    il: usize,
) -> Result<(), ModelError> {
    let (ty, e, ff) = (s.weight_type, s.n_embd, s.n_ff);
    let n = |t: &str| format!("blk.{il}.{t}");
    vector(w, rng, &n("ffn_norm.weight"), e, 1.0)?;
    if s.arch == Arch::Phi3 {
        matrix(w, rng, &n("ffn_up.weight"), 2 * ff, e, ty)?;
    } else {
        matrix(w, rng, &n("ffn_gate.weight"), ff, e, ty)?;
        matrix(w, rng, &n("ffn_up.weight"), ff, e, ty)?;
    }
    matrix(w, rng, &n("ffn_down.weight"), e, ff, ty)
}

/// LFM2's `shortconv.l_cache` in synthetic files (the released models' value).
const L_CACHE: usize = 3;

/// The model's metadata and its toy vocabulary; returns the vocabulary's size.
fn write_metadata(w: &mut GgufWriter, s: &SyntheticSpec) -> usize {
    let a = s.arch.name();
    let (tokens, scores, types) = vocab();
    let n_vocab = tokens.len();
    w.set("general.architecture", Value::String(a.into()));
    // Not the architecture's name: llama.cpp keys vocabulary quirks on `general.name` (a name
    // with "phi3" in it wants Phi's special tokens).
    w.set("general.name", Value::String("statelm synthetic".into()));
    let u32s = [
        ("embedding_length", s.n_embd),
        ("block_count", s.n_layer),
        ("feed_forward_length", s.n_ff),
        ("attention.head_count", s.n_head),
        ("attention.head_count_kv", s.n_head_kv),
        ("attention.key_length", s.head_dim),
        ("attention.value_length", s.head_dim),
        ("context_length", 4096),
    ];
    // LFM2 gives one count per layer (written below); the others' keys keep their order.
    let per_layer = s.arch == Arch::Lfm2;
    for (key, v) in u32s
        .into_iter()
        .filter(|(key, _)| !(per_layer && *key == "attention.head_count_kv"))
        .chain(s.sliding_window.map(|v| ("attention.sliding_window", v)))
        .chain((s.rope_dim != 0).then_some(("rope.dimension_count", s.rope_dim)))
        .chain(
            (s.n_ctx_orig != 0).then_some(("rope.scaling.original_context_length", s.n_ctx_orig)),
        )
    {
        w.set(format!("{a}.{key}"), Value::U32(v as u32));
    }
    if s.arch == Arch::Lfm2 {
        let per_layer = (0..s.n_layer)
            .map(|il| {
                if s.is_conv_layer(il) {
                    0
                } else {
                    s.n_head_kv as i32
                }
            })
            .collect();
        let key = format!("{a}.attention.head_count_kv");
        w.set(key, Value::Array(Array::I32(per_layer)));
        w.set(format!("{a}.shortconv.l_cache"), Value::U32(L_CACHE as u32));
    }
    w.set(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    w.set(format!("{a}.rope.freq_base"), Value::F32(10_000.0));
    for (key, v) in arch_floats(s.arch) {
        w.set(format!("{a}.{key}"), Value::F32(*v));
    }
    if s.arch == Arch::Mistral3 {
        w.set(
            format!("{a}.rope.scaling.type"),
            Value::String("yarn".into()),
        );
    }
    w.set("tokenizer.ggml.model", Value::String("llama".into()));
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    w.set("tokenizer.ggml.bos_token_id", Value::U32(1));
    w.set("tokenizer.ggml.eos_token_id", Value::U32(2));
    w.set("tokenizer.ggml.unknown_token_id", Value::U32(0));
    w.set("tokenizer.ggml.add_space_prefix", Value::Bool(true));
    n_vocab
}

/// The float keys an architecture's own arithmetic reads, at values that make them matter on
/// a tiny random model.
fn arch_floats(arch: Arch) -> &'static [(&'static str, f32)] {
    match arch {
        Arch::Gemma2 => &[
            ("attn_logit_softcapping", 2.0),
            ("final_logit_softcapping", 5.0),
        ],
        Arch::Granite => &[
            ("logit_scale", 2.5),
            ("residual_scale", 0.5),
            ("embedding_scale", 3.0),
            ("attention.scale", 0.2),
        ],
        Arch::Phi3 => &[("rope.scaling.attn_factor", 1.2)],
        Arch::Mistral3 => &[
            ("rope.scaling.factor", 4.0),
            ("rope.scaling.yarn_beta_fast", 32.0),
            ("rope.scaling.yarn_beta_slow", 1.0),
            ("attention.temperature_scale", 0.1),
        ],
        _ => &[],
    }
}

/// The context every architecture parity reference was computed with (llama.cpp's `n_ctx`;
/// statelm's state capacity in the test, which chooses Phi-3's LongRoPE factors alike).
pub const PARITY_CTX: usize = 256;

/// The architecture parity files, by reference name: one per architecture, Phi-3 three times
/// (partial rotary alone; LongRoPE with its short factors; with its long ones, the original
/// context below [`PARITY_CTX`]).
pub fn parity_set() -> Vec<(&'static str, SyntheticSpec)> {
    let p = SyntheticSpec::parity;
    vec![
        ("llama-rope-freqs", p(Arch::Llama)),
        ("qwen3", p(Arch::Qwen3)),
        ("smollm3", p(Arch::Smollm3)),
        ("gemma2", p(Arch::Gemma2)),
        ("granite", p(Arch::Granite)),
        (
            "phi3",
            SyntheticSpec {
                rope_freqs: false,
                ..p(Arch::Phi3)
            },
        ),
        ("phi3-longrope-short", p(Arch::Phi3)),
        (
            "phi3-longrope-long",
            SyntheticSpec {
                n_ctx_orig: 64,
                ..p(Arch::Phi3)
            },
        ),
        ("mistral3", p(Arch::Mistral3)),
        ("lfm2", p(Arch::Lfm2)),
    ]
}
