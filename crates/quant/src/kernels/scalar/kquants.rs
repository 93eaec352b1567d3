//! Scalar dots of the K-quant formats against Q8_K.
//!
//! Per super-block the code·activation sum (and the min·bsum sum) is exact in
//! `i32`, then scaled once: `sum += d * isum - dmin * msum` with
//! `d = d_x * d_y`. The AVX2 kernels compute the same integers and the same
//! `f32` expression, so for K-quants the two agree bit for bit.

use super::vector::hsum8;
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

/// `Σ_j m_j (bsum_{2j} + bsum_{2j+1})`: the min correction of Q4_K/Q5_K (of a whole
/// super-block, or of the sub-blocks whose mins and 16-element bsums are given).
#[inline(always)]
pub(crate) fn min_sum(mn: &[u8], bsums: &[i16]) -> i32 {
    mn.iter()
        .enumerate()
        .map(|(j, &m)| i32::from(m) * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1])))
        .sum()
}

/// Q4_K weights · Q8_K activations, in the order of ggml's repacked GEMV (which llama.cpp uses
/// for Q4_K on x86): per super-block one FMA of the exact `isum` by `d_x·d_y` and one of the
/// exact min sum by `dmin_x·d_y`, into two sums subtracted at the end.
pub fn dot_q4_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (x, y) in blocks::<BlockQ4K>(w).zip(blocks::<BlockQ8K>(a)) {
        let (q, sc, mn) = x.unpack();
        let isum = grouped_isum(&q, &y.qs, &sc, 32);
        let msum = min_sum(&mn, &y.bsums);
        acc = (isum as f32).mul_add(h2f(x.d) * y.d, acc);
        acc_min = (msum as f32).mul_add(h2f(x.dmin) * y.d, acc_min);
    }
    acc - acc_min
}

/// Q4_K weights · four Q8_K activation vectors in the order of ggml's 4-row repacked GEMM
/// (llama.cpp's prefill): like [`dot_q4_k_q8_k`] but one FMA per 64-element chunk (two
/// sub-blocks), so it is not bit-identical to four single dots.
pub fn dot4_q4_k_q8_k(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    a.map(|a| {
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (x, y) in blocks::<BlockQ4K>(w).zip(blocks::<BlockQ8K>(a)) {
            let (q, sc, mn) = x.unpack();
            let (d, dmin) = (h2f(x.d) * y.d, h2f(x.dmin) * y.d);
            for c in 0..4 {
                let r = 64 * c..64 * (c + 1);
                let isum = grouped_isum(&q[r.clone()], &y.qs[r], &sc[2 * c..2 * c + 2], 32);
                let msum = min_sum(&mn[2 * c..2 * c + 2], &y.bsums[4 * c..4 * c + 4]);
                acc = (isum as f32).mul_add(d, acc);
                acc_min = (msum as f32).mul_add(dmin, acc_min);
            }
        }
        acc - acc_min
    })
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

/// Q6_K weights · Q8_K activations, in the order of ggml's AVX2 kernel: eight i32 lanes per
/// super-block (lane `k` holds bytes `4k..4k+4` of every 32-element group times that group's
/// scale for its half, on unsigned codes, minus the code offset `32 Σ sc·bsum` of sub-blocks
/// `2k, 2k+1`), each lane scaled and accumulated in f32 across super-blocks, then [`hsum8`].
pub fn dot_q6_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in blocks::<BlockQ6K>(w).zip(blocks::<BlockQ8K>(a)) {
        let q = x.unpack();
        let d = y.d * h2f(x.d);
        for (k, lane) in acc.iter_mut().enumerate() {
            let mut sum = 0i32;
            for g in 0..8 {
                let s = i32::from(x.scales[2 * g + k / 4]);
                let bytes = 32 * g + 4 * k..32 * g + 4 * k + 4;
                let dot: i32 = q[bytes.clone()]
                    .iter()
                    .zip(&y.qs[bytes])
                    .map(|(&c, &v)| (i32::from(c) + 32) * i32::from(v))
                    .sum();
                sum += s * dot;
            }
            let offset = |j: usize| i32::from(y.bsums[j]) * i32::from(x.scales[j]);
            sum -= 32 * (offset(2 * k) + offset(2 * k + 1));
            *lane = d.mul_add(sum as f32, *lane);
        }
    }
    hsum8(&acc)
}
