//! Q8_0: blocks of 32 values, 8-bit codes and one f16 scale: `x = q * d`.
//!
//! Used both for weights and for the activations that Q4_0/Q5_0/Q8_0 weights
//! dot against.

use super::{blocks, round_away, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q8_0 block (34 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// 32 signed codes.
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

// SAFETY: repr(C), an f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    const ELEMS: usize = 32;
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ8_0>(src).zip(dst.chunks_exact_mut(32)) {
        let d = b.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&b.qs) {
            *o = f32::from(q) * d;
        }
    }
}

/// Quantizes one block: ggml's reference rule `d = amax / 127`, `q = round(x / d)`
/// (half away from zero, computed as `x * (1 / d)`).
#[inline]
pub(crate) fn quantize_block(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ8_0 {
        d: f16::from_f32(d),
        qs: [0; 32],
    };
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = round_away(v * id) as i8;
    }
    b
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(34)) {
        write_block(&quantize_block(x), out);
    }
}
