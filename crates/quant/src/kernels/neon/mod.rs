//! AArch64 Advanced SIMD (NEON) kernels: every 64-bit ARM phone, tablet and laptop.
//!
//! Three tables use them (see [`crate::dispatch::Kernels::available`]):
//! - `neon` — ARMv8.0 Advanced SIMD, on every aarch64 core. Integer block dots widen byte
//!   products with `smull`/`smull2` and pair them up with `saddlp`/`addp`.
//! - `neon+dotprod` — the same kernels with `sdot` (FEAT_DotProd: Apple A11 and later,
//!   Cortex-A55/A75 and later, so most Android phones since 2018): four byte products summed
//!   into each i32 lane by one instruction.
//! - `neon+dotprod+i8mm` — adds `usdot` (FEAT_I8MM: Apple A15/M2 and later, Armv8.6 cores) to
//!   the int8 GEMM, whose packed weight codes are unsigned, so Q8_0 prefill takes it too.
//!
//! Summation orders are those of the AVX2 kernels, lane for lane (an f32x8 register of the x86
//! kernels is two `float32x4_t` here, lanes 0–3 and 4–7, reduced as `hsum_ps` reduces them),
//! so an ARM phone computes the same bits as the x86 kernels do — and, with
//! `Numerics::LlamaCpp`, the same logits as llama.cpp's x86 backend. Where the x86 kernel equals
//! the scalar reference bit for bit (K-quants, Q4_0, the float vector kernels, both GEMMs), so
//! does this one; the property tests check it for every table this CPU runs.
//!
//! The weights are read in the file's own block layout (no repacked copy beside the mapped
//! file): the multi-row and tile kernels share activation loads across rows instead.
//!
//! # Safety (all functions)
//! NEON is part of every aarch64 target, so the `neon`-only functions are safe to call on any
//! aarch64 CPU; the `dotprod` / `i8mm` entry points are `unsafe fn`s that need those CPU
//! features (checked with `is_aarch64_feature_detected!` before a table holds them). Slices are
//! walked by whole blocks, so shorter slices only drop blocks, never read out of bounds.
//!
//! `sdot` and `usdot` are written as inline assembly: their `std::arch` intrinsics are not
//! stable yet. Each such statement names its extension (`.arch_extension dotprod` / `i8mm`)
//! so it assembles wherever LLVM places it, inlined or not; only the dispatch tables decide
//! where it runs.

use std::arch::aarch64::*;
use std::arch::asm;

mod elementwise;
mod gemm;
mod igemm;
mod igemm_k;
mod kquants;
mod legacy;
mod quantize;
mod rows_k;
mod vector;

pub use elementwise::{f32_to_f16, gelu_mul_f32, rms_norm};
pub use gemm::{interleave_panel, panel_f32};
pub use igemm::{tile_i8_dotprod, tile_i8_i8mm, tile_i8_neon};
pub use igemm_k::{tile_i8_k_dotprod, tile_i8_k_neon};
pub use kquants::{
    dot4_q4_k_q8_k, dot4_q4_k_q8_k_dotprod, dot4_q5_k_q8_k, dot4_q5_k_q8_k_dotprod, dot4_q6_k_q8_k,
    dot4_q6_k_q8_k_dotprod, dot_q4_k_q8_k, dot_q4_k_q8_k_dotprod, dot_q5_k_q8_k,
    dot_q5_k_q8_k_dotprod, dot_q6_k_q8_k, dot_q6_k_q8_k_dotprod,
};
pub use legacy::{
    dot4_q4_0_q8_0, dot4_q4_0_q8_0_dotprod, dot4_q5_0_q8_0, dot4_q5_0_q8_0_dotprod, dot4_q8_0_q8_0,
    dot4_q8_0_q8_0_dotprod, dot_q4_0_q8_0, dot_q4_0_q8_0_dotprod, dot_q4_1_q8_1,
    dot_q4_1_q8_1_dotprod, dot_q5_0_q8_0, dot_q5_0_q8_0_dotprod, dot_q5_1_q8_1,
    dot_q5_1_q8_1_dotprod, dot_q8_0_q8_0, dot_q8_0_q8_0_dotprod, rows8_q4_0_q8_0,
    rows8_q4_0_q8_0_dotprod, rows8_q5_0_q8_0, rows8_q5_0_q8_0_dotprod, rows8_q8_0_q8_0,
    rows8_q8_0_q8_0_dotprod, tile_q4_0_q8_0, tile_q4_0_q8_0_dotprod, tile_q5_0_q8_0,
    tile_q5_0_q8_0_dotprod, tile_q8_0_q8_0, tile_q8_0_q8_0_dotprod,
};
pub use quantize::{quantize_q8_0, quantize_q8_k};
pub use rows_k::{
    rows8_q4_k_q8_k_dotprod, rows8_q6_k_q8_k_dotprod, rows8x4_q4_k_q8_k_dotprod,
    rows8x4_q6_k_q8_k_dotprod,
};
pub use vector::{axpy_f32, dot_f32, f16_to_f32, silu_mul_f32, softmax_f32};

/// 16 bytes as signed bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_s8(b: &[u8; 16]) -> int8x16_t {
    // SAFETY: `b` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_s8(b.as_ptr().cast()) }
}

/// 16 bytes as unsigned bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_u8(b: &[u8; 16]) -> uint8x16_t {
    // SAFETY: `b` is 16 readable bytes; `ld1` has no alignment requirement.
    unsafe { vld1q_u8(b.as_ptr()) }
}

/// Four f32.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn load_f32(x: &[f32; 4]) -> float32x4_t {
    // SAFETY: `x` is 4 readable f32; `ld1` has no alignment requirement.
    unsafe { vld1q_f32(x.as_ptr()) }
}

/// Stores four f32.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn store_f32(out: &mut [f32; 4], v: float32x4_t) {
    // SAFETY: `out` is 4 writable f32; `st1` has no alignment requirement.
    unsafe { vst1q_f32(out.as_mut_ptr(), v) }
}

/// The IEEE half at `b[0..2]` widened to f32 (exact; `ldr h` + `fcvt`, ARMv8.0 base: the
/// half goes straight from memory to the FP register, no general-register round trip).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn h2f(b: &[u8; 2]) -> f32 {
    let out: f32;
    // SAFETY: reads exactly the two bytes of `b` (no alignment needed for `ldr h`); writes
    // only registers; no stack or flags touched.
    unsafe {
        asm!(
            "ldr {t:h}, [{p}]",
            "fcvt {out:s}, {t:h}",
            p = in(reg) b.as_ptr(),
            t = out(vreg) _,
            out = lateout(vreg) out,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    out
}

/// `Σ` of 16 byte products into four i32 lanes, lane `k` taking bytes `4k..4k+4`: one `sdot`
/// when `SDOT` (the caller must then run on a CPU with FEAT_DotProd), else `smull` and pairwise
/// adds. Exact for any signed bytes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn idot16<const SDOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        let mut acc = acc;
        // SAFETY: register-only; the `*_dotprod` entry points that instantiate `SDOT = true`
        // are only called on CPUs with FEAT_DotProd (the kernel tables check it).
        unsafe {
            asm!(
                ".arch_extension dotprod",
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        acc
    } else {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)))
    }
}

/// The exact dot of 32 signed codes (`x`, two halves) with 32 signed codes as eight i32 lanes
/// (`[lanes 0–3, lanes 4–7]`, lane `k` holding bytes `4k..4k+4`, as AVX2's `maddubs`+`madd`).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn idot32<const SDOT: bool>(x: [int8x16_t; 2], y: [int8x16_t; 2]) -> [int32x4_t; 2] {
    let z = vdupq_n_s32(0);
    [idot16::<SDOT>(z, x[0], y[0]), idot16::<SDOT>(z, x[1], y[1])]
}

/// The sum of eight lanes held as two registers, in the order of AVX2's `hsum_ps`:
/// `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))` (see [`crate::kernels::scalar::hsum8`]).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let t = vaddq_f32(lo, hi);
    let u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    vpadds_f32(u)
}

/// How far ahead of the current weight block to prefetch (as the AVX2 kernels: the weight
/// stream continues there).
pub(crate) const PREFETCH_DISTANCE: usize = 8192;

/// Prefetches the cache line [`PREFETCH_DISTANCE`] bytes past `s[off]` (`prfm` never faults,
/// so the address need not be in bounds).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn prefetch_ahead(s: &[u8], off: usize) {
    prefetch_at(s, off.wrapping_add(PREFETCH_DISTANCE));
}

/// Prefetches the cache line at `s[off]` (`prfm` never faults, so the address need not be in
/// bounds).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn prefetch_at(s: &[u8], off: usize) {
    let p = s.as_ptr().wrapping_add(off);
    // SAFETY: a prefetch hint reads nothing architecturally and never faults.
    unsafe {
        asm!("prfm pldl1keep, [{p}]", p = in(reg) p, options(nostack, preserves_flags, readonly));
    }
}
