//! Q8_K: blocks of 256 values, f32 scale, 8-bit codes and 16 partial sums —
//! the activations the K-quant weights dot against: `x = q * d`.

use super::{blocks, nearest_int, write_block, Block, QK_K};
use statelm_gguf::GgmlType;

/// One Q8_K block (292 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// 256 signed codes, in -127..=127 when produced by this crate.
    pub qs: [i8; QK_K],
    /// Sums of each group of 16 codes.
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

// SAFETY: repr(C), f32 + 256 bytes + 16 i16 (offsets 0, 4, 260; size 292, a
// multiple of the alignment 4): no padding, all bit patterns valid.
unsafe impl Block for BlockQ8K {
    const TYPE: GgmlType = GgmlType::Q8_K;
    const ELEMS: usize = QK_K;
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ8K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        for (o, &q) in out.iter_mut().zip(&b.qs) {
            *o = f32::from(q) * b.d;
        }
    }
}

/// The signed extreme used for the scale: `max(x)` when `max(x) >= -min(x)`,
/// else `min(x)`. (ggml takes the first value of largest magnitude; this tie
/// rule is what a SIMD max/min reduction computes, so scalar and AVX2 agree.)
#[inline]
pub(crate) fn signed_extreme(x: &[f32]) -> f32 {
    let max = x.iter().copied().fold(f32::MIN, f32::max);
    let min = x.iter().copied().fold(f32::MAX, f32::min);
    if max >= -min {
        max
    } else {
        min
    }
}

/// Quantizes one block given its signed extreme: `q = nearest_int(-127 / max * x)`
/// clamped to -127..=127, `d = max / -127`.
#[inline]
pub(crate) fn quantize_block_with(x: &[f32], max: f32) -> BlockQ8K {
    let mut b = BlockQ8K::default();
    if max == 0.0 || !max.is_finite() {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).clamp(-127, 127) as i8;
    }
    fill_bsums(&mut b);
    b.d = 1.0 / iscale;
    b
}

/// Recomputes `bsums` from `qs`.
#[inline]
pub(crate) fn fill_bsums(b: &mut BlockQ8K) {
    for (s, g) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = g.iter().map(|&q| i16::from(q)).sum();
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(292)) {
        write_block(&quantize_block_with(x, signed_extreme(x)), out);
    }
}
