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

/// `Σ a_i b_i` over the common length, in the order of [`crate::kernels::scalar::dot_f32`]
/// (four f32x8 accumulators over 32-element blocks, ggml's reduction, an FMA tail).
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !31;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (k, s) in acc.iter_mut().enumerate() {
            *s = _mm256_fmadd_ps(load8(a, i + 8 * k), load8(b, i + 8 * k), *s);
        }
    }
    let z = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps::<1>(z));
    let t = _mm_hadd_ps(t, t);
    let mut sum = _mm_cvtss_f32(_mm_hadd_ps(t, t));
    for (x, y) in a[np..n].iter().zip(&b[np..n]) {
        sum = x.mul_add(*y, sum);
    }
    sum
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

/// Widens IEEE halves to f32 over the common length (exact), eight per
/// `vcvtph2ps`.
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    let n = dst.len().min(src.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    let mut d8 = dst.chunks_exact_mut(8);
    let mut s8 = src.chunks_exact(8);
    for (d, s) in (&mut d8).zip(&mut s8) {
        // SAFETY: `s` is 8 readable halves (16 bytes) and `d` 8 writable f32;
        // `loadu`/`storeu` have no alignment requirement.
        unsafe {
            let h = _mm_loadu_si128(s.as_ptr().cast());
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for (d, s) in d8.into_remainder().iter_mut().zip(s8.remainder()) {
        *d = s.to_f32();
    }
}

/// `e^x` lane-wise, in the order of [`crate::kernels::scalar::exp_f32`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp_ps(x: __m256) -> __m256 {
    let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let r = _mm256_set1_ps(12582912.0);
    let z = _mm256_fmadd_ps(x, f(0x3fb8_aa3b), r);
    let n = _mm256_sub_ps(z, r);
    let b = _mm256_fnmadd_ps(n, f(0x35bf_be8e), _mm256_fnmadd_ps(n, f(0x3f31_7200), x));
    let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
    let k = _mm256_castsi256_ps(_mm256_add_epi32(
        e,
        _mm256_castps_si256(_mm256_set1_ps(1.0)),
    ));
    let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
    let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
    let u = _mm256_mul_ps(b, b);
    let hi = _mm256_fmadd_ps(f(0x3c07_2010), b, f(0x3d2b_9f17));
    let lo = _mm256_fmadd_ps(f(0x3e2a_af33), b, f(0x3eff_fedb));
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(hi, u, lo),
        u,
        _mm256_mul_ps(f(0x3f7f_fff6), b),
    );
    if _mm256_movemask_ps(c) == 0 {
        return _mm256_fmadd_ps(j, k, k);
    }
    let g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
        _mm256_set1_epi32(0x8200_0000u32 as i32),
    );
    let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
    let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
    let scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    let normal = _mm256_fmadd_ps(k, j, k);
    let mid = _mm256_blendv_ps(normal, scaled, c);
    _mm256_blendv_ps(mid, _mm256_mul_ps(s1, s1), d)
}

/// `x = softmax(x)` in place, in the order of [`crate::kernels::scalar::softmax_f32`].
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax_f32(x: &mut [f32]) {
    let Some(max) = x.iter().copied().reduce(f32::max) else {
        return;
    };
    let m = _mm256_set1_ps(max);
    let mut sum = 0f64;
    for block in x.chunks_mut(8) {
        let mut lanes = [f32::NEG_INFINITY; 8];
        lanes[..block.len()].copy_from_slice(block);
        let v = exp_ps(_mm256_sub_ps(super::load_ps(&lanes), m));
        // SAFETY: `lanes` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        block.copy_from_slice(&lanes[..block.len()]);
        sum += f64::from(hsum_ps(v));
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// `g_i = silu(g_i) · u_i` over the common length, as [`crate::kernels::scalar::silu_mul_f32`].
///
/// # Safety
/// CPU must support avx2+fma+f16c.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu_mul_f32(g: &mut [f32], u: &[f32]) {
    let n = g.len().min(u.len());
    let one = _mm256_set1_ps(1.0);
    let mut i = 0;
    while i + 8 <= n {
        let out: &mut [f32; 8] = (&mut g[i..i + 8]).try_into().expect("8 floats in bounds");
        let x = super::load_ps(out);
        let e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
        let r = _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), load8(u, i));
        // SAFETY: `out` is 8 writable f32; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), r) };
        i += 8;
    }
    crate::kernels::scalar::silu_mul_f32(&mut g[i..n], &u[i..n]);
}
