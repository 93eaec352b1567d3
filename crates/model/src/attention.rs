//! Causal attention over the KV cache, with grouped-query heads and sliding windows.
//!
//! For each query token `t` (position `p0 + t`) and head `h` (kv head `h / (H / Hkv)`):
//! `out = Σ_c softmax_c(scale · q·k_c) · v_c` over the cells `c` whose position is at most
//! `p0 + t` and, for a sliding-window layer, within the window.

use crate::kv::LayerCache;
use crate::ops;
use crate::scratch::fit;
use statelm_quant::{BMatrix, Kernels, QuantError, ThreadPool};
use std::sync::Mutex;

/// Batches of at least this many queries attend with two GEMMs per head (`S = Q·Kᵀ` over every
/// cell, masked softmax, `O = P·V`); smaller ones (decode) loop over the visible cells per query.
/// The same threshold as the projections' GEMM path, so a batch below it computes exactly what
/// token-by-token decode computes (bit for bit), and a batch above it differs from that only by
/// f32 summation order.
const GEMM_MIN_QUERIES: usize = statelm_quant::GEMM_MIN_VECS;

/// The head layout of one layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub v_head_dim: usize,
    pub scale: f32,
    /// A query at `p` sees keys at `p - window < pos <= p` (sliding-window layers).
    pub window: Option<usize>,
}

/// Attention of `n` queries `q [n, H·D]` at positions `p0..p0+n` over `cache` (which already
/// holds their own keys) into `out [n, H·Dv]`. `kf`/`vf` are scratch for the f32 cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    pool: &ThreadPool,
    s: &AttentionShape,
    cache: &LayerCache,
    q: &[f32],
    p0: usize,
    out: &mut [f32],
    kf: &mut Vec<f32>,
    vf: &mut Vec<f32>,
) -> Result<(), QuantError> {
    let cells = cache.used();
    let (kd, vd) = (s.n_head_kv * s.head_dim, s.n_head_kv * s.v_head_dim);
    let kf = fit(kf, cells * kd);
    cache.read_all_k(kf);
    let vf = fit(vf, cells * vd);
    cache.read_all_v(vf);
    let (kf, vf) = (&*kf, &*vf);
    let pos = &cache.pos;
    let n = out.len() / (s.n_head * s.v_head_dim);
    if n >= GEMM_MIN_QUERIES {
        return attend_gemm(pool, s, pos, kf, vf, q, p0, out);
    }
    let group = s.n_head / s.n_head_kv;
    let kernels = Kernels::global();
    for_each_chunk_mut(pool, out, s.v_head_dim, &|i, o: &mut [f32]| {
        let (t, h) = (i / s.n_head, i % s.n_head);
        let kvh = h / group;
        let qpos = (p0 + t) as u32;
        let qv = &q[(t * s.n_head + h) * s.head_dim..][..s.head_dim];
        let mut scores = Vec::with_capacity(cells);
        let mut visible = Vec::with_capacity(cells);
        for (c, &p) in pos.iter().enumerate() {
            if is_visible(s, qpos, p) {
                let k = &kf[c * kd + kvh * s.head_dim..][..s.head_dim];
                scores.push(kernels.dot_f32(qv, k) * s.scale);
                visible.push(c);
            }
        }
        ops::softmax(&mut scores);
        o.fill(0.0);
        for (&c, &w) in visible.iter().zip(&scores) {
            kernels.axpy_f32(o, w, &vf[c * vd + kvh * s.v_head_dim..][..s.v_head_dim]);
        }
    });
    Ok(())
}

/// Whether a key at `p` is visible to a query at `qpos`.
fn is_visible(s: &AttentionShape, qpos: u32, p: u32) -> bool {
    p <= qpos && s.window.is_none_or(|w| qpos - p < w as u32)
}

/// [`attend`] for a batch: per head (one pool task each), `S [n, cells] = Q_h · K_kvhᵀ`,
/// invisible cells set to −∞, softmax per row, `O_h [n, Dv] = P · V_kvh`. The same arithmetic
/// as the per-query loop (masked cells get weight exactly 0) in another summation order; the
/// results agree to f32 rounding (about 1e-6 relative on the real models).
#[allow(clippy::too_many_arguments)]
fn attend_gemm(
    pool: &ThreadPool,
    s: &AttentionShape,
    pos: &[u32],
    kf: &[f32],
    vf: &[f32],
    q: &[f32],
    p0: usize,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let dv = s.v_head_dim;
    let n = out.len() / (s.n_head * dv);
    let heads: Vec<Mutex<Result<Vec<f32>, QuantError>>> =
        (0..s.n_head).map(|_| Mutex::new(Ok(Vec::new()))).collect();
    let kv = KvView { pos, kf, vf };
    pool.run(s.n_head, &|h| {
        *heads[h].lock().unwrap_or_else(|e| e.into_inner()) = attend_head(s, &kv, q, p0, n, h);
    });
    for (h, slot) in heads.into_iter().enumerate() {
        let o = slot.into_inner().unwrap_or_else(|e| e.into_inner())?;
        for (t, src) in o.chunks_exact(dv).enumerate() {
            out[(t * s.n_head + h) * dv..][..dv].copy_from_slice(src);
        }
    }
    Ok(())
}

/// Runs `f(i, chunk_i)` for every `chunk_len`-sized chunk of `out` across the pool. Each chunk
/// sits behind its own (uncontended) mutex, which is how safe code hands disjoint `&mut` slices
/// to pool tasks.
pub(crate) fn for_each_chunk_mut(
    pool: &ThreadPool,
    out: &mut [f32],
    chunk_len: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    let chunks: Vec<std::sync::Mutex<&mut [f32]>> = out
        .chunks_mut(chunk_len)
        .map(std::sync::Mutex::new)
        .collect();
    pool.run(chunks.len(), &|i| {
        let mut chunk = chunks[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i, &mut chunk);
    });
}

/// The cache as f32 rows: cell positions, keys `[cells, Hkv·D]`, values `[cells, Hkv·Dv]`.
struct KvView<'a> {
    pos: &'a [u32],
    kf: &'a [f32],
    vf: &'a [f32],
}

/// One head of [`attend_gemm`]: `softmax(mask(scale · Q_h K_kvhᵀ)) V_kvh` as `[n, Dv]`.
fn attend_head(
    s: &AttentionShape,
    kv: &KvView<'_>,
    q: &[f32],
    p0: usize,
    n: usize,
    h: usize,
) -> Result<Vec<f32>, QuantError> {
    let (cells, d, dv) = (kv.pos.len(), s.head_dim, s.v_head_dim);
    let kvh = h / (s.n_head / s.n_head_kv);
    let kernels = Kernels::global();
    // S [n, cells] = Q_h · K_kvhᵀ
    let mut scores = vec![0f32; n * cells];
    let keys = BMatrix::Rows {
        data: &kv.kf[kvh * d..],
        stride: s.n_head_kv * d,
    };
    kernels.gemm_f32(
        n,
        cells,
        d,
        &q[h * d..],
        s.n_head * d,
        keys,
        &mut scores,
        cells,
    )?;
    for (t, row) in scores.chunks_exact_mut(cells).enumerate() {
        let qpos = (p0 + t) as u32;
        for (v, &p) in row.iter_mut().zip(kv.pos) {
            *v = if is_visible(s, qpos, p) {
                *v * s.scale
            } else {
                f32::NEG_INFINITY
            };
        }
        ops::softmax(row);
    }
    // O [n, Dv] = P · V_kvh
    let mut o = vec![0f32; n * dv];
    let values = BMatrix::Cols {
        data: &kv.vf[kvh * dv..],
        stride: s.n_head_kv * dv,
    };
    kernels.gemm_f32(n, dv, cells, &scores, cells, values, &mut o, dv)?;
    Ok(o)
}
