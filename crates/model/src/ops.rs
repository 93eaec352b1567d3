//! Element-wise operations of the decoder that are not `statelm_quant` kernels. The RMS norm,
//! GELU, softmax and SwiGLU are kernels (see [`statelm_quant::Kernels`]); these wrappers keep
//! the decoder's calls short.

use statelm_quant::Kernels;

/// `out = x / sqrt(mean(x²) + eps) * w` (see [`Kernels::rms_norm`]).
pub fn rms_norm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    Kernels::global().rms_norm(out, x, w, eps);
}

/// In-place [`rms_norm`].
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    Kernels::global().rms_norm_in_place(x, w, eps);
}

/// `log(sum(exp(x)))`, computed stably.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    max + sum.ln() as f32
}

/// Resizes `v` to `n` elements (allocation only grows) and returns them.
pub(crate) fn fit(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations() {
        // SiLU and GELU run as kernels (SwiGLU `silu(g) · u`, GeGLU `gelu(g) · u`).
        let mut g = [1.0f32];
        Kernels::global().silu_mul_f32(&mut g, &[1.0]);
        assert!((g[0] - 0.731_058_6).abs() < 1e-6);
        let mut g = [1.0f32];
        Kernels::global().gelu_mul_f32(&mut g, &[1.0]);
        assert!((g[0] - 0.841_192).abs() < 1e-3);
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f32.ln()).abs() < 1e-6);
    }
}
