//! AVX512-VNNI versions (256-bit, EVEX-encoded) of the eight-row Q4_0 and
//! Q5_0 matvec kernels of [`super::rows`]: each block's products summed by one
//! `vpdpbusd` instead of `maddubs` + `madd` (for Q5_0 starting from the
//! negated code offset), and Q5_0's fifth code bit merged by one masked byte
//! add straight from the `qh` word (`vpaddb` under a 32-bit mask) instead of
//! expanding it through a shuffle and compare. Every lane holds the same exact
//! integer as in `rows`, so the results are bit-identical to the single dots.

use super::rows::{block_fma8, hsum_epi32_all, row_blocks, store8};
use super::{at, half_lane0, hsum_ps, le16, load256, nibbles_32, prefetch_at};
use std::arch::x86_64::*;

/// Q5_0 weights: eight rows · one Q8_0 vector (bit-identical to eight single
/// dots), as two passes of four rows.
///
/// # Safety
/// CPU must support avx2+fma+f16c and avx512f+avx512bw+avx512vl+avx512vnni;
/// slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8_q5_0_q8_0_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let lo = rows4_q5_0([w[0], w[1], w[2], w[3]], a);
    let hi = rows4_q5_0([w[4], w[5], w[6], w[7]], a);
    [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]]
}

/// Four Q5_0 rows against one Q8_0 vector, in the f32x8-accumulator order of
/// the Q5_0 single dot (per block: `d_x * d_y` rounded to f32, one FMA of the
/// eight exact integer lanes, then [`hsum_ps`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows4_q5_0(w: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    let (xs, ys) = row_blocks::<22, 4>(w, a);
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, y) in ys.iter().enumerate() {
        let dy = half_lane0(at(y, 0));
        let qy = load256(at(y, 2));
        // Unsigned codes overstate each lane by 16 · (its four activation codes).
        let start = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), sixteen, qy),
        );
        for r in 0..4 {
            let x = &xs[r][b];
            prefetch_at(x, 4 * w[r].len());
            let nib = nibbles_32(at(x, 6));
            let qh = u32::from_le_bytes(*at::<4>(x, 2));
            let u = _mm256_mask_add_epi8(nib, qh, nib, sixteen);
            let p = _mm256_dpbusd_epi32(start, u, qy);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(half_lane0(at(x, 0)), dy));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
        }
    }
    acc.map(|v| hsum_ps(v))
}

/// Q4_0 weights: eight rows · one Q8_0 vector (bit-identical to eight single
/// dots), in the one-FMA-per-block order of `rows8_q4_0_q8_0`: each row's
/// exact block integer in its own lane, one f32x8 FMA for the eight rows.
///
/// # Safety
/// CPU must support avx2+fma+f16c and avx512f+avx512bw+avx512vl+avx512vnni;
/// slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8_q4_0_q8_0_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let (xs, ys) = row_blocks::<18, 8>(w, a);
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_ps();
    for (b, y) in ys.iter().enumerate() {
        let dy = _mm256_broadcastss_ps(half_lane0(at(y, 0)));
        let qy = load256(at(y, 2));
        // Unsigned codes overstate each row's sum by 8 · Σ of the block's activation codes.
        let corr = hsum_epi32_all(_mm256_dpbusd_epi32(zero, _mm256_set1_epi8(8), qy));
        let mut p = [zero; 8];
        let mut dx = [0u16; 8];
        for r in 0..8 {
            let x = &xs[r][b];
            prefetch_at(x, 8 * w[r].len());
            p[r] = _mm256_dpbusd_epi32(zero, nibbles_32(at(x, 2)), qy);
            dx[r] = le16(x, 0);
        }
        acc = block_fma8(p, corr, dx, dy, acc);
    }
    store8(acc)
}
