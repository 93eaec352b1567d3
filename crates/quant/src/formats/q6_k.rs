//! Q6_K: 256-weight super-blocks of 16 sub-blocks of 16; 6-bit codes, a signed
//! 8-bit scale per sub-block and an f16 super-scale: `x = d * sc_j * (q - 32)`.
//!
//! Per half `h` (128 elements), with `l` in 0..32: `ql[64h + l]` holds the low
//! nibbles of elements `l` (low) and `l + 64` (high); `ql[64h + 32 + l]` those
//! of `l + 32` and `l + 96`; `qh[32h + l]` holds the top two bits of elements
//! `l`, `l + 32`, `l + 64`, `l + 96` at bit offsets 0, 2, 4, 6.

use super::kquant_fit::fit_symmetric;
use super::{blocks, nearest_int, signed_absmax, write_block, Block, QK_K};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q6_K super-block (210 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ6K {
    /// Low 4 bits of the codes.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the codes.
    pub qh: [u8; QK_K / 4],
    /// Signed sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-scale.
    pub d: f16,
}
const _: () = assert!(size_of::<BlockQ6K>() == 210);

// SAFETY: repr(C): 208 bytes then an f16 at the even offset 208; size 210 is a
// multiple of the alignment 2: no padding, all bit patterns valid.
unsafe impl Block for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const ELEMS: usize = QK_K;
}

impl BlockQ6K {
    /// The 256 codes minus 32 (range -32..=31), in element order.
    #[inline]
    pub fn unpack(&self) -> [i8; QK_K] {
        let mut q = [0i8; QK_K];
        for h in 0..2 {
            let (ql, qh) = (&self.ql[64 * h..], &self.qh[32 * h..]);
            let out = &mut q[128 * h..];
            for l in 0..32 {
                let hb = qh[l];
                out[l] = ((ql[l] & 0x0f) | ((hb & 3) << 4)) as i8 - 32;
                out[l + 32] = ((ql[l + 32] & 0x0f) | (((hb >> 2) & 3) << 4)) as i8 - 32;
                out[l + 64] = ((ql[l] >> 4) | (((hb >> 4) & 3) << 4)) as i8 - 32;
                out[l + 96] = ((ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        q
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ6K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let q = b.unpack();
        for (j, (o, qj)) in out.chunks_exact_mut(16).zip(q.chunks_exact(16)).enumerate() {
            let dl = d * f32::from(b.scales[j]);
            for (v, &c) in o.iter_mut().zip(qj) {
                *v = dl * f32::from(c);
            }
        }
    }
}

/// Sub-block scales by weighted search (`w = x²`), then 8-bit scales against
/// `d = max_scale / -128`, then codes recomputed against the quantized scales.
fn quantize_block(x: &[f32]) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let mut scale = [0f32; 16];
    let mut w = [0f32; 16];
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        for (wi, v) in w.iter_mut().zip(xs) {
            *wi = v * v;
        }
        scale[j] = fit_symmetric(xs, &w, 32, &mut l[16 * j..16 * j + 16]);
    }
    let mut b = BlockQ6K {
        ql: [0; QK_K / 2],
        qh: [0; QK_K / 4],
        scales: [0; 16],
        d: f16::ZERO,
    };
    let (max_scale, amax) = signed_absmax(&scale);
    if amax >= 1e-30 {
        let iscale = -128.0 / max_scale;
        b.d = f16::from_f32(1.0 / iscale);
        for (s, &v) in b.scales.iter_mut().zip(&scale) {
            *s = nearest_int(iscale * v).clamp(-128, 127) as i8;
        }
    }
    for j in 0..16 {
        let dl = b.d.to_f32() * f32::from(b.scales[j]);
        for (c, &v) in l[16 * j..16 * j + 16]
            .iter_mut()
            .zip(&x[16 * j..16 * j + 16])
        {
            *c = if dl != 0.0 {
                nearest_int(v / dl).clamp(-32, 31) as i8
            } else {
                0
            };
        }
    }
    pack(&mut b, &l);
    b
}

fn pack(b: &mut BlockQ6K, l: &[i8; QK_K]) {
    for h in 0..2 {
        for i in 0..32 {
            let code = |k: usize| (l[128 * h + i + 32 * k] + 32) as u8;
            let (c0, c1, c2, c3) = (code(0), code(1), code(2), code(3));
            b.ql[64 * h + i] = (c0 & 0x0f) | ((c2 & 0x0f) << 4);
            b.ql[64 * h + 32 + i] = (c1 & 0x0f) | ((c3 & 0x0f) << 4);
            b.qh[32 * h + i] = (c0 >> 4) | ((c1 >> 4) << 2) | ((c2 >> 4) << 4) | ((c3 >> 4) << 6);
        }
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(210)) {
        write_block(&quantize_block(x), out);
    }
}
