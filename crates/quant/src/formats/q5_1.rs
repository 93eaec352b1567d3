//! Q5_1: blocks of 32 weights, 5-bit codes, f16 scale and f16 min: `x = q * d + m`.
//!
//! Bit packing as Q5_0.

use super::{blocks, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q5_1 block (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Offset (the block minimum).
    pub m: f16,
    /// Fifth bits of the 32 codes (little-endian u32, bit `j` = element `j`).
    pub qh: [u8; 4],
    /// Low 4 bits of the 32 codes, two per byte.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

// SAFETY: repr(C), two f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    const ELEMS: usize = 32;
}

impl BlockQ5_1 {
    /// The 32 codes (range 0..=31), in element order.
    #[inline]
    pub fn unpack(&self) -> [u8; 32] {
        let qh = u32::from_le_bytes(self.qh);
        let mut q = [0u8; 32];
        for (j, &b) in self.qs.iter().enumerate() {
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            q[j] = (b & 0x0f) | (h0 << 4);
            q[j + 16] = (b >> 4) | (h1 << 4);
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ5_1>(src).zip(dst.chunks_exact_mut(32)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (o, q) in out.iter_mut().zip(b.unpack()) {
            *o = f32::from(q) * d + m;
        }
    }
}

/// ggml's reference rule: `d = (max - min) / 31`, `q = min(31, trunc((x - min) / d + 0.5))`.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(24)) {
        let min = x.iter().copied().fold(f32::MAX, f32::min);
        let max = x.iter().copied().fold(f32::MIN, f32::max);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut b = BlockQ5_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh: [0; 4],
            qs: [0; 16],
        };
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = (((x[j] - min) * id + 0.5) as i8).min(31) as u8;
            let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(31) as u8;
            b.qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= u32::from(q0 >> 4) << j;
            qh |= u32::from(q1 >> 4) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
        write_block(&b, out);
    }
}
