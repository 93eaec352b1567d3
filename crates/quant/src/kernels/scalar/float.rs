//! Scalar dots of float weights against f32 activations (little-endian bytes).
//!
//! Eight independent partial sums (like one AVX register) keep the rounding
//! error close to the SIMD versions and let the compiler vectorize.

use crate::formats::float::{bf16_to_f32, f16_to_f32};

#[inline(always)]
fn f32_at(c: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]])
}

#[inline(always)]
fn dot_generic(w: &[u8], a: &[u8], wbytes: usize, load: impl Fn(&[u8], usize) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut wc = w.chunks_exact(8 * wbytes);
    let mut ac = a.chunks_exact(32);
    for (x, y) in wc.by_ref().zip(ac.by_ref()) {
        for (i, s) in acc.iter_mut().enumerate() {
            *s += load(x, i) * f32_at(y, i);
        }
    }
    let mut tail = 0f32;
    let (wr, ar) = (wc.remainder(), ac.remainder());
    for i in 0..(wr.len() / wbytes).min(ar.len() / 4) {
        tail += load(wr, i) * f32_at(ar, i);
    }
    acc.iter().sum::<f32>() + tail
}

/// F32 weights · f32 activations.
pub fn dot_f32_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(w, a, 4, f32_at)
}

/// F16 weights · f32 activations.
pub fn dot_f16_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(w, a, 2, |c, i| {
        f16_to_f32(u16::from_le_bytes([c[2 * i], c[2 * i + 1]]))
    })
}

/// BF16 weights · f32 activations.
pub fn dot_bf16_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_generic(w, a, 2, |c, i| {
        bf16_to_f32(u16::from_le_bytes([c[2 * i], c[2 * i + 1]]))
    })
}
