//! Scalar dots of the 32-element block formats against Q8_0 / Q8_1.

use crate::formats::float::h2f;
use crate::formats::{blocks, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

#[inline(always)]
fn idot_signed(x: &[i8; 32], y: &[i8; 32]) -> i32 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

#[inline(always)]
fn idot_unsigned(x: &[u8; 32], y: &[i8; 32]) -> i32 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// Q8_0 weights · Q8_0 activations.
pub fn dot_q8_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ8_0>(w).zip(blocks::<BlockQ8_0>(a)) {
        sum += idot_signed(&x.qs, &y.qs) as f32 * (h2f(x.d) * h2f(y.d));
    }
    sum
}

/// Q4_0 weights · Q8_0 activations, in the order of ggml's repacked (8×8) kernels: one FMA of
/// each block's exact integer dot (the AVX2 kernel matches this bit for bit).
pub fn dot_q4_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ4_0>(w).zip(blocks::<BlockQ8_0>(a)) {
        let isum = idot_signed(&x.unpack(), &y.qs) as f32;
        sum = isum.mul_add(h2f(x.d) * h2f(y.d), sum);
    }
    sum
}

/// Q5_0 weights · Q8_0 activations.
pub fn dot_q5_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ5_0>(w).zip(blocks::<BlockQ8_0>(a)) {
        sum += idot_signed(&x.unpack(), &y.qs) as f32 * (h2f(x.d) * h2f(y.d));
    }
    sum
}

/// Q4_1 weights · Q8_1 activations: `d_x d_y Σ q_x q_y + m_x s_y` per block.
pub fn dot_q4_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ4_1>(w).zip(blocks::<BlockQ8_1>(a)) {
        let isum = idot_unsigned(&x.unpack(), &y.qs);
        sum += isum as f32 * (h2f(x.d) * h2f(y.d)) + h2f(x.m) * h2f(y.s);
    }
    sum
}

/// Q5_1 weights · Q8_1 activations.
pub fn dot_q5_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ5_1>(w).zip(blocks::<BlockQ8_1>(a)) {
        let isum = idot_unsigned(&x.unpack(), &y.qs);
        sum += isum as f32 * (h2f(x.d) * h2f(y.d)) + h2f(x.m) * h2f(y.s);
    }
    sum
}
