//! AVX2 + FMA + F16C kernels (x86_64).
//!
//! Every public function here is an `unsafe fn` with
//! `#[target_feature(enable = "avx2,fma,f16c")]`.
//!
//! # Safety (all functions)
//! The CPU must support avx2, fma and f16c (check with
//! `is_x86_feature_detected!`, as [`crate::dispatch::Kernels::detected`] does);
//! slice lengths as checked by the caller (the kernels walk whole blocks with
//! `chunks_exact`, so shorter slices only drop blocks, never read out of bounds).
//!
//! Loads go through small helpers that take array references, so each raw
//! load is in bounds by construction.

use std::arch::x86_64::*;

/// Repeats `$body` with `$t` bound to each literal in turn (the token loops
/// must unroll so that every accumulator stays in a register; LLVM leaves a
/// loop of 8 × 8 dot instructions rolled and keeps the accumulators on the
/// stack).
macro_rules! unroll {
    ($t:ident in [$($i:literal)*] $body:block) => {
        $( { let $t: usize = $i; $body } )*
    };
}

mod float;
mod gemm;
mod igemm;
mod igemm_k;
mod kquants;
mod legacy;
mod pairs_vnni;
mod quantize;
mod rows;
mod rows_k;
mod rows_k512;
mod rows_vnni;
mod vector;

pub use float::{dot_bf16_f32, dot_f16_f32, dot_f32_f32};
pub use gemm::{interleave_panel, panel_f32};
pub use igemm::{tile_i8_avx2, tile_i8_avx512vnni, tile_i8_avxvnni};
pub use igemm_k::{tile_i8_k_avx2, tile_i8_k_avx512vnni, tile_i8_k_avxvnni};
pub use kquants::{
    dot4_q4_k_q8_k, dot4_q5_k_q8_k, dot4_q6_k_q8_k, dot_q4_k_q8_k, dot_q5_k_q8_k, dot_q6_k_q8_k,
};
pub use legacy::{
    dot4_q4_0_q8_0, dot4_q5_0_q8_0, dot4_q8_0_q8_0, dot_q4_0_q8_0, dot_q4_1_q8_1, dot_q5_0_q8_0,
    dot_q5_1_q8_1, dot_q8_0_q8_0, tile_q4_0_q8_0, tile_q5_0_q8_0, tile_q8_0_q8_0,
};
pub use pairs_vnni::{
    pairs_q5_0_avx512vnni, pairs_q5_0_avxvnni, pairs_q8_0_avx512vnni, pairs_q8_0_avxvnni,
};
pub use quantize::{quantize_q8_0, quantize_q8_k};
pub use rows::{rows8_q4_0_q8_0, rows8_q5_0_q8_0};
pub use rows_k::{rows8x4_q4_k_q8_k, rows8x4_q6_k_q8_k};
pub use rows_k512::{
    rows8_q4_k_q8_k_avx512vnni, rows8_q6_k_q8_k_avx512vnni, rows8x4_q4_k_q8_k_avx512vnni,
    rows8x4_q6_k_q8_k_avx512vnni,
};
pub use rows_vnni::{rows8_q4_0_q8_0_avx512vnni, rows8_q5_0_q8_0_avx512vnni};
pub use vector::{axpy_f32, dot_f32, f16_to_f32, silu_mul_f32, softmax_f32};

pub(crate) use super::{at, le16};

/// Loads 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load256(b: &[u8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// Loads 16 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load128(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Loads 8 little-endian f32 from 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_f32x8(b: &[u8; 32]) -> __m256 {
    // SAFETY: `b` is 32 readable bytes (8 f32, any bit pattern valid) and
    // `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }
}

/// Loads 8 f32 from a float array.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn load_ps(x: &[f32; 8]) -> __m256 {
    // SAFETY: `x` is 8 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

/// Stores 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn store256(out: &mut [u8; 32], v: __m256i) {
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
}

/// How far ahead of the current weight block to prefetch, in bytes. Decode
/// streams the weights once per token; on this 2-core host (≈ 8 GB/s per core
/// with a long memory latency) 1 KiB ahead kept too few lines in flight:
/// 8 KiB gave Gemma Q8_0 decode ≈ +20% and Qwen Q4_K_M ≈ +10% (interleaved
/// A/B with `statelm bench`, 4 rounds; 4 KiB and 16 KiB measured alike within
/// noise, 2 KiB in between).
pub(crate) const PREFETCH_DISTANCE: usize = 8192;

/// Prefetches the cache line [`PREFETCH_DISTANCE`] bytes past `s[off]` (the
/// weight stream continues there: later blocks, then the next rows). Prefetch
/// never faults, so the address need not be in bounds.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_ahead(s: &[u8], off: usize) {
    prefetch_at(s, off.wrapping_add(PREFETCH_DISTANCE));
}

/// Prefetches the cache line at `s[off]`, which need not be in bounds
/// (prefetch never faults).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn prefetch_at(s: &[u8], off: usize) {
    let p = s.as_ptr().wrapping_add(off);
    _mm_prefetch::<_MM_HINT_T0>(p.cast());
}
/// The product of two IEEE halves, converted together by one F16C instruction.
///
/// (Converting a single half via `_mm_cvtsi32_si128` lets LLVM fold the load
/// into a `vpinsrw` on an arbitrary register — often the accumulator — which
/// puts the conversion on the loop-carried dependency chain. Packing both
/// halves into one 32-bit lane forces a `vmovd`, which has no input dependency.)
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16c_mul(a: u16, b: u16) -> f32 {
    let packed = u32::from(a) | (u32::from(b) << 16);
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(packed as i32));
    _mm_cvtss_f32(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// Eight IEEE halves widened to f32 by one F16C instruction (exact, as
/// [`crate::formats::float::f16_to_f32`] is, subnormals and specials included).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn halves8(h: &[u16; 8]) -> __m256 {
    // SAFETY: `h` is 16 readable bytes; `loadu` has no alignment requirement.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
}

/// Horizontal sum of 8 f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Horizontal sum of 8 i32 (wrapping; callers stay within i32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Pairwise sums of `x * y` for unsigned `x` and signed `y`, as 8 i32 lanes
/// (exact while `2 * x * y` fits i16: `x <= 127`, or `x <= 63` for any `y`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn mul_sum_u8_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// Expands 16 bytes of nibbles to 32 bytes: low nibbles then high nibbles.
///
/// The 16 bytes are broadcast to both halves by the load itself
/// (`vbroadcasti128`) and the upper half shifted by a per-lane shift, which
/// keeps the expansion off the shuffle port.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn nibbles_32(b: &[u8; 16]) -> __m256i {
    let t = _mm256_broadcastsi128_si256(load128(b));
    let v = _mm256_srlv_epi32(t, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0));
    _mm256_and_si256(v, _mm256_set1_epi8(0x0f))
}

/// The half-precision value in the first two of 8 bytes, widened to f32 in
/// lane 0 (lanes 1–3 hold the next bytes, widened alike).
///
/// Written as one memory-operand `vcvtph2ps`: from the intrinsics LLVM
/// narrows the load to 16 bits and inserts it into whatever register is at
/// hand (often the loop's accumulator, which puts the conversion on the
/// loop-carried chain), or merges it with neighbouring loads of the block
/// and splits them again on the shuffle port.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn half_lane0(b: &[u8; 8]) -> __m128 {
    let out: __m128;
    // SAFETY: `b` is 8 readable bytes, exactly what the instruction reads
    // (no alignment requirement); it writes only `out` and touches no flags
    // or stack.
    unsafe {
        std::arch::asm!(
            "vcvtph2ps {out}, qword ptr [{src}]",
            out = lateout(xmm_reg) out,
            src = in(reg) b.as_ptr(),
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    out
}
/// Expands 32 bits to 32 bytes: `0xff` where the bit is set, else `0`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn bits_32(bits: u32) -> __m256i {
    let x = _mm256_set1_epi32(bits as i32);
    // Byte i takes byte i / 8 of `bits`.
    let spread = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(x, spread);
    // Set every bit except bit i % 8 of byte i; all-ones iff that bit was set.
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1))
}
