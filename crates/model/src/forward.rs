//! The decoder: one forward pass over a batch of new tokens, read top to bottom.
//!
//! Shapes: `n` tokens in the batch, `E = n_embd`, `H` query heads and `Hkv` key/value heads of
//! dimension `D`, FFN width `F`. Activations are row-major `[n, width]`.

use crate::attention::{attend, AttendBuffers, AttentionShape};
use crate::config::{FfnActivation, ModelConfig};
use crate::ops;
use crate::ops::fit;
use crate::scratch::Scratch;
use crate::state::State;
use crate::weights::{AttentionWeights, LayerWeights, Mixer, ShortConvWeights, TensorRef, Weights};
use crate::{ModelError, Numerics};
use statelm_gguf::GgufFile;
use statelm_quant::{Projector, Summation, ThreadPool};

/// Receives named intermediates of a forward pass, to bisect a mismatch layer by layer.
pub trait Trace {
    /// Called with `[n, width]` rows of the intermediate `name` (`layer` is `None` outside blocks).
    fn record(&mut self, layer: Option<usize>, name: &str, n_tokens: usize, data: &[f32]);
}

/// Everything one batch needs that is not the state.
pub(crate) struct BatchCtx<'a> {
    pub file: &'a GgufFile,
    pub config: &'a ModelConfig,
    pub weights: &'a Weights,
    pub pool: &'a ThreadPool,
    pub numerics: Numerics,
}

/// Runs `tokens` (positions `state.n_cached..`) through the decoder in the buffers of `sc`,
/// appending their keys and values to the cache. Appends the logits of the batch rows
/// `logit_rows` to `logits`.
pub(crate) fn forward_batch(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    state: &mut State,
    tokens: &[u32],
    logit_rows: std::ops::Range<usize>,
    logits: &mut Vec<f32>,
    trace: &mut Option<&mut dyn Trace>,
) -> Result<(), ModelError> {
    let c = ctx.config;
    let n = tokens.len();
    let p0 = state.n_cached;
    embed(ctx, tokens, fit(&mut sc.x, n * c.n_embd))?;
    record(trace, None, "embd", n, &sc.x[..n * c.n_embd]);
    for (il, lw) in ctx.weights.layers.iter().enumerate() {
        match &lw.mixer {
            Mixer::Attention(a) => attention_block(ctx, sc, state, (il, lw, a), p0, n, trace)?,
            Mixer::ShortConv(w) => shortconv_block(ctx, sc, state, (il, lw, w), p0, n, trace)?,
        }
        ffn_block(ctx, sc, il, lw, n, trace)?;
    }
    output(ctx, sc, n, logit_rows, logits)?;
    sc.release_batch_buffers(n);
    state.n_cached += n;
    Ok(())
}

fn record(trace: &mut Option<&mut dyn Trace>, il: Option<usize>, name: &str, n: usize, d: &[f32]) {
    if let Some(t) = trace.as_deref_mut() {
        t.record(il, name, n, d);
    }
}

/// `x[t] = embedding row of tokens[t]` (× `sqrt(E)` for Gemma).
fn embed(ctx: &BatchCtx<'_>, tokens: &[u32], x: &mut [f32]) -> Result<(), ModelError> {
    let c = ctx.config;
    let table = ctx.weights.token_embd.matrix(ctx.file);
    for (&tok, row) in tokens.iter().zip(x.chunks_exact_mut(c.n_embd)) {
        table.dequantize_row(tok as usize, row)?;
        if let Some(s) = c.embed_scale {
            row.iter_mut().for_each(|v| *v *= s);
        }
    }
    Ok(())
}

impl BatchCtx<'_> {
    /// How the projections may sum: llama.cpp's orders, or the fastest per shape.
    fn summation(&self) -> Summation {
        match self.numerics {
            Numerics::Fast => Summation::Fast,
            Numerics::LlamaCpp => Summation::Ggml,
        }
    }
}

/// `y[n, rows] = x[n, cols] · wᵀ`.
fn project(
    ctx: &BatchCtx<'_>,
    acts: &mut Projector,
    w: &TensorRef,
    x: &[f32],
    n: usize,
    y: &mut Vec<f32>,
) -> Result<(), ModelError> {
    let y = fit(y, n * w.rows);
    acts.project(ctx.pool, &w.matrix(ctx.file), x, n, y, ctx.summation())?;
    Ok(())
}

/// `y_j[n, rows_j] = x[n, cols] · w_jᵀ` for matrices sharing the input `x` (quantized once;
/// one pool dispatch for a decode step).
fn project_many<const N: usize>(
    ctx: &BatchCtx<'_>,
    acts: &mut Projector,
    ws: [&TensorRef; N],
    x: &[f32],
    n: usize,
    ys: [&mut Vec<f32>; N],
) -> Result<(), ModelError> {
    let mats = ws.map(|w| w.matrix(ctx.file));
    let mut i = 0;
    let jobs = ys.map(|y| {
        let w = &mats[i];
        i += 1;
        (w, fit(y, n * w.rows()))
    });
    acts.project_many(ctx.pool, jobs, x, n, ctx.summation())?;
    Ok(())
}

fn add_bias(y: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in y.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(v, bv)| *v += bv);
        }
    }
}

/// `x += post_norm(Wo · attention(rope(norm(Wq·h)), rope(norm(Wk·h)), Wv·h))`, `h = norm(x)`:
/// projections, RoPE, the KV append, attention, the output projection.
fn attention_block(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    state: &mut State,
    (il, lw, a): (usize, &LayerWeights, &AttentionWeights),
    p0: usize,
    n: usize,
    trace: &mut Option<&mut dyn Trace>,
) -> Result<(), ModelError> {
    let c = ctx.config;
    let e = c.n_embd;
    qkv(ctx, sc, il, (lw, a), n, trace)?;
    rope(ctx, sc, il, a, (p0, state.capacity), n, trace);
    // Append k, v to the cache, then attend over every visible cell.
    let cache = &mut state.layers[il];
    for t in 0..n {
        cache.push(
            (p0 + t) as u32,
            &sc.k[t * c.k_dim()..(t + 1) * c.k_dim()],
            &sc.v[t * c.v_dim()..(t + 1) * c.v_dim()],
        );
    }
    let shape = AttentionShape {
        n_head: c.n_head,
        n_head_kv: c.n_head_kv,
        head_dim: c.head_dim,
        v_head_dim: c.v_head_dim,
        scale: c.attn_scale,
        window: c.sliding_window.filter(|_| c.is_swa_layer(il)),
        softcap: c.attn_softcap,
    };
    let att_len = n * c.n_head * c.v_head_dim;
    let buffers = AttendBuffers {
        kf: &mut sc.kf,
        vf: &mut sc.vf,
        tasks: &mut sc.attn,
    };
    let att = fit(&mut sc.att, att_len);
    let q = &sc.q[..n * c.q_dim()];
    attend(ctx.pool, &shape, cache, q, p0, att, buffers, ctx.numerics)?;
    record(trace, Some(il), "kqv_out", n, &sc.att[..att_len]);
    // o = att·Woᵀ [n, E]; Gemma normalizes it again before the residual add.
    project(ctx, &mut sc.acts, &a.wo, &sc.att[..att_len], n, &mut sc.xb2)?;
    post_norm(sc, lw.post_attn_norm.as_deref(), n * e, e, c.norm_eps);
    record(trace, Some(il), "attn_post_norm", n, &sc.xb2[..n * e]);
    add_residual(sc, n * e, c.residual_scale);
    record(trace, Some(il), "attn_out", n, &sc.x[..n * e]);
    Ok(())
}

/// `h = rms_norm(x)`; `q = h·Wqᵀ [n, H·D]`, `k = h·Wkᵀ [n, Hkv·D]`, `v = h·Wvᵀ [n, Hkv·D]`,
/// plus their biases (Qwen 2).
fn qkv(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    il: usize,
    (lw, a): (&LayerWeights, &AttentionWeights),
    n: usize,
    trace: &mut Option<&mut dyn Trace>,
) -> Result<(), ModelError> {
    let c = ctx.config;
    let e = c.n_embd;
    norm_input(sc, &lw.attn_norm, n, e, c.norm_eps);
    record(trace, Some(il), "attn_norm", n, &sc.xb[..n * e]);
    project_many(
        ctx,
        &mut sc.acts,
        [&a.wq, &a.wk, &a.wv],
        &sc.xb[..n * e],
        n,
        [&mut sc.q, &mut sc.k, &mut sc.v],
    )?;
    add_bias(&mut sc.q[..n * c.q_dim()], a.bq.as_ref());
    add_bias(&mut sc.k[..n * c.k_dim()], a.bk.as_ref());
    add_bias(&mut sc.v[..n * c.v_dim()], a.bv.as_ref());
    Ok(())
}

/// Per-head RMS norms of q and k (Gemma 3, Qwen3), then rotary embeddings at positions
/// `p0..p0+n` (none on SmolLM3's NoPE layers), then the attention temperature (Ministral 3).
/// `at` is `(p0, capacity)`: the state's capacity chooses Phi-3's LongRoPE factors.
fn rope(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    il: usize,
    lw: &AttentionWeights,
    at: (usize, usize),
    n: usize,
    trace: &mut Option<&mut dyn Trace>,
) {
    let (p0, capacity) = at;
    let c = ctx.config;
    let (q, k) = (&mut sc.q[..n * c.q_dim()], &mut sc.k[..n * c.k_dim()]);
    if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
        q.chunks_exact_mut(c.head_dim)
            .for_each(|h| ops::rms_norm_in_place(h, qn, c.norm_eps));
        k.chunks_exact_mut(c.head_dim)
            .for_each(|h| ops::rms_norm_in_place(h, kn, c.norm_eps));
        record(trace, Some(il), "q_normed", n, q);
        record(trace, Some(il), "k_normed", n, k);
    }
    let angles = &mut sc.rope[usize::from(c.is_swa_layer(il))];
    let params = c.rope_params(il, capacity);
    for t in 0..n {
        let qt = &mut q[t * c.q_dim()..(t + 1) * c.q_dim()];
        let kt = &mut k[t * c.k_dim()..(t + 1) * c.k_dim()];
        if c.uses_rope(il) {
            angles.compute((p0 + t) as f32, &params, false);
            qt.chunks_exact_mut(c.head_dim)
                .for_each(|h| angles.apply(h, c.rope.style));
            kt.chunks_exact_mut(c.head_dim)
                .for_each(|h| angles.apply(h, c.rope.style));
        }
        if let Some(temp) = c.attn_temperature {
            // llama.cpp computes the factor in double and stores it as f32.
            let steps = ((p0 + t) / temp.floor) as f64;
            let f = ((steps + 1.0).ln() * f64::from(temp.scale) + 1.0) as f32;
            qt.iter_mut().for_each(|v| *v *= f);
        }
    }
    record(trace, Some(il), "q", n, q);
    record(trace, Some(il), "k", n, k);
    record(trace, Some(il), "v", n, &sc.v[..n * c.v_dim()]);
}

/// `x += W_out · (c ⊙ conv(b ⊙ u))` with `[b, c, u] = W_in · norm(x)`: LFM2's gated short
/// convolution, causal and depthwise over the last `l_cache` gated inputs. The inputs before
/// this batch come from the layer's state, which then keeps this batch's newest ones.
fn shortconv_block(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    state: &mut State,
    (il, lw, w): (usize, &LayerWeights, &ShortConvWeights),
    p0: usize,
    n: usize,
    trace: &mut Option<&mut dyn Trace>,
) -> Result<(), ModelError> {
    let c = ctx.config;
    let e = c.n_embd;
    let taps = w.kernel.len() / e;
    let ring = state.conv[il].as_mut().ok_or_else(|| {
        ModelError::BadConfig(format!("layer {il} is a convolution without a state"))
    })?;
    if ring.end() != p0 && !ring.truncate(p0, taps - 1) {
        return Err(ModelError::BadConfig(format!(
            "layer {il}'s convolution state ends at {}, not at position {p0}",
            ring.end()
        )));
    }
    norm_input(sc, &lw.attn_norm, n, e, c.norm_eps);
    record(trace, Some(il), "attn_norm", n, &sc.xb[..n * e]);
    project_many(
        ctx,
        &mut sc.acts,
        [&w.b, &w.c, &w.x],
        &sc.xb[..n * e],
        n,
        [&mut sc.hb, &mut sc.hb2, &mut sc.att],
    )?;
    // bx = b ⊙ u, then conv[t] = Σ_k kernel[k] · bx[t - (taps-1) + k] per channel, oldest tap
    // first from zero (ggml's ssm_conv order); rows before the batch come from the ring.
    let bx = &mut sc.hb[..n * e];
    bx.iter_mut()
        .zip(&sc.att[..n * e])
        .for_each(|(b, u)| *b *= u);
    let conv = fit(&mut sc.xb, n * e);
    conv.fill(0.0);
    for (t, out) in conv.chunks_exact_mut(e).enumerate() {
        for k in 0..taps {
            let j = t as isize + k as isize - (taps as isize - 1);
            let src = if j >= 0 {
                &bx[j as usize * e..(j as usize + 1) * e]
            } else {
                match ring.row(p0 as isize + j) {
                    Some(row) => row,
                    None => continue,
                }
            };
            for ((o, s), kern) in out
                .iter_mut()
                .zip(src)
                .zip(w.kernel[k..].iter().step_by(taps))
            {
                *o += s * kern;
            }
        }
    }
    for t in n.saturating_sub(ring.capacity())..n {
        ring.push(p0 + t, &bx[t * e..(t + 1) * e]);
    }
    // y = c ⊙ conv, then the output projection.
    conv.iter_mut()
        .zip(&sc.hb2[..n * e])
        .for_each(|(y, g)| *y *= g);
    record(trace, Some(il), "shortconv_y", n, &sc.xb[..n * e]);
    project(ctx, &mut sc.acts, &w.out, &sc.xb[..n * e], n, &mut sc.xb2)?;
    post_norm(sc, lw.post_attn_norm.as_deref(), n * e, e, c.norm_eps);
    add_residual(sc, n * e, c.residual_scale);
    record(trace, Some(il), "attn_out", n, &sc.x[..n * e]);
    Ok(())
}

/// `x += post_norm(W_down · (act(W_gate·h) ⊙ W_up·h))`, `h = norm(x)`.
fn ffn_block(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    il: usize,
    lw: &LayerWeights,
    n: usize,
    trace: &mut Option<&mut dyn Trace>,
) -> Result<(), ModelError> {
    let c = ctx.config;
    let e = c.n_embd;
    norm_input(sc, &lw.ffn_norm, n, e, c.norm_eps);
    record(trace, Some(il), "ffn_norm", n, &sc.xb[..n * e]);
    // gate, up: [n, F]
    project_many(
        ctx,
        &mut sc.acts,
        [&lw.w_gate, &lw.w_up],
        &sc.xb[..n * e],
        n,
        [&mut sc.hb, &mut sc.hb2],
    )?;
    record(trace, Some(il), "ffn_gate", n, &sc.hb[..n * c.n_ff]);
    record(trace, Some(il), "ffn_up", n, &sc.hb2[..n * c.n_ff]);
    let (hb, hb2) = (&mut sc.hb[..n * c.n_ff], &sc.hb2[..n * c.n_ff]);
    match c.ffn_activation {
        FfnActivation::Silu => statelm_quant::Kernels::global().silu_mul_f32(hb, hb2),
        FfnActivation::GeluTanh => statelm_quant::Kernels::global().gelu_mul_f32(hb, hb2),
    }
    record(trace, Some(il), "ffn_geglu", n, &sc.hb[..n * c.n_ff]);
    // down: [n, E]
    project(
        ctx,
        &mut sc.acts,
        &lw.w_down,
        &sc.hb[..n * c.n_ff],
        n,
        &mut sc.xb2,
    )?;
    record(trace, Some(il), "ffn_out", n, &sc.xb2[..n * e]);
    post_norm(sc, lw.post_ffn_norm.as_deref(), n * e, e, c.norm_eps);
    record(trace, Some(il), "ffn_post_norm", n, &sc.xb2[..n * e]);
    add_residual(sc, n * e, c.residual_scale);
    record(trace, Some(il), "l_out", n, &sc.x[..n * e]);
    Ok(())
}

/// `xb = rms_norm(x) · weight` for the `n` rows of width `e` (a block's input norm).
fn norm_input(sc: &mut Scratch, weight: &[f32], n: usize, e: usize, eps: f32) {
    let xb = fit(&mut sc.xb, n * e);
    for (o, x) in xb.chunks_exact_mut(e).zip(sc.x.chunks_exact(e)) {
        ops::rms_norm(o, x, weight, eps);
    }
}

/// `xb2 = post_norm(xb2)` over `len` elements of rows of width `e` (Gemma 3 has the norm).
fn post_norm(sc: &mut Scratch, post_norm: Option<&[f32]>, len: usize, e: usize, eps: f32) {
    if let Some(w) = post_norm {
        sc.xb2[..len]
            .chunks_exact_mut(e)
            .for_each(|r| ops::rms_norm_in_place(r, w, eps));
    }
}

/// `x += xb2` over `len` elements (the residual connection), `xb2` first scaled by Granite's
/// residual scale.
fn add_residual(sc: &mut Scratch, len: usize, scale: Option<f32>) {
    if let Some(s) = scale {
        sc.xb2[..len].iter_mut().for_each(|v| *v *= s);
    }
    let o = &sc.xb2[..len];
    sc.x[..len]
        .iter_mut()
        .zip(o.iter())
        .for_each(|(x, d)| *x += d);
}

/// Logits of the requested rows: `norm(x[t]) · W_outᵀ`, soft-capped if the model says so.
fn output(
    ctx: &BatchCtx<'_>,
    sc: &mut Scratch,
    n: usize,
    rows: std::ops::Range<usize>,
    logits: &mut Vec<f32>,
) -> Result<(), ModelError> {
    if rows.is_empty() {
        return Ok(());
    }
    let c = ctx.config;
    let e = c.n_embd;
    let m = rows.len();
    debug_assert!(rows.end <= n);
    let xb = fit(&mut sc.xb, m * e);
    for (o, r) in xb.chunks_exact_mut(e).zip(rows) {
        ops::rms_norm(
            o,
            &sc.x[r * e..(r + 1) * e],
            &ctx.weights.output_norm,
            c.norm_eps,
        );
    }
    let start = logits.len();
    logits.resize(start + m * c.n_vocab, 0.0);
    let w = ctx.weights.output.matrix(ctx.file);
    let summation = ctx.summation();
    (sc.acts).project(
        ctx.pool,
        &w,
        &sc.xb[..m * e],
        m,
        &mut logits[start..],
        summation,
    )?;
    if let Some(s) = c.logit_scale {
        let inv = 1.0 / s;
        logits[start..].iter_mut().for_each(|v| *v *= inv);
    }
    if let Some(cap) = c.final_logit_softcap {
        logits[start..]
            .iter_mut()
            .for_each(|v| *v = cap * (*v / cap).tanh());
    }
    Ok(())
}
