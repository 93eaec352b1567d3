//! AVX2 matvec kernels over several weight rows and one Q8_0 activation
//! vector, for the 32-element block formats with small unsigned codes (Q4_0,
//! Q5_0).
//!
//! A block's codes are decoded unsigned (`0..16` or `0..32`) and dotted with
//! `maddubs` directly; the code offset (`8·Σy` or `16·Σy`, per i32 lane) is
//! computed once per activation block for all rows and subtracted in the
//! integer domain, so every lane holds exactly the integer the signed dot
//! would — results are bit-identical to the single dots in `legacy`, with
//! fewer instructions per weight block (no sign trick, shared activation
//! loads).

use super::legacy::blocks;
use super::{
    at, bits_32, half_lane0, hsum_ps, le16, load256, mul_sum_u8_i8, nibbles_32, prefetch_at,
};
use std::arch::x86_64::*;

/// Q4_0 weights: eight rows · one Q8_0 vector (bit-identical to eight single dots).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8_q4_0_q8_0(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    rows8_block_fma::<18>(w, a, 8, |x| nibbles_32(at(x, 2)))
}

/// Q5_0 weights: eight rows · one Q8_0 vector (bit-identical to eight single
/// dots), as two passes of four rows (four f32x8 accumulators fit the
/// registers beside the decoding constants).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8_q5_0_q8_0(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let decode = |x: &[u8; 22]| {
        let qh = u32::from_le_bytes(*at::<4>(x, 2));
        let high = _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles_32(at(x, 6)), high)
    };
    let lo = rows4_lane_acc::<22>([w[0], w[1], w[2], w[3]], a, 16, decode);
    let hi = rows4_lane_acc::<22>([w[4], w[5], w[6], w[7]], a, 16, decode);
    [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]]
}

/// The whole blocks of `R` weight rows (blocks of `WB` bytes) and of one Q8_0
/// vector, all cut to the shortest, so indexing block `b < ys.len()` of any
/// row needs no further check.
#[inline(always)]
pub(super) fn row_blocks<'a, const WB: usize, const R: usize>(
    w: [&'a [u8]; R],
    a: &'a [u8],
) -> ([&'a [[u8; WB]]; R], &'a [[u8; 34]]) {
    let ys = blocks::<34>(a);
    let nb = w.iter().fold(ys.len(), |m, r| m.min(r.len() / WB));
    let mut xs: [&[[u8; WB]]; R] = [&[]; R];
    for r in 0..R {
        xs[r] = &blocks::<WB>(w[r])[..nb];
    }
    (xs, &ys[..nb])
}

/// `offset · y` summed per i32 lane of a block's pairwise products: what
/// unsigned codes `u` overstate `u - offset` by.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn offset_lanes(offset: i8, qy: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_set1_epi8(offset), qy);
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// Four rows (blocks of `WB` bytes, unsigned codes from `decode`, minus
/// `offset`) against one Q8_0 vector in the f32x8-accumulator order of the
/// Q5_0 / Q8_0 single dots: per block, `d_x * d_y` rounded to f32, one FMA of
/// the eight exact integer lanes into the row's accumulator, then
/// [`hsum_ps`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows4_lane_acc<const WB: usize>(
    w: [&[u8]; 4],
    a: &[u8],
    offset: i8,
    decode: impl Fn(&[u8; WB]) -> __m256i,
) -> [f32; 4] {
    let (xs, ys) = row_blocks::<WB, 4>(w, a);
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, y) in ys.iter().enumerate() {
        let dy = half_lane0(at(y, 0));
        let qy = load256(at(y, 2));
        let corr = offset_lanes(offset, qy);
        for r in 0..4 {
            let x = &xs[r][b];
            // The same place four rows on: the next rows, if they are contiguous.
            prefetch_at(x, 4 * w[r].len());
            let p = _mm256_sub_epi32(mul_sum_u8_i8(decode(x), qy), corr);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(half_lane0(at(x, 0)), dy));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
        }
    }
    acc.map(|v| hsum_ps(v))
}

/// Sums each of eight i32x8 vectors: lane r of the result is the (wrapping)
/// sum of `p[r]`'s lanes, by a tree of horizontal adds.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn sum_lanes8(p: [__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(p[0], p[1]);
    let h23 = _mm256_hadd_epi32(p[2], p[3]);
    let h45 = _mm256_hadd_epi32(p[4], p[5]);
    let h67 = _mm256_hadd_epi32(p[6], p[7]);
    // Per 128-bit half: the partial sums of rows 0–3 (resp. 4–7) over that half's lanes.
    let q0123 = _mm256_hadd_epi32(h01, h23);
    let q4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256::<0x20>(q0123, q4567);
    let hi = _mm256_permute2x128_si256::<0x31>(q0123, q4567);
    _mm256_add_epi32(lo, hi)
}

/// Horizontal sum of 8 i32, broadcast to every lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_epi32_all(v: __m256i) -> __m256i {
    let s = _mm256_add_epi32(v, _mm256_permute2x128_si256::<0x01>(v, v));
    let s = _mm256_add_epi32(s, _mm256_shuffle_epi32::<0b01_00_11_10>(s));
    _mm256_add_epi32(s, _mm256_shuffle_epi32::<0b10_11_00_01>(s))
}

/// Eight rows (blocks of `WB` bytes, unsigned codes from `decode`, minus
/// `offset`) against one Q8_0 vector in the one-FMA-per-block order of the
/// Q4_0 single dot: per block, each row's exact integer sum lands in its own
/// lane ([`sum_lanes8`], less the shared offset term), its `d_x * d_y` rounded
/// to f32 beside it, and one f32x8 FMA accumulates all eight rows — lane r
/// sees exactly the operations of row r's single dot.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows8_block_fma<const WB: usize>(
    w: [&[u8]; 8],
    a: &[u8],
    offset: i8,
    decode: impl Fn(&[u8; WB]) -> __m256i,
) -> [f32; 8] {
    let (xs, ys) = row_blocks::<WB, 8>(w, a);
    let mut acc = _mm256_setzero_ps();
    for (b, y) in ys.iter().enumerate() {
        let dy = _mm256_broadcastss_ps(half_lane0(at(y, 0)));
        let qy = load256(at(y, 2));
        let corr = hsum_epi32_all(offset_lanes(offset, qy));
        let mut p = [_mm256_setzero_si256(); 8];
        let mut dx = [0u16; 8];
        for r in 0..8 {
            let x = &xs[r][b];
            // The same place eight rows on: the next group of rows, if they are contiguous.
            prefetch_at(x, 8 * w[r].len());
            p[r] = mul_sum_u8_i8(decode(x), qy);
            dx[r] = le16(x, 0);
        }
        acc = block_fma8(p, corr, dx, dy, acc);
    }
    store8(acc)
}

/// One block of the eight-row Q4_0 order: row r's exact integer `p[r]` summed into lane r
/// ([`sum_lanes8`]) less the shared offset term `corr`, times its `d_x * d_y` (the halves `dx`
/// widened beside the broadcast `dy`), accumulated into `acc` by one f32x8 FMA.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn block_fma8(
    p: [__m256i; 8],
    corr: __m256i,
    dx: [u16; 8],
    dy: __m256,
    acc: __m256,
) -> __m256 {
    let [h0, h1, h2, h3, h4, h5, h6, h7] = dx.map(|h| h as i16);
    let dx = _mm256_cvtph_ps(_mm_setr_epi16(h0, h1, h2, h3, h4, h5, h6, h7));
    let isum = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum_lanes8(p), corr));
    _mm256_fmadd_ps(isum, _mm256_mul_ps(dx, dy), acc)
}

/// The eight lanes of `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn store8(acc: __m256) -> [f32; 8] {
    let mut out = [0f32; 8];
    // SAFETY: `out` is 8 writable f32; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
    out
}
