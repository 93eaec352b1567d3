//! Element-wise reference kernels of the decoder beside the attention ones: the RMS norm, GELU
//! (as ggml's CPU backend computes it) and the f32 → f16 narrowing of the KV cache.

/// `1 / sqrt(mean(x²) + eps)` as ggml computes it: each square rounded to f32, the sum in f64
/// (Gemma's residual stream has values in the thousands; an f32 sum of them loses digits the
/// logits notice), the mean rounded to f32.
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    rms_inv(ss, x.len(), eps)
}

/// `1 / sqrt(ss / n + eps)` with the mean rounded to f32: the end of [`rms_scale`].
pub(crate) fn rms_inv(ss: f64, n: usize, eps: f32) -> f32 {
    let mean = (ss / n as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `x = src / sqrt(mean(src²) + eps) · w` over the common length, with `src = x` when `None`
/// (each element `v · inv · w`, left to right).
pub fn rms_norm(x: &mut [f32], src: Option<&[f32]>, w: &[f32], eps: f32) {
    match src {
        Some(src) => {
            let inv = rms_scale(src, eps);
            for ((o, v), g) in x.iter_mut().zip(src).zip(w) {
                *o = v * inv * g;
            }
        }
        None => {
            let inv = rms_scale(x, eps);
            for (v, g) in x.iter_mut().zip(w) {
                *v = *v * inv * g;
            }
        }
    }
}

/// GELU, tanh approximation (as Gemma and ggml use).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    // `1 + a·x·x` as one FMA, as GCC contracts ggml's expression.
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (0.044_715 * x).mul_add(x, 1.0)).tanh())
}

/// GELU as ggml's CPU backend computes it: the input rounded to f16, then a table of f16
/// results (exact to the table's rounding); 0 at or below −10 and `x` at or above 10. Gemma 3
/// 270M is so sensitive to this rounding that matching it halves the logit difference to
/// llama.cpp.
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
pub(crate) fn gelu_f16_table() -> &'static [u16; 65536] {
    static TABLE: std::sync::OnceLock<Box<[u16; 65536]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0u16; 65536]);
        for (bits, out) in (0..=u16::MAX).zip(t.iter_mut()) {
            let x = half::f16::from_bits(bits).to_f32();
            *out = half::f16::from_f32(gelu_tanh(x)).to_bits();
        }
        t
    })
}

/// `g_i = gelu_tanh_f16(g_i) · u_i` over the common length (GeGLU).
pub fn gelu_mul_f32(g: &mut [f32], u: &[f32]) {
    for (gv, uv) in g.iter_mut().zip(u) {
        *gv = gelu_tanh_f16(*gv) * uv;
    }
}

/// Narrows f32 to IEEE halves over the common length, rounding to nearest, ties to even
/// (overflow to ±∞; the f16 KV cache).
pub fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    dst[..n].convert_from_f32_slice(&src[..n]);
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
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
    }

    #[test]
    fn rms_norm_in_place_equals_out_of_place() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 31.7).collect();
        let w: Vec<f32> = (0..37).map(|i| 1.0 + i as f32 / 50.0).collect();
        let mut out = vec![0f32; 37];
        rms_norm(&mut out, Some(&x), &w, 1e-6);
        let mut inplace = x.clone();
        rms_norm(&mut inplace, None, &w, 1e-6);
        assert_eq!(out, inplace);
        let rms = (x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / 37.0).sqrt();
        assert!((f64::from(out[0]) - f64::from(x[0] * w[0]) / rms).abs() < 1e-4);
    }
}
