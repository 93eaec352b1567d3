//! Causal attention over the KV cache, with grouped-query heads and sliding windows.
//!
//! For each query token `t` (position `p0 + t`) and head `h` (kv head `h / (H / Hkv)`):
//! `out = Σ_c softmax_c(scale · q·k_c) · v_c` over the cells `c` whose position is at most
//! `p0 + t` and, for a sliding-window layer, within the window.
//!
//! Work is split by kv head (and the query heads of a kv head into parts when there are fewer
//! kv heads than threads), so each key and value row is read once for all the query heads that
//! share it, into per-task buffers the State keeps (decode does not allocate). Decode and
//! batches below [`GEMM_MIN_QUERIES`] tokens take one dot and one `axpy` per (query row, visible
//! cell), in the summation orders of llama.cpp's x86 backend (ggml's f32 dot, its softmax and
//! `expf`, the value sums in its dot's 32 lanes — or, with `Numerics::LlamaCpp`, tinyBLAS's 8
//! lanes for a batch, as llama.cpp does). Larger batches in `Numerics::Fast` run two GEMMs,
//! `Sᵀ = K·Qᵀ` over every cell (invisible ones then −∞), softmax per row, `O = P·V`: the same
//! products in another order.

use crate::kv::LayerCache;
use crate::ops::fit;
use crate::Numerics;
use statelm_quant::sums::{hsum8, reduce_dot_partials};
use statelm_quant::{BMatrix, Kernels, QuantError, ThreadPool};
use std::ops::Range;
use std::sync::Mutex;

/// Batches of at least this many tokens attend with GEMMs — the same threshold as the
/// projections' GEMM path.
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
    /// Soft-capping of the scaled scores, `cap · tanh(s / cap)` (Gemma 2).
    pub softcap: Option<f32>,
}

impl AttentionShape {
    /// The score of a raw `q·k`: scaled, then soft-capped if the model says so.
    #[inline]
    fn score(&self, raw: f32) -> f32 {
        let x = raw * self.scale;
        match self.softcap {
            Some(cap) => cap * (x / cap).tanh(),
            None => x,
        }
    }
}

/// Buffers of one attention task, kept by the State between calls (decode does not allocate).
#[derive(Default)]
pub(crate) struct AttnScratch {
    /// The task's queries, stacked `[n·heads, D]`.
    q: Vec<f32>,
    /// Raw scores, transposed `[cells, n·heads]`.
    st: Vec<f32>,
    /// Scores, then probabilities `[n·heads, cells]`.
    scores: Vec<f32>,
    /// Output rows `[n·heads, Dv]`.
    out: Vec<f32>,
    /// Packed key or value panels of the GEMMs.
    panels: Vec<f32>,
    /// One key or value row as f32 (small batches).
    row: Vec<f32>,
    /// The task's error, if its GEMM refused the shapes.
    error: Option<QuantError>,
}

impl AttnScratch {
    /// Bytes allocated.
    pub(crate) fn bytes(&self) -> usize {
        let f = [
            &self.q,
            &self.st,
            &self.scores,
            &self.out,
            &self.panels,
            &self.row,
        ];
        f.iter().map(|v| v.capacity() * 4).sum()
    }
}

/// One pool task: kv head `kvh` and its query heads `h0..h1`.
#[derive(Clone, Copy)]
struct Task {
    kvh: usize,
    h0: usize,
    h1: usize,
}

/// Splits the work into at most `n_head` tasks: one per kv head, and the query heads of a kv
/// head into parts when there are fewer kv heads than threads (Gemma 3 270M has one).
fn task(s: &AttentionShape, threads: usize, i: usize) -> Task {
    let group = s.n_head / s.n_head_kv;
    let parts = threads.div_ceil(s.n_head_kv).clamp(1, group);
    let (kvh, part) = (i / parts, i % parts);
    let per = group.div_ceil(parts);
    let h0 = kvh * group + (part * per).min(group);
    let h1 = kvh * group + ((part + 1) * per).min(group);
    Task { kvh, h0, h1 }
}

/// Number of tasks [`task`] defines.
fn n_tasks(s: &AttentionShape, threads: usize) -> usize {
    let group = s.n_head / s.n_head_kv;
    s.n_head_kv * threads.div_ceil(s.n_head_kv).clamp(1, group)
}

/// The buffers [`attend`] writes into, owned by the computation's scratch.
pub(crate) struct AttendBuffers<'a> {
    /// The cache's keys as f32 (the GEMM path).
    pub kf: &'a mut Vec<f32>,
    /// The cache's values as f32 (the GEMM path).
    pub vf: &'a mut Vec<f32>,
    /// The per-task buffers.
    pub tasks: &'a mut Vec<Mutex<AttnScratch>>,
}

/// The cache as f32 rows: cell positions, keys `[cells, Hkv·D]`, values `[cells, Hkv·Dv]`.
struct KvView<'a> {
    pos: &'a [u32],
    /// The whole cache as f32 (the GEMM path only; empty for small batches).
    kf: &'a [f32],
    vf: &'a [f32],
    /// The cache itself: small batches read one row at a time from it.
    cache: &'a LayerCache,
}

/// Attention of `n` queries `q [n, H·D]` at positions `p0..p0+n` over `cache` (which already
/// holds their own keys) into `out [n, H·Dv]`, in the summation orders of `numerics`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    pool: &ThreadPool,
    s: &AttentionShape,
    cache: &LayerCache,
    q: &[f32],
    p0: usize,
    out: &mut [f32],
    buffers: AttendBuffers<'_>,
    numerics: Numerics,
) -> Result<(), QuantError> {
    let AttendBuffers { kf, vf, tasks } = buffers;
    let n = out.len() / (s.n_head * s.v_head_dim);
    let gemm = n >= GEMM_MIN_QUERIES && numerics == Numerics::Fast;
    // The GEMM path reads the cache as two f32 matrices; small batches (decode) read it row by
    // row into L1-sized buffers instead of converting it all on every step.
    let (cells, kd, vd) = (
        cache.used(),
        s.n_head_kv * s.head_dim,
        s.n_head_kv * s.v_head_dim,
    );
    let (kf, vf): (&[f32], &[f32]) = if gemm {
        let kf = fit(kf, cells * kd);
        cache.read_all_k(kf);
        let vf = fit(vf, cells * vd);
        cache.read_all_v(vf);
        (kf, vf)
    } else {
        (&[], &[])
    };
    let kv = KvView {
        pos: &cache.pos,
        kf,
        vf,
        cache,
    };
    let count = n_tasks(s, pool.n_threads());
    while tasks.len() < count {
        tasks.push(Mutex::default());
    }
    let tasks = &tasks[..count];
    pool.run(count, &|i| {
        let mut sc = tasks[i].lock().unwrap_or_else(|e| e.into_inner());
        let t = task(s, pool.n_threads(), i);
        sc.error = attend_task(s, &kv, (q, p0, n), t, (gemm, numerics), &mut sc).err();
    });
    let dv = s.v_head_dim;
    for (i, slot) in tasks.iter().enumerate() {
        let mut sc = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = sc.error.take() {
            return Err(e);
        }
        let t = task(s, pool.n_threads(), i);
        let heads = t.h1 - t.h0;
        for (r, src) in sc.out.chunks_exact(dv).take(n * heads).enumerate() {
            let (tok, j) = (r / heads, r % heads);
            out[(tok * s.n_head + t.h0 + j) * dv..][..dv].copy_from_slice(src);
        }
    }
    Ok(())
}

/// Whether a key at `p` is visible to a query at `qpos`.
fn is_visible(s: &AttentionShape, qpos: u32, p: u32) -> bool {
    p <= qpos && s.window.is_none_or(|w| qpos - p < w as u32)
}

/// One task of [`attend`]: `softmax(mask(scale · Q Kᵀ)) V` for query heads `t.h0..t.h1` of all
/// `n` tokens `q [n, H·D]` at positions `p0..`, rows ordered token-major, into
/// `sc.out [n·heads, Dv]`, by GEMMs or by dots.
fn attend_task(
    s: &AttentionShape,
    kv: &KvView<'_>,
    (q, p0, n): (&[f32], usize, usize),
    t: Task,
    (gemm, numerics): (bool, Numerics),
    sc: &mut AttnScratch,
) -> Result<(), QuantError> {
    let (d, dv) = (s.head_dim, s.v_head_dim);
    let heads = t.h1 - t.h0;
    let rows = n * heads;
    if rows == 0 {
        return Ok(());
    }
    // Q [rows, D]: row (tok, j) is head h0 + j of token tok.
    let qs = fit(&mut sc.q, rows * d);
    for (tok, dst) in qs.chunks_exact_mut(heads * d).enumerate() {
        dst.copy_from_slice(&q[(tok * s.n_head + t.h0) * d..][..heads * d]);
    }
    // Blocks of QUERY_BLOCK tokens bound the score buffers (`rows × cells`) whatever the
    // batch; each row's arithmetic does not depend on its block.
    let AttnScratch {
        q: qbuf,
        st,
        scores,
        out,
        panels,
        row,
        ..
    } = sc;
    let out = fit(out, rows * dv);
    for b0 in (0..n).step_by(QUERY_BLOCK) {
        let nb = QUERY_BLOCK.min(n - b0);
        let (r0, rb) = (b0 * heads, nb * heads);
        let block = Block {
            p0: p0 + b0,
            heads,
            kvh: t.kvh,
        };
        let qs = &qbuf[r0 * d..(r0 + rb) * d];
        let o = &mut out[r0 * dv..(r0 + rb) * dv];
        if gemm {
            attend_block_gemm(s, kv, &block, qs, (st, scores, panels), o)?;
        } else {
            // The value sums keep ggml's lanes: its `vec_dot_f32` for one token (and for any
            // batch in `Fast`, so a batch equals its tokens one by one), tinyBLAS's 8-lane
            // tiles for a batch in llama.cpp's numerics.
            let lanes = if n > 1 && numerics == Numerics::LlamaCpp {
                8
            } else {
                32
            };
            attend_block_by_dots(s, kv, &block, qs, lanes, (scores, st, row), o);
        }
    }
    Ok(())
}

/// Tokens per block of the GEMM path (keeps its score buffers to `64 · heads · cells` floats).
const QUERY_BLOCK: usize = 64;

/// Where a block of query rows sits: its first token's position, heads per token, kv head.
struct Block {
    p0: usize,
    heads: usize,
    kvh: usize,
}

/// The GEMM path for one block of query rows `qs [rows, D]` (token-major) into `o [rows, Dv]`:
/// `Sᵀ = K·Qᵀ` reading the keys in place (only the queries are packed), scale and mask,
/// softmax per row, `O = P·V`.
fn attend_block_gemm(
    s: &AttentionShape,
    kv: &KvView<'_>,
    b: &Block,
    qs: &[f32],
    (st, scores, panels): (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<f32>),
    o: &mut [f32],
) -> Result<(), QuantError> {
    let (d, dv) = (s.head_dim, s.v_head_dim);
    let rows = qs.len() / d;
    let kernels = Kernels::global();
    // Only the cells some query of the block sees (a causal batch's first blocks skip the
    // later cells), widened so the sums keep their bits (see `visible_cells`).
    let visible = visible_cells(s, kv.pos, b.p0, b.p0 + (rows / b.heads).max(1) - 1);
    let (c0, pos) = (visible.start, &kv.pos[visible]);
    let cells = pos.len();
    // Sᵀ [cells, rows] = K_kvh · Qᵀ
    let st = fit(st, cells * rows);
    let queries = BMatrix::Rows {
        data: qs,
        stride: d,
    };
    let keys = &kv.kf[(c0 * s.n_head_kv + b.kvh) * d..];
    kernels.gemm_f32_with(
        cells,
        rows,
        d,
        keys,
        s.n_head_kv * d,
        queries,
        st,
        rows,
        panels,
    )?;
    // S [rows, cells]: scaled, invisible cells −∞, softmax per row.
    let scores = fit(scores, rows * cells);
    for (r, row) in scores.chunks_exact_mut(cells).enumerate() {
        let qpos = (b.p0 + r / b.heads) as u32;
        for ((v, &p), st_row) in row.iter_mut().zip(pos).zip(st.chunks_exact(rows)) {
            *v = if is_visible(s, qpos, p) {
                s.score(st_row[r])
            } else {
                f32::NEG_INFINITY
            };
        }
        kernels.softmax_f32(row);
    }
    // O [rows, Dv] = P · V_kvh
    let values = BMatrix::Cols {
        data: &kv.vf[(c0 * s.n_head_kv + b.kvh) * dv..],
        stride: s.n_head_kv * dv,
    };
    kernels.gemm_f32_with(rows, dv, cells, scores, cells, values, o, dv, panels)
}

/// The cells a block of queries at positions `first..=last` can see, as one index range: from
/// the first visible cell, rounded down to a multiple of [`statelm_quant::GEMM_KC`], to the
/// last visible cell. What it leaves out are cells every query masks (probability exactly 0):
/// trailing ones only drop `+ 0` terms at the ends of the softmax sum and of each `P·V` chain,
/// and the rounded start keeps the GEMM's column slices where they were, so every result keeps
/// its bits. A wrapped ring may still span the whole cache.
fn visible_cells(s: &AttentionShape, pos: &[u32], first: usize, last: usize) -> Range<usize> {
    let (first, last) = (first as u32, last as u32);
    let seen = |p: u32| p <= last && s.window.is_none_or(|w| first.saturating_sub(p) < w as u32);
    let Some(lo) = pos.iter().position(|&p| seen(p)) else {
        return 0..pos.len();
    };
    let hi = pos
        .iter()
        .rposition(|&p| seen(p))
        .map_or(pos.len(), |i| i + 1);
    lo / statelm_quant::GEMM_KC * statelm_quant::GEMM_KC..hi
}

/// The dot path for one block of query rows `qs [rows, D]` (token-major) into `o [rows, Dv]`,
/// in llama.cpp's summation orders: per cell, one [`Kernels::dot_f32`] per query row; a
/// [`Kernels::softmax_f32`] per row; per cell, one `axpy` of the value row into partial sum
/// `cell % lanes` of each query row, the partials then reduced as ggml's dot (32 lanes) or
/// tinyBLAS (8 lanes) reduce them. Each key and value row is read from the cache (converted from
/// its storage type) once into an L1-sized buffer for all the rows — no whole-cache f32 copy.
/// A row's arithmetic does not depend on the other rows, so for one `lanes` value a batch
/// equals its tokens one by one bit for bit.
fn attend_block_by_dots(
    s: &AttentionShape,
    kv: &KvView<'_>,
    b: &Block,
    qs: &[f32],
    lanes: usize,
    (scores, partials, row): (&mut Vec<f32>, &mut Vec<f32>, &mut Vec<f32>),
    o: &mut [f32],
) {
    let (cells, d, dv) = (kv.pos.len(), s.head_dim, s.v_head_dim);
    let rows = qs.len() / d;
    let kernels = Kernels::global();
    let scores = fit(scores, rows * cells);
    let key = fit(row, d);
    let visible = |r: usize, p: u32| is_visible(s, (b.p0 + r / b.heads) as u32, p);
    for (c, &p) in kv.pos.iter().enumerate() {
        if (0..rows).any(|r| visible(r, p)) {
            kv.cache.read_k(c, b.kvh * d, key);
        }
        for (r, qr) in qs.chunks_exact(d).enumerate() {
            scores[r * cells + c] = if visible(r, p) {
                s.score(kernels.dot_f32(qr, key))
            } else {
                f32::NEG_INFINITY
            };
        }
    }
    scores
        .chunks_exact_mut(cells)
        .for_each(|r| kernels.softmax_f32(r));
    // partials [rows, lanes, Dv]
    let acc = fit(partials, rows * lanes * dv);
    acc.fill(0.0);
    for c in 0..cells {
        if (0..rows).all(|r| scores[r * cells + c] == 0.0) {
            continue;
        }
        let value = fit(row, dv);
        kv.cache.read_v(c, b.kvh * dv, value);
        for (r, acc_r) in acc.chunks_exact_mut(lanes * dv).enumerate() {
            let w = scores[r * cells + c];
            if w != 0.0 {
                let lane = (c % lanes) * dv;
                kernels.axpy_f32(&mut acc_r[lane..lane + dv], w, value);
            }
        }
    }
    for (acc_r, o_r) in acc.chunks_exact(lanes * dv).zip(o.chunks_exact_mut(dv)) {
        for (j, out) in o_r.iter_mut().enumerate() {
            *out = if lanes == 32 {
                reduce_dot_partials(&std::array::from_fn(|l| acc_r[l * dv + j]))
            } else {
                hsum8(&std::array::from_fn(|l| acc_r[l * dv + j]))
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvType;

    /// Plain loops in f64 over the visible cells.
    fn naive(s: &AttentionShape, cache: &LayerCache, q: &[f32], p0: usize, n: usize) -> Vec<f32> {
        let (d, dv, group) = (s.head_dim, s.v_head_dim, s.n_head / s.n_head_kv);
        let (mut k, mut v) = (
            vec![0f32; cache.used() * s.n_head_kv * d],
            vec![0f32; cache.used() * s.n_head_kv * dv],
        );
        cache.read_all_k(&mut k);
        cache.read_all_v(&mut v);
        let mut out = vec![0f32; n * s.n_head * dv];
        for t in 0..n {
            for h in 0..s.n_head {
                let kvh = h / group;
                let qv = &q[(t * s.n_head + h) * d..][..d];
                let vis: Vec<usize> = (0..cache.used())
                    .filter(|&c| is_visible(s, (p0 + t) as u32, cache.pos[c]))
                    .collect();
                let sc: Vec<f64> = vis
                    .iter()
                    .map(|&c| {
                        let kr = &k[(c * s.n_head_kv + kvh) * d..][..d];
                        qv.iter()
                            .zip(kr)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum::<f64>()
                            * f64::from(s.scale)
                    })
                    .map(|x| {
                        s.softcap
                            .map_or(x, |cap| f64::from(cap) * (x / f64::from(cap)).tanh())
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (i, &c) in vis.iter().enumerate() {
                    let vr = &v[(c * s.n_head_kv + kvh) * dv..][..dv];
                    for (o, x) in out[(t * s.n_head + h) * dv..][..dv].iter_mut().zip(vr) {
                        *o += (e[i] / z * f64::from(*x)) as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn both_paths_match_naive_attention_on_a_wrapped_ring() {
        // Head sizes of 32 so that the Q8_0 cache reads whole blocks per head.
        let s = AttentionShape {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            v_head_dim: 32,
            scale: 0.3,
            window: Some(8),
            softcap: Some(4.0),
        };
        let pool = ThreadPool::new(2);
        let val = |i: usize| ((i * 7919 % 1000) as f32 / 500.0) - 1.0;
        let cases = [KvType::F32, KvType::F16, KvType::Q8_0].map(|ty| (ty, Numerics::Fast));
        for (ty, numerics) in cases.into_iter().chain([(KvType::F32, Numerics::LlamaCpp)]) {
            // A 48-cell ring: the batches of 33 and 40 take the GEMM path (the dots when
            // llama.cpp numerics), the others the dots.
            let mut cache = LayerCache::new(ty, 64, 64, 48);
            let (mut kf, mut vf, mut tasks) = (Vec::new(), Vec::new(), Vec::new());
            let mut p0 = 0;
            for n in [3usize, 2, 1, 33, 4, 2, 1, 40, 1, 3] {
                for t in 0..n {
                    let p = p0 + t;
                    let k: Vec<f32> = (0..64).map(|i| val(p * 100 + i)).collect();
                    let v: Vec<f32> = (0..64).map(|i| val(p * 100 + 50 + i)).collect();
                    cache.push(p as u32, &k, &v);
                }
                let q: Vec<f32> = (0..n * 4 * 32).map(|i| val(p0 * 1000 + i + 7)).collect();
                let mut out = vec![0f32; n * 4 * 32];
                let buffers = AttendBuffers {
                    kf: &mut kf,
                    vf: &mut vf,
                    tasks: &mut tasks,
                };
                attend(&pool, &s, &cache, &q, p0, &mut out, buffers, numerics).unwrap();
                let want = naive(&s, &cache, &q, p0, n);
                for (a, b) in out.iter().zip(&want) {
                    assert!((a - b).abs() < 1e-5, "{ty:?} p0 {p0} n {n}: {a} vs {b}");
                }
                p0 += n;
            }
        }
    }

    #[test]
    fn visible_cells_cover_every_visible_cell() {
        let kc = statelm_quant::GEMM_KC as u32;
        let shape = |window| AttentionShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 8,
            v_head_dim: 8,
            scale: 1.0,
            window,
            softcap: None,
        };
        // In order from 0, a ring wrapped after 2·KC + 100 positions, and a ring with a window.
        let ordered: Vec<u32> = (0..3 * kc).collect();
        let wrapped: Vec<u32> = (0..3 * kc)
            .map(|i| if i < 100 { 3 * kc + i } else { i })
            .collect();
        for (pos, window) in [
            (&ordered, None),
            (&wrapped, None),
            (&wrapped, Some(kc as usize + 7)),
        ] {
            let s = shape(window);
            for (first, last) in [
                (0, 0),
                (0, 63),
                (100, 163),
                (kc + 5, 2 * kc),
                (3 * kc - 1, 3 * kc + 99),
            ] {
                let r = visible_cells(&s, pos, first as usize, last as usize);
                assert_eq!(r.start % kc as usize, 0);
                for (i, &p) in pos.iter().enumerate() {
                    let seen = (first..=last).any(|q| is_visible(&s, q, p));
                    assert!(
                        !seen || r.contains(&i),
                        "{window:?} {first}..={last}: cell {i} at {p}"
                    );
                }
                if window.is_none() && pos == &ordered {
                    assert_eq!(r.end, (last + 1).min(3 * kc) as usize, "causal end");
                }
            }
        }
    }

    #[test]
    fn tasks_cover_every_head_once() {
        for (n_head, n_head_kv) in [(4, 1), (14, 2), (8, 8), (32, 8), (6, 3)] {
            for threads in 1..6 {
                let s = AttentionShape {
                    n_head,
                    n_head_kv,
                    head_dim: 8,
                    v_head_dim: 8,
                    scale: 1.0,
                    window: None,
                    softcap: None,
                };
                let mut seen = vec![0; n_head];
                for i in 0..n_tasks(&s, threads) {
                    let t = task(&s, threads, i);
                    let group = n_head / n_head_kv;
                    assert!(t.h0 <= t.h1 && t.h1 <= (t.kvh + 1) * group && t.h0 >= t.kvh * group);
                    (t.h0..t.h1).for_each(|h| seen[h] += 1);
                }
                assert!(
                    seen.iter().all(|&c| c == 1),
                    "{n_head}/{n_head_kv}/{threads}: {seen:?}"
                );
            }
        }
    }
}
