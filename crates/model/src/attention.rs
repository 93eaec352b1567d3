//! Causal attention over the KV cache, with grouped-query heads and sliding windows.
//!
//! For each query token `t` (position `p0 + t`) and head `h` (kv head `h / (H / Hkv)`):
//! `out = Σ_c softmax_c(scale · q·k_c) · v_c` over the cells `c` whose position is at most
//! `p0 + t` and, for a sliding-window layer, within the window.

use crate::kv::LayerCache;
use crate::ops;
use crate::scratch::fit;
use statelm_quant::{Kernels, ThreadPool};

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
) {
    let cells = cache.used();
    let (kd, vd) = (s.n_head_kv * s.head_dim, s.n_head_kv * s.v_head_dim);
    let kf = fit(kf, cells * kd);
    cache.read_all_k(kf);
    let vf = fit(vf, cells * vd);
    cache.read_all_v(vf);
    let (kf, vf) = (&*kf, &*vf);
    let pos = &cache.pos;
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
            if p > qpos {
                continue;
            }
            if s.window.is_none_or(|w| qpos - p < w as u32) {
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
