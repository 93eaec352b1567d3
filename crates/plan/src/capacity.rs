//! Capacity planner: how much memory a model needs at a given context, line by line, from the
//! GGUF header alone (no weight is read) or for a hypothetical model of a given size.
//!
//! The figures are the runtime's own allocation rules, not rules of thumb:
//! - **weights**: the tensor bytes, which stay in the memory map (every page is touched by a
//!   decode step, so all of it is resident), plus the 1-D tensors (norms, biases) that loading
//!   copies out as f32;
//! - **KV cache**: per layer, rows of `n_head_kv × head_dim` keys and `n_head_kv × v_head_dim`
//!   values in the cache type, plus a 4-byte position per cell, allocated 256 cells at a time up
//!   to the layer's maximum: the context for global layers, `min(window + ubatch, context)` for
//!   sliding-window layers (which therefore stop growing);
//! - **scratch**: the forward pass's buffers (the compute thread's [`statelm_model::Scratch`], one per
//!   engine whatever the number of States) after a prefill of `context` tokens in
//!   micro-batches of `ubatch` (residual and sub-block outputs, q/k/v, attention output, the
//!   two FFN halves, the f32 copies of one layer's cache, the quantized activations per
//!   vec-dot type), grown with `Vec`'s doubling exactly as the forward pass grows them;
//! - **token history** (4 bytes a token) and the **logits** rows returned (`n_vocab × 4` each);
//! - **tokenizer and metadata**: the parsed GGUF metadata (vocabulary strings, scores, merges)
//!   and the tokenizer's own index, estimated per entry (see [`tokenizer_bytes`]);
//! - **runtime**: [`RUNTIME_BASE_BYTES`] for code, allocator arenas and the engine, plus
//!   [`THREAD_STACK_BYTES`] per worker thread.
//!
//! `State::bytes() + Scratch::bytes()` equals `kv + scratch + token history` (tested on the
//! real models).

use statelm_gguf::{Array, GgmlType, GgufFile, Value};
use statelm_model::config::{Arch, FfnActivation, ModelConfig, RopeConfig, RopeFactors, RopeStyle};
use statelm_model::kv::KvType;
use statelm_model::quantize::{choose_types, QuantTarget};
use statelm_model::ModelError;
use std::path::Path;

/// Code, static data, allocator arenas and the engine's own structures (a stated constant).
pub const RUNTIME_BASE_BYTES: u64 = 24 << 20;
/// Stack reserved per worker thread (Rust's default for spawned threads; counted in full).
pub const THREAD_STACK_BYTES: u64 = 2 << 20;

/// What to plan for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOptions {
    /// Tokens the State holds (its capacity, filled).
    pub context: usize,
    /// KV cache element type.
    pub kv_type: KvType,
    /// Micro-batch of a prefill (`LoadOptions::ubatch`).
    pub ubatch: usize,
    /// Worker threads.
    pub threads: usize,
    /// Logits rows returned by one call (1 for generation).
    pub logits_rows: usize,
    /// The memory ceiling to compare against, if any.
    pub ceiling: Option<u64>,
}

impl PlanOptions {
    /// `context` tokens, f16 cache, the default micro-batch, 4 threads, one logits row.
    pub fn new(context: usize) -> PlanOptions {
        PlanOptions {
            context,
            kv_type: KvType::F16,
            ubatch: statelm_model::LoadOptions::default().ubatch,
            threads: 4,
            logits_rows: 1,
            ceiling: None,
        }
    }
}

/// Tensors and bytes of one weight type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeBytes {
    /// Type name (`"Q8_0"`, or `"~4.85 bpw"` for a hypothetical model).
    pub ty: String,
    /// Number of tensors.
    pub tensors: usize,
    /// Bytes.
    pub bytes: u64,
}

/// Size of a vocabulary, for the tokenizer estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenizerSize {
    /// Tokens.
    pub tokens: u64,
    /// Total bytes of the token texts.
    pub token_text: u64,
    /// BPE merges.
    pub merges: u64,
    /// Total bytes of the merge texts.
    pub merge_text: u64,
}

/// What the planner knows about a model: its shape, weight types and vocabulary size.
#[derive(Debug, Clone)]
pub struct ModelSketch {
    /// Name (file name, or a description of the hypothetical model).
    pub name: String,
    /// Hyperparameters.
    pub config: ModelConfig,
    /// Weight bytes by type.
    pub weights: Vec<TypeBytes>,
    /// Bytes of the 1-D tensors, which loading copies out as f32.
    pub vector_bytes: u64,
    /// Types of each layer's `[q, k, v, o, gate, up, down]` matrices.
    pub layer_types: Vec<[GgmlType; 7]>,
    /// Type of the output projection.
    pub output_type: GgmlType,
    /// Vocabulary size for the tokenizer estimate.
    pub tokenizer: TokenizerSize,
    /// Parameters (elements of every tensor).
    pub params: u64,
}

/// The memory a model needs, line by line (bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    /// The model.
    pub model: String,
    /// The options planned for.
    pub options: PlanOptions,
    /// Weights by type (memory-mapped).
    pub weights_by_type: Vec<TypeBytes>,
    /// All weight bytes (memory-mapped).
    pub weights_total: u64,
    /// 1-D tensors copied out as f32 at load.
    pub weight_vectors: u64,
    /// KV bytes per token while every layer grows (below the sliding window).
    pub kv_per_token: u64,
    /// KV bytes per token once sliding-window layers are full (global layers only).
    pub kv_per_token_beyond_window: u64,
    /// KV cache bytes with `context` tokens (allocated cells).
    pub kv_at_context: u64,
    /// The compute thread's scratch buffers ([`statelm_model::Scratch`]: one per engine, not per State).
    pub scratch: u64,
    /// The State's token history.
    pub token_history: u64,
    /// Logits rows returned by one call.
    pub logits: u64,
    /// Tokenizer and parsed metadata (estimate).
    pub tokenizer: u64,
    /// Runtime overhead (stated constants).
    pub runtime: u64,
    /// Everything.
    pub total: u64,
    /// The ceiling planned against.
    pub ceiling: Option<u64>,
    /// `ceiling - total` (negative: does not fit).
    pub headroom: Option<i64>,
}

impl Footprint {
    /// What a filled State and the scratch that ran it report (`State::bytes()` +
    /// `Scratch::bytes()`): KV + scratch + token history.
    pub fn state_bytes(&self) -> u64 {
        self.kv_at_context + self.scratch + self.token_history
    }

    /// Whether the total stays under the ceiling (true without a ceiling).
    pub fn fits(&self) -> bool {
        self.headroom.is_none_or(|h| h >= 0)
    }

    /// The breakdown as `(label, bytes)` lines, in print order.
    pub fn lines(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("weights (mapped)", self.weights_total),
            ("weight vectors (f32 copies)", self.weight_vectors),
            ("KV cache", self.kv_at_context),
            ("scratch", self.scratch),
            ("token history", self.token_history),
            ("logits", self.logits),
            ("tokenizer + metadata", self.tokenizer),
            ("runtime", self.runtime),
        ]
    }
}

impl ModelSketch {
    /// From a GGUF file's header (tensor index and metadata; no weight is read).
    pub fn from_gguf(file: &GgufFile, name: &str) -> Result<ModelSketch, ModelError> {
        let tensors: Vec<(&str, &[u64], GgmlType)> = file
            .tensors()
            .iter()
            .map(|t| (t.name.as_str(), t.dims.as_slice(), t.ty))
            .collect();
        sketch_from_tensors(file, name, &tensors)
    }

    /// As the file would be after `statelm quantize` to `target` (the recipe's types).
    pub fn from_recipe(
        file: &GgufFile,
        name: &str,
        target: QuantTarget,
    ) -> Result<ModelSketch, ModelError> {
        let choices = choose_types(file, target);
        let tensors: Vec<(&str, &[u64], GgmlType)> = choices
            .iter()
            .map(|c| (c.name.as_str(), c.dims.as_slice(), c.to))
            .collect();
        sketch_from_tensors(file, name, &tensors)
    }

    /// Total weight bytes.
    pub fn weights_total(&self) -> u64 {
        self.weights.iter().map(|t| t.bytes).sum()
    }
}

fn sketch_from_tensors(
    file: &GgufFile,
    name: &str,
    tensors: &[(&str, &[u64], GgmlType)],
) -> Result<ModelSketch, ModelError> {
    let config = ModelConfig::from_gguf(file)?;
    let mut weights: Vec<TypeBytes> = Vec::new();
    let (mut vector_bytes, mut params) = (0u64, 0u64);
    for &(_, dims, ty) in tensors {
        let n: u64 = dims.iter().product();
        params += n;
        let bytes = ty.bytes_for(n).unwrap_or(0);
        if dims.len() < 2 {
            vector_bytes += 4 * n;
        }
        match weights.iter_mut().find(|w| w.ty == ty.name()) {
            Some(w) => {
                w.tensors += 1;
                w.bytes += bytes;
            }
            None => weights.push(TypeBytes {
                ty: ty.name().to_string(),
                tensors: 1,
                bytes,
            }),
        }
    }
    weights.sort_by_key(|w| std::cmp::Reverse(w.bytes));
    let type_of = |n: &str| {
        tensors
            .iter()
            .find(|t| t.0 == n)
            .map(|t| t.2)
            .ok_or_else(|| ModelError::MissingTensor(n.to_string()))
    };
    // Each product's tensor, or where an architecture keeps it: Phi-3's fused `attn_qkv` and
    // gate-up `ffn_up`, LFM2's convolution layers' `in_proj` and `out_proj`.
    let names: [&[&str]; 7] = [
        &["attn_q", "attn_qkv", "shortconv.in_proj"],
        &["attn_k", "attn_qkv", "shortconv.in_proj"],
        &["attn_v", "attn_qkv", "shortconv.in_proj"],
        &["attn_output", "shortconv.out_proj"],
        &["ffn_gate", "ffn_up"],
        &["ffn_up"],
        &["ffn_down"],
    ];
    let mut layer_types = Vec::with_capacity(config.n_layer);
    for il in 0..config.n_layer {
        let mut types = [GgmlType::F32; 7];
        for (slot, alternatives) in types.iter_mut().zip(names) {
            let found = alternatives
                .iter()
                .find_map(|n| type_of(&format!("blk.{il}.{n}.weight")).ok());
            *slot = match found {
                Some(ty) => ty,
                None => type_of(&format!("blk.{il}.{}.weight", alternatives[0]))?,
            };
        }
        layer_types.push(types);
    }
    let output_type = type_of("output.weight").or_else(|_| type_of("token_embd.weight"))?;
    Ok(ModelSketch {
        name: name.to_string(),
        config,
        weights,
        vector_bytes,
        layer_types,
        output_type,
        tokenizer: tokenizer_size(file),
        params,
    })
}

/// Counts and text bytes of `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`.
fn tokenizer_size(file: &GgufFile) -> TokenizerSize {
    let strings = |key: &str| match file.get(key) {
        Some(Value::Array(Array::String(v))) => {
            (v.len() as u64, v.iter().map(|s| s.len() as u64).sum())
        }
        _ => (0, 0),
    };
    let (tokens, token_text) = strings("tokenizer.ggml.tokens");
    let (merges, merge_text) = strings("tokenizer.ggml.merges");
    TokenizerSize {
        tokens,
        token_text,
        merges,
        merge_text,
    }
}

/// Heap bytes of a string of `len` bytes under glibc: chunks of `len + 8` rounded up to 16,
/// at least 32.
fn string_heap(len: f64) -> f64 {
    (((len + 8.0 + 15.0) / 16.0).floor() * 16.0).max(32.0)
}

/// Estimated heap bytes of the tokenizer and the parsed metadata for a vocabulary:
/// per token, the metadata `String` (24 + heap), the tokenizer's text (`Box<str>`, 16 + heap),
/// its hash-map key (heap) and slot (24 bytes at 7/8 load), score and type (4 + 4 in the
/// metadata, 4 + 1 in the tokenizer) and the decoded piece (24 + heap); per merge, the
/// metadata `String` (24 + heap) and a pair-map slot (16 bytes at 7/8 load).
pub fn tokenizer_bytes(t: &TokenizerSize) -> u64 {
    if t.tokens == 0 {
        return 0;
    }
    let tok_heap = string_heap(t.token_text as f64 / t.tokens as f64);
    let per_token = 24.0
        + tok_heap
        + 16.0
        + tok_heap
        + tok_heap
        + 24.0 * 8.0 / 7.0
        + 1.0
        + 8.0
        + 5.0
        + 24.0
        + tok_heap;
    let merge_heap = if t.merges > 0 {
        string_heap(t.merge_text as f64 / t.merges as f64)
    } else {
        0.0
    };
    let per_merge = 24.0 + merge_heap + 16.0 * 8.0 / 7.0 + 1.0;
    (per_token * t.tokens as f64 + per_merge * t.merges as f64) as u64
}

/// The cells layer `il` may hold: the context, or the sliding window plus a micro-batch.
fn max_cells(c: &ModelConfig, il: usize, context: usize, ubatch: usize) -> usize {
    statelm_model::kv::layer_cells(c, il, context, Some(ubatch))
}

/// KV cache bytes once `n` tokens are in a state of capacity `context` ([`statelm_model::kv::kv_bytes_for`]).
pub fn kv_bytes(c: &ModelConfig, kv: KvType, context: usize, ubatch: usize, n: usize) -> u64 {
    statelm_model::kv::kv_bytes_for(c, kv, context, Some(ubatch), n)
}

/// `Vec` growth: a request above the capacity doubles it (or grows to the request).
fn grow(cap: usize, need: usize) -> usize {
    if need > cap {
        need.max(2 * cap)
    } else {
        cap
    }
}

/// The scratch bytes after a prefill of `context` tokens in `ubatch` micro-batches.
fn scratch_bytes(s: &ModelSketch, o: &PlanOptions) -> u64 {
    let c = &s.config;
    let n = o.context.min(o.ubatch).max(1);
    let att = c.n_head * c.v_head_dim;
    let fixed = n * (3 * c.n_embd + c.q_dim() + c.k_dim() + c.v_dim() + att + 2 * c.n_ff);
    let (mut kf, mut vf, mut done) = (0usize, 0usize, 0usize);
    while done < o.context {
        let end = (done + o.ubatch.max(1)).min(o.context);
        for il in 0..c.n_layer {
            let used = end.min(max_cells(c, il, o.context, o.ubatch));
            kf = grow(kf, used * c.k_dim());
            vf = grow(vf, used * c.v_dim());
        }
        done = end;
    }
    4 * (fixed + kf + vf) as u64 + acts_bytes(s, n, o.logits_rows.min(n)) as u64
}

/// Bytes of the quantized-activation buffers: one per vec-dot type, grown over the first
/// micro-batch's matrix products in forward order.
fn acts_bytes(s: &ModelSketch, n: usize, logit_rows: usize) -> usize {
    let c = &s.config;
    // Per vec-dot type: (type, quantized bytes). The GEMM path's f32 copies are freed at the
    // end of every forward call, so a State never holds them between calls.
    let mut caps: Vec<(GgmlType, usize)> = Vec::new();
    let mut need = |ty: GgmlType, cols: usize, rows: usize| {
        let vdt = statelm_quant::vec_dot_type(ty);
        let row = vdt.bytes_for(cols as u64).unwrap_or(4 * cols as u64) as usize;
        match caps.iter_mut().find(|e| e.0 == vdt) {
            Some(e) => e.1 = grow(e.1, row * rows),
            None => caps.push((vdt, row * rows)),
        }
    };
    let cols = [
        c.n_embd,
        c.n_embd,
        c.n_embd,
        c.n_head * c.v_head_dim,
        c.n_embd,
        c.n_embd,
        c.n_ff,
    ];
    for types in &s.layer_types {
        for (&ty, &k) in types.iter().zip(&cols) {
            need(ty, k, n);
        }
    }
    if logit_rows > 0 {
        need(s.output_type, c.n_embd, logit_rows);
    }
    caps.iter().map(|e| e.1).sum()
}

/// Plans `sketch` under `opts`.
pub fn plan(sketch: &ModelSketch, opts: &PlanOptions) -> Footprint {
    let c = &sketch.config;
    let per_cell = statelm_model::kv::cell_bytes(c, opts.kv_type);
    let n_global = (0..c.n_layer)
        .filter(|&il| !c.is_swa_layer(il) && !c.is_conv_layer(il))
        .count() as u64;
    let weights_total = sketch.weights_total();
    let kv_at_context = kv_bytes(c, opts.kv_type, opts.context, opts.ubatch, opts.context);
    let scratch = scratch_bytes(sketch, opts);
    let token_history = 4 * opts.context as u64;
    let logits = (opts.logits_rows * c.n_vocab * 4) as u64;
    let tokenizer = tokenizer_bytes(&sketch.tokenizer);
    let runtime = RUNTIME_BASE_BYTES + THREAD_STACK_BYTES * opts.threads as u64;
    let total = weights_total
        + sketch.vector_bytes
        + kv_at_context
        + scratch
        + token_history
        + logits
        + tokenizer
        + runtime;
    Footprint {
        model: sketch.name.clone(),
        options: *opts,
        weights_by_type: sketch.weights.clone(),
        weights_total,
        weight_vectors: sketch.vector_bytes,
        kv_per_token: per_cell * c.n_layer as u64,
        kv_per_token_beyond_window: per_cell * n_global,
        kv_at_context,
        scratch,
        token_history,
        logits,
        tokenizer,
        runtime,
        total,
        ceiling: opts.ceiling,
        headroom: opts.ceiling.map(|l| l as i64 - total as i64),
    }
}

/// Plans the GGUF file at `path` from its header.
pub fn plan_file(path: impl AsRef<Path>, opts: &PlanOptions) -> Result<Footprint, ModelError> {
    let path = path.as_ref();
    let file = GgufFile::open(path)?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    Ok(plan(&ModelSketch::from_gguf(&file, &name)?, opts))
}

/// A public model whose shape anchors the hypothetical ones.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceShape {
    /// Model name.
    pub name: &'static str,
    /// Parameters.
    pub params: u64,
    /// Layers.
    pub n_layer: usize,
    /// Width.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// FFN width.
    pub n_ff: usize,
    /// Vocabulary.
    pub n_vocab: usize,
}

/// Typical GQA architectures from 0.5B to 14B parameters (published configs).
pub const REFERENCE_SHAPES: [ReferenceShape; 5] = [
    ReferenceShape {
        name: "Qwen2.5-0.5B",
        params: 494_000_000,
        n_layer: 24,
        n_embd: 896,
        n_head: 14,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 4864,
        n_vocab: 151_936,
    },
    ReferenceShape {
        name: "Llama-3.2-1B",
        params: 1_236_000_000,
        n_layer: 16,
        n_embd: 2048,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 8192,
        n_vocab: 128_256,
    },
    ReferenceShape {
        name: "Llama-3.2-3B",
        params: 3_213_000_000,
        n_layer: 28,
        n_embd: 3072,
        n_head: 24,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 8192,
        n_vocab: 128_256,
    },
    ReferenceShape {
        name: "Llama-3.1-8B",
        params: 8_030_000_000,
        n_layer: 32,
        n_embd: 4096,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 14336,
        n_vocab: 128_256,
    },
    ReferenceShape {
        name: "Qwen2.5-14B",
        params: 14_770_000_000,
        n_layer: 48,
        n_embd: 5120,
        n_head: 40,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 13824,
        n_vocab: 152_064,
    },
];

/// Average token length (bytes) assumed for a hypothetical vocabulary, and merges per token.
const HYPOTHETICAL_TOKEN_LEN: u64 = 7;

impl ModelSketch {
    /// A hypothetical dense GQA model of `params` parameters at `bits_per_weight` (scales
    /// included): its shape is interpolated geometrically (in log-parameters) between the two
    /// nearest [`REFERENCE_SHAPES`] (clamped at the ends), with a BPE vocabulary.
    pub fn hypothetical(params: u64, bits_per_weight: f64) -> ModelSketch {
        let (config, basis) = typical_config(params);
        let ty = if bits_per_weight < 6.0 {
            GgmlType::Q4_K
        } else {
            GgmlType::Q8_0
        };
        let bytes = (params as f64 * bits_per_weight / 8.0) as u64;
        let n_vocab = config.n_vocab as u64;
        ModelSketch {
            name: format!("hypothetical {:.2}B ({basis})", params as f64 / 1e9),
            layer_types: vec![[ty; 7]; config.n_layer],
            output_type: ty,
            vector_bytes: 4 * (2 * config.n_layer as u64 + 1) * config.n_embd as u64,
            weights: vec![TypeBytes {
                ty: format!("~{bits_per_weight:.2} bpw"),
                tensors: 7 * config.n_layer + 2,
                bytes,
            }],
            tokenizer: TokenizerSize {
                tokens: n_vocab,
                token_text: n_vocab * HYPOTHETICAL_TOKEN_LEN,
                merges: n_vocab,
                merge_text: n_vocab * (HYPOTHETICAL_TOKEN_LEN + 1),
            },
            params,
            config,
        }
    }
}

/// The interpolated shape for `params` and a description of its basis.
fn typical_config(params: u64) -> (ModelConfig, String) {
    let r = &REFERENCE_SHAPES;
    let p = (params.max(1) as f64).ln();
    let i = r
        .iter()
        .position(|s| (s.params as f64).ln() >= p)
        .unwrap_or(r.len() - 1)
        .max(1);
    let (a, b) = (&r[i - 1], &r[i]);
    let (pa, pb) = ((a.params as f64).ln(), (b.params as f64).ln());
    let t = ((p - pa) / (pb - pa)).clamp(0.0, 1.0);
    let mix = |x: usize, y: usize| ((x as f64).ln() * (1.0 - t) + (y as f64).ln() * t).exp();
    let head_dim = if t < 0.5 { a.head_dim } else { b.head_dim };
    let kv_dim = mix(a.n_head_kv * a.head_dim, b.n_head_kv * b.head_dim);
    let n_head_kv = ((kv_dim / head_dim as f64).round() as usize).max(1);
    let n_embd = ((mix(a.n_embd, b.n_embd) / 64.0).round() as usize).max(1) * 64;
    let n_head = (n_embd / head_dim).div_ceil(n_head_kv).max(1) * n_head_kv;
    let n_layer = mix(a.n_layer, b.n_layer).round() as usize;
    let config = ModelConfig {
        arch: Arch::Llama,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        attention_layers: vec![true; n_layer],
        shortconv: None,
        head_dim,
        v_head_dim: head_dim,
        n_ff: ((mix(a.n_ff, b.n_ff) / 256.0).round() as usize).max(1) * 256,
        n_vocab: mix(a.n_vocab, b.n_vocab).round() as usize,
        context_length: 8192,
        norm_eps: 1e-5,
        rope: RopeConfig {
            style: RopeStyle::Neox,
            dim: head_dim,
            base: 500_000.0,
            base_swa: 500_000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 8192,
            no_rope_step: None,
            factors: RopeFactors::None,
        },
        sliding_window: None,
        swa_period: 1,
        embed_scale: None,
        qk_norm: false,
        post_norms: false,
        ffn_activation: FfnActivation::Silu,
        attn_scale: 1.0 / (head_dim as f64).sqrt() as f32,
        attn_softcap: None,
        attn_temperature: None,
        residual_scale: None,
        logit_scale: None,
        final_logit_softcap: None,
        output_norm: "output_norm.weight",
    };
    let basis = if t == 0.0 || t == 1.0 {
        format!("shape of {}", if t == 0.0 { a.name } else { b.name })
    } else {
        format!("shape between {} and {}", a.name, b.name)
    };
    (config, basis)
}

/// The largest parameter count (to 10M) of a hypothetical model at `bits_per_weight` whose
/// footprint under `opts` stays within `budget` bytes; 0 if not even 10M parameters fit.
pub fn max_params_that_fit(budget: u64, bits_per_weight: f64, opts: &PlanOptions) -> u64 {
    const STEP: u64 = 10_000_000;
    let fits = |p: u64| plan(&ModelSketch::hypothetical(p, bits_per_weight), opts).total <= budget;
    let (mut lo, mut hi) = (0u64, 100_000u64); // in STEPs: up to 1T parameters
    if !fits(STEP) {
        return 0;
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid * STEP) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo * STEP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_growth_and_kv_cells() {
        assert_eq!(grow(0, 10), 10);
        assert_eq!(grow(10, 15), 20);
        assert_eq!(grow(10, 25), 25);
        assert_eq!(grow(10, 5), 10);
        let (c, _) = typical_config(1_236_000_000);
        assert_eq!(
            (c.n_layer, c.n_embd, c.n_head_kv, c.head_dim),
            (16, 2048, 8, 64)
        );
        // 16 layers × (512 + 512) f16 + 4 bytes of position per cell.
        let per_token = 16 * (2 * 512 * 2 + 4);
        assert_eq!(kv_bytes(&c, KvType::F16, 2048, 128, 2048), 2048 * per_token);
        assert_eq!(kv_bytes(&c, KvType::F16, 2048, 128, 1), 256 * per_token);
    }

    #[test]
    fn hypothetical_models_grow_with_parameters() {
        let o = PlanOptions::new(2048);
        let mut last = 0;
        for p in [300, 500, 800, 1200, 2000, 3000, 5000, 8000, 14000, 30000] {
            let f = plan(&ModelSketch::hypothetical(p * 1_000_000, 4.85), &o);
            assert!(f.total > last, "{p}M: {} <= {last}", f.total);
            last = f.total;
        }
        let three = plan(&ModelSketch::hypothetical(3_000_000_000, 4.85), &o);
        // A 3B GQA model at 2K context: ~200 MiB of f16 KV (the guide's "200-400 MB").
        assert!(
            (150 << 20..300 << 20).contains(&three.kv_at_context),
            "{three:?}"
        );
        let p = max_params_that_fit(3 << 30, 4.85, &o);
        assert!((3_000_000_000..6_000_000_000).contains(&p), "{p}");
        assert!(max_params_that_fit(3 << 30, 8.5, &o) < p);
        assert_eq!(max_params_that_fit(1 << 20, 8.5, &o), 0);
    }
}
