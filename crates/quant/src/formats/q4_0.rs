//! Q4_0: blocks of 32 weights, 4-bit codes and one f16 scale: `x = (q - 8) * d`.
//!
//! Byte `j` of `qs` holds element `j` in its low nibble and element `j + 16`
//! in its high nibble.

use super::{blocks, signed_absmax, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q4_0 block (18 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// 32 4-bit codes, two per byte.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

// SAFETY: repr(C), an f16 followed by bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    const ELEMS: usize = 32;
}

impl BlockQ4_0 {
    /// The 32 codes minus 8 (range -8..=7), in element order.
    #[inline]
    pub fn unpack(&self) -> [i8; 32] {
        let mut q = [0i8; 32];
        for (j, &b) in self.qs.iter().enumerate() {
            q[j] = (b & 0x0f) as i8 - 8;
            q[j + 16] = (b >> 4) as i8 - 8;
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ4_0>(src).zip(dst.chunks_exact_mut(32)) {
        let d = b.d.to_f32();
        for (o, q) in out.iter_mut().zip(b.unpack()) {
            *o = f32::from(q) * d;
        }
    }
}

/// ggml's reference rule: `d = max / -8` (max = the value with the largest
/// magnitude), `q = min(15, trunc(x / d + 8.5))`.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(18)) {
        let (max, _) = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut b = BlockQ4_0 {
            d: f16::from_f32(d),
            qs: [0; 16],
        };
        for j in 0..16 {
            let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
        write_block(&b, out);
    }
}
