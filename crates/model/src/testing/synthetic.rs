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
    /// Sliding window of local layers (Gemma 3 only).
    pub sliding_window: Option<usize>,
    /// Seed of the random weights.
    pub seed: u64,
}

impl SyntheticSpec {
    /// A tiny model of `arch` (2 layers, or 6 for Gemma 3 so one layer is global).
    pub fn tiny(arch: Arch) -> SyntheticSpec {
        SyntheticSpec {
            arch,
            n_embd: 64,
            n_layer: if arch == Arch::Gemma3 { 6 } else { 2 },
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            n_ff: 128,
            weight_type: GgmlType::Q8_0,
            sliding_window: (arch == Arch::Gemma3).then_some(8),
            seed: 7,
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
    let scale = 1.0 / (cols as f32).sqrt();
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

/// Writes a synthetic model to `path`.
pub fn write_synthetic_model(path: impl AsRef<Path>, s: &SyntheticSpec) -> Result<(), ModelError> {
    let mut w = GgufWriter::new();
    let n_vocab = write_metadata(&mut w, s);
    let mut rng = Rng(s.seed);
    let ty = s.weight_type;
    let (e, qd, kd) = (s.n_embd, s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    let gemma = s.arch == Arch::Gemma3;
    matrix(&mut w, &mut rng, "token_embd.weight", n_vocab, e, ty)?;
    vector(&mut w, &mut rng, "output_norm.weight", e, 1.0)?;
    if !gemma {
        matrix(&mut w, &mut rng, "output.weight", n_vocab, e, ty)?;
    }
    for il in 0..s.n_layer {
        let n = |t: &str| format!("blk.{il}.{t}");
        vector(&mut w, &mut rng, &n("attn_norm.weight"), e, 1.0)?;
        matrix(&mut w, &mut rng, &n("attn_q.weight"), qd, e, ty)?;
        matrix(&mut w, &mut rng, &n("attn_k.weight"), kd, e, ty)?;
        matrix(&mut w, &mut rng, &n("attn_v.weight"), kd, e, ty)?;
        matrix(&mut w, &mut rng, &n("attn_output.weight"), e, qd, ty)?;
        vector(&mut w, &mut rng, &n("ffn_norm.weight"), e, 1.0)?;
        matrix(&mut w, &mut rng, &n("ffn_gate.weight"), s.n_ff, e, ty)?;
        matrix(&mut w, &mut rng, &n("ffn_up.weight"), s.n_ff, e, ty)?;
        matrix(&mut w, &mut rng, &n("ffn_down.weight"), e, s.n_ff, ty)?;
        if s.arch == Arch::Qwen2 {
            vector(&mut w, &mut rng, &n("attn_q.bias"), qd, 0.0)?;
            vector(&mut w, &mut rng, &n("attn_k.bias"), kd, 0.0)?;
            vector(&mut w, &mut rng, &n("attn_v.bias"), kd, 0.0)?;
        }
        if gemma {
            vector(&mut w, &mut rng, &n("attn_q_norm.weight"), s.head_dim, 1.0)?;
            vector(&mut w, &mut rng, &n("attn_k_norm.weight"), s.head_dim, 1.0)?;
            vector(&mut w, &mut rng, &n("post_attention_norm.weight"), e, 1.0)?;
            vector(&mut w, &mut rng, &n("post_ffw_norm.weight"), e, 1.0)?;
        }
    }
    w.write_file_atomic(path)?;
    Ok(())
}

/// The model's metadata and its toy vocabulary; returns the vocabulary's size.
fn write_metadata(w: &mut GgufWriter, s: &SyntheticSpec) -> usize {
    let a = s.arch.name();
    let (tokens, scores, types) = vocab();
    let n_vocab = tokens.len();
    w.set("general.architecture", Value::String(a.into()));
    w.set("general.name", Value::String(format!("synthetic {a}")));
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
    for (key, v) in u32s
        .into_iter()
        .chain(s.sliding_window.map(|v| ("attention.sliding_window", v)))
    {
        w.set(format!("{a}.{key}"), Value::U32(v as u32));
    }
    w.set(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    w.set(format!("{a}.rope.freq_base"), Value::F32(10_000.0));
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
