//! Dot-product kernels, one per (weight format, activation format) pair, in a
//! portable scalar reference version ([`scalar`]), an AVX2+FMA+F16C version
//! (`avx2`, x86_64 only) and a NEON version (`neon`, aarch64 only, with
//! `dotprod` and `i8mm` variants). [`crate::dispatch::Kernels`] picks one at run time.
//!
//! Every kernel has the signature of [`DotFn`]: `n` elements of one weight row
//! `w` (bytes in the weight format) against one activation vector `a` (bytes in
//! the paired activation format, see [`crate::vec_dot_type`]). The integer part
//! of each block's dot is exact; blocks are scaled and summed in `f32`, so the
//! versions differ only by `f32` summation order. Where llama.cpp's x86 backend
//! has a fixed order (its AVX2 `vec_dot`s, the repacked Q4_0/Q4_K kernels, the
//! f32 dot and softmax), both versions follow it lane by lane, so statelm can
//! reproduce its logits bit for bit.

/// The body of a [`Rows8x4Fn`]: calls `$call` (a kernel generic over its vector count, the
/// vectors bound to `$v` as an array) for the 1..=4 vectors of `$a` (more are cut), its results
/// first in the output.
#[allow(unused_macros)] // the SIMD kernels' helper
macro_rules! by_vectors {
    ($a:expr, |$v:ident| $call:expr) => {{
        let a: &[&[u8]] = $a;
        let mut out = [[0f32; 8]; 4];
        match *a {
            [] => {}
            [x] => {
                let $v = [x];
                out[..1].copy_from_slice(&$call);
            }
            [x, y] => {
                let $v = [x, y];
                out[..2].copy_from_slice(&$call);
            }
            [x, y, z] => {
                let $v = [x, y, z];
                out[..3].copy_from_slice(&$call);
            }
            [x, y, z, u, ..] => {
                let $v = [x, y, z, u];
                out = $call;
            }
        }
        out
    }};
}

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod avx2;

#[cfg(target_arch = "aarch64")]
pub mod neon;

/// The fixed-size array at `s[off..off + N]` (bounds-checked; with constant
/// offsets into whole blocks the check compiles away).
#[inline(always)]
pub(crate) fn at<const N: usize>(s: &[u8], off: usize) -> &[u8; N] {
    s[off..off + N].try_into().expect("block field in bounds")
}

/// Little-endian u16 at `off`.
#[inline(always)]
pub(crate) fn le16(s: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(*at::<2>(s, off))
}

/// Where an eight-row matvec walk (block `i` of eight rows at once, blocks of `bytes` bytes,
/// rows `row_len` bytes long and contiguous) should prefetch so that it reads `distance`
/// bytes of weights ahead: `distance / (8 bytes)` blocks further in the same row or, past
/// the row's end, in the row eight further on (the next group's, seven rows later in memory).
/// Prefetching `distance` ahead of each row instead would land, for rows longer than
/// `distance / 8`, in a row of the same group, which the walk is already reading. The offset
/// is relative to the row's start and may lie past it (prefetches never fault).
#[inline(always)]
#[allow(dead_code)] // the SIMD kernels' helper
pub(crate) fn rows8_prefetch_offset(
    i: usize,
    bytes: usize,
    row_len: usize,
    distance: usize,
) -> usize {
    let at = (i + (distance / (8 * bytes)).max(1)) * bytes;
    if at >= row_len {
        at + 7 * row_len
    } else {
        at
    }
}

/// The f32 scale of a Q8_K block (bytes 0..4; codes follow at 4..260, bsums at 260..292).
#[inline(always)]
pub(crate) fn q8k_d(y: &[u8]) -> f32 {
    f32::from_le_bytes(*at::<4>(y, 0))
}

/// The 16 sums of 16 codes each of a Q8_K block.
#[inline(always)]
pub(crate) fn q8k_bsums(y: &[u8]) -> [i16; 16] {
    let b = at::<32>(y, 260);
    std::array::from_fn(|i| i16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

/// The whole blocks of `s` as arrays (a short tail is dropped), so block
/// fields at constant offsets need no bounds checks (`<[u8]>::as_chunks`
/// does the same from Rust 1.88).
#[inline(always)]
pub(crate) fn blocks<const B: usize>(s: &[u8]) -> &[[u8; B]] {
    let n = s.len().checked_div(B).unwrap_or(0);
    // SAFETY: `[u8; B]` has size `B` and alignment 1, so the first `n * B <=
    // s.len()` bytes of `s` are exactly `n` valid arrays, borrowed for `s`'s
    // lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<[u8; B]>(), n) }
}

/// A dot-product kernel (see the module docs). Unsafe to call because SIMD
/// versions require CPU features; the slice lengths must be those of `n`
/// elements of the two formats.
pub type DotFn = unsafe fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// A dot-product kernel of one weight row against four activation vectors
/// (used by matmul to decode each weight block once). Gives exactly the results
/// of four [`DotFn`] calls of the same ISA, except for Q4_K, whose four-vector
/// kernel sums in ggml's 4-row GEMM order (see `scalar::dot4_q4_k_q8_k`); every
/// ISA's version equals the scalar reference's bits.
pub type Dot4Fn = unsafe fn(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4];

/// A register-tile kernel: two weight rows against four activation vectors
/// (`out[row][vector]`), the inner loop of matmul for the 32-element formats.
/// Must give exactly the results of eight [`DotFn`] calls of the same ISA.
pub type TileFn = unsafe fn(n: usize, w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2];

/// One block of two Q8_0 activation vectors prepared for a [`PairTileFn`] (see
/// [`crate::pairs`]): vector `2p` in the low half of each field, `2p + 1` in the high half.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(64))]
pub struct PairBlock {
    /// The two vectors' 32 codes each.
    pub q: [i8; 64],
    /// Per i32 lane (four codes): `-offset · Σ codes`, the dot's starting value for weights
    /// whose unsigned codes exceed the signed ones by `offset`.
    pub start: [i32; 16],
    /// Each vector's block scale, widened to f32, over its eight lanes.
    pub d: [f32; 16],
}

impl Default for PairBlock {
    fn default() -> Self {
        PairBlock {
            q: [0; 64],
            start: [0; 16],
            d: [0.0; 16],
        }
    }
}

/// Vectors per call of a [`PairTileFn`] (four pairs).
pub const PAIR_TILE_VECS: usize = 8;

/// A small-batch tile kernel: two weight rows against `npairs` (1..=4) prepared pairs of
/// activation vectors, `pairs[b * npairs + p]` for block `b` (see [`crate::pairs::prepare`]);
/// `out[row][2p + h]` is row `row` against vector `2p + h`. Must give exactly the results of
/// single [`DotFn`] calls of the same ISA. Unsafe to call because SIMD versions require CPU
/// features; the rows must hold `pairs.len() / npairs` blocks.
pub type PairTileFn =
    unsafe fn(w: [&[u8]; 2], pairs: &[PairBlock], npairs: usize) -> [[f32; PAIR_TILE_VECS]; 2];

/// A matvec kernel: eight weight rows against one activation vector (shares
/// the activation block's loads and code-offset term between rows; for Q4_0,
/// whose single dot sums one FMA per block, the eight block sums share one
/// f32x8 FMA, row r in lane r). Must give exactly the results of eight
/// [`DotFn`] calls of the same ISA.
pub type Rows8Fn = unsafe fn(n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8];

/// A small-batch matvec kernel: eight weight rows against 1..=4 activation vectors
/// (`out[vector][row]`; outputs past `a.len()` are unspecified), each weight block decoded
/// once for all of them. Must give exactly the results of single [`DotFn`] calls of the same
/// ISA.
pub type Rows8x4Fn = unsafe fn(n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4];

/// An activation quantizer: `x` (a whole number of blocks) into `out` (the
/// bytes of as many blocks). Unsafe to call for the same reason as [`DotFn`].
pub type QuantFn = unsafe fn(x: &[f32], out: &mut [u8]);

/// A float dot product over the common length of two slices (attention scores).
pub type VecDotFn = unsafe fn(a: &[f32], b: &[f32]) -> f32;

/// `g = silu(g) · u` over the common length (SwiGLU).
pub type GatedFn = unsafe fn(g: &mut [f32], u: &[f32]);

/// `x = softmax(x)` in place (attention probabilities).
pub type SoftmaxFn = unsafe fn(x: &mut [f32]);

/// Narrows f32 to IEEE halves over the common length, to nearest, ties to even (the f16 KV
/// cache's writes).
pub type NarrowFn = unsafe fn(src: &[f32], dst: &mut [half::f16]);

/// `x = src / sqrt(mean(src²) + eps) · w` with `src = x` when `None` (the RMS norm).
pub type NormFn = unsafe fn(x: &mut [f32], src: Option<&[f32]>, w: &[f32], eps: f32);

/// Widens IEEE halves to f32 over the common length (exact; the f16 KV cache).
pub type WidenFn = unsafe fn(src: &[half::f16], dst: &mut [f32]);

/// `y += alpha * x` over the common length (attention's weighted sum of values).
pub type AxpyFn = unsafe fn(y: &mut [f32], alpha: f32, x: &[f32]);

/// Weight rows per packed GEMM panel (two f32x8 registers).
pub const PANEL_ROWS: usize = 16;
/// Activation rows (tokens) per GEMM micro-kernel call.
pub const TILE_TOKENS: usize = 6;

/// Interleaves [`PANEL_ROWS`] dequantized weight rows (stride `ld`) into a
/// GEMM panel: `panel[k * PANEL_ROWS + j] = rows[j * ld + k]` for `k < kc`.
/// Unsafe to call because SIMD versions require CPU features; every version
/// checks its slice lengths.
pub type InterleaveFn = unsafe fn(rows: &[f32], ld: usize, kc: usize, panel: &mut [f32]);

/// The f32 GEMM micro-kernel (see [`crate::gemm`]):
/// `acc[t][j] = Σ_k x[t * ldx + k] · panel[k * PANEL_ROWS + j]`
/// for `t < m <= TILE_TOKENS`, `k < kc`.
/// Unsafe to call because SIMD versions require CPU features; every version
/// checks its slice lengths.
pub type PanelFn = unsafe fn(
    m: usize,
    kc: usize,
    x: &[f32],
    ldx: usize,
    panel: &[f32],
    acc: &mut [[f32; PANEL_ROWS]; TILE_TOKENS],
);

/// Weight rows per int8 GEMM panel group: one i32 lane per row of a 512-bit
/// register (AVX-512), or of two 256-bit ones (see [`crate::igemm`]).
pub const I8_ROWS: usize = 16;
/// Activation rows (tokens) per int8 GEMM micro-kernel call.
pub const I8_TILE_TOKENS: usize = 8;
/// Bytes of one block of an int8 GEMM panel: [`I8_ROWS`] rows × 32 codes,
/// interleaved in groups of four codes (`panel[g * 4 * I8_ROWS + r * 4 + j]`
/// is code `4g + j` of row `r`).
pub const I8_PANEL_BLOCK: usize = I8_ROWS * 32;

/// Per activation block of an int8 GEMM: the Q8_0 scale widened to f32 and
/// `-offset · Σ q` (what the weights' unsigned codes overstate the dot by).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct ActBlockMeta {
    /// The activation block's scale.
    pub d: f32,
    /// `-offset · Σ_k q_k` over the block's 32 activation codes.
    pub neg_offset_sum: i32,
}

/// The int8 GEMM micro-kernel (see [`crate::igemm`]): for `t < m <=
/// I8_TILE_TOKENS` and `r < I8_ROWS`,
/// `acc[t][r] = Σ_b fma(i_{t,b,r}, scales[b * I8_ROWS + r] · meta[t * ldm + b].d)`
/// in block order, where `i_{t,b,r} = meta.neg_offset_sum + Σ_k u_{b,r,k} ·
/// q_{t,b,k}` is exact (unsigned panel codes `u`, the Q8_0 codes `q` of block
/// `b` of activation row `t`, at `x[t * ldx + 34 b..]`), over `nb` blocks.
/// Unsafe to call because SIMD versions require CPU features; every version
/// checks its slice lengths.
#[allow(clippy::too_many_arguments)]
pub type I8TileFn = unsafe fn(
    m: usize,
    nb: usize,
    panel: &[u8],
    scales: &[f32],
    x: &[u8],
    ldx: usize,
    meta: &[ActBlockMeta],
    ldm: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
);

/// The operands of one int8 GEMM micro-kernel call ([`I8TileFn`]), cut to `nb` blocks, with
/// the activation rows and their block metadata per token (for the SIMD micro-kernels).
#[allow(dead_code)] // not every architecture has a SIMD micro-kernel
pub(crate) struct I8Operands<'a, const M: usize> {
    /// The panel's blocks.
    pub panel: &'a [[u8; I8_PANEL_BLOCK]],
    /// The rows' scales per block.
    pub scales: &'a [[f32; I8_ROWS]],
    /// Each token's Q8_0 blocks.
    pub xs: [&'a [[u8; 34]]; M],
    /// Each token's block metadata.
    pub metas: [&'a [ActBlockMeta]; M],
}

/// Cuts the raw operands of [`I8TileFn`] for `M` tokens from `t0` on. Panics (never reads
/// out of bounds) when a slice is too short.
#[allow(clippy::too_many_arguments, dead_code)]
pub(crate) fn operands<'a, const M: usize>(
    t0: usize,
    nb: usize,
    panel: &'a [u8],
    scales: &'a [f32],
    x: &'a [u8],
    ldx: usize,
    meta: &'a [ActBlockMeta],
    ldm: usize,
) -> I8Operands<'a, M> {
    let (panel, _) = panel.as_chunks::<I8_PANEL_BLOCK>();
    let (scales, _) = scales.as_chunks::<I8_ROWS>();
    I8Operands {
        panel: &panel[..nb],
        scales: &scales[..nb],
        xs: std::array::from_fn(|t| x[(t0 + t) * ldx..][..nb * 34].as_chunks::<34>().0),
        metas: std::array::from_fn(|t| &meta[(t0 + t) * ldm..][..nb]),
    }
}

/// Bytes of one Q8_K activation block (`d: f32`, 256 codes, 16 `i16` bsums).
pub const Q8K_BLOCK: usize = 292;

/// One super-block (256 elements) of [`I8_ROWS`] K-quant weight rows, packed for the K-quant
/// int8 GEMM (see [`crate::igemm_k`]). Rows past the end of the matrix are all zeros.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(64))]
pub struct KPanelBlock {
    /// Unsigned codes interleaved by four: code `k` of row `r` at `k / 4 * 64 + r * 4 + k % 4`
    /// (Q4_K: `0..16`, Q5_K: `0..32`, Q6_K: the signed code + 32, `0..64`).
    pub codes: [u8; I8_ROWS * 256],
    /// Integer sub-block scales, `scales[j][r]` for sub-block `j` of row `r` (Q4_K/Q5_K: 8
    /// sub-blocks of 32 codes, the rest zero; Q6_K: 16 sub-blocks of 16, signed).
    pub scales: [[i32; I8_ROWS]; 16],
    /// Per row, eight pairs of `i16` (low half first) that multiply the activation block's
    /// sixteen bsums pairwise: `mins[p][r]` = `(c_{2p}, c_{2p+1})` against
    /// `(bsums[2p], bsums[2p+1])`. Q4_K/Q5_K: `c_{2p} = c_{2p+1} = m_p` (the sub-block mins);
    /// Q6_K: `c_j = -32 · scale_j` (the code offset).
    pub mins: [[i32; I8_ROWS]; 8],
    /// Per row, the super-block scale `d` widened to f32.
    pub d: [f32; I8_ROWS],
    /// Per row, the super-block min scale `dmin` widened to f32 (Q6_K: zero).
    pub dmin: [f32; I8_ROWS],
}

impl Default for KPanelBlock {
    fn default() -> Self {
        KPanelBlock {
            codes: [0; I8_ROWS * 256],
            scales: [[0; I8_ROWS]; 16],
            mins: [[0; I8_ROWS]; 8],
            d: [0.0; I8_ROWS],
            dmin: [0.0; I8_ROWS],
        }
    }
}

/// How the K-quant int8 GEMM turns each super-block's exact integers into f32, chosen to
/// equal the format's single-vector dot where that is cheap (see [`KTileFn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KFormat {
    /// Sub-blocks of 32; `acc = fma(isum, d·d_y, acc)`, `accm = fma(msum, dmin·d_y, accm)`,
    /// result `acc - accm` (ggml's repacked GEMV order: equals `dot_q4_k_q8_k`).
    Q4K,
    /// Sub-blocks of 32; `acc = acc + ((d·d_y)·isum - (dmin·d_y)·msum)`, no fused
    /// operations (equals `dot_q5_k_q8_k`).
    Q5K,
    /// Sub-blocks of 16; `acc = fma(isum + msum, d·d_y, acc)`, where `msum` is the code offset
    /// `-32 Σ_j scale_j · bsum_j` — not ggml's eight-lane order of `dot_q6_k_q8_k` (that would
    /// take eight accumulators per output), but the same for every batch size and thread count.
    Q6K,
}

impl KFormat {
    /// Codes per sub-block (each with one integer scale).
    pub const fn sub_len(self) -> usize {
        match self {
            KFormat::Q6K => 16,
            _ => 32,
        }
    }
}

/// The K-quant int8 GEMM micro-kernel (see [`crate::igemm_k`]): [`I8_ROWS`] weight rows,
/// packed as `panel` (one [`KPanelBlock`] per super-block, `nb = panel.len()` of them), against
/// `m <= I8_TILE_TOKENS` Q8_K activation rows (row `t` at `x[t * ldx..]`, `nb` blocks of
/// [`Q8K_BLOCK`] bytes: `d` as little-endian f32 at 0, codes `q` at 4, bsums at 260).
///
/// For each token `t`, row `r` and super-block `b`, with `u` the panel codes and `S = fmt.sub_len()`:
/// * `isum = Σ_{j < 256 / S} scales[j][r] · Σ_{k in sub-block j} u_k · q_k` (exact in i32;
///   every sub-block product `u_k q_k` summed in any order gives the same integer);
/// * `msum = Σ_{p < 8} lo(mins[p][r]) · bsums[2p] + hi(mins[p][r]) · bsums[2p + 1]` (exact);
/// * with `dy` = the block's `d`, `dd = d[r] · dy` and `dm = dmin[r] · dy` (f32 products),
///   the f32 accumulators of `(t, r)` advance as [`KFormat`] says, in super-block order,
///   starting from zero; `acc[t][r]` gets the result (Q4K: `acc - accm`).
///
/// Rows `t >= m` of `acc` are left alone. Every version gives the same bits as the scalar
/// reference (`scalar::tile_i8_k`); an aarch64 SDOT/USDOT version must too (the integer sums
/// are exact, so only the f32 steps above fix the result). Unsafe to call because SIMD
/// versions require CPU features; every version checks its slice lengths.
pub type KTileFn = unsafe fn(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
);

#[cfg(test)]
mod tests {
    use super::rows8_prefetch_offset;

    #[test]
    fn rows8_prefetch_reads_the_distance_ahead_in_walk_order() {
        // Long rows (35 Q6_K super-blocks): four blocks further in the same row, then the
        // start of the row eight further on.
        let (bytes, len) = (210, 35 * 210);
        assert_eq!(rows8_prefetch_offset(0, bytes, len, 8192), 4 * 210);
        assert_eq!(rows8_prefetch_offset(31, bytes, len, 8192), 8 * len);
        // Short rows (six Q4_K super-blocks): always in the next group's row.
        let (bytes, len) = (144, 6 * 144);
        assert_eq!(rows8_prefetch_offset(0, bytes, len, 8192), 8 * len + 144);
        // A distance under one step of the walk still prefetches one block ahead.
        assert_eq!(rows8_prefetch_offset(0, bytes, 100 * len, 64), 144);
    }
}
