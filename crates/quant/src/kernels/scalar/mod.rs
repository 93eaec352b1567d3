//! Portable scalar reference kernels: clear, exact-integer block dots.
//!
//! These are safe functions; they coerce to [`super::DotFn`]. They read blocks
//! with the format structs, so a short slice just yields fewer blocks.

mod elementwise;
mod float;
mod gemm;
mod igemm;
mod igemm_k;
mod kquants;
mod legacy;
mod vector;

pub use elementwise::{f32_to_f16, gelu_mul_f32, gelu_tanh, gelu_tanh_f16, rms_norm, rms_scale};
#[cfg_attr(not(target_arch = "aarch64"), allow(unused_imports))] // the NEON kernels' helpers
pub(crate) use elementwise::{gelu_f16_table, rms_inv};
pub use float::{dot_bf16_f32, dot_f16_f32, dot_f32_f32};
pub use gemm::{interleave_panel, panel_f32};
pub use igemm::tile_i8;
pub use igemm_k::tile_i8_k;
pub(crate) use kquants::min_sum;
pub use kquants::{
    dot4_q4_k_q8_k, dot_q2_k_q8_k, dot_q3_k_q8_k, dot_q4_k_q8_k, dot_q5_k_q8_k, dot_q6_k_q8_k,
};
pub use legacy::{dot_q4_0_q8_0, dot_q4_1_q8_1, dot_q5_0_q8_0, dot_q5_1_q8_1, dot_q8_0_q8_0};
pub use vector::{
    axpy_f32, dot_f32, exp_f32, f16_to_f32, hsum8, reduce_dot_partials, silu_mul_f32, softmax_f32,
};

use crate::formats::{q8_0, q8_k, write_block};

/// Quantizes activations to Q8_0 (ggml's x86 rule, see [`q8_0::quantize_block_acts`]).
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        write_block(&q8_0::quantize_block_acts(xb), ob);
    }
}

/// Quantizes activations to Q8_1 (ggml's x86 rule, as [`quantize_q8_0`]).
pub fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    crate::formats::q8_1::quantize_acts(x, out);
}

/// Quantizes activations to Q8_K (see [`crate::formats::q8_k`] for the tie rule).
pub fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(292)) {
        write_block(&q8_k::quantize_block_with(xb, q8_k::signed_extreme(xb)), ob);
    }
}

/// "Quantizes" activations to F32: copies them as little-endian bytes.
pub fn quantize_f32(x: &[f32], out: &mut [u8]) {
    for (v, o) in x.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&v.to_le_bytes());
    }
}
