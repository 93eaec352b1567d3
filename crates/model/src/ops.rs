//! Element-wise operations of the decoder: norms, GELU, log-sum-exp (softmax and SwiGLU are
//! `statelm_quant` kernels).

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares accumulated in f64 (Gemma's residual stream
/// has values in the thousands; an f32 sum of them loses digits the logits notice).
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    // As ggml: each square rounded to f32, the sum in f64, the mean rounded to f32.
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (ss / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `out = x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let inv = rms_scale(x, eps);
    for ((o, v), g) in out.iter_mut().zip(x).zip(w) {
        *o = v * inv * g;
    }
}

/// In-place [`rms_norm`].
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let inv = rms_scale(x, eps);
    for (v, g) in x.iter_mut().zip(w) {
        *v = *v * inv * g;
    }
}

/// GELU, tanh approximation (as Gemma and ggml use).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    // `1 + a·x·x` as one FMA, as GCC contracts ggml's expression.
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (0.044_715 * x).mul_add(x, 1.0)).tanh())
}

/// GELU as ggml's CPU backend computes it: the input rounded to f16, then a table of f16
/// results (exact to the table's rounding). Gemma 3 270M is so sensitive to this rounding that
/// matching it halves the logit difference to llama.cpp.
pub fn gelu_tanh_f16(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let h = half::f16::from_f32(x);
        half::f16::from_bits(gelu_f16_table()[usize::from(h.to_bits())]).to_f32()
    }
}

/// GELU of every f16 input, as f16 bits (like ggml's table: 128 KiB, built once per process
/// on first use; a pure function of its index, so sharing it is safe).
fn gelu_f16_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Box<[u16]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                let x = half::f16::from_bits(bits).to_f32();
                half::f16::from_f32(gelu_tanh(x)).to_bits()
            })
            .collect()
    })
}

/// `log(sum(exp(x)))`, computed stably.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    max + sum.ln() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_table_matches_direct_computation() {
        for i in -1300..1300 {
            let x = i as f32 * 0.00731;
            let direct = half::f16::from_f32(gelu_tanh(half::f16::from_f32(x).to_f32())).to_f32();
            assert_eq!(gelu_tanh_f16(x).to_bits(), direct.to_bits(), "x = {x}");
        }
        assert_eq!(gelu_tanh_f16(-11.0), 0.0);
        assert_eq!(gelu_tanh_f16(12.5), 12.5);
    }

    #[test]
    fn activations() {
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        // SiLU runs as a kernel (SwiGLU, `silu(g) · u`).
        let mut g = [1.0f32];
        statelm_quant::Kernels::global().silu_mul_f32(&mut g, &[1.0]);
        assert!((g[0] - 0.731_058_6).abs() < 1e-6);
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f32.ln()).abs() < 1e-6);
    }
}
