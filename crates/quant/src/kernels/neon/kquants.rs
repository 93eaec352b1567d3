//! NEON dots of K-quant weights against Q8_K activations.
//!
//! Codes are unsigned (0..=15, 0..=31, 0..=63), so they are valid signed bytes for
//! [`super::idot16`]; sub-block scales multiply whole i32 lanes (`mla`). The integer sums are
//! exact and the f32 accumulation follows the scalar kernels (and the AVX2 ones) exactly:
//! Q4_K one FMA per super-block (per 64-element chunk in the four-vector kernel), Q6_K eight
//! f32 lanes, Q5_K `d·isum − dmin·msum` per super-block — bit for bit.

use super::{h2f, hsum8, idot16, load_s8, load_u8, prefetch_ahead};
use crate::formats::q4_k::unpack_scales;
use crate::kernels::scalar::min_sum;
use crate::kernels::{at, blocks, q8k_bsums, q8k_d};
use std::arch::aarch64::*;

/// 32 bytes of nibbles: low nibbles (one sub-block), then high nibbles (the next).
pub(super) type Codes = [[int8x16_t; 2]; 2];

/// `Σ_l q_l y_l` over 32 codes of one sub-block against activations at `y[off..off + 32]`.
#[inline]
#[target_feature(enable = "neon")]
fn sub_dot<const SDOT: bool>(q: [int8x16_t; 2], y: &[u8], off: usize) -> int32x4_t {
    let acc = idot16::<SDOT>(vdupq_n_s32(0), q[0], load_s8(at(y, off)));
    idot16::<SDOT>(acc, q[1], load_s8(at(y, off + 16)))
}

/// `sc_{2c} Σ q y + sc_{2c+1} Σ q y` over 64-element chunk `c` of a Q4_K/Q5_K super-block.
#[inline]
#[target_feature(enable = "neon")]
fn chunk_isum<const SDOT: bool>(y: &[u8], sc: &[u8; 8], codes: &Codes, c: usize) -> int32x4_t {
    let lo = sub_dot::<SDOT>(codes[0], y, 4 + 64 * c);
    let hi = sub_dot::<SDOT>(codes[1], y, 36 + 64 * c);
    let s = vmulq_n_s32(lo, i32::from(sc[2 * c]));
    vmlaq_n_s32(s, hi, i32::from(sc[2 * c + 1]))
}

/// `Σ_j sc_j Σ q y` over a Q4_K/Q5_K super-block.
#[inline]
#[target_feature(enable = "neon")]
fn affine_isum<const SDOT: bool>(y: &[u8], sc: &[u8; 8], codes: &[Codes; 4]) -> i32 {
    let mut sum = vdupq_n_s32(0);
    for (c, code) in codes.iter().enumerate() {
        sum = vaddq_s32(sum, chunk_isum::<SDOT>(y, sc, code, c));
    }
    vaddvq_s32(sum)
}

/// The four 64-element chunks of Q4_K codes at `qs` (128 bytes of nibbles).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn q4_k_codes(x: &[u8; 144]) -> [Codes; 4] {
    let m4 = vdupq_n_u8(0x0f);
    std::array::from_fn(|c| {
        let q = [load_u8(at(x, 16 + 32 * c)), load_u8(at(x, 32 + 32 * c))];
        [
            q.map(|v| vreinterpretq_s8_u8(vandq_u8(v, m4))),
            q.map(|v| vreinterpretq_s8_u8(vshrq_n_u8::<4>(v))),
        ]
    })
}

/// Q4_K against `V` Q8_K vectors in the order of [`crate::kernels::scalar::dot_q4_k_q8_k`]
/// (`PER_CHUNK = false`) or of [`crate::kernels::scalar::dot4_q4_k_q8_k`] (`true`).
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_acts<const V: usize, const PER_CHUNK: bool, const SDOT: bool>(
    w: &[u8],
    a: [&[u8]; V],
) -> [f32; V] {
    let nb = a.iter().fold(w.len() / 144, |m, v| m.min(v.len() / 292));
    let (mut acc, mut acc_min) = ([0f32; V], [0f32; V]);
    for (i, x) in blocks::<144>(w)[..nb].iter().enumerate() {
        prefetch_ahead(x, 0);
        prefetch_ahead(x, 64);
        prefetch_ahead(x, 128);
        let (sc, mn) = unpack_scales(at(x, 4));
        let codes = q4_k_codes(x);
        let xd = [h2f(at(x, 0)), h2f(at(x, 2))];
        for v in 0..V {
            let y = &a[v][i * 292..(i + 1) * 292];
            let yd = q8k_d(y);
            let (d, dmin) = (xd[0] * yd, xd[1] * yd);
            let bsums = q8k_bsums(y);
            if PER_CHUNK {
                for (c, code) in codes.iter().enumerate() {
                    let isum = vaddvq_s32(chunk_isum::<SDOT>(y, &sc, code, c));
                    let msum = min_sum(&mn[2 * c..2 * c + 2], &bsums[4 * c..4 * c + 4]);
                    acc[v] = (isum as f32).mul_add(d, acc[v]);
                    acc_min[v] = (msum as f32).mul_add(dmin, acc_min[v]);
                }
            } else {
                let isum = affine_isum::<SDOT>(y, &sc, &codes);
                let msum = min_sum(&mn, &bsums);
                acc[v] = (isum as f32).mul_add(d, acc[v]);
                acc_min[v] = (msum as f32).mul_add(dmin, acc_min[v]);
            }
        }
    }
    std::array::from_fn(|v| acc[v] - acc_min[v])
}

/// The four 64-element chunks of Q5_K codes (nibbles at 48.., fifth bits at 16..48).
#[inline]
#[target_feature(enable = "neon")]
fn q5_k_codes(x: &[u8; 176]) -> [Codes; 4] {
    let m4 = vdupq_n_u8(0x0f);
    let b4 = vdupq_n_u8(0x10);
    let qh = [load_u8(at(x, 16)), load_u8(at(x, 32))];
    std::array::from_fn(|c| {
        let q = [load_u8(at(x, 48 + 32 * c)), load_u8(at(x, 64 + 32 * c))];
        let bit = |j: usize, h: uint8x16_t| vandq_u8(vtstq_u8(h, vdupq_n_u8(1 << j)), b4);
        let lo = [0, 1].map(|i| vorrq_u8(vandq_u8(q[i], m4), bit(2 * c, qh[i])));
        let hi = [0, 1].map(|i| vorrq_u8(vshrq_n_u8::<4>(q[i]), bit(2 * c + 1, qh[i])));
        [
            lo.map(|v| vreinterpretq_s8_u8(v)),
            hi.map(|v| vreinterpretq_s8_u8(v)),
        ]
    })
}

/// Q5_K against `V` Q8_K vectors: `sum += d·isum − dmin·msum` per super-block.
#[inline]
#[target_feature(enable = "neon")]
fn q5_k_acts<const V: usize, const SDOT: bool>(w: &[u8], a: [&[u8]; V]) -> [f32; V] {
    let nb = a.iter().fold(w.len() / 176, |m, v| m.min(v.len() / 292));
    let mut sum = [0f32; V];
    for (i, x) in blocks::<176>(w)[..nb].iter().enumerate() {
        prefetch_ahead(x, 0);
        prefetch_ahead(x, 64);
        prefetch_ahead(x, 128);
        let (sc, mn) = unpack_scales(at(x, 4));
        let codes = q5_k_codes(x);
        let xd = [h2f(at(x, 0)), h2f(at(x, 2))];
        for v in 0..V {
            let y = &a[v][i * 292..(i + 1) * 292];
            let isum = affine_isum::<SDOT>(y, &sc, &codes);
            let msum = min_sum(&mn, &q8k_bsums(y));
            let yd = q8k_d(y);
            let (d, dmin) = (xd[0] * yd, xd[1] * yd);
            sum[v] += d * isum as f32 - dmin * msum as f32;
        }
    }
    sum
}

/// The eight 32-element code vectors of a Q6_K super-block (unsigned 0..=63), element order.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn q6_k_codes(x: &[u8; 210]) -> [[int8x16_t; 2]; 8] {
    let m4 = vdupq_n_u8(0x0f);
    let top = |v: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(v, vdupq_n_u8(3)));
    let mut q = [[vdupq_n_s8(0); 2]; 8];
    for h in 0..2 {
        for i in 0..2 {
            let l0 = load_u8(at(x, 64 * h + 16 * i));
            let l1 = load_u8(at(x, 64 * h + 32 + 16 * i));
            let hb = load_u8(at(x, 128 + 32 * h + 16 * i));
            let parts = [
                vorrq_u8(vandq_u8(l0, m4), top(hb)),
                vorrq_u8(vandq_u8(l1, m4), top(vshrq_n_u8::<2>(hb))),
                vorrq_u8(vshrq_n_u8::<4>(l0), top(vshrq_n_u8::<4>(hb))),
                vorrq_u8(vshrq_n_u8::<4>(l1), top(vshrq_n_u8::<6>(hb))),
            ];
            for (qk, p) in q[4 * h..4 * h + 4].iter_mut().zip(parts) {
                qk[i] = vreinterpretq_s8_u8(p);
            }
        }
    }
    q
}

/// One Q6_K super-block's eight i32 lanes as [`crate::kernels::scalar::dot_q6_k_q8_k`] defines
/// them: lane `k` (register `k / 4`) sums bytes `4k..4k+4` of every 32-element group times the
/// group's scale for its half, minus the code offset `32 Σ sc·bsum` of sub-blocks `2k, 2k+1`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn q6_k_lanes<const SDOT: bool>(
    y: &[u8],
    q: &[[int8x16_t; 2]; 8],
    sc: &[i8; 16],
) -> [int32x4_t; 2] {
    let mut lanes = [vdupq_n_s32(0); 2];
    for (g, qg) in q.iter().enumerate() {
        for (half, lane) in lanes.iter_mut().enumerate() {
            let p = idot16::<SDOT>(
                vdupq_n_s32(0),
                qg[half],
                load_s8(at(y, 4 + 32 * g + 16 * half)),
            );
            *lane = vmlaq_n_s32(*lane, p, i32::from(sc[2 * g + half]));
        }
    }
    let b = q8k_bsums(y);
    // SAFETY: `sc` is 16 readable bytes.
    let s8 = unsafe { vld1q_s8(sc.as_ptr()) };
    let s16 = [vmovl_s8(vget_low_s8(s8)), vmovl_high_s8(s8)];
    for (h, lane) in lanes.iter_mut().enumerate() {
        // SAFETY: `b[8h..8h + 8]` is 8 readable i16.
        let b16 = unsafe { vld1q_s16(b[8 * h..].as_ptr()) };
        let lo = vmull_s16(vget_low_s16(b16), vget_low_s16(s16[h]));
        let hi = vmull_high_s16(b16, s16[h]);
        let offset = vshlq_n_s32::<5>(vpaddq_s32(lo, hi));
        *lane = vsubq_s32(*lane, offset);
    }
    lanes
}

/// Q6_K against `V` Q8_K vectors: eight f32 lanes, one FMA each per super-block.
#[inline]
#[target_feature(enable = "neon")]
fn q6_k_acts<const V: usize, const SDOT: bool>(w: &[u8], a: [&[u8]; V]) -> [f32; V] {
    let nb = a.iter().fold(w.len() / 210, |m, v| m.min(v.len() / 292));
    let mut acc = [[vdupq_n_f32(0.0); 2]; V];
    for (i, x) in blocks::<210>(w)[..nb].iter().enumerate() {
        prefetch_ahead(x, 0);
        prefetch_ahead(x, 64);
        prefetch_ahead(x, 128);
        prefetch_ahead(x, 192);
        let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
        let q = q6_k_codes(x);
        let xd = h2f(at(x, 208));
        for v in 0..V {
            let y = &a[v][i * 292..(i + 1) * 292];
            let d = q8k_d(y) * xd;
            let lanes = q6_k_lanes::<SDOT>(y, &q, &sc);
            for (l, s) in acc[v].iter_mut().zip(lanes) {
                *l = vfmaq_n_f32(*l, vcvtq_f32_s32(s), d);
            }
        }
    }
    acc.map(|[lo, hi]| hsum8(lo, hi))
}

/// Defines a K-quant's single and four-vector kernels in plain NEON and `dotprod` versions.
macro_rules! kquant_pair {
    ($name:literal, $one:ident, $four:ident, $one_d:ident, $four_d:ident,
     |$w:ident, $a:ident, $s:ident| $one_body:expr, $four_body:expr) => {
        kquant_pair!(@ $name, "neon", false, $one, $four, |$w, $a, $s| $one_body, $four_body);
        kquant_pair!(@ $name, "neon,dotprod", true, $one_d, $four_d,
                     |$w, $a, $s| $one_body, $four_body);
    };
    (@ $name:literal, $feat:literal, $sdot:literal, $one:ident, $four:ident,
     |$w:ident, $a:ident, $s:ident| $one_body:expr, $four_body:expr) => {
        #[doc = concat!($name, " weights · Q8_K activations (", $feat, ").")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $one(_n: usize, $w: &[u8], a: &[u8]) -> f32 {
            const $s: bool = $sdot;
            let $a = [a];
            $one_body[0]
        }

        #[doc = concat!($name, " weights · four Q8_K activation vectors (", $feat, ").")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $four(_n: usize, $w: &[u8], $a: [&[u8]; 4]) -> [f32; 4] {
            const $s: bool = $sdot;
            $four_body
        }
    };
}

// Q4_K's four-vector kernel sums in ggml's 4-row GEMM order (see the scalar reference).
kquant_pair!(
    "Q4_K",
    dot_q4_k_q8_k,
    dot4_q4_k_q8_k,
    dot_q4_k_q8_k_dotprod,
    dot4_q4_k_q8_k_dotprod,
    |w, a, S| q4_k_acts::<1, false, S>(w, a),
    q4_k_acts::<4, true, S>(w, a)
);
kquant_pair!(
    "Q5_K",
    dot_q5_k_q8_k,
    dot4_q5_k_q8_k,
    dot_q5_k_q8_k_dotprod,
    dot4_q5_k_q8_k_dotprod,
    |w, a, S| q5_k_acts::<1, S>(w, a),
    q5_k_acts::<4, S>(w, a)
);
kquant_pair!(
    "Q6_K",
    dot_q6_k_q8_k,
    dot4_q6_k_q8_k,
    dot_q6_k_q8_k_dotprod,
    dot4_q6_k_q8_k_dotprod,
    |w, a, S| q6_k_acts::<1, S>(w, a),
    q6_k_acts::<4, S>(w, a)
);
