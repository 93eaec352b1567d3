//! Q4_1: blocks of 32 weights, 4-bit codes, f16 scale and f16 min: `x = q * d + m`.
//!
//! Nibble layout as Q4_0 (byte `j`: element `j` low, element `j + 16` high).

use super::{blocks, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q4_1 block (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Offset (the block minimum).
    pub m: f16,
    /// 32 4-bit codes, two per byte.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

// SAFETY: repr(C), two f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    const ELEMS: usize = 32;
}

impl BlockQ4_1 {
    /// The 32 codes (range 0..=15), in element order.
    #[inline]
    pub fn unpack(&self) -> [u8; 32] {
        let mut q = [0u8; 32];
        for (j, &b) in self.qs.iter().enumerate() {
            q[j] = b & 0x0f;
            q[j + 16] = b >> 4;
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ4_1>(src).zip(dst.chunks_exact_mut(32)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (o, q) in out.iter_mut().zip(b.unpack()) {
            *o = f32::from(q) * d + m;
        }
    }
}

/// ggml's reference rule: `d = (max - min) / 15`, `q = min(15, trunc((x - min) / d + 0.5))`.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(20)) {
        let min = x.iter().copied().fold(f32::MAX, f32::min);
        let max = x.iter().copied().fold(f32::MIN, f32::max);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut b = BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs: [0; 16],
        };
        for j in 0..16 {
            let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = q0 | (q1 << 4);
        }
        write_block(&b, out);
    }
}
