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

/// Quantizes one block of activations the way ggml's x86 SIMD quantizer does (what llama.cpp
/// multiplies by on AVX2 machines): `d = amax / 127`, but `q = x * (127 / amax)` rounded half
/// to even. It differs from [`quantize_block`] in the last bit of some codes, enough to move a
/// sensitive model's logits, so activations use this rule and weights the reference one.
#[inline]
pub(crate) fn quantize_block_acts(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut b = BlockQ8_0 {
        d: f16::from_f32(amax / 127.0),
        qs: [0; 32],
    };
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
    b
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(34)) {
        write_block(&quantize_block(x), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights round half away from zero through `1 / d`; activations round half to even
    /// through `127 / amax`, as ggml's x86 quantizer does.
    #[test]
    fn activation_rule_rounds_ties_to_even() {
        let mut x = [0.0f32; 32];
        x[0] = 127.0; // amax 127: d = 1, both scales exactly 1
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.5;
        let w = quantize_block(&x);
        let a = quantize_block_acts(&x);
        assert_eq!(&w.qs[..4], &[127, 3, -4, 1]);
        assert_eq!(&a.qs[..4], &[127, 2, -4, 0]);
        assert_eq!(w.d, a.d);
        assert_eq!(quantize_block_acts(&[0.0; 32]).qs, [0; 32]);
    }
}
