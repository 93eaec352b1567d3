//! Element-wise operations of the decoder: norms, activations, softmax.

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares accumulated in f64 (Gemma's residual stream
/// has values in the thousands; an f32 sum of them loses digits the logits notice).
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
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
        *v *= inv * g;
    }
}

/// `x * sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (as Gemma and ggml use).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x)).tanh())
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
        let h = half::f16::from_f32(x).to_f32();
        half::f16::from_f32(gelu_tanh(h)).to_f32()
    }
}

/// In-place softmax; returns nothing for an empty slice.
pub fn softmax(x: &mut [f32]) {
    let Some(max) = x.iter().copied().reduce(f32::max) else {
        return;
    };
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `a · b`, with several accumulators so the compiler vectorizes it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
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

/// `y += a * x`.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yv, xv) in y.iter_mut().zip(x) {
        *yv += a * xv;
    }
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
    fn softmax_sums_to_one() {
        let mut v = vec![1.0, 2.0, 3.0, -1e9];
        softmax(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(v[3], 0.0);
    }

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.1).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }

    #[test]
    fn activations() {
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f32.ln()).abs() < 1e-6);
    }
}
