//! NEON dots of the 32-element block formats against Q8_0 / Q8_1.
//!
//! One generic register tile, [`rows_acts`], serves the single dot, the four-vector and
//! two-row × four-vector kernels of matmul, and the eight-row kernels of matvec: every
//! (row, vector) pair sees exactly the operations of the single dot, so all of them are
//! bit-identical to it. Per block: the exact integer dot as eight i32 lanes
//! ([`super::idot32`]), `d_x · d_y` rounded to f32, then one FMA per lane into two
//! `float32x4_t` accumulators reduced by [`super::hsum8`] — AVX2's `f32x8` order — or, for
//! Q4_0 (ggml's repacked order, as on x86), one scalar FMA of the block's integer sum.

use super::{h2f, hsum8, idot16, idot32, load_s8, load_u8, prefetch_ahead};
use crate::kernels::{at, blocks};
use std::arch::aarch64::*;

/// A Q8_0 block's 32 signed codes.
#[inline]
#[target_feature(enable = "neon")]
fn decode_q8_0(x: &[u8; 34]) -> [int8x16_t; 2] {
    [load_s8(at(x, 2)), load_s8(at(x, 18))]
}

/// 16 bytes of nibbles as 32 unsigned codes: low nibbles, then high nibbles.
#[inline]
#[target_feature(enable = "neon")]
fn nibbles(b: &[u8; 16]) -> [uint8x16_t; 2] {
    let v = load_u8(b);
    [vandq_u8(v, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(v)]
}

/// A Q4_0 block's 32 codes minus 8.
#[inline]
#[target_feature(enable = "neon")]
fn decode_q4_0(x: &[u8; 18]) -> [int8x16_t; 2] {
    nibbles(at(x, 2)).map(|v| vreinterpretq_s8_u8(vsubq_u8(v, vdupq_n_u8(8))))
}

/// 32 bits as 32 bytes: `0xff` where the bit is set, else 0 (bit `i` → byte `i`).
#[inline]
#[target_feature(enable = "neon")]
fn bits_32(bits: u32) -> [uint8x16_t; 2] {
    const SELECT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `SELECT` is 16 readable bytes.
    let select = unsafe { vld1q_u8(SELECT.as_ptr()) };
    let b = bits.to_le_bytes();
    let spread = |lo: u8, hi: u8| vcombine_u8(vdup_n_u8(lo), vdup_n_u8(hi));
    [
        vtstq_u8(spread(b[0], b[1]), select),
        vtstq_u8(spread(b[2], b[3]), select),
    ]
}

/// A Q5_0 block's 32 codes minus 16: `nibble | 0xf0` (as i8) where the fifth bit is clear.
#[inline]
#[target_feature(enable = "neon")]
fn decode_q5_0(x: &[u8; 22]) -> [int8x16_t; 2] {
    let high = bits_32(u32::from_le_bytes(*at::<4>(x, 2)));
    let low = nibbles(at(x, 6));
    let f0 = vdupq_n_u8(0xf0);
    [0, 1].map(|i| vreinterpretq_s8_u8(vorrq_u8(low[i], vbicq_u8(f0, high[i]))))
}

/// Dots `R` weight rows (blocks of `WB` bytes) against `V` Q8_0 vectors (see the module docs;
/// `BLOCK_FMA`: one scalar FMA of each block's integer sum, else eight f32 lanes).
#[inline]
#[target_feature(enable = "neon")]
fn rows_acts<
    const WB: usize,
    const R: usize,
    const V: usize,
    const BLOCK_FMA: bool,
    const SDOT: bool,
>(
    w: [&[u8]; R],
    a: [&[u8]; V],
    decode: impl Fn(&[u8; WB]) -> [int8x16_t; 2],
) -> [[f32; V]; R] {
    let nb = a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / WB)),
        |m, v| m.min(v.len() / 34),
    );
    let xs = w.map(|r| &blocks::<WB>(r)[..nb]);
    let ys = a.map(|v| &blocks::<34>(v)[..nb]);
    let zero = vdupq_n_f32(0.0);
    let mut acc = [[[zero; 2]; V]; R];
    let mut acc_s = [[0f32; V]; R];
    for b in 0..nb {
        let mut dx = [0f32; R];
        let mut qx = [[vdupq_n_s8(0); 2]; R];
        for r in 0..R {
            let x = &xs[r][b];
            prefetch_ahead(x, 0);
            dx[r] = h2f(at(x, 0));
            qx[r] = decode(x);
        }
        for v in 0..V {
            let y = &ys[v][b];
            let dy = h2f(at(y, 0));
            let qy = decode_q8_0(y);
            for r in 0..R {
                let d = dx[r] * dy;
                if BLOCK_FMA {
                    // Only the block's total counts: one accumulator for both halves.
                    let lanes = idot16::<SDOT>(vdupq_n_s32(0), qx[r][0], qy[0]);
                    let lanes = idot16::<SDOT>(lanes, qx[r][1], qy[1]);
                    acc_s[r][v] = (vaddvq_s32(lanes) as f32).mul_add(d, acc_s[r][v]);
                } else {
                    let p = idot32::<SDOT>(qx[r], qy);
                    let l = &mut acc[r][v];
                    l[0] = vfmaq_n_f32(l[0], vcvtq_f32_s32(p[0]), d);
                    l[1] = vfmaq_n_f32(l[1], vcvtq_f32_s32(p[1]), d);
                }
            }
        }
    }
    if BLOCK_FMA {
        return acc_s;
    }
    acc.map(|row| row.map(|[lo, hi]| hsum8(lo, hi)))
}

/// Defines the single, four-vector, tile and eight-row kernels of a Q8_0-paired format, in a
/// plain NEON and a `dotprod` version.
macro_rules! q8_0_family {
    ($name:literal, $bytes:literal, $decode:ident, $fma:literal,
     [$one:ident, $four:ident, $tile:ident, $rows8:ident],
     [$one_d:ident, $four_d:ident, $tile_d:ident, $rows8_d:ident]) => {
        q8_0_family!(@ $name, $bytes, $decode, $fma, false, "neon", $one, $four, $tile, $rows8);
        q8_0_family!(@ $name, $bytes, $decode, $fma, true, "neon,dotprod",
                     $one_d, $four_d, $tile_d, $rows8_d);
    };
    (@ $name:literal, $bytes:literal, $decode:ident, $fma:literal, $sdot:literal, $feat:literal,
     $one:ident, $four:ident, $tile:ident, $rows8:ident) => {
        #[doc = concat!($name, " weights · Q8_0 activations (", $feat, ").")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $one(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            rows_acts::<$bytes, 1, 1, $fma, $sdot>([w], [a], |x| $decode(x))[0][0]
        }

        #[doc = concat!($name, " weights · four Q8_0 vectors (", $feat, "; bit-identical to four dots).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $four(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            rows_acts::<$bytes, 1, 4, $fma, $sdot>([w], a, |x| $decode(x))[0]
        }

        #[doc = concat!($name, " weights: two rows · four Q8_0 vectors (", $feat, "; bit-identical to eight dots).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $tile(_n: usize, w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
            rows_acts::<$bytes, 2, 4, $fma, $sdot>(w, a, |x| $decode(x))
        }

        #[doc = concat!($name, " weights: eight rows · one Q8_0 vector (", $feat, "; bit-identical to eight dots).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $rows8(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
            rows_acts::<$bytes, 8, 1, $fma, $sdot>(w, [a], |x| $decode(x)).map(|r| r[0])
        }
    };
}

// Q4_0 sums as ggml's repacked kernels (one FMA per block), Q8_0 and Q5_0 in eight f32 lanes:
// the orders of the x86 kernels.
q8_0_family!(
    "Q8_0",
    34,
    decode_q8_0,
    false,
    [
        dot_q8_0_q8_0,
        dot4_q8_0_q8_0,
        tile_q8_0_q8_0,
        rows8_q8_0_q8_0
    ],
    [
        dot_q8_0_q8_0_dotprod,
        dot4_q8_0_q8_0_dotprod,
        tile_q8_0_q8_0_dotprod,
        rows8_q8_0_q8_0_dotprod
    ]
);
q8_0_family!(
    "Q4_0",
    18,
    decode_q4_0,
    true,
    [
        dot_q4_0_q8_0,
        dot4_q4_0_q8_0,
        tile_q4_0_q8_0,
        rows8_q4_0_q8_0
    ],
    [
        dot_q4_0_q8_0_dotprod,
        dot4_q4_0_q8_0_dotprod,
        tile_q4_0_q8_0_dotprod,
        rows8_q4_0_q8_0_dotprod
    ]
);
q8_0_family!(
    "Q5_0",
    22,
    decode_q5_0,
    false,
    [
        dot_q5_0_q8_0,
        dot4_q5_0_q8_0,
        tile_q5_0_q8_0,
        rows8_q5_0_q8_0
    ],
    [
        dot_q5_0_q8_0_dotprod,
        dot4_q5_0_q8_0_dotprod,
        tile_q5_0_q8_0_dotprod,
        rows8_q5_0_q8_0_dotprod
    ]
);

/// Q4_1/Q5_1 against Q8_1 (`WB`-byte weight blocks, codes from `decode`): eight f32 lanes of
/// `d_x d_y Σ q_x q_y`, plus the scalar sum of `m_x s_y`, as the AVX2 kernels.
#[inline]
#[target_feature(enable = "neon")]
fn affine_acts<const WB: usize, const SDOT: bool>(
    w: &[u8],
    a: &[u8],
    decode: impl Fn(&[u8; WB]) -> [int8x16_t; 2],
) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 2];
    let mut summs = 0f32;
    for (x, y) in blocks::<WB>(w).iter().zip(blocks::<36>(a)) {
        let d = h2f(at(x, 0)) * h2f(at(y, 0));
        summs += h2f(at(x, 2)) * h2f(at(y, 2));
        let p = idot32::<SDOT>(decode(x), [load_s8(at(y, 4)), load_s8(at(y, 20))]);
        acc[0] = vfmaq_n_f32(acc[0], vcvtq_f32_s32(p[0]), d);
        acc[1] = vfmaq_n_f32(acc[1], vcvtq_f32_s32(p[1]), d);
    }
    hsum8(acc[0], acc[1]) + summs
}

/// A Q4_1 block's 32 unsigned codes.
#[inline]
#[target_feature(enable = "neon")]
fn decode_q4_1(x: &[u8; 20]) -> [int8x16_t; 2] {
    nibbles(at(x, 4)).map(|v| vreinterpretq_s8_u8(v))
}

/// A Q5_1 block's 32 unsigned codes (nibble plus the fifth bit).
#[inline]
#[target_feature(enable = "neon")]
fn decode_q5_1(x: &[u8; 24]) -> [int8x16_t; 2] {
    let high = bits_32(u32::from_le_bytes(*at::<4>(x, 4)));
    let low = nibbles(at(x, 8));
    let b4 = vdupq_n_u8(0x10);
    [0, 1].map(|i| vreinterpretq_s8_u8(vorrq_u8(low[i], vandq_u8(high[i], b4))))
}

/// Defines a Q8_1-paired dot in a plain NEON and a `dotprod` version.
macro_rules! q8_1_pair {
    ($name:literal, $bytes:literal, $decode:ident, $one:ident, $one_d:ident) => {
        q8_1_pair!(@ $name, $bytes, $decode, false, "neon", $one);
        q8_1_pair!(@ $name, $bytes, $decode, true, "neon,dotprod", $one_d);
    };
    (@ $name:literal, $bytes:literal, $decode:ident, $sdot:literal, $feat:literal, $one:ident) => {
        #[doc = concat!($name, " weights · Q8_1 activations (", $feat, ").")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must have ", $feat, "; slice lengths as checked by the caller.")]
        #[target_feature(enable = $feat)]
        pub unsafe fn $one(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            affine_acts::<$bytes, $sdot>(w, a, |x| $decode(x))
        }
    };
}

q8_1_pair!(
    "Q4_1",
    20,
    decode_q4_1,
    dot_q4_1_q8_1,
    dot_q4_1_q8_1_dotprod
);
q8_1_pair!(
    "Q5_1",
    24,
    decode_q5_1,
    dot_q5_1_q8_1,
    dot_q5_1_q8_1_dotprod
);
