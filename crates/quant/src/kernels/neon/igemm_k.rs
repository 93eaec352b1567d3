//! K-quant int8 GEMM micro-kernels (see [`crate::kernels::KTileFn`]) on NEON: `sdot` by element
//! (FEAT_DotProd), or `smull` and pairwise adds on plain NEON. Every K-quant code is below 64, so
//! the packed unsigned codes are valid signed bytes for `sdot` (no `usdot` needed).
//!
//! Tokens run in groups of up to four against a quarter of the row group (four rows, one panel
//! register per code group): per super-block, each sub-block's exact dot per row and token,
//! times the rows' integer scales (`mla`), the mins (Q6_K: the code offset) from the packed
//! `i16` pairs against the block's bsums (`smull` + pairwise add, as `vpmaddwd`), then the f32
//! steps of [`KFormat`] — the scalar reference's bits.

use super::igemm::{dot_lane, PLAIN, SDOT};
use super::{load_f32, load_s8, store_f32};
use crate::kernels::{at, KFormat, KPanelBlock, I8_ROWS, I8_TILE_TOKENS, Q8K_BLOCK};
use std::arch::aarch64::*;

/// Four i32 of an array.
#[inline(always)]
fn i32x4(v: &[i32; I8_ROWS], q: usize) -> &[i32; 4] {
    v[4 * q..4 * q + 4].try_into().expect("in bounds")
}

/// Four f32 of an array.
#[inline(always)]
fn f32x4(v: &[f32; I8_ROWS], q: usize) -> &[f32; 4] {
    v[4 * q..4 * q + 4].try_into().expect("in bounds")
}

/// Loads four i32.
#[inline]
#[target_feature(enable = "neon")]
fn load_i32(v: &[i32; 4]) -> int32x4_t {
    // SAFETY: `v` is 4 readable i32; `ld1` has no alignment requirement.
    unsafe { vld1q_s32(v.as_ptr()) }
}

/// `Σ_p lo(mins[p][r]) · bsums[2p] + hi(mins[p][r]) · bsums[2p + 1]` for the four rows of
/// quarter `q` (exact in i32).
#[inline]
#[target_feature(enable = "neon")]
fn min_sums(p: &KPanelBlock, y: &[u8; Q8K_BLOCK], q: usize) -> int32x4_t {
    let mut ms = vdupq_n_s32(0);
    for (k, mins) in p.mins.iter().enumerate() {
        let pair = i32::from_le_bytes(*at::<4>(y, 260 + 4 * k));
        let b = vreinterpretq_s16_s32(vdupq_n_s32(pair));
        let m = vreinterpretq_s16_s32(load_i32(i32x4(mins, q)));
        let lo = vmull_s16(vget_low_s16(m), vget_low_s16(b));
        let hi = vmull_high_s16(m, b);
        ms = vaddq_s32(ms, vpaddq_s32(lo, hi));
    }
    ms
}

/// Exact `isum` of super-block `p` for the four rows of quarter `Q` against each token's block.
#[inline]
#[target_feature(enable = "neon")]
fn block_isums<const KIND: u8, const M: usize, const Q: usize>(
    fmt: KFormat,
    p: &KPanelBlock,
    ys: [&[u8; Q8K_BLOCK]; M],
) -> [int32x4_t; M] {
    let mut isum = [vdupq_n_s32(0); M];
    let subs = 256 / fmt.sub_len();
    for j in 0..subs {
        let sc = load_i32(i32x4(&p.scales[j], Q));
        let mut d = [vdupq_n_s32(0); M];
        // Groups of four codes: 8 per 32-code sub-block, 4 per 16-code one; 16 codes a register.
        let base = j * fmt.sub_len() / 4;
        for reg in 0..fmt.sub_len() / 16 {
            let x: [int8x16_t; M] =
                std::array::from_fn(|t| load_s8(at(ys[t], 4 + 4 * base + 16 * reg)));
            macro_rules! lane {
                ($l:literal) => {
                    let g = base + 4 * reg + $l;
                    let w = load_s8(at(&p.codes, 64 * g + 16 * Q));
                    for t in 0..M {
                        d[t] = dot_lane::<KIND, $l>(d[t], w, x[t]);
                    }
                };
            }
            lane!(0);
            lane!(1);
            lane!(2);
            lane!(3);
        }
        for t in 0..M {
            isum[t] = vmlaq_s32(isum[t], d[t], sc);
        }
    }
    isum
}

/// Micro-kernel for exactly `M <= 4` tokens and rows `4Q..4Q + 4` of the row group.
#[inline]
#[target_feature(enable = "neon")]
fn tile<const KIND: u8, const M: usize, const Q: usize>(
    fmt: KFormat,
    panel: &[KPanelBlock],
    xs: [&[[u8; Q8K_BLOCK]]; M],
    acc: &mut [[f32; I8_ROWS]],
) {
    let zero = vdupq_n_f32(0.0);
    let (mut c, mut cm) = ([zero; M], [zero; M]);
    for (b, p) in panel.iter().enumerate() {
        let ys: [&[u8; Q8K_BLOCK]; M] = std::array::from_fn(|t| &xs[t][b]);
        let isum = block_isums::<KIND, M, Q>(fmt, p, ys);
        let (dw, dmw) = (load_f32(f32x4(&p.d, Q)), load_f32(f32x4(&p.dmin, Q)));
        for t in 0..M {
            let ms = min_sums(p, ys[t], Q);
            let dy = f32::from_le_bytes(*at::<4>(ys[t], 0));
            let (dd, dm) = (vmulq_n_f32(dw, dy), vmulq_n_f32(dmw, dy));
            match fmt {
                KFormat::Q4K => {
                    c[t] = vfmaq_f32(c[t], vcvtq_f32_s32(isum[t]), dd);
                    cm[t] = vfmaq_f32(cm[t], vcvtq_f32_s32(ms), dm);
                }
                KFormat::Q5K => {
                    let a = vmulq_f32(dd, vcvtq_f32_s32(isum[t]));
                    let s = vsubq_f32(a, vmulq_f32(dm, vcvtq_f32_s32(ms)));
                    c[t] = vaddq_f32(c[t], s);
                }
                KFormat::Q6K => {
                    let i = vcvtq_f32_s32(vaddq_s32(isum[t], ms));
                    c[t] = vfmaq_f32(c[t], i, dd);
                }
            }
        }
    }
    for ((ct, cmt), out) in c.iter().zip(&cm).zip(acc.iter_mut()) {
        let out: &mut [f32; 4] = (&mut out[4 * Q..4 * Q + 4]).try_into().expect("in bounds");
        store_f32(out, vsubq_f32(*ct, *cmt));
    }
}

/// Tokens in runs of four, each over the four quarters of the row group.
#[inline]
#[target_feature(enable = "neon")]
fn tile_runs<const KIND: u8>(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    assert!(m <= I8_TILE_TOKENS, "tile shape");
    let len = panel.len() * Q8K_BLOCK;
    let mut t0 = 0;
    while t0 < m {
        let n = (m - t0).min(4);
        let acc = &mut acc[t0..];
        macro_rules! run {
            ($n:literal) => {{
                let xs: [&[[u8; Q8K_BLOCK]]; $n] =
                    std::array::from_fn(|t| x[(t0 + t) * ldx..][..len].as_chunks::<Q8K_BLOCK>().0);
                tile::<KIND, $n, 0>(fmt, panel, xs, acc);
                tile::<KIND, $n, 1>(fmt, panel, xs, acc);
                tile::<KIND, $n, 2>(fmt, panel, xs, acc);
                tile::<KIND, $n, 3>(fmt, panel, xs, acc);
            }};
        }
        match n {
            1 => run!(1),
            2 => run!(2),
            3 => run!(3),
            _ => run!(4),
        }
        t0 += n;
    }
}

/// See [`crate::kernels::KTileFn`] (plain NEON).
///
/// # Safety
/// None beyond NEON. Panics (never reads out of bounds) when a slice is too short.
#[target_feature(enable = "neon")]
pub unsafe fn tile_i8_k_neon(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    tile_runs::<PLAIN>(fmt, m, panel, x, ldx, acc)
}

/// See [`crate::kernels::KTileFn`] (`sdot`).
///
/// # Safety
/// The CPU must have FEAT_DotProd. Panics (never reads out of bounds) when a slice is too short.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn tile_i8_k_dotprod(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    tile_runs::<SDOT>(fmt, m, panel, x, ldx, acc)
}
