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

use crate::bandwidth::prefetch_read;
use crate::dispatch::Kernels;
use crate::error::QuantError;
use crate::formats::float::f16_to_f32;
use crate::formats::q4_k::unpack_scales;
use crate::formats::{BlockQ4K, BlockQ5K, BlockQ6K};
use crate::igemm::{store_tile, MAX_CHUNK_BYTES};
use crate::kernels::{at, le16, KFormat, KPanelBlock, KTileFn, I8_ROWS, I8_TILE_TOKENS};
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
    let nb = w.cols() / 256;
    let groups = rows.len().div_ceil(I8_ROWS);
    PANEL.with_borrow_mut(|panel| {
        panel.resize(groups * nb, KPanelBlock::default());
        for (g, p) in panel[..groups * nb].chunks_exact_mut(nb).enumerate() {
            let g0 = rows.start + g * I8_ROWS;
            let end = (g0 + I8_ROWS).min(rows.end);
            if end - g0 < I8_ROWS {
                // A partial group: the rows past the matrix must be zeros, not an earlier panel.
                p.fill(KPanelBlock::default());
            }
            pack_group(w, g0..end, p);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { run_tiles(w, acts, fmt, &panel[..groups * nb], rows, tile, out) };
    });
}

thread_local! {
    /// Each pool thread's packed panel, kept between products: allocating and zeroing it per
    /// call wrote as many bytes again as the packing itself.
    static PANEL: std::cell::RefCell<Vec<KPanelBlock>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs every token tile of `acts` over every group of `panel` (rows `rows` of `w`, packed).
///
/// # Safety
/// As [`run_chunk`].
unsafe fn run_tiles(
    w: &QMatrix<'_>,
    acts: &QuantizedActs,
    fmt: KFormat,
    panel: &[KPanelBlock],
    rows: std::ops::Range<usize>,
    tile: KTileFn,
    out: &OutPtr,
) {
    let (nb, n) = (w.cols() / 256, acts.n());
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
/// super-block (see its fields); the caller zeroes the rows past `rows`.
///
/// Super-block by super-block, each for all the group's rows, so that the block being written
/// (5.7 KB) stays in L1 (row by row, every store of the whole group's panel missed it). The
/// codes go four at a time: 64 little-endian words per super-block ([`q4_k_words`],
/// [`q5_k_words`], [`q6_k_words`]: a few mask and shift steps per word), one store each. The
/// weights are read in place, not copied out as blocks.
fn pack_group(w: &QMatrix<'_>, rows: std::ops::Range<usize>, panel: &mut [KPanelBlock]) {
    let (bytes, put): (usize, PutRow) = match w.ty() {
        GgmlType::Q4_K => (size_of::<BlockQ4K>(), put_q4_k),
        GgmlType::Q5_K => (size_of::<BlockQ5K>(), put_q5_k),
        _ => (size_of::<BlockQ6K>(), put_q6_k),
    };
    let n = rows.len();
    let src: [&[u8]; I8_ROWS] =
        std::array::from_fn(|i| if i < n { w.row(rows.start + i) } else { &[] });
    for (b, p) in panel.iter_mut().enumerate() {
        for (r, row) in src[..n].iter().enumerate() {
            // Sixteen rows are sixteen streams, more than the hardware prefetcher follows.
            let ahead = row.as_ptr().wrapping_add((b + PACK_AHEAD) * bytes);
            for line in (0..bytes).step_by(64) {
                prefetch_read(ahead.wrapping_add(line));
            }
            put(p, r, &row[b * bytes..][..bytes]);
        }
    }
}

/// Packs row `r` of one super-block (its bytes) into a panel block.
type PutRow = fn(&mut KPanelBlock, usize, &[u8]);

/// Super-blocks ahead of the one packed that each row prefetches.
const PACK_AHEAD: usize = 2;

/// The f16 at `x[off..off + 2]`, widened.
#[inline(always)]
fn half(x: &[u8], off: usize) -> f32 {
    f16_to_f32(le16(x, off))
}

/// Row `r` of one Q4_K super-block (`d`, `dmin`, 12 scale bytes, 128 code bytes).
fn put_q4_k(p: &mut KPanelBlock, r: usize, x: &[u8]) {
    put_words(p, r, &q4_k_words(at(x, 16)));
    let (sc, mn) = unpack_scales(at(x, 4));
    put_affine(p, r, &sc, &mn, [half(x, 0), half(x, 2)]);
}

/// Row `r` of one Q5_K super-block (`d`, `dmin`, 12 scale bytes, 32 high-bit bytes, 128 code
/// bytes).
fn put_q5_k(p: &mut KPanelBlock, r: usize, x: &[u8]) {
    put_words(p, r, &q5_k_words(at(x, 48), at(x, 16)));
    let (sc, mn) = unpack_scales(at(x, 4));
    put_affine(p, r, &sc, &mn, [half(x, 0), half(x, 2)]);
}

/// Row `r` of one Q6_K super-block (128 low-bit bytes, 64 high-bit bytes, 16 signed scales,
/// `d`): the codes plus 32, the scales, and the offset's `-32 · scale` pairs for the bsums.
fn put_q6_k(p: &mut KPanelBlock, r: usize, x: &[u8]) {
    put_words(p, r, &q6_k_words(at(x, 0), at(x, 128)));
    let scales = at::<16>(x, 192).map(|b| i16::from(b as i8));
    for (j, &s) in scales.iter().enumerate() {
        p.scales[j][r] = i32::from(s);
    }
    for (pair, c) in scales.chunks_exact(2).zip(&mut p.mins) {
        c[r] = i16_pair(-32 * pair[0], -32 * pair[1]);
    }
    (p.d[r], p.dmin[r]) = (half(x, 208), 0.0);
}

/// Four bytes at `off` as a little-endian word.
#[inline(always)]
fn word(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(*at::<4>(b, off))
}

/// The low (`0x0f`) nibble of every byte.
const NIB: u32 = 0x0f0f_0f0f;

/// Q4_K's 256 codes (`0..16`) as 64 words of four, word `g` = codes `4g..4g + 4`: chunk `c`
/// of 32 bytes holds codes `64c..64c + 32` in its low nibbles and the next 32 in its high ones.
fn q4_k_words(qs: &[u8; 128]) -> [u32; 64] {
    let mut out = [0; 64];
    for c in 0..4 {
        for l in 0..8 {
            let b = word(qs, 32 * c + 4 * l);
            out[16 * c + l] = b & NIB;
            out[16 * c + 8 + l] = (b >> 4) & NIB;
        }
    }
    out
}

/// Q5_K's 256 codes (`0..32`) as 64 words of four: Q4_K's nibbles plus the fifth bits, bit
/// `2c` (low half of chunk `c`) and `2c + 1` (high half) of `qh[l]`.
fn q5_k_words(qs: &[u8; 128], qh: &[u8; 32]) -> [u32; 64] {
    let mut out = [0; 64];
    for c in 0..4 {
        for l in 0..8 {
            let (b, h) = (word(qs, 32 * c + 4 * l), word(qh, 4 * l));
            out[16 * c + l] = (b & NIB) | ((h >> (2 * c)) & 0x0101_0101) << 4;
            out[16 * c + 8 + l] = ((b >> 4) & NIB) | ((h >> (2 * c + 1)) & 0x0101_0101) << 4;
        }
    }
    out
}

/// Q6_K's 256 codes plus 32 (`0..64`: the stored six bits) as 64 words of four: per half `h`
/// of 128 codes, `ql[64h + l]` holds codes `l` (low nibble) and `l + 64` (high),
/// `ql[64h + 32 + l]` codes `l + 32` and `l + 96`, and `qh[32h + l]` their top two bits in
/// that order.
fn q6_k_words(ql: &[u8; 128], qh: &[u8; 64]) -> [u32; 64] {
    let mut out = [0; 64];
    for h in 0..2 {
        for l in 0..8 {
            let (a, b) = (word(ql, 64 * h + 4 * l), word(ql, 64 * h + 32 + 4 * l));
            let q = word(qh, 32 * h + 4 * l);
            let top = |s: u32| ((q >> s) & 0x0303_0303) << 4;
            out[32 * h + l] = (a & NIB) | top(0);
            out[32 * h + 8 + l] = (b & NIB) | top(2);
            out[32 * h + 16 + l] = ((a >> 4) & NIB) | top(4);
            out[32 * h + 24 + l] = ((b >> 4) & NIB) | top(6);
        }
    }
    out
}

/// Row `r` of a Q4_K/Q5_K super-block: scales, mins (each paired with itself) and `[d, dmin]`.
fn put_affine(p: &mut KPanelBlock, r: usize, sc: &[u8; 8], mn: &[u8; 8], d: [f32; 2]) {
    for (j, (&s, &m)) in sc.iter().zip(mn).enumerate() {
        p.scales[j][r] = i32::from(s);
        p.mins[j][r] = i16_pair(i16::from(m), i16::from(m));
    }
    [p.d[r], p.dmin[r]] = d;
}

/// Row `r`'s codes, given as 64 words of four, interleaved by four: word `g` at
/// `codes[64 g + 4 r..]`.
fn put_words(p: &mut KPanelBlock, r: usize, words: &[u32; 64]) {
    let (cells, _) = p.codes.as_chunks_mut::<4>();
    for (g, w) in words.iter().enumerate() {
        cells[g * I8_ROWS + r] = w.to_le_bytes();
    }
}

/// Two `i16` in one `i32`, `lo` in the low half.
fn i16_pair(lo: i16, hi: i16) -> i32 {
    i32::from(lo as u16) | i32::from(hi) << 16
}
