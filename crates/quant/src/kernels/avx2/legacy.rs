//! AVX2 dots of the 32-element block formats against Q8_0 / Q8_1.
//!
//! Each block's integer dot is exact (`maddubs` + `madd` without saturation
//! for these code ranges); blocks are scaled by `d_x * d_y` and accumulated in
//! an f32x8 register per activation vector. The `dot4_`
//! kernels decode each weight block once for four activation vectors (matmul).

use super::{
    at, bits_32, f16c_mul, half_lane0, hsum_epi32, hsum_ps, le16, load256, mul_sum_u8_i8,
    nibbles_32, prefetch_ahead,
};
use std::arch::x86_64::*;

/// Decodes a Q8_0 block's 32 signed codes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q8_0(x: &[u8; 34]) -> __m256i {
    load256(at(x, 2))
}

/// Decodes a Q4_0 block's 32 codes minus 8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q4_0(x: &[u8; 18]) -> __m256i {
    _mm256_sub_epi8(nibbles_32(at(x, 2)), _mm256_set1_epi8(8))
}

/// Decodes a Q5_0 block's 32 codes minus 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q5_0(x: &[u8; 22]) -> __m256i {
    let qh = u32::from_le_bytes(*at::<4>(x, 2));
    // code - 16 == nibble | 0xf0 (as i8) when the fifth bit is clear, else nibble.
    let high = _mm256_andnot_si256(bits_32(qh), _mm256_set1_epi8(0xf0u8 as i8));
    _mm256_or_si256(nibbles_32(at(x, 6)), high)
}

/// Defines the one-vector and four-vector kernels of a Q8_0-paired format.
macro_rules! q8_0_pair {
    ($one:ident, $four:ident, $bytes:literal, $decode:ident, $fma:literal, $name:literal) => {
        #[doc = concat!($name, " weights · Q8_0 activations.")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $one(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            dot_q8_0_acts::<$bytes, 1, $fma>(w, [a], |x| $decode(x))[0]
        }

        #[doc = concat!($name, " weights · four Q8_0 activation vectors (bit-identical to four single dots).")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $four(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            dot_q8_0_acts::<$bytes, 4, $fma>(w, a, |x| $decode(x))
        }
    };
}

// Q4_0 sums as ggml's repacked (8×8) kernels do, which llama.cpp uses for Q4_0 on x86: one
// FMA per block; Q8_0 and Q5_0 as its `vec_dot` / tinyBLAS: an f32x8 accumulator.
q8_0_pair!(
    dot_q8_0_q8_0,
    dot4_q8_0_q8_0,
    34,
    decode_q8_0,
    false,
    "Q8_0"
);
q8_0_pair!(dot_q4_0_q8_0, dot4_q4_0_q8_0, 18, decode_q4_0, true, "Q4_0");
q8_0_pair!(
    dot_q5_0_q8_0,
    dot4_q5_0_q8_0,
    22,
    decode_q5_0,
    false,
    "Q5_0"
);

/// Defines the two-row × four-vector tile kernel of a Q8_0-paired format.
macro_rules! q8_0_tile {
    ($tile:ident, $bytes:literal, $decode:ident, $fma:literal, $name:literal) => {
        #[doc = concat!($name, " weights: two rows · four Q8_0 activation vectors (bit-identical to eight single dots).")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $tile(_n: usize, w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
            tile_q8_0_acts::<$bytes, 2, 4, $fma>(w, a, |x| $decode(x))
        }
    };
}

q8_0_tile!(tile_q8_0_q8_0, 34, decode_q8_0, false, "Q8_0");
q8_0_tile!(tile_q4_0_q8_0, 18, decode_q4_0, true, "Q4_0");
q8_0_tile!(tile_q5_0_q8_0, 22, decode_q5_0, false, "Q5_0");

pub(super) use crate::kernels::blocks;

/// Pairwise sums of `qx * y` for signed bytes, as 8 i32 lanes, given
/// `ax = |qx|` (hoisted out of the vector loop). Exact when `y` is in
/// -127..=127: the sign trick moves `qx`'s sign onto `y` so `maddubs` sees
/// `|qx| <= 128` unsigned.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mul_sum_abs_i8(ax: __m256i, qx: __m256i, y: __m256i) -> __m256i {
    let sy = _mm256_sign_epi8(y, qx);
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// Dots `R` weight rows (blocks of `WB` bytes) against `V` Q8_0 vectors: the
/// register tile behind matmul. Each weight block is decoded once for all
/// vectors and each activation block loaded once for all rows; every
/// (row, vector) pair sees exactly the operations of [`dot_q8_0_acts`]
/// (`d_x * d_y` rounded to f32, one FMA per block into its own f32x8, then
/// [`hsum_ps`]), so the results are bit-identical to single dots.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q8_0_acts<const WB: usize, const R: usize, const V: usize, const BLOCK_FMA: bool>(
    w: [&[u8]; R],
    a: [&[u8]; V],
    decode: impl Fn(&[u8; WB]) -> __m256i,
) -> [[f32; V]; R] {
    let nb = a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / WB)),
        |m, v| m.min(v.len() / 34),
    );
    let xs = w.map(|r| &blocks::<WB>(r)[..nb]);
    let ys = a.map(|v| &blocks::<34>(v)[..nb]);
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let mut acc_s = [[0f32; V]; R];
    for b in 0..nb {
        let mut dx = [_mm_setzero_ps(); R];
        let mut qx = [_mm256_setzero_si256(); R];
        let mut ax = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let x = &xs[r][b];
            prefetch_ahead(x, 0);
            dx[r] = half_lane0(at(x, 0));
            qx[r] = decode(x);
            ax[r] = _mm256_sign_epi8(qx[r], qx[r]);
        }
        for v in 0..V {
            let y = &ys[v][b];
            let dy = half_lane0(at(y, 0));
            let qy = load256(at(y, 2));
            for r in 0..R {
                let p = mul_sum_abs_i8(ax[r], qx[r], qy);
                let d = _mm_mul_ss(dx[r], dy);
                if BLOCK_FMA {
                    let isum = hsum_epi32(p) as f32;
                    acc_s[r][v] = isum.mul_add(_mm_cvtss_f32(d), acc_s[r][v]);
                } else {
                    let d = _mm256_broadcastss_ps(d);
                    acc[r][v] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][v]);
                }
            }
        }
    }
    if BLOCK_FMA {
        return acc_s;
    }
    acc.map(|row| row.map(|v| hsum_ps(v)))
}

/// Dots weight blocks of `WB` bytes against `V` Q8_0 vectors. Each weight
/// block is decoded once and accumulated into one f32x8 register per vector
/// (the vectors give the FMA chains independent work), so every vector sees
/// exactly the same operations whatever `V` is.
///
/// Per block: `d_x * d_y` rounded to f32 (both halves widened by a
/// memory-operand `vcvtph2ps`, no shuffle port), the exact integer dot in 8
/// i32 lanes, then one FMA into the f32x8 accumulator (or, with `BLOCK_FMA`,
/// the lanes' integer sum times `d` into a scalar).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q8_0_acts<const WB: usize, const V: usize, const BLOCK_FMA: bool>(
    w: &[u8],
    a: [&[u8]; V],
    decode: impl Fn(&[u8; WB]) -> __m256i,
) -> [f32; V] {
    let xs = blocks::<WB>(w);
    let nb = a.iter().fold(xs.len(), |m, v| m.min(v.len() / 34));
    let xs = &xs[..nb];
    let mut ys: [&[[u8; 34]]; V] = [&[]; V];
    for v in 0..V {
        ys[v] = &blocks::<34>(a[v])[..nb];
    }
    let mut acc = [_mm256_setzero_ps(); V];
    let mut acc_s = [0f32; V];
    for b in 0..nb {
        let x = &xs[b];
        prefetch_ahead(x, 0);
        let dx = half_lane0(at(x, 0));
        let qx = decode(x);
        let ax = _mm256_sign_epi8(qx, qx);
        for v in 0..V {
            let y = &ys[v][b];
            let d = _mm_mul_ss(dx, half_lane0(at(y, 0)));
            let p = mul_sum_abs_i8(ax, qx, load256(at(y, 2)));
            if BLOCK_FMA {
                acc_s[v] = (hsum_epi32(p) as f32).mul_add(_mm_cvtss_f32(d), acc_s[v]);
            } else {
                let d = _mm256_broadcastss_ps(d);
                acc[v] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[v]);
            }
        }
    }
    if BLOCK_FMA {
        return acc_s;
    }
    acc.map(|v| hsum_ps(v))
}

/// Q4_1 weights · Q8_1 activations.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (x, y) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        let d = _mm256_set1_ps(f16c_mul(le16(x, 0), le16(y, 0)));
        summs += f16c_mul(le16(x, 2), le16(y, 2));
        let p = mul_sum_u8_i8(nibbles_32(at(x, 4)), load256(at(y, 4)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc) + summs
}

/// Q5_1 weights · Q8_1 activations.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (x, y) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        let d = _mm256_set1_ps(f16c_mul(le16(x, 0), le16(y, 0)));
        summs += f16c_mul(le16(x, 2), le16(y, 2));
        let qh = u32::from_le_bytes(*at::<4>(x, 4));
        let high = _mm256_and_si256(bits_32(qh), _mm256_set1_epi8(0x10));
        let qx = _mm256_or_si256(nibbles_32(at(x, 8)), high);
        let p = mul_sum_u8_i8(qx, load256(at(y, 4)));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc) + summs
}
