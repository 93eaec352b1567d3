//! Scalar float-vector operations for attention: dot, axpy, softmax on `f32` slices.
//!
//! They are the reference for the AVX2 versions and follow the same summation orders lane by
//! lane — the orders of llama.cpp's x86 CPU backend (ggml `vec_dot_f32`, `soft_max`), so that
//! statelm can reproduce its attention bit for bit:
//! - a dot keeps 4 × 8 partial sums (element `i` of each 32-element block goes to partial
//!   `i % 32`), reduced by [`reduce_dot_partials`], then adds the `n % 32` tail one FMA at a time;
//! - a softmax exponentiates blocks of 8 with [`exp_f32`] and adds each block's [`hsum8`] to an
//!   `f64` total (a short last block is padded with zeros).

/// `0x1.8p23`: adding it rounds an f32 in ±2²² to an integer.
const ROUND_MAGIC: f32 = 12582912.0;
/// `log2(e)` rounded to f32 (`0x1.715476p+0`).
const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b);
/// `ln 2` split in two: `0x1.62e4p-1` + `0x1.7f7d1cp-20`.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
/// Minimax polynomial for `exp(b) - 1` on `|b| <= ln2/2`: `P1 b + P2 b² + … + P5 b⁵`.
const EXP_P: [f32; 5] = [
    f32::from_bits(0x3f7f_fff6), // 0x1.ffffecp-1
    f32::from_bits(0x3eff_fedb), // 0x1.fffdb6p-2
    f32::from_bits(0x3e2a_af33), // 0x1.555e66p-3
    f32::from_bits(0x3d2b_9f17), // 0x1.573e2ep-5
    f32::from_bits(0x3c07_2010), // 0x1.0e4020p-7
];

/// `e^x` in f32 the way ggml's SIMD `expf` computes it (relative error ~1.5 ulp): `x = n ln2 + b`,
/// `e^x = 2ⁿ (1 + p(b))`, with explicit scaling where `2ⁿ` leaves the normal range; 0 for −∞.
pub fn exp_f32(x: f32) -> f32 {
    let z = x.mul_add(LOG2E, ROUND_MAGIC);
    let n = z - ROUND_MAGIC;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let hi = EXP_P[4].mul_add(b, EXP_P[3]);
    let lo = EXP_P[2].mul_add(b, EXP_P[1]);
    let j = hi.mul_add(u, lo).mul_add(u, EXP_P[0] * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// The sum of 8 lanes as `hsum` of an f32x8 register: `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`.
pub fn hsum8(l: &[f32; 8]) -> f32 {
    let t: [f32; 4] = std::array::from_fn(|i| l[i] + l[i + 4]);
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The reduction that ends [`dot_f32`]: partial `i` belongs to register `i / 8`, lane `i % 8`;
/// registers 0+2 and 1+3, then their sum, then the halves, then two horizontal adds.
pub fn reduce_dot_partials(p: &[f32; 32]) -> f32 {
    let z: [f32; 8] = std::array::from_fn(|l| (p[l] + p[16 + l]) + (p[8 + l] + p[24 + l]));
    let t: [f32; 4] = std::array::from_fn(|i| z[i] + z[i + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// `Σ a_i b_i` over the common length (see the module docs for the order).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !31;
    let mut acc = [0f32; 32];
    for (x, y) in a[..np].chunks_exact(32).zip(b[..np].chunks_exact(32)) {
        for i in 0..32 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut sum = reduce_dot_partials(&acc);
    for (x, y) in a[np..n].iter().zip(&b[np..n]) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// `y_i += alpha * x_i` (one FMA each) over the common length.
pub fn axpy_f32(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (yv, xv) in y.iter_mut().zip(x) {
        *yv = alpha.mul_add(*xv, *yv);
    }
}

/// `x = softmax(x)` in place (see the module docs for the order). A row needs one finite entry
/// (an all −∞ row gives NaN, as in ggml).
pub fn softmax_f32(x: &mut [f32]) {
    let Some(max) = x.iter().copied().reduce(f32::max) else {
        return;
    };
    let mut sum = 0f64;
    for block in x.chunks_mut(8) {
        let mut lanes = [0f32; 8];
        for (l, v) in lanes.iter_mut().zip(block.iter_mut()) {
            *v = exp_f32(*v - max);
            *l = *v;
        }
        sum += f64::from(hsum8(&lanes));
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// `g_i = silu(g_i) · u_i` over the common length, with SiLU as ggml's SIMD path computes it:
/// `x / (1 + exp_f32(0 − x))` (SwiGLU).
pub fn silu_mul_f32(g: &mut [f32], u: &[f32]) {
    for (gv, uv) in g.iter_mut().zip(u) {
        *gv = *gv / (1.0 + exp_f32(0.0 - *gv)) * uv;
    }
}

/// Widens IEEE halves to f32 over the common length (exact).
pub fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}
