//! Q5_K: like Q4_K with a fifth bit per code: `x = d * sc_j * q - dmin * m_j`, `q` in 0..=31.
//!
//! Low nibbles as Q4_K; `qh[l]` bit `2c` is the fifth bit of element `64c + l`
//! and bit `2c + 1` that of element `64c + 32 + l`.

use super::q4_k::{dequantize_affine, quantize_affine, unpack_scales};
use super::{blocks, write_block, Block, QK_K};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q5_K super-block (176 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5K {
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
    /// 8 scales and 8 mins, 6 bits each (packed as Q4_K).
    pub scales: [u8; 12],
    /// Fifth bits of the codes.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of the codes.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ5K>() == 176);

// SAFETY: repr(C), two f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    const ELEMS: usize = QK_K;
}

impl BlockQ5K {
    /// The 256 codes (0..=31) in element order, the 8 scales and the 8 mins.
    #[inline]
    pub fn unpack(&self) -> ([u8; QK_K], [u8; 8], [u8; 8]) {
        let mut q = [0u8; QK_K];
        for (c, chunk) in self.qs.chunks_exact(32).enumerate() {
            for (l, &b) in chunk.iter().enumerate() {
                let h = self.qh[l] >> (2 * c);
                q[64 * c + l] = (b & 0x0f) | ((h & 1) << 4);
                q[64 * c + 32 + l] = (b >> 4) | (((h >> 1) & 1) << 4);
            }
        }
        let (sc, mn) = unpack_scales(&self.scales);
        (q, sc, mn)
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ5K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        let (q, sc, mn) = b.unpack();
        dequantize_affine(&q, &sc, &mn, b.d.to_f32(), b.dmin.to_f32(), out);
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(176)) {
        let a = quantize_affine(x, 31);
        let mut b = BlockQ5K {
            d: a.d,
            dmin: a.dmin,
            scales: a.scales,
            qh: [0; QK_K / 8],
            qs: [0; QK_K / 2],
        };
        for (c, chunk) in b.qs.chunks_exact_mut(32).enumerate() {
            for (l, byte) in chunk.iter_mut().enumerate() {
                let (lo, hi) = (a.q[64 * c + l], a.q[64 * c + 32 + l]);
                *byte = (lo & 0x0f) | ((hi & 0x0f) << 4);
                b.qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
        write_block(&b, out);
    }
}
