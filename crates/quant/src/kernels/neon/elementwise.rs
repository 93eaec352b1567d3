//! NEON element-wise kernels: the RMS norm, GeGLU and the f32 → f16 narrowing of the KV cache,
//! each bit-identical to its scalar reference in [`crate::kernels::scalar`].
//!
//! `fcvtn`/`fcvtl` (single ↔ half, ARMv8.0 base: no FEAT_FP16 needed) round to nearest, ties to
//! even, as the scalar conversions do. The RMS norm's sum of squares stays a left-to-right f64
//! sum (ggml's order, which the logits notice); the squares, widenings and the scaling are the
//! vector part.

use super::{load_f32, store_f32};
use crate::kernels::scalar::{gelu_f16_table, gelu_tanh_f16, rms_inv};
use std::arch::aarch64::*;
use std::arch::asm;

/// Eight f32 (two registers) narrowed to eight IEEE halves (`fcvtn` + `fcvtn2`).
#[inline]
#[target_feature(enable = "neon")]
fn narrow8(lo: float32x4_t, hi: float32x4_t) -> uint16x8_t {
    let h: uint16x8_t;
    // SAFETY: register-only instructions of the base ISA; `h` is an early output distinct from
    // both inputs, so `fcvtn` cannot clobber `hi` before `fcvtn2` reads it.
    unsafe {
        asm!(
            "fcvtn {h:v}.4h, {lo:v}.4s",
            "fcvtn2 {h:v}.8h, {hi:v}.4s",
            lo = in(vreg) lo,
            hi = in(vreg) hi,
            h = out(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    h
}

/// Eight IEEE halves widened to f32 (`fcvtl` + `fcvtl2`; exact).
#[inline]
#[target_feature(enable = "neon")]
fn widen8(h: uint16x8_t) -> [float32x4_t; 2] {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: register-only instructions of the base ISA; no memory, stack or flags. `lo` is
    // an early output (`out`, not `lateout`): it is written before `fcvtl2` reads `h`, so it
    // must not share `h`'s register.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = lateout(vreg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    [lo, hi]
}

/// Narrows f32 to IEEE halves over the common length (to nearest, ties to even).
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn f32_to_f16(src: &[f32], dst: &mut [half::f16]) {
    use half::slice::HalfFloatSliceExt;
    let n = src.len().min(dst.len());
    let np = n & !7;
    let (s4, _) = src[..np].as_chunks::<4>();
    for (d, s) in dst[..np].chunks_exact_mut(8).zip(s4.chunks_exact(2)) {
        let h = narrow8(load_f32(&s[0]), load_f32(&s[1]));
        // SAFETY: `d` is 8 writable halves (`half::f16` is a transparent `u16`); `st1` needs
        // no alignment.
        unsafe { vst1q_u16(d.as_mut_ptr().cast(), h) };
    }
    dst[np..n].convert_from_f32_slice(&src[np..n]);
}

/// `Σ x_i²` as the scalar [`crate::kernels::scalar::rms_scale`] sums it: squares rounded to
/// f32, widened, added left to right in f64.
#[inline]
#[target_feature(enable = "neon")]
fn sum_squares(x: &[f32]) -> f64 {
    let (x4, tail) = x.as_chunks::<4>();
    let mut ss = 0f64;
    for c in x4 {
        let v = load_f32(c);
        let sq = vmulq_f32(v, v);
        let (lo, hi) = (vcvt_f64_f32(vget_low_f32(sq)), vcvt_high_f64_f32(sq));
        ss += vgetq_lane_f64::<0>(lo);
        ss += vgetq_lane_f64::<1>(lo);
        ss += vgetq_lane_f64::<0>(hi);
        ss += vgetq_lane_f64::<1>(hi);
    }
    for v in tail {
        ss += f64::from(v * v);
    }
    ss
}

/// `x = src / sqrt(mean(src²) + eps) · w` with `src = x` when `None`, over the common length.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn rms_norm(x: &mut [f32], src: Option<&[f32]>, w: &[f32], eps: f32) {
    let inv = match src {
        Some(s) => rms_inv(sum_squares(s), s.len(), eps),
        None => rms_inv(sum_squares(x), x.len(), eps),
    };
    let n = x
        .len()
        .min(w.len())
        .min(src.map_or(usize::MAX, <[f32]>::len));
    let np = n & !3;
    let (w4, _) = w[..np].as_chunks::<4>();
    for (k, g) in w4.iter().enumerate() {
        let v = load_f32(
            src.unwrap_or(x)[4 * k..4 * k + 4]
                .try_into()
                .expect("4 floats"),
        );
        let out: &mut [f32; 4] = (&mut x[4 * k..4 * k + 4]).try_into().expect("4 floats");
        store_f32(out, vmulq_f32(vmulq_n_f32(v, inv), load_f32(g)));
    }
    for i in np..n {
        let v = src.map_or(x[i], |s| s[i]);
        x[i] = v * inv * w[i];
    }
}

/// `g_i = gelu_tanh_f16(g_i) · u_i` over the common length: the f16 rounding and the widening
/// of the table's results in vector registers, the table lookups lane by lane.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn gelu_mul_f32(g: &mut [f32], u: &[f32]) {
    let table = gelu_f16_table();
    let n = g.len().min(u.len());
    let np = n & !7;
    let (lo_cut, hi_cut, zero) = (vdupq_n_f32(-10.0), vdupq_n_f32(10.0), vdupq_n_f32(0.0));
    let (g4, _) = g[..np].as_chunks_mut::<4>();
    for (gs, us) in g4
        .chunks_exact_mut(2)
        .zip(u[..np].as_chunks::<4>().0.chunks_exact(2))
    {
        let x = [load_f32(&gs[0]), load_f32(&gs[1])];
        let mut bits = [0u16; 8];
        // SAFETY: `bits` is 8 writable u16; `st1` needs no alignment.
        unsafe { vst1q_u16(bits.as_mut_ptr(), narrow8(x[0], x[1])) };
        let looked = bits.map(|b| table[usize::from(b)]);
        // SAFETY: `looked` is 8 readable u16.
        let y = widen8(unsafe { vld1q_u16(looked.as_ptr()) });
        for h in 0..2 {
            let r = vbslq_f32(vcleq_f32(x[h], lo_cut), zero, y[h]);
            let r = vbslq_f32(vcgeq_f32(x[h], hi_cut), x[h], r);
            store_f32(&mut gs[h], vmulq_f32(r, load_f32(&us[h])));
        }
    }
    for (gv, uv) in g[np..n].iter_mut().zip(&u[np..n]) {
        *gv = gelu_tanh_f16(*gv) * uv;
    }
}
