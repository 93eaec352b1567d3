//! Prefill products as an int8 GEMM, for Q4_0, Q5_0 and Q8_0 weights against
//! Q8_0 activations, on CPUs with a u8 × i8 dot instruction (`vpdpbusd` of
//! AVX512-VNNI or AVX-VNNI), and for Q4_0 and Q5_0 on plain AVX2
//! (`vpmaddubsw`, exact for codes below 32).
//!
//! [`crate::gemm`]'s f32 GEMM does 8 multiply-adds per instruction. With
//! `vpdpbusd` one instruction does 32 (8 lanes × 4 byte products) exactly in
//! integers, so the prefill products keep the integer path's numerics and run
//! several times fewer instructions:
//!
//! * rows are split into chunks (multiples of [`I8_ROWS`]) across the pool;
//! * each chunk packs its rows once, over the whole reduction: per group of
//!   [`I8_ROWS`] rows and per block, the rows' codes as unsigned bytes
//!   (`q + 8`, `q + 16` or `q + 128`), interleaved by four so that i32 lane
//!   `r` of a 64-byte load holds four codes of row `r`, and the rows' scales
//!   as f32;
//! * each tile of [`I8_TILE_TOKENS`] activation rows runs the micro-kernel
//!   over every group and writes 16 outputs per token: no partial sums.
//!
//! The code offset is subtracted exactly: the dot of unsigned codes overstates
//! the signed dot by `offset · Σ q` over the activation block, computed once
//! per activation block ([`ActBlockMeta`]) and used as the start of each
//! block's integer sum. So every block's integer is the signed dot's, then
//! `acc = fma(i, d_w · d_x, acc)` in block order — for every thread count and
//! ISA alike (the scalar micro-kernel is the reference, bit for bit).

use crate::dispatch::Kernels;
use crate::error::{check_len, QuantError};
use crate::kernels::{ActBlockMeta, I8_PANEL_BLOCK, I8_ROWS, I8_TILE_TOKENS};
use crate::matrix::{QMatrix, QuantizedActs};
use crate::matvec::{OutPtr, CHUNKS_PER_THREAD};
use crate::pool::ThreadPool;
use statelm_gguf::GgmlType;

/// Upper bound on the packed bytes of one task's rows (they stay in L2 while
/// every token tile passes over them).
pub(crate) const MAX_CHUNK_BYTES: usize = 1 << 20;

/// Batch size from which K-quant products take the int8 GEMM (two micro-kernel tiles of
/// tokens). On the synthetic 1.5B Q4_K_M file (`statelm bench --prefill 8,16,24`, 2 threads,
/// two alternating rounds) the GEMM instead of single dots took pp16 from 16–18 to 29–32 tok/s
/// and pp24 from 16–17 to 33–35; at 8 tokens the two were even (packing the rows costs about
/// what eight single dots do).
pub const I8_K_GEMM_MIN_VECS: usize = 2 * crate::kernels::I8_TILE_TOKENS;

/// What unsigned codes of weight type `ty` overstate the signed ones by, for
/// the types this GEMM takes.
pub fn code_offset(ty: GgmlType) -> Option<u8> {
    match ty {
        GgmlType::Q4_0 => Some(8),
        GgmlType::Q5_0 => Some(16),
        GgmlType::Q8_0 => Some(128),
        _ => None,
    }
}

impl Kernels {
    /// Whether batches of at least [`crate::GEMM_MIN_VECS`] vectors against
    /// weights of type `w` should take [`Kernels::matmul_i8`]: the type has
    /// unsigned codes ([`code_offset`]) and this table has a SIMD micro-kernel
    /// for codes that large (AVX2 `vpmaddubsw`: Q4_0 and Q5_0; VNNI: Q8_0
    /// too), or it is a K-quant of [`crate::igemm_k`] and this table has a SIMD
    /// K-quant micro-kernel. The scalar micro-kernels are references, not fast paths.
    pub fn prefers_i8_gemm(&self, w: GgmlType) -> bool {
        if crate::igemm_k::k_format(w).is_some() {
            return self.k_tile_is_fast();
        }
        code_offset(w).is_some_and(|o| o <= self.i8_fast_offset())
    }

    /// The batch size from which [`Kernels::matmul_i8`] should take products against weights
    /// of type `w`, if it should at all ([`Kernels::prefers_i8_gemm`]): K-quants from
    /// [`I8_K_GEMM_MIN_VECS`] (their single dots unpack every super-block again for each
    /// vector, and the GEMM's Q4_K/Q5_K sums are the single dots' bit for bit), the legacy
    /// formats from [`crate::GEMM_MIN_VECS`] (their small-batch tile kernels are cheap).
    pub fn i8_gemm_min_vecs(&self, w: GgmlType) -> Option<usize> {
        if !self.prefers_i8_gemm(w) {
            return None;
        }
        Some(if crate::igemm_k::k_format(w).is_some() {
            I8_K_GEMM_MIN_VECS
        } else {
            crate::GEMM_MIN_VECS
        })
    }

    /// `y[i * rows + r] = w_r · x_i` for the `n` Q8_0 vectors in `acts`, as
    /// an int8 GEMM (see the module docs), or for Q4_K/Q5_K/Q6_K weights the
    /// `n` Q8_K vectors (see [`crate::igemm_k`]). Other weights are a typed error.
    pub fn matmul_i8(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        y: &mut [f32],
    ) -> Result<(), QuantError> {
        let k_format = crate::igemm_k::k_format(w.ty());
        let offset = code_offset(w.ty());
        if k_format.is_none() && offset.is_none() {
            return Err(QuantError::Unsupported {
                ty: w.ty(),
                op: "int8 GEMM",
            });
        }
        acts.check_against(w)?;
        let (rows, n) = (w.rows(), acts.n());
        let total = rows.checked_mul(n).ok_or(QuantError::Overflow {
            what: "matmul_i8 output",
        })?;
        check_len("matmul_i8 output (n * rows)", total, y.len())?;
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let (Some(offset), None) = (offset, k_format) else {
            return self.matmul_i8_k(pool, w, acts, y, k_format.expect("checked above"));
        };
        let meta = block_meta(acts, offset);
        let per_thread = rows.div_ceil(pool.n_threads() * CHUNKS_PER_THREAD);
        let max_rows = (MAX_CHUNK_BYTES / w.cols().max(1)).max(I8_ROWS);
        let chunk = per_thread.clamp(1, max_rows).div_ceil(I8_ROWS) * I8_ROWS;
        // A SIMD kernel sums only codes up to its offset exactly; the reference takes the rest.
        let tile = if offset <= self.i8_fast_offset() {
            self.i8_tile_fn()
        } else {
            crate::kernels::scalar::tile_i8
        };
        let out = OutPtr::new(y);
        pool.run(rows.div_ceil(chunk), &|t| {
            let r0 = t * chunk;
            let job = Chunk {
                w,
                acts,
                meta: &meta,
                rows: r0..(r0 + chunk).min(rows),
            };
            // SAFETY: task t alone writes rows r0..r0 + chunk of every output
            // vector; y (n * rows long, checked above) outlives pool.run, and
            // the kernel comes from this table (it runs on this CPU).
            unsafe { job.run(tile, &out) };
        });
        Ok(())
    }
}

/// Per activation block: its scale and `-offset · Σ q`.
fn block_meta(acts: &QuantizedActs, offset: u8) -> Vec<ActBlockMeta> {
    let blocks = acts.bytes().chunks_exact(34);
    blocks
        .map(|b| {
            let sum: i32 = b[2..].iter().map(|&q| i32::from(q as i8)).sum();
            ActBlockMeta {
                d: half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
                neg_offset_sum: -i32::from(offset) * sum,
            }
        })
        .collect()
}

/// One task: a range of weight rows against all activation vectors.
struct Chunk<'a, 'w> {
    w: &'a QMatrix<'w>,
    acts: &'a QuantizedActs,
    meta: &'a [ActBlockMeta],
    rows: std::ops::Range<usize>,
}

impl Chunk<'_, '_> {
    /// Packs the rows, then runs every token tile over every group of rows.
    ///
    /// # Safety
    /// `tile` must run on this CPU; `out` must point to `n * w.rows()`
    /// writable floats of which no other thread writes rows `self.rows`.
    unsafe fn run(&self, tile: crate::kernels::I8TileFn, out: &OutPtr) {
        let (rows, nb, n) = (self.w.rows(), self.w.cols() / 32, self.acts.n());
        let groups = self.rows.len().div_ceil(I8_ROWS);
        let mut panel = vec![0u8; groups * nb * I8_PANEL_BLOCK];
        let mut scales = vec![0f32; groups * nb * I8_ROWS];
        let packed = panel.chunks_exact_mut(nb * I8_PANEL_BLOCK);
        for (g, (p, s)) in packed
            .zip(scales.chunks_exact_mut(nb * I8_ROWS))
            .enumerate()
        {
            let g0 = self.rows.start + g * I8_ROWS;
            pack_group(self.w, g0..(g0 + I8_ROWS).min(self.rows.end), p, s);
        }
        let (x, ldx) = (self.acts.bytes(), self.acts.row_bytes());
        let mut acc = [[0f32; I8_ROWS]; I8_TILE_TOKENS];
        for t0 in (0..n).step_by(I8_TILE_TOKENS) {
            let m = I8_TILE_TOKENS.min(n - t0);
            for g in 0..groups {
                let p = &panel[g * nb * I8_PANEL_BLOCK..][..nb * I8_PANEL_BLOCK];
                let s = &scales[g * nb * I8_ROWS..][..nb * I8_ROWS];
                let (xs, ms) = (&x[t0 * ldx..], &self.meta[t0 * nb..]);
                // SAFETY: the kernel runs on this CPU (caller); it checks lengths.
                unsafe { tile(m, nb, p, s, xs, ldx, ms, nb, &mut acc) };
                let r = self.rows.start + g * I8_ROWS;
                // SAFETY: rows r..min(r + 16, rows.end) of tokens t0..t0 + m belong to
                // this task (the caller's contract) and lie inside y.
                unsafe { store_tile(out, &acc[..m], t0, rows, r..self.rows.end) };
            }
        }
    }
}

/// Copies a micro-kernel's outputs: token `t0 + t`'s first `min(16, rows.len())` values to
/// `y[(t0 + t) * stride + rows.start..]`.
///
/// # Safety
/// Those runs must lie inside the output behind `out`, and no other thread may write them
/// while this runs.
pub(crate) unsafe fn store_tile(
    out: &OutPtr,
    acc: &[[f32; I8_ROWS]],
    t0: usize,
    stride: usize,
    rows: std::ops::Range<usize>,
) {
    let valid = I8_ROWS.min(rows.len());
    for (t, v) in acc.iter().enumerate() {
        // SAFETY: the caller's contract: the run is inside y and this thread's alone.
        let o = unsafe {
            std::slice::from_raw_parts_mut(out.get().add((t0 + t) * stride + rows.start), valid)
        };
        o.copy_from_slice(&v[..valid]);
    }
}

/// Packs rows `rows` (at most [`I8_ROWS`]) of `w` into one group: `panel`
/// gets each block's unsigned codes interleaved by four (row `r`, code `k` at
/// `b * I8_PANEL_BLOCK + k / 4 * 4 * I8_ROWS + r * 4 + k % 4`), `scales` each
/// block's scales (`b * I8_ROWS + r`). Rows past `rows` get zero codes and scales.
fn pack_group(w: &QMatrix<'_>, rows: std::ops::Range<usize>, panel: &mut [u8], scales: &mut [f32]) {
    let (ty, bb) = (w.ty(), w.ty().block_bytes());
    panel.fill(0);
    scales.fill(0.0);
    for (r, row) in rows.map(|r| w.row(r)).enumerate() {
        let blocks = row.chunks_exact(bb);
        let out = panel.chunks_exact_mut(I8_PANEL_BLOCK);
        for (b, (block, dst)) in blocks.zip(out).enumerate() {
            let codes = unsigned_codes(ty, block);
            scales[b * I8_ROWS + r] = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            for (g, four) in codes.chunks_exact(4).enumerate() {
                dst[g * 4 * I8_ROWS + r * 4..][..4].copy_from_slice(four);
            }
        }
    }
}

/// The 32 codes of one block as unsigned bytes (signed code + [`code_offset`]).
fn unsigned_codes(ty: GgmlType, block: &[u8]) -> [u8; 32] {
    let mut u = [0u8; 32];
    match ty {
        GgmlType::Q4_0 => {
            for (j, &b) in block[2..18].iter().enumerate() {
                (u[j], u[j + 16]) = (b & 0x0f, b >> 4);
            }
        }
        GgmlType::Q5_0 => {
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            for (j, &b) in block[6..22].iter().enumerate() {
                let (h0, h1) = ((qh >> j) & 1, (qh >> (j + 16)) & 1);
                u[j] = (b & 0x0f) | (h0 as u8) << 4;
                u[j + 16] = (b >> 4) | (h1 as u8) << 4;
            }
        }
        _ => {
            for (o, &q) in u.iter_mut().zip(&block[2..34]) {
                *o = q ^ 0x80;
            }
        }
    }
    u
}
