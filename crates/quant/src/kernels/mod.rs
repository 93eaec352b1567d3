//! Dot-product kernels, one per (weight format, activation format) pair, in a
//! portable scalar reference version ([`scalar`]) and an AVX2+FMA+F16C version
//! ([`avx2`], x86_64 only). [`crate::dispatch::Kernels`] picks one at run time.
//!
//! Every kernel has the signature of [`DotFn`]: `n` elements of one weight row
//! `w` (bytes in the weight format) against one activation vector `a` (bytes in
//! the paired activation format, see [`crate::vec_dot_type`]). The integer part
//! of each block's dot is exact; blocks are scaled and summed in `f32`, so the
//! versions differ only by `f32` summation order.

pub mod scalar;

#[cfg(target_arch = "x86_64")]
pub mod avx2;

/// A dot-product kernel (see the module docs). Unsafe to call because SIMD
/// versions require CPU features; the slice lengths must be those of `n`
/// elements of the two formats.
pub type DotFn = unsafe fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// A dot-product kernel of one weight row against four activation vectors
/// (used by matmul to decode each weight block once). Must give exactly the
/// results of four [`DotFn`] calls of the same ISA.
pub type Dot4Fn = unsafe fn(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4];

/// An activation quantizer: `x` (a whole number of blocks) into `out` (the
/// bytes of as many blocks). Unsafe to call for the same reason as [`DotFn`].
pub type QuantFn = unsafe fn(x: &[f32], out: &mut [u8]);
