//! AVX2+FMA float-vector operations for attention: dot and axpy on `f32` slices.

use super::hsum_ps;
use std::arch::x86_64::*;

/// Loads 8 f32 from `x[off..off + 8]` (bounds-checked).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load8(x: &[f32], off: usize) -> __m256 {
    let s: &[f32; 8] = x[off..off + 8].try_into().expect("8 floats in bounds");
    super::load_ps(s)
}

/// `Σ a_i b_i` over the common length (four f32x8 accumulators, then a scalar tail).
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm256_fmadd_ps(load8(a, i + 8 * k), load8(b, i + 8 * k), *s);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load8(a, i), load8(b, i), acc[0]);
        i += 8;
    }
    let tail: f32 = a[i..n].iter().zip(&b[i..n]).map(|(x, y)| x * y).sum();
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum_ps(s) + tail
}

/// `y_i += alpha * x_i` over the common length.
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_f32(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let av = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        let out: &mut [f32; 8] = (&mut y[i..i + 8]).try_into().expect("8 floats in bounds");
        let r = _mm256_fmadd_ps(av, load8(x, i), super::load_ps(out));
        // SAFETY: `out` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), r) };
        i += 8;
    }
    for (yv, xv) in y[i..n].iter_mut().zip(&x[i..n]) {
        *yv = alpha.mul_add(*xv, *yv);
    }
}
