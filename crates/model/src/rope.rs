//! Rotary position embeddings, as ggml's `rope_ext` computes them (YaRN terms included).
//!
//! Pair `i` of the `dim` rotated dimensions of a head turns by
//! `θ_i = pos · base^(-2i/dim) / factor_i`, interpolated by the frequency scale (YaRN mixes
//! interpolation and extrapolation per pair), and the rotation is multiplied by the magnitude
//! `mscale`. Dimensions past `dim` (partial rotary) pass through. Turning a stored key by
//! `new - old` with unit magnitude moves it to a new position, which is how a context shift
//! keeps the cache without recomputing it.

use crate::config::RopeStyle;

/// One layer's rotary parameters, resolved for one state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams<'a> {
    /// Rotated dimensions of a head.
    pub dim: usize,
    /// Base frequency.
    pub base: f32,
    /// Frequency scale (interpolation).
    pub freq_scale: f32,
    /// YaRN's extrapolation mix (0: none).
    pub ext_factor: f32,
    /// Magnitude of the rotation.
    pub attn_factor: f32,
    /// YaRN's correction range, in pairs.
    pub corr_dims: [f32; 2],
    /// Per-pair frequency divisors.
    pub factors: Option<&'a [f32]>,
}

impl RopeParams<'_> {
    /// Plain RoPE over `dim` dimensions (no scaling, factors or YaRN).
    pub fn plain(dim: usize, base: f32) -> RopeParams<'static> {
        RopeParams {
            dim,
            base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            corr_dims: [0.0, 0.0],
            factors: None,
        }
    }
}

/// ggml's YaRN correction range: the pairs whose wavelengths fall between `beta_fast` and
/// `beta_slow` rotations over the original context.
pub fn yarn_corr_dims(dim: usize, n_ctx_orig: usize, base: f32, fast: f32, slow: f32) -> [f32; 2] {
    let corr = |n_rot: f32| {
        dim as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = corr(fast).floor();
    let end = corr(slow).ceil();
    [start.max(0.0), end.min(dim as f32 - 1.0)]
}

fn yarn_ramp(low: f32, high: f32, pair: usize) -> f32 {
    let y = (pair as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Cosines and sines of one position, for one layer's parameters.
#[derive(Debug, Clone, Default)]
pub struct RopeAngles {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeAngles {
    /// Fills the table for position `pos` (may be negative: a relative turn). With
    /// `unit_magnitude` the rotation keeps lengths (a context shift re-rotating stored keys).
    pub fn compute(&mut self, pos: f32, p: &RopeParams<'_>, unit_magnitude: bool) {
        let half = p.dim / 2;
        self.cos.resize(half, 0.0);
        self.sin.resize(half, 0.0);
        let theta_scale = p.base.powf(-2.0 / p.dim as f32);
        let mut mscale = if unit_magnitude { 1.0 } else { p.attn_factor };
        if p.ext_factor != 0.0 && !unit_magnitude {
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        let mut theta = pos;
        for i in 0..half {
            let extrap = match p.factors {
                Some(f) => theta / f[i],
                None => theta,
            };
            let interp = p.freq_scale * extrap;
            let angle = if p.ext_factor != 0.0 {
                let mix = yarn_ramp(p.corr_dims[0], p.corr_dims[1], i) * p.ext_factor;
                interp * (1.0 - mix) + extrap * mix
            } else {
                interp
            };
            let (s, c) = angle.sin_cos();
            self.cos[i] = c * mscale;
            self.sin[i] = s * mscale;
            theta *= theta_scale;
        }
    }

    /// Rotates the first `2 × pairs` dimensions of one head in place (the rest pass through).
    pub fn apply(&self, head: &mut [f32], style: RopeStyle) {
        let dim = self.cos.len() * 2;
        let head = &mut head[..dim];
        let half = dim / 2;
        match style {
            RopeStyle::Neox => {
                let (lo, hi) = head.split_at_mut(half);
                for i in 0..half {
                    (lo[i], hi[i]) = rotate_pair(lo[i], hi[i], self.cos[i], self.sin[i]);
                }
            }
            RopeStyle::Interleaved => {
                for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                    (pair[0], pair[1]) = rotate_pair(pair[0], pair[1], self.cos[i], self.sin[i]);
                }
            }
        }
    }
}

/// `(x0·cos − x1·sin, x0·sin + x1·cos)` with the rounding llama.cpp's x86 build has: its C
/// compiler contracts each line into one fused multiply-add of the first product onto the
/// rounded second (`fma(x0, cos, −(x1·sin))`). Verified bit for bit against its intermediates.
#[inline]
fn rotate_pair(x0: f32, x1: f32, cos: f32, sin: f32) -> (f32, f32) {
    (x0.mul_add(cos, -(x1 * sin)), x0.mul_add(sin, x1 * cos))
}

/// Rotates one head by `pos` positions with unit magnitude (a one-off; the forward pass reuses
/// [`RopeAngles`]).
pub fn rotate(head: &mut [f32], pos: f32, p: &RopeParams<'_>, style: RopeStyle) {
    let mut a = RopeAngles::default();
    a.compute(pos, p, true);
    a.apply(head, style);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_compose() {
        let factors: Vec<f32> = (0..16).map(|i| 1.0 + i as f32 * 0.5).collect();
        let yarn = RopeParams {
            dim: 32,
            base: 10_000.0,
            freq_scale: 0.25,
            ext_factor: 1.0,
            attn_factor: 1.3,
            corr_dims: yarn_corr_dims(32, 64, 10_000.0, 32.0, 1.0),
            factors: Some(&factors),
        };
        for p in [
            RopeParams::plain(64, 10_000.0),
            RopeParams::plain(32, 10_000.0),
            yarn,
        ] {
            for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
                let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
                let mut a = x.clone();
                rotate(&mut a, 100.0, &p, style);
                rotate(&mut a, -40.0, &p, style);
                let mut b = x.clone();
                rotate(&mut b, 60.0, &p, style);
                for (u, v) in a.iter().zip(&b) {
                    assert!((u - v).abs() < 1e-4, "{style:?}: {u} vs {v}");
                }
                let norm = |v: &[f32]| v.iter().map(|t| t * t).sum::<f32>();
                assert!((norm(&a) - norm(&x)).abs() < 1e-3);
                // Partial rotary: the dimensions past `dim` pass through.
                assert_eq!(a[p.dim..], x[p.dim..]);
            }
        }
    }
}
