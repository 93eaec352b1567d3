//! AVX2 dots of the 32-element block formats against Q8_0 / Q8_1.
//!
//! Each block's integer dot is exact (`maddubs` + `madd` without saturation
//! for these code ranges); blocks are scaled by `d_x * d_y` and accumulated in
//! an f32x8 register per activation vector. The `dot4_`
//! kernels decode each weight block once for four activation vectors (matmul).

use super::{
    at, bits_32, f16c_mul, hsum_epi32, hsum_ps, le16, load256, mul_sum_i8, mul_sum_u8_i8,
    nibbles_32, prefetch_ahead,
};
use std::arch::x86_64::*;

/// Decodes a Q8_0 block: (f16 scale bits, 32 signed codes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q8_0(x: &[u8]) -> (u16, __m256i) {
    (le16(x, 0), load256(at(x, 2)))
}

/// Decodes a Q4_0 block: (f16 scale bits, 32 codes minus 8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q4_0(x: &[u8]) -> (u16, __m256i) {
    let q = _mm256_sub_epi8(nibbles_32(at(x, 2)), _mm256_set1_epi8(8));
    (le16(x, 0), q)
}

/// Decodes a Q5_0 block: (f16 scale bits, 32 codes minus 16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_q5_0(x: &[u8]) -> (u16, __m256i) {
    let qh = u32::from_le_bytes(*at::<4>(x, 2));
    // code - 16 == nibble | 0xf0 (as i8) when the fifth bit is clear, else nibble.
    let high = _mm256_andnot_si256(bits_32(qh), _mm256_set1_epi8(0xf0u8 as i8));
    (le16(x, 0), _mm256_or_si256(nibbles_32(at(x, 6)), high))
}

/// Defines the one-vector and four-vector kernels of a Q8_0-paired format.
macro_rules! q8_0_pair {
    ($one:ident, $four:ident, $bytes:expr, $decode:ident, $fma:literal, $name:literal) => {
        #[doc = concat!($name, " weights · Q8_0 activations.")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $one(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            dot_q8_0_acts::<1, $fma>(w, [a], $bytes, |x| $decode(x))[0]
        }

        #[doc = concat!($name, " weights · four Q8_0 activation vectors (bit-identical to four single dots).")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $four(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            dot_q8_0_acts::<4, $fma>(w, a, $bytes, |x| $decode(x))
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
    ($tile:ident, $bytes:expr, $decode:ident, $fma:literal, $name:literal) => {
        #[doc = concat!($name, " weights: two rows · four Q8_0 activation vectors (bit-identical to eight single dots).")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $tile(_n: usize, w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
            tile_q8_0_acts::<2, 4, $fma>(w, a, $bytes, |x| $decode(x))
        }
    };
}

q8_0_tile!(tile_q8_0_q8_0, 34, decode_q8_0, false, "Q8_0");
q8_0_tile!(tile_q4_0_q8_0, 18, decode_q4_0, true, "Q4_0");
q8_0_tile!(tile_q5_0_q8_0, 22, decode_q5_0, false, "Q5_0");

/// One half-precision value as f32 (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn half_to_f32(h: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// Dots `R` weight rows (blocks of `wb` bytes) against `V` Q8_0 vectors: the
/// register tile behind matmul. Each weight block is decoded once for all
/// vectors and each activation block loaded once for all rows; every
/// (row, vector) pair sees exactly the operations of [`dot_q8_0_acts`]
/// (`d_x * d_y` rounded to f32, one FMA per block into its own f32x8, then
/// [`hsum_ps`]), so the results are bit-identical to single dots.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_q8_0_acts<const R: usize, const V: usize, const BLOCK_FMA: bool>(
    w: [&[u8]; R],
    a: [&[u8]; V],
    wb: usize,
    decode: impl Fn(&[u8]) -> (u16, __m256i),
) -> [[f32; V]; R] {
    let nb = a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / wb)),
        |m, v| m.min(v.len() / 34),
    );
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    let mut acc_s = [[0f32; V]; R];
    let ones = _mm256_set1_epi16(1);
    for b in 0..nb {
        let mut dx = [0f32; R];
        let mut qx = [_mm256_setzero_si256(); R];
        let mut ax = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let x = &w[r][b * wb..(b + 1) * wb];
            if b % 2 == 0 {
                prefetch_ahead(x, 0);
            }
            let (d, q) = decode(x);
            dx[r] = half_to_f32(d);
            qx[r] = q;
            ax[r] = _mm256_sign_epi8(q, q);
        }
        for v in 0..V {
            let y = &a[v][b * 34..(b + 1) * 34];
            let dy = half_to_f32(le16(y, 0));
            let qy = load256(at(y, 2));
            for r in 0..R {
                let sy = _mm256_sign_epi8(qy, qx[r]);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[r], sy), ones);
                if BLOCK_FMA {
                    let isum = hsum_epi32(p) as f32;
                    acc_s[r][v] = isum.mul_add(dx[r] * dy, acc_s[r][v]);
                } else {
                    let d = _mm256_set1_ps(dx[r] * dy);
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

/// Dots weight blocks of `wb` bytes against `V` Q8_0 vectors. Each weight
/// block is decoded once and accumulated into one f32x8 register per vector
/// (the vectors give the FMA chains independent work), so every vector sees
/// exactly the same operations whatever `V` is.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q8_0_acts<const V: usize, const BLOCK_FMA: bool>(
    w: &[u8],
    a: [&[u8]; V],
    wb: usize,
    decode: impl Fn(&[u8]) -> (u16, __m256i),
) -> [f32; V] {
    let nb = a.iter().fold(w.len() / wb, |m, v| m.min(v.len() / 34));
    let mut ys = a.map(|v| v[..nb * 34].chunks_exact(34));
    let mut acc = [_mm256_setzero_ps(); V];
    let mut acc_s = [0f32; V];
    for (b, x) in w[..nb * wb].chunks_exact(wb).enumerate() {
        if b % 2 == 0 {
            prefetch_ahead(x, 0);
        }
        let (dx, qx) = decode(x);
        for v in 0..V {
            let Some(y) = ys[v].next() else { break };
            let d = f16c_mul(dx, le16(y, 0));
            let p = mul_sum_i8(qx, load256(at(y, 2)));
            if BLOCK_FMA {
                acc_s[v] = (hsum_epi32(p) as f32).mul_add(d, acc_s[v]);
            } else {
                acc[v] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc[v]);
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
