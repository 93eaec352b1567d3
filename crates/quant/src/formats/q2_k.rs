//! Q2_K: 256-weight super-blocks of 16 sub-blocks of 16; 2-bit codes, a 4-bit
//! scale and 4-bit min per sub-block, f16 super-scales:
//! `x = d * sc_j * q - dmin * m_j`. Dequantization only.
//!
//! Element `128n + 32j + l` (n in 0..2, j in 0..4, l in 0..32) has code
//! `(qs[32n + l] >> 2j) & 3`; `scales[i]` holds scale `i` in its low nibble and
//! min `i` in its high nibble.

use super::{blocks, Block, QK_K};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q2_K super-block (84 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ2K {
    /// Scales (low nibble) and mins (high nibble) of the 16 sub-blocks.
    pub scales: [u8; QK_K / 16],
    /// 2-bit codes.
    pub qs: [u8; QK_K / 4],
    /// Super-scale of the scales.
    pub d: f16,
    /// Super-scale of the mins.
    pub dmin: f16,
}
const _: () = assert!(size_of::<BlockQ2K>() == 84);

// SAFETY: repr(C): 80 bytes then two f16 at even offsets; size 84 is a multiple
// of the alignment 2: no padding, all bit patterns valid.
unsafe impl Block for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    const ELEMS: usize = QK_K;
}

impl BlockQ2K {
    /// The 256 codes (0..=3), in element order.
    #[inline]
    pub fn unpack(&self) -> [u8; QK_K] {
        let mut q = [0u8; QK_K];
        for n in 0..2 {
            for j in 0..4 {
                for l in 0..32 {
                    q[128 * n + 32 * j + l] = (self.qs[32 * n + l] >> (2 * j)) & 3;
                }
            }
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ2K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
        let q = b.unpack();
        for (j, (o, qj)) in out.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * f32::from(b.scales[j] & 0x0f);
            let ml = dmin * f32::from(b.scales[j] >> 4);
            for (v, &c) in o.iter_mut().zip(qj) {
                *v = dl * f32::from(c) - ml;
            }
        }
    }
}
