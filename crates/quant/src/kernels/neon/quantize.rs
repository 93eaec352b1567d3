//! NEON activation quantizers: exactly the bytes of the scalar quantizers (Q8_0 as ggml's
//! quantizer, `x · (127 / amax)` rounded half to even; Q8_K as its reference,
//! `x · (−127 / max)` half to even, clamped to −127). `fcvtns` rounds half to even like the
//! scalar `round_ties_even`, and the saturating narrows (`sqxtn`) match the scalar casts; the
//! extremes use `fmaxnm`/`fminnm`, which skip NaNs as `f32::max`/`f32::min` do.

use super::load_f32;
use crate::formats::float::f32_to_f16;
use crate::formats::q8_k::{fill_bsums, BlockQ8K};
use crate::formats::write_block;
use std::arch::aarch64::*;

/// `n` floats (a multiple of 4) as registers.
#[inline]
#[target_feature(enable = "neon")]
fn load_n<const R: usize>(x: &[f32]) -> [float32x4_t; R] {
    let (c, _) = x.as_chunks::<4>();
    std::array::from_fn(|k| load_f32(&c[k]))
}

/// Eight registers of products `x · s` rounded half to even and saturated to 32 i8, in order.
#[inline]
#[target_feature(enable = "neon")]
fn round_pack(v: &[float32x4_t; 8], s: float32x4_t) -> [int8x16_t; 2] {
    let i = v.map(|x| vcvtnq_s32_f32(vmulq_f32(x, s)));
    let h: [int16x8_t; 4] =
        std::array::from_fn(|k| vqmovn_high_s32(vqmovn_s32(i[2 * k]), i[2 * k + 1]));
    [
        vqmovn_high_s16(vqmovn_s16(h[0]), h[1]),
        vqmovn_high_s16(vqmovn_s16(h[2]), h[3]),
    ]
}

/// Stores 16 signed bytes.
#[inline]
#[target_feature(enable = "neon")]
fn store_s8(out: &mut [u8], v: int8x16_t) {
    let out = &mut out[..16];
    // SAFETY: `out` is 16 writable bytes; `st1` needs no alignment.
    unsafe { vst1q_s8(out.as_mut_ptr().cast(), v) }
}

/// Quantizes activations to Q8_0; same bytes as the scalar quantizer.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let v: [float32x4_t; 8] = load_n(xb);
        let m = v
            .iter()
            .fold(vdupq_n_f32(0.0), |m, t| vmaxnmq_f32(m, vabsq_f32(*t)));
        let amax = vmaxnmvq_f32(m);
        let id = vdupq_n_f32(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q = round_pack(&v, id);
        ob[..2].copy_from_slice(&f32_to_f16(amax / 127.0).to_le_bytes());
        store_s8(&mut ob[2..18], q[0]);
        store_s8(&mut ob[18..34], q[1]);
    }
}

/// Quantizes activations to Q8_K; same bytes as the scalar quantizer.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(292)) {
        let (mut vmax, mut vmin) = (vdupq_n_f32(f32::MIN), vdupq_n_f32(f32::MAX));
        for c in xb.chunks_exact(32) {
            for v in load_n::<8>(c) {
                vmax = vmaxnmq_f32(vmax, v);
                vmin = vminnmq_f32(vmin, v);
            }
        }
        let (max, min) = (vmaxnmvq_f32(vmax), vminnmvq_f32(vmin));
        let ext = if max >= -min { max } else { min };
        let mut b = BlockQ8K::default();
        if ext != 0.0 && ext.is_finite() {
            let iscale = -127.0 / ext;
            let (is, lo) = (vdupq_n_f32(iscale), vdupq_n_s8(-127));
            for (c, qs) in xb.chunks_exact(32).zip(b.qs.chunks_exact_mut(32)) {
                let q = round_pack(&load_n(c), is).map(|v| vmaxq_s8(v, lo));
                let mut bytes = [0u8; 32];
                store_s8(&mut bytes[..16], q[0]);
                store_s8(&mut bytes[16..], q[1]);
                for (o, t) in qs.iter_mut().zip(bytes) {
                    *o = t as i8;
                }
            }
            fill_bsums(&mut b);
            b.d = 1.0 / iscale;
        }
        write_block(&b, ob);
    }
}
