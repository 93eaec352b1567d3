//! AVX2 dots of float weights against f32 activations (four f32x8 accumulators).

use super::{at, hsum_ps, load128, load_f32x8};
use crate::formats::float::{bf16_to_f32, f16_to_f32};
use std::arch::x86_64::*;

#[inline(always)]
fn f32_at(c: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(*at::<4>(c, 4 * i))
}

/// Shared loop: `load(chunk, k)` gives weights `8k..8k+8` of a 32-weight chunk
/// of `wbytes * 32` bytes; `scalar` converts one tail weight.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_generic(
    w: &[u8],
    a: &[u8],
    wbytes: usize,
    load: impl Fn(&[u8], usize) -> __m256,
    scalar: impl Fn(&[u8], usize) -> f32,
) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut wc = w.chunks_exact(32 * wbytes);
    let mut ac = a.chunks_exact(128);
    for (x, y) in wc.by_ref().zip(ac.by_ref()) {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm256_fmadd_ps(load(x, k), load_f32x8(at(y, 32 * k)), *s);
        }
    }
    let (wr, ar) = (wc.remainder(), ac.remainder());
    let mut tail = 0f32;
    for i in 0..(wr.len() / wbytes).min(ar.len() / 4) {
        tail += scalar(wr, i) * f32_at(ar, i);
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum_ps(s) + tail
}

/// F32 weights · f32 activations.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(w, a, 4, |x, k| load_f32x8(at(x, 32 * k)), f32_at)
}

/// F16 weights · f32 activations (F16C conversion).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(
        w,
        a,
        2,
        |x, k| _mm256_cvtph_ps(load128(at(x, 16 * k))),
        |c, i| f16_to_f32(u16::from_le_bytes(*at::<2>(c, 2 * i))),
    )
}

/// BF16 weights · f32 activations (bf16 is the top half of an f32).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(
        w,
        a,
        2,
        |x, k| {
            let h = _mm256_cvtepu16_epi32(load128(at(x, 16 * k)));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h))
        },
        |c, i| bf16_to_f32(u16::from_le_bytes(*at::<2>(c, 2 * i))),
    )
}
