//! Q3_K: 256-weight super-blocks of 16 sub-blocks of 16; 3-bit codes (2 low
//! bits in `qs`, the third in `hmask`), 6-bit signed scales and an f16
//! super-scale: `x = d * (sc_j - 32) * (q - 4)`. Dequantization only.
//!
//! Element `128n + 32j + l` (n in 0..2, j in 0..4, l in 0..32) has low bits
//! `(qs[32n + l] >> 2j) & 3` and high bit `hmask[l] >> (4n + j) & 1`; a clear
//! high bit subtracts 4.

use super::{blocks, Block, QK_K};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q3_K super-block (110 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ3K {
    /// High bits of the codes.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the codes.
    pub qs: [u8; QK_K / 4],
    /// 16 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-scale.
    pub d: f16,
}
const _: () = assert!(size_of::<BlockQ3K>() == 110);

// SAFETY: repr(C): 108 bytes then an f16 at the even offset 108; size 110 is a
// multiple of the alignment 2: no padding, all bit patterns valid.
unsafe impl Block for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    const ELEMS: usize = QK_K;
}

impl BlockQ3K {
    /// The 16 sub-block scales minus 32 (range -32..=31).
    ///
    /// Scale `i` has its low 4 bits in `scales[i % 8]` (low nibble for `i < 8`,
    /// high nibble otherwise) and its top 2 bits at bit `2 * (i / 4)` of
    /// `scales[8 + i % 4]`.
    #[inline]
    pub fn unpack_scales(&self) -> [i8; 16] {
        let s = &self.scales;
        let mut out = [0i8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
            let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
            *o = (low | (high << 4)) as i8 - 32;
        }
        out
    }

    /// The 256 codes minus 4 (range -4..=3), in element order.
    #[inline]
    pub fn unpack(&self) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for n in 0..2 {
            for j in 0..4 {
                let mask = 1u8 << (4 * n + j);
                for l in 0..32 {
                    let low = ((self.qs[32 * n + l] >> (2 * j)) & 3) as i8;
                    let sub = if self.hmask[l] & mask != 0 { 0 } else { 4 };
                    q[128 * n + 32 * j + l] = low - sub;
                }
            }
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ3K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let (q, sc) = (b.unpack(), b.unpack_scales());
        for (j, (o, qj)) in out.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * f32::from(sc[j]);
            for (v, &c) in o.iter_mut().zip(qj) {
                *v = dl * f32::from(c);
            }
        }
    }
}
