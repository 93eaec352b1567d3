//! Scalar dots of the K-quant formats against Q8_K.
//!
//! Per super-block the code·activation sum (and the min·bsum sum) is exact in
//! `i32`, then scaled once: `sum += d * isum - dmin * msum` with
//! `d = d_x * d_y`. The AVX2 kernels compute the same integers and the same
//! `f32` expression, so for K-quants the two agree bit for bit.

use crate::formats::float::h2f;
use crate::formats::{blocks, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};

/// `Σ_j scale_j · Σ_{l in group j} q_l y_l` over groups of `group` elements.
#[inline(always)]
fn grouped_isum<Q: Copy + Into<i32>, S: Copy + Into<i32>>(
    q: &[Q],
    y: &[i8],
    scales: &[S],
    group: usize,
) -> i32 {
    q.chunks_exact(group)
        .zip(y.chunks_exact(group))
        .zip(scales)
        .map(|((qg, yg), &s)| {
            let dot: i32 = qg
                .iter()
                .zip(yg)
                .map(|(&a, &b)| a.into() * i32::from(b))
                .sum();
            s.into() * dot
        })
        .sum()
}

/// Q2_K weights · Q8_K activations.
pub fn dot_q2_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ2K>(w).zip(blocks::<BlockQ8K>(a)) {
        let sc: [u8; 16] = x.scales.map(|s| s & 0x0f);
        let isum = grouped_isum(&x.unpack(), &y.qs, &sc, 16);
        let msum: i32 = x
            .scales
            .iter()
            .zip(&y.bsums)
            .map(|(&s, &b)| i32::from(s >> 4) * i32::from(b))
            .sum();
        let d = h2f(x.d) * y.d;
        let dmin = h2f(x.dmin) * y.d;
        sum += d * isum as f32 - dmin * msum as f32;
    }
    sum
}

/// Q3_K weights · Q8_K activations.
pub fn dot_q3_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ3K>(w).zip(blocks::<BlockQ8K>(a)) {
        let isum = grouped_isum(&x.unpack(), &y.qs, &x.unpack_scales(), 16);
        sum += (h2f(x.d) * y.d) * isum as f32;
    }
    sum
}

/// `Σ_j m_j (bsum_{2j} + bsum_{2j+1})`: the min correction of Q4_K/Q5_K.
#[inline(always)]
pub(crate) fn min_sum(mn: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    mn.iter()
        .enumerate()
        .map(|(j, &m)| i32::from(m) * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1])))
        .sum()
}

/// Q4_K weights · Q8_K activations.
pub fn dot_q4_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ4K>(w).zip(blocks::<BlockQ8K>(a)) {
        let (q, sc, mn) = x.unpack();
        let isum = grouped_isum(&q, &y.qs, &sc, 32);
        let msum = min_sum(&mn, &y.bsums);
        let d = h2f(x.d) * y.d;
        let dmin = h2f(x.dmin) * y.d;
        sum += d * isum as f32 - dmin * msum as f32;
    }
    sum
}

/// Q5_K weights · Q8_K activations.
pub fn dot_q5_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ5K>(w).zip(blocks::<BlockQ8K>(a)) {
        let (q, sc, mn) = x.unpack();
        let isum = grouped_isum(&q, &y.qs, &sc, 32);
        let msum = min_sum(&mn, &y.bsums);
        let d = h2f(x.d) * y.d;
        let dmin = h2f(x.dmin) * y.d;
        sum += d * isum as f32 - dmin * msum as f32;
    }
    sum
}

/// Q6_K weights · Q8_K activations.
pub fn dot_q6_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in blocks::<BlockQ6K>(w).zip(blocks::<BlockQ8K>(a)) {
        let isum = grouped_isum(&x.unpack(), &y.qs, &x.scales, 16);
        sum += (h2f(x.d) * y.d) * isum as f32;
    }
    sum
}
