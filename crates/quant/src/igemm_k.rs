//! Prefill products as an int8 GEMM for the K-quants (Q4_K, Q5_K, Q6_K weights against Q8_K
//! activations): the design of [`crate::igemm`] on 256-element super-blocks.
//!
//! * rows are split into chunks (multiples of [`I8_ROWS`]) across the pool;
//! * each chunk packs its rows once: per group of [`I8_ROWS`] rows and per super-block, one
//!   [`KPanelBlock`] — the unsigned codes interleaved by four (so a broadcast of four
//!   activation codes against one register leaves row `r`'s partial dot in i32 lane `r`), the
//!   integer sub-block scales, the mins (or Q6_K's code offset) as `i16` pairs to multiply the
//!   activations' bsums, and the f32 super-block scales;
//! * each tile of [`I8_TILE_TOKENS`] activation rows runs the micro-kernel
//!   ([`crate::kernels::KTileFn`]) over every group and writes 16 outputs per token.
//!
//! Per super-block the integers are exact (the sub-block sums times their integer scales, the
//! mins times the bsums), then f32 steps in super-block order: for Q4_K and Q5_K the very steps
//! of their single-vector dots, so a prefilled token's products equal a decoded token's bit for
//! bit; for Q6_K one FMA per super-block (ggml's single dot keeps eight lanes — see
//! [`KFormat::Q6K`]). Every ISA and thread count gives the scalar reference's bits.

use crate::dispatch::Kernels;
use crate::error::QuantError;
use crate::formats::float::h2f;
use crate::formats::{blocks, BlockQ4K, BlockQ5K, BlockQ6K};
use crate::igemm::{store_tile, MAX_CHUNK_BYTES};
use crate::kernels::{KFormat, KPanelBlock, KTileFn, I8_ROWS, I8_TILE_TOKENS};
use crate::matrix::{QMatrix, QuantizedActs};
use crate::matvec::{OutPtr, CHUNKS_PER_THREAD};
use crate::pool::ThreadPool;
use statelm_gguf::GgmlType;

/// The K-quant int8 GEMM's treatment of weight type `ty`, if it takes it.
pub fn k_format(ty: GgmlType) -> Option<KFormat> {
    match ty {
        GgmlType::Q4_K => Some(KFormat::Q4K),
        GgmlType::Q5_K => Some(KFormat::Q5K),
        GgmlType::Q6_K => Some(KFormat::Q6K),
        _ => None,
    }
}

impl Kernels {
    /// [`Kernels::matmul_i8`] for K-quant weights of treatment `fmt`, after its checks (the
    /// activations fit `w`, `y` is `n * rows` long, neither is zero).
    pub(crate) fn matmul_i8_k(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        y: &mut [f32],
        fmt: KFormat,
    ) -> Result<(), QuantError> {
        let rows = w.rows();
        if w.cols() == 0 {
            y.fill(0.0);
            return Ok(());
        }
        let per_thread = rows.div_ceil(pool.n_threads() * CHUNKS_PER_THREAD);
        let row_bytes = w.cols() / 256 * size_of::<KPanelBlock>() / I8_ROWS;
        let max_rows = (MAX_CHUNK_BYTES / row_bytes.max(1)).max(I8_ROWS);
        let chunk = per_thread.clamp(1, max_rows).div_ceil(I8_ROWS) * I8_ROWS;
        let tile = self.k_tile_fn();
        let out = OutPtr::new(y);
        pool.run(rows.div_ceil(chunk), &|t| {
            let r0 = t * chunk;
            let rows = r0..(r0 + chunk).min(rows);
            // SAFETY: task t alone writes rows r0..r0 + chunk of every output vector; y
            // (n * rows long, checked above) outlives pool.run, and the kernel comes from this
            // table (it runs on this CPU).
            unsafe { run_chunk(w, acts, fmt, rows, tile, &out) };
        });
        Ok(())
    }
}

/// Packs rows `rows` of `w`, then runs every token tile over every group of rows.
///
/// # Safety
/// `tile` must run on this CPU; `out` must point to `n * w.rows()` writable floats of which no
/// other thread writes rows `rows`.
unsafe fn run_chunk(
    w: &QMatrix<'_>,
    acts: &QuantizedActs,
    fmt: KFormat,
    rows: std::ops::Range<usize>,
    tile: KTileFn,
    out: &OutPtr,
) {
    let (nb, n) = (w.cols() / 256, acts.n());
    let groups = rows.len().div_ceil(I8_ROWS);
    let mut panel = vec![KPanelBlock::default(); groups * nb];
    for (g, p) in panel.chunks_exact_mut(nb).enumerate() {
        let g0 = rows.start + g * I8_ROWS;
        pack_group(w, g0..(g0 + I8_ROWS).min(rows.end), p);
    }
    let (x, ldx) = (acts.bytes(), acts.row_bytes());
    let mut acc = [[0f32; I8_ROWS]; I8_TILE_TOKENS];
    for t0 in (0..n).step_by(I8_TILE_TOKENS) {
        let m = I8_TILE_TOKENS.min(n - t0);
        for (g, p) in panel.chunks_exact(nb).enumerate() {
            // SAFETY: the kernel runs on this CPU (caller); it checks lengths.
            unsafe { tile(fmt, m, p, &x[t0 * ldx..], ldx, &mut acc) };
            let r = rows.start + g * I8_ROWS;
            // SAFETY: tokens t0..t0 + m < n and rows r.. of this task (the caller's contract).
            unsafe { store_tile(out, &acc[..m], t0, w.rows(), r..rows.end) };
        }
    }
}

/// Packs rows `rows` (at most [`I8_ROWS`]) of `w` into one group, one [`KPanelBlock`] per
/// super-block (see its fields); rows past `rows` stay zero.
fn pack_group(w: &QMatrix<'_>, rows: std::ops::Range<usize>, panel: &mut [KPanelBlock]) {
    for (r, row) in rows.map(|r| w.row(r)).enumerate() {
        match w.ty() {
            GgmlType::Q4_K => {
                for (x, p) in blocks::<BlockQ4K>(row).zip(panel.iter_mut()) {
                    let (q, sc, mn) = x.unpack();
                    put_affine(p, r, &q, &sc, &mn, [h2f(x.d), h2f(x.dmin)]);
                }
            }
            GgmlType::Q5_K => {
                for (x, p) in blocks::<BlockQ5K>(row).zip(panel.iter_mut()) {
                    let (q, sc, mn) = x.unpack();
                    put_affine(p, r, &q, &sc, &mn, [h2f(x.d), h2f(x.dmin)]);
                }
            }
            _ => {
                for (x, p) in blocks::<BlockQ6K>(row).zip(panel.iter_mut()) {
                    let q = x.unpack().map(|c| (c + 32) as u8);
                    put_codes(p, r, &q);
                    for (j, &s) in x.scales.iter().enumerate() {
                        p.scales[j][r] = i32::from(s);
                    }
                    for (pair, c) in x.scales.chunks_exact(2).zip(&mut p.mins) {
                        c[r] = i16_pair(-32 * i16::from(pair[0]), -32 * i16::from(pair[1]));
                    }
                    (p.d[r], p.dmin[r]) = (h2f(x.d), 0.0);
                }
            }
        }
    }
}

/// Row `r` of a Q4_K/Q5_K super-block: codes, scales, mins (each paired with itself) and `[d, dmin]`.
fn put_affine(
    p: &mut KPanelBlock,
    r: usize,
    q: &[u8; 256],
    sc: &[u8; 8],
    mn: &[u8; 8],
    d: [f32; 2],
) {
    put_codes(p, r, q);
    for (j, (&s, &m)) in sc.iter().zip(mn).enumerate() {
        p.scales[j][r] = i32::from(s);
        p.mins[j][r] = i16_pair(i16::from(m), i16::from(m));
    }
    [p.d[r], p.dmin[r]] = d;
}

/// Row `r`'s 256 unsigned codes, interleaved by four.
fn put_codes(p: &mut KPanelBlock, r: usize, q: &[u8; 256]) {
    for (g, four) in q.chunks_exact(4).enumerate() {
        p.codes[g * 4 * I8_ROWS + r * 4..][..4].copy_from_slice(four);
    }
}

/// Two `i16` in one `i32`, `lo` in the low half.
fn i16_pair(lo: i16, hi: i16) -> i32 {
    i32::from(lo as u16) | i32::from(hi) << 16
}
