//! Int8 GEMM micro-kernels (see [`crate::igemm`]) on the by-element dot instructions: `sdot`
//! (FEAT_DotProd) and `usdot` (FEAT_I8MM) multiply four bytes of every i32 lane of the panel
//! register — four codes of one weight row — with one four-byte group of the activation
//! register, chosen by an immediate lane index, so no broadcast is needed. Plain NEON builds
//! the same sums from `smull` and pairwise adds.
//!
//! The panel's codes are unsigned. `usdot` takes them as they are (any code offset, so Q8_0
//! too); `sdot` and the plain kernel read them as signed bytes, which is exact for codes below
//! 128 (Q4_0, Q5_0: the tables say so through their fast code offset).
//!
//! Each call runs tokens in runs of four, each run over the two eight-row halves of the row
//! group: four tokens × two i32 and two f32 registers, eight activation registers and the
//! current code group's two panel registers stay in the 32 vector registers.

use super::{load_f32, load_s8, store_f32};
use crate::kernels::{
    at, operands, ActBlockMeta, I8Operands, I8_PANEL_BLOCK, I8_ROWS, I8_TILE_TOKENS,
};
use std::arch::aarch64::*;
use std::arch::asm;

/// Plain NEON: `smull` and pairwise adds.
pub(super) const PLAIN: u8 = 0;
/// `sdot` by element (FEAT_DotProd).
pub(super) const SDOT: u8 = 1;
/// `usdot` by element (FEAT_I8MM).
const USDOT: u8 = 2;

/// `acc[r] += Σ_j w[4r + j] · x[4L + j]` for the four rows `r` of `w`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn dot_lane<const KIND: u8, const L: i32>(
    acc: int32x4_t,
    w: int8x16_t,
    x: int8x16_t,
) -> int32x4_t {
    let mut acc = acc;
    match KIND {
        // SAFETY: register-only; the entry point instantiating SDOT is only called on CPUs
        // with FEAT_DotProd (the kernel tables check it).
        SDOT => unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {w:v}.16b, {x:v}.4b[{l}]",
                acc = inout(vreg) acc,
                w = in(vreg) w,
                x = in(vreg) x,
                l = const L,
                options(pure, nomem, nostack, preserves_flags),
            );
        },
        // SAFETY: as above, for USDOT and FEAT_I8MM.
        USDOT => unsafe {
            asm!(
                ".arch_extension i8mm",
                "usdot {acc:v}.4s, {w:v}.16b, {x:v}.4b[{l}]",
                acc = inout(vreg) acc,
                w = in(vreg) w,
                x = in(vreg) x,
                l = const L,
                options(pure, nomem, nostack, preserves_flags),
            );
        },
        _ => {
            let xg = vreinterpretq_s8_s32(vdupq_laneq_s32::<L>(vreinterpretq_s32_s8(x)));
            let lo = vmull_s8(vget_low_s8(w), vget_low_s8(xg));
            let hi = vmull_high_s8(w, xg);
            acc = vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
        }
    }
    acc
}

/// Micro-kernel for exactly `M <= 4` tokens and rows `8H..8H + 8` of the row group.
#[inline]
#[target_feature(enable = "neon")]
fn tile<const KIND: u8, const M: usize, const H: usize>(
    o: &I8Operands<'_, M>,
    acc: &mut [[f32; I8_ROWS]],
) {
    let mut c = [[vdupq_n_f32(0.0); 2]; M];
    for (b, (panel, dw)) in o.panel.iter().zip(o.scales).enumerate() {
        let x: [[int8x16_t; 2]; M] = std::array::from_fn(|t| {
            let xb = &o.xs[t][b];
            [load_s8(at(xb, 2)), load_s8(at(xb, 18))]
        });
        let mut i: [[int32x4_t; 2]; M] =
            std::array::from_fn(|t| [vdupq_n_s32(o.metas[t][b].neg_offset_sum); 2]);
        macro_rules! group {
            ($g:literal, $half:literal, $lane:literal) => {
                let w = [0, 1].map(|q| load_s8(panel_at(panel, 64 * $g + 32 * H + 16 * q)));
                for t in 0..M {
                    for q in 0..2 {
                        i[t][q] = dot_lane::<KIND, $lane>(i[t][q], w[q], x[t][$half]);
                    }
                }
            };
        }
        group!(0, 0, 0);
        group!(1, 0, 1);
        group!(2, 0, 2);
        group!(3, 0, 3);
        group!(4, 1, 0);
        group!(5, 1, 1);
        group!(6, 1, 2);
        group!(7, 1, 3);
        let dw = [0, 1].map(|q| load_f32(at_f32(dw, 8 * H + 4 * q)));
        for t in 0..M {
            let d = o.metas[t][b].d;
            for q in 0..2 {
                let s = vmulq_n_f32(dw[q], d);
                c[t][q] = vfmaq_f32(c[t][q], vcvtq_f32_s32(i[t][q]), s);
            }
        }
    }
    for (ct, out) in c.iter().zip(acc.iter_mut()) {
        for (q, v) in ct.iter().enumerate() {
            store_f32(at_f32_mut(out, 8 * H + 4 * q), *v);
        }
    }
}

/// The 16 panel bytes at `off`.
#[inline(always)]
fn panel_at(panel: &[u8; I8_PANEL_BLOCK], off: usize) -> &[u8; 16] {
    panel[off..off + 16].try_into().expect("in bounds")
}

/// The four floats at `s[off..off + 4]`.
#[inline(always)]
fn at_f32(s: &[f32; I8_ROWS], off: usize) -> &[f32; 4] {
    s[off..off + 4].try_into().expect("in bounds")
}

/// The four writable floats at `s[off..off + 4]`.
#[inline(always)]
fn at_f32_mut(s: &mut [f32; I8_ROWS], off: usize) -> &mut [f32; 4] {
    (&mut s[off..off + 4]).try_into().expect("in bounds")
}

/// The body of every [`crate::kernels::I8TileFn`] here: tokens in runs of four, each over
/// both halves of the row group.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
fn tile_runs<const KIND: u8>(
    m: usize,
    nb: usize,
    panel: &[u8],
    scales: &[f32],
    x: &[u8],
    ldx: usize,
    meta: &[ActBlockMeta],
    ldm: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    assert!(m <= I8_TILE_TOKENS, "tile shape");
    if nb == 0 {
        return;
    }
    let mut t0 = 0;
    while t0 < m {
        let n = (m - t0).min(4);
        let acc = &mut acc[t0..];
        macro_rules! run {
            ($n:literal) => {{
                let o = operands::<$n>(t0, nb, panel, scales, x, ldx, meta, ldm);
                tile::<KIND, $n, 0>(&o, acc);
                tile::<KIND, $n, 1>(&o, acc);
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

/// Defines an [`crate::kernels::I8TileFn`] of one instruction choice.
macro_rules! tile_i8 {
    ($(#[$doc:meta])* $name:ident, $feat:literal, $kind:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $feat)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(
            m: usize,
            nb: usize,
            panel: &[u8],
            scales: &[f32],
            x: &[u8],
            ldx: usize,
            meta: &[ActBlockMeta],
            ldm: usize,
            acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
        ) {
            tile_runs::<$kind>(m, nb, panel, scales, x, ldx, meta, ldm, acc)
        }
    };
}

tile_i8!(
    /// See [`crate::kernels::I8TileFn`] (plain NEON; exact for codes below 128).
    ///
    /// # Safety
    /// None beyond NEON. Panics (never reads out of bounds) when a slice is too short.
    tile_i8_neon,
    "neon",
    PLAIN
);

tile_i8!(
    /// See [`crate::kernels::I8TileFn`] (`sdot`; exact for codes below 128).
    ///
    /// # Safety
    /// The CPU must have FEAT_DotProd. Panics (never reads out of bounds) when a slice is too
    /// short.
    tile_i8_dotprod,
    "neon,dotprod",
    SDOT
);

tile_i8!(
    /// See [`crate::kernels::I8TileFn`] (`usdot`; exact for every code).
    ///
    /// # Safety
    /// The CPU must have FEAT_I8MM. Panics (never reads out of bounds) when a slice is too
    /// short.
    tile_i8_i8mm,
    "neon,i8mm",
    USDOT
);
