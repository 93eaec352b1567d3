//! Rotary position embeddings.
//!
//! Pair `i` of a head of dimension `d` turns by `pos * scale * base^(-2i/d)` radians. Turning a
//! stored key by `new - old` moves it to a new position, which is how a context shift keeps the
//! cache without recomputing it.

use crate::config::RopeStyle;

/// Cosines and sines of one position, for one base.
#[derive(Debug, Clone, Default)]
pub struct RopeAngles {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeAngles {
    /// Fills the table for position `pos` (may be negative: a relative turn).
    pub fn compute(&mut self, pos: f32, head_dim: usize, base: f32, scale: f32) {
        let half = head_dim / 2;
        self.cos.resize(half, 0.0);
        self.sin.resize(half, 0.0);
        let step = base.powf(-2.0 / head_dim as f32);
        let mut theta = pos * scale;
        for i in 0..half {
            let (s, c) = theta.sin_cos();
            self.cos[i] = c;
            self.sin[i] = s;
            theta *= step;
        }
    }

    /// Rotates one head in place.
    pub fn apply(&self, head: &mut [f32], style: RopeStyle) {
        let half = head.len() / 2;
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

/// Rotates one head by `pos` positions (a one-off; the forward pass reuses [`RopeAngles`]).
pub fn rotate(head: &mut [f32], pos: f32, base: f32, scale: f32, style: RopeStyle) {
    let mut a = RopeAngles::default();
    a.compute(pos, head.len(), base, scale);
    a.apply(head, style);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_compose() {
        for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
            let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut a = x.clone();
            rotate(&mut a, 100.0, 10_000.0, 1.0, style);
            rotate(&mut a, -40.0, 10_000.0, 1.0, style);
            let mut b = x.clone();
            rotate(&mut b, 60.0, 10_000.0, 1.0, style);
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() < 1e-4, "{style:?}: {p} vs {q}");
            }
            let norm = |v: &[f32]| v.iter().map(|t| t * t).sum::<f32>();
            assert!((norm(&a) - norm(&x)).abs() < 1e-3);
        }
    }
}
