//! Int8 GEMM micro-kernels on `vpdpbusd` (four u8 × i8 products summed into
//! each i32 lane in one instruction, no i16 intermediate to saturate): a
//! 512-bit AVX512-VNNI version and a 256-bit AVX-VNNI one; and a plain AVX2
//! one on `vpmaddubsw` for codes below 32 (Q4_0, Q5_0).
//!
//! A panel block holds [`I8_ROWS`] weight rows' unsigned codes interleaved by
//! four (`64 g + 4 r + j`), so one broadcast group of four activation codes
//! against one panel register leaves row `r`'s partial dot in lane `r`: eight
//! `vpdpbusd` per block give each row's exact integer sum, with no horizontal
//! reduction. Per token and block that is 8 dot instructions for 16 × 32
//! multiply-adds (512-bit; twice that count at 256 bits), plus a convert and
//! two f32 operations for the scales.
//!
//! # Safety (all functions)
//! The CPU must support the features each function enables.

use super::at;
use crate::kernels::{
    operands, ActBlockMeta, I8Operands as Operands, I8_PANEL_BLOCK, I8_ROWS, I8_TILE_TOKENS,
};
use std::arch::x86_64::*;

/// The four activation codes of group `g` of block `x` as one i32.
#[inline(always)]
fn group(x: &[u8; 34], g: usize) -> i32 {
    i32::from_le_bytes(*at::<4>(x, 2 + 4 * g))
}

/// 512-bit micro-kernel for exactly `M` tokens: all [`I8_ROWS`] rows in one
/// register per code group.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn tile512<const M: usize>(o: &Operands<'_, M>, acc: &mut [[f32; I8_ROWS]]) {
    let mut c = [_mm512_setzero_ps(); M];
    for (b, (panel, dw)) in o.panel.iter().zip(o.scales).enumerate() {
        let w: [__m512i; 8] = std::array::from_fn(|g| {
            let v: &[u8; 64] = at(panel, 64 * g);
            // SAFETY: `v` is 64 readable bytes; `loadu` needs no alignment.
            unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
        });
        // SAFETY: `dw` is 16 readable f32; `loadu` needs no alignment.
        let dw = unsafe { _mm512_loadu_ps(dw.as_ptr()) };
        unroll!(t in [0 1 2 3 4 5 6 7] {
            if t < M {
                let (x, m) = (&o.xs[t][b], o.metas[t][b]);
                let mut i = _mm512_set1_epi32(m.neg_offset_sum);
                for (g, wg) in w.iter().enumerate() {
                    i = _mm512_dpbusd_epi32(i, *wg, _mm512_set1_epi32(group(x, g)));
                }
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(m.d));
                c[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), d, c[t]);
            }
        });
    }
    for (ct, out) in c.iter().zip(acc.iter_mut()) {
        // SAFETY: `out` is 16 writable f32; `storeu` needs no alignment.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), *ct) };
    }
}

/// 256-bit micro-kernel for exactly `M <= 4` tokens and the eight rows of
/// half `H` of the group (16 registers: eight panel groups, four
/// accumulators, the scales and a temporary).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn tile256<const M: usize, const H: usize>(o: &Operands<'_, M>, acc: &mut [[f32; I8_ROWS]]) {
    let mut c = [_mm256_setzero_ps(); M];
    for (b, (panel, dw)) in o.panel.iter().zip(o.scales).enumerate() {
        let (w, dw) = half_block::<H>(panel, dw);
        unroll!(t in [0 1 2 3] {
            if t < M {
                let (x, m) = (&o.xs[t][b], o.metas[t][b]);
                let mut i = _mm256_set1_epi32(m.neg_offset_sum);
                for (g, wg) in w.iter().enumerate() {
                    i = _mm256_dpbusd_avx_epi32(i, *wg, _mm256_set1_epi32(group(x, g)));
                }
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(m.d));
                c[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), d, c[t]);
            }
        });
    }
    store_half::<H>(&c, acc);
}

/// AVX2 micro-kernel, like [`tile256`] with `vpmaddubsw` for `vpdpbusd`: the
/// byte-pair sums of four code groups add up in i16 lanes before one
/// `vpmaddwd` widens them, which is exact while the unsigned codes stay below
/// 32 (`4 · 2 · 31 · 128 = 31744 < 2^15`), so the i32 lanes hold the same
/// integers as [`tile256`]'s.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile256_maddubs<const M: usize, const H: usize>(
    o: &Operands<'_, M>,
    acc: &mut [[f32; I8_ROWS]],
) {
    let ones = _mm256_set1_epi16(1);
    let mut c = [_mm256_setzero_ps(); M];
    for (b, (panel, dw)) in o.panel.iter().zip(o.scales).enumerate() {
        let (w, dw) = half_block::<H>(panel, dw);
        unroll!(t in [0 1 2 3] {
            if t < M {
                let (x, m) = (&o.xs[t][b], o.metas[t][b]);
                let pairs = |g: usize| _mm256_maddubs_epi16(w[g], _mm256_set1_epi32(group(x, g)));
                let lo = _mm256_add_epi16(_mm256_add_epi16(pairs(0), pairs(1)), _mm256_add_epi16(pairs(2), pairs(3)));
                let hi = _mm256_add_epi16(_mm256_add_epi16(pairs(4), pairs(5)), _mm256_add_epi16(pairs(6), pairs(7)));
                let i = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
                let i = _mm256_add_epi32(i, _mm256_set1_epi32(m.neg_offset_sum));
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(m.d));
                c[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), d, c[t]);
            }
        });
    }
    store_half::<H>(&c, acc);
}

/// Half `H` (rows `8H..8H + 8`) of a panel block: its eight code groups and scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn half_block<const H: usize>(
    panel: &[u8; I8_PANEL_BLOCK],
    dw: &[f32; I8_ROWS],
) -> ([__m256i; 8], __m256) {
    let w = std::array::from_fn(|g| super::load256(at(panel, 64 * g + 32 * H)));
    (w, super::load_ps(at_f32::<8>(dw, 8 * H)))
}

/// Stores each token's accumulator into half `H` of its output row.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn store_half<const H: usize>(c: &[__m256], acc: &mut [[f32; I8_ROWS]]) {
    for (ct, out) in c.iter().zip(acc.iter_mut()) {
        let out = &mut out[8 * H..][..8];
        // SAFETY: `out` is 8 writable f32; `storeu` needs no alignment.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *ct) };
    }
}

/// The fixed-size array at `s[off..off + N]`.
#[inline(always)]
fn at_f32<const N: usize>(s: &[f32], off: usize) -> &[f32; N] {
    s[off..off + N].try_into().expect("in bounds")
}

/// See [`crate::kernels::I8TileFn`] (512-bit version).
///
/// # Safety
/// CPU must support avx512f+avx512vnni. Panics (never reads out of bounds)
/// when a slice is too short.
#[target_feature(enable = "avx512f,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile_i8_avx512vnni(
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
    if m == 0 || nb == 0 {
        return;
    }
    macro_rules! call {
        ($($k:literal)*) => {
            match m {
                $($k => tile512::<$k>(&operands(0, nb, panel, scales, x, ldx, meta, ldm), acc),)*
                _ => unreachable!("m <= I8_TILE_TOKENS"),
            }
        };
    }
    call!(1 2 3 4 5 6 7 8)
}

/// Defines a 256-bit [`crate::kernels::I8TileFn`] from a two-half micro-kernel
/// `$tile::<M, H>` of at most four tokens: the tokens in runs of four, each
/// run over both halves of the row group.
macro_rules! tile_i8_256 {
    ($(#[$doc:meta])* $name:ident, $features:literal, $tile:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
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
            assert!(m <= I8_TILE_TOKENS, "tile shape");
            if nb == 0 {
                return;
            }
            let mut t0 = 0;
            while t0 < m {
                let n = (m - t0).min(4);
                let acc = &mut acc[t0..];
                match n {
                    1 => {
                        let o = operands::<1>(t0, nb, panel, scales, x, ldx, meta, ldm);
                        $tile::<1, 0>(&o, acc);
                        $tile::<1, 1>(&o, acc);
                    }
                    2 => {
                        let o = operands::<2>(t0, nb, panel, scales, x, ldx, meta, ldm);
                        $tile::<2, 0>(&o, acc);
                        $tile::<2, 1>(&o, acc);
                    }
                    3 => {
                        let o = operands::<3>(t0, nb, panel, scales, x, ldx, meta, ldm);
                        $tile::<3, 0>(&o, acc);
                        $tile::<3, 1>(&o, acc);
                    }
                    _ => {
                        let o = operands::<4>(t0, nb, panel, scales, x, ldx, meta, ldm);
                        $tile::<4, 0>(&o, acc);
                        $tile::<4, 1>(&o, acc);
                    }
                }
                t0 += n;
            }
        }
    };
}

tile_i8_256!(
    /// See [`crate::kernels::I8TileFn`] (256-bit AVX-VNNI version).
    ///
    /// # Safety
    /// CPU must support avx2+fma+f16c+avxvnni. Panics (never reads out of
    /// bounds) when a slice is too short.
    tile_i8_avxvnni,
    "avx2,fma,f16c,avxvnni",
    tile256
);

tile_i8_256!(
    /// See [`crate::kernels::I8TileFn`] (AVX2 version, for codes below 32:
    /// Q4_0 and Q5_0 — see [`tile256_maddubs`]).
    ///
    /// # Safety
    /// CPU must support avx2+fma+f16c. Panics (never reads out of bounds)
    /// when a slice is too short.
    tile_i8_avx2,
    "avx2,fma,f16c",
    tile256_maddubs
);
