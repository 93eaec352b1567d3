//! Scalar float-vector operations for attention: dot and axpy on `f32` slices.
//!
//! Eight partial sums, like one AVX register, so the compiler vectorizes the
//! dot and the rounding stays close to the SIMD version.

/// `Σ a_i b_i` over the common length.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y_i += alpha * x_i` over the common length.
pub fn axpy_f32(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (yv, xv) in y.iter_mut().zip(x) {
        *yv += alpha * xv;
    }
}
