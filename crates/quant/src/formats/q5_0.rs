//! Q5_0: blocks of 32 weights, 5-bit codes and one f16 scale: `x = (q - 16) * d`.
//!
//! The low 4 bits are packed as in Q4_0; bit `j` of the little-endian `qh`
//! word is the fifth bit of element `j`.

use super::{blocks, signed_absmax, write_block, Block};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q5_0 block (22 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits of the 32 codes (little-endian u32, bit `j` = element `j`).
    pub qh: [u8; 4],
    /// Low 4 bits of the 32 codes, two per byte.
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

// SAFETY: repr(C), an f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    const ELEMS: usize = 32;
}

impl BlockQ5_0 {
    /// The 32 codes minus 16 (range -16..=15), in element order.
    #[inline]
    pub fn unpack(&self) -> [i8; 32] {
        let qh = u32::from_le_bytes(self.qh);
        let mut q = [0i8; 32];
        for (j, &b) in self.qs.iter().enumerate() {
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            q[j] = ((b & 0x0f) | (h0 << 4)) as i8 - 16;
            q[j + 16] = ((b >> 4) | (h1 << 4)) as i8 - 16;
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ5_0>(src).zip(dst.chunks_exact_mut(32)) {
        let d = b.d.to_f32();
        for (o, q) in out.iter_mut().zip(b.unpack()) {
            *o = f32::from(q) * d;
        }
    }
}

/// ggml's reference rule: `d = max / -16`, `q = min(31, trunc(x / d + 16.5))`.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(32).zip(dst.chunks_exact_mut(22)) {
        let (max, _) = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut b = BlockQ5_0 {
            d: f16::from_f32(d),
            qh: [0; 4],
            qs: [0; 16],
        };
        let mut qh = 0u32;
        for j in 0..16 {
            let q0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let q1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
            b.qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= u32::from(q0 >> 4) << j;
            qh |= u32::from(q1 >> 4) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
        write_block(&b, out);
    }
}
