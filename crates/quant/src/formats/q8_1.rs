//! Q8_1: Q8_0 plus `s = d * sum(q)`, the activations Q4_1/Q5_1 weights dot against.

use super::{blocks, q8_0, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q8_1 block (36 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ8_1 {
    /// Scale.
    pub d: f16,
    /// `d * sum(qs)`, rounded to f16.
    pub s: f16,
    /// 32 signed codes.
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);

// SAFETY: repr(C), two f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ8_1 {
    const TYPE: GgmlType = GgmlType::Q8_1;
    const ELEMS: usize = 32;
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ8_1>(src).zip(dst.chunks_exact_mut(32)) {
        let d = b.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&b.qs) {
            *o = f32::from(q) * d;
        }
    }
}

/// Quantizes like Q8_0 and stores `s = f16(d * sum(q))` with the f32 `d`.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, dst, q8_0::quantize_block);
}

/// [`quantize`] of activations, with the codes of ggml's x86 quantizer
/// ([`q8_0::quantize_block_acts`]: `x * (127 / amax)` rounded half to even), which is what
/// llama.cpp's Q4_1 and Q5_1 products multiply by.
pub(crate) fn quantize_acts(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, dst, q8_0::quantize_block_acts);
}

fn quantize_with(src: &[f32], dst: &mut [u8], block: fn(&[f32]) -> q8_0::BlockQ8_0) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(36)) {
        let b0 = block(x);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let sum: i32 = b0.qs.iter().map(|&q| i32::from(q)).sum();
        let b = BlockQ8_1 {
            d: b0.d,
            s: f16::from_f32(sum as f32 * d),
            qs: b0.qs,
        };
        write_block(&b, out);
    }
}
