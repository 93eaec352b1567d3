//! NEON float-vector kernels of attention and the MLP: dot, axpy, f16 widening, softmax,
//! SwiGLU — each bit-identical to its scalar reference in [`crate::kernels::scalar`] (whose
//! orders are ggml's x86 orders): the f32 dot keeps the 32 partial sums as eight registers,
//! `exp` is the same polynomial with the same fused operations.

use super::{hsum8, load_f32, store_f32};
use crate::kernels::scalar::{exp_f32, reduce_dot_partials};
use std::arch::aarch64::*;
use std::arch::asm;

/// `Σ a_i b_i` over the common length, in [`crate::kernels::scalar::dot_f32`]'s order.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = n & !31;
    let mut acc = [vdupq_n_f32(0.0); 8];
    let (xa, _) = a[..np].as_chunks::<4>();
    let (xb, _) = b[..np].as_chunks::<4>();
    for (x, y) in xa.chunks_exact(8).zip(xb.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] = vfmaq_f32(acc[i], load_f32(&x[i]), load_f32(&y[i]));
        }
    }
    let mut partials = [0f32; 32];
    for (p, v) in partials.as_chunks_mut::<4>().0.iter_mut().zip(acc) {
        store_f32(p, v);
    }
    let mut sum = reduce_dot_partials(&partials);
    for (x, y) in a[np..n].iter().zip(&b[np..n]) {
        sum = x.mul_add(*y, sum);
    }
    sum
}

/// `y_i += alpha * x_i` (one FMA each) over the common length.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn axpy_f32(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let np = n & !3;
    let (ys, _) = y[..np].as_chunks_mut::<4>();
    for (yv, xv) in ys.iter_mut().zip(x[..np].as_chunks::<4>().0) {
        let r = vfmaq_n_f32(load_f32(yv), load_f32(xv), alpha);
        store_f32(yv, r);
    }
    for (yv, xv) in y[np..n].iter_mut().zip(&x[np..n]) {
        *yv = alpha.mul_add(*xv, *yv);
    }
}

/// Widens IEEE halves to f32 over the common length (exact; `fcvtl`, ARMv8.0 base).
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn f16_to_f32(src: &[half::f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let np = n & !3;
    let (out, _) = dst[..np].as_chunks_mut::<4>();
    for (o, h) in out.iter_mut().zip(src[..np].chunks_exact(4)) {
        let bits: u64 = h
            .iter()
            .rev()
            .fold(0, |acc, v| (acc << 16) | u64::from(v.to_bits()));
        let wide: float32x4_t;
        // SAFETY: register-only instructions of the base ISA; no memory, stack or flags.
        unsafe {
            asm!(
                "fmov {t:d}, {bits}",
                "fcvtl {out:v}.4s, {t:v}.4h",
                bits = in(reg) bits,
                t = out(vreg) _,
                out = lateout(vreg) wide,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        store_f32(o, wide);
    }
    for (d, s) in dst[np..n].iter_mut().zip(&src[np..n]) {
        *d = s.to_f32();
    }
}

/// `exp_f32` on four lanes, bit for bit; `None` when a lane leaves the range where the scalar
/// function takes its main path (`|n| > 126`: the caller then uses the scalar function).
#[inline]
#[target_feature(enable = "neon")]
fn exp4(x: float32x4_t) -> Option<float32x4_t> {
    const ROUND_MAGIC: f32 = 12582912.0;
    const LOG2E: f32 = f32::from_bits(0x3fb8_aa3b);
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    const P: [u32; 5] = [
        0x3f7f_fff6,
        0x3eff_fedb,
        0x3e2a_af33,
        0x3d2b_9f17,
        0x3c07_2010,
    ];
    let p = |i: usize| vdupq_n_f32(f32::from_bits(P[i]));
    let magic = vdupq_n_f32(ROUND_MAGIC);
    let z = vfmaq_n_f32(magic, x, LOG2E);
    let n = vsubq_f32(z, magic);
    if vmaxvq_f32(vabsq_f32(n)) > 126.0 {
        return None;
    }
    let neg = vnegq_f32(n);
    let b = vfmaq_n_f32(vfmaq_n_f32(x, neg, LN2_HI), neg, LN2_LO);
    let e = vshlq_n_u32::<23>(vreinterpretq_u32_f32(z));
    let k = vreinterpretq_f32_u32(vaddq_u32(e, vdupq_n_u32(1f32.to_bits())));
    let u = vmulq_f32(b, b);
    let hi = vfmaq_f32(p(3), p(4), b);
    let lo = vfmaq_f32(p(1), p(2), b);
    let j = vfmaq_f32(vmulq_f32(p(0), b), vfmaq_f32(lo, hi, u), u);
    Some(vfmaq_f32(k, j, k))
}

/// `exp_f32` of every lane (the vector path, or lane by lane where it does not apply).
#[inline]
#[target_feature(enable = "neon")]
fn exp4_or_scalar(x: float32x4_t) -> float32x4_t {
    exp4(x).unwrap_or_else(|| {
        let mut l = [0f32; 4];
        store_f32(&mut l, x);
        load_f32(&l.map(exp_f32))
    })
}

/// `x = softmax(x)` in place, in [`crate::kernels::scalar::softmax_f32`]'s order.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn softmax_f32(x: &mut [f32]) {
    let Some(max) = x.iter().copied().reduce(f32::max) else {
        return;
    };
    let m = vdupq_n_f32(max);
    let mut sum = 0f64;
    for block in x.chunks_mut(8) {
        let mut lanes = [0f32; 8];
        lanes[..block.len()].copy_from_slice(block);
        let (halves, _) = lanes.as_chunks_mut::<4>();
        let lo = exp4_or_scalar(vsubq_f32(load_f32(&halves[0]), m));
        let hi = exp4_or_scalar(vsubq_f32(load_f32(&halves[1]), m));
        store_f32(&mut halves[0], lo);
        store_f32(&mut halves[1], hi);
        block.copy_from_slice(&lanes[..block.len()]);
        let lo = if block.len() < 4 {
            zero_from(lo, block.len())
        } else {
            lo
        };
        let hi = if block.len() < 8 {
            zero_from(hi, block.len().saturating_sub(4))
        } else {
            hi
        };
        sum += f64::from(hsum8(lo, hi));
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// `v` with lanes `from..4` set to zero (a short last block is padded with zeros).
#[inline]
#[target_feature(enable = "neon")]
fn zero_from(v: float32x4_t, from: usize) -> float32x4_t {
    let mut l = [0f32; 4];
    store_f32(&mut l, v);
    l[from.min(4)..].fill(0.0);
    load_f32(&l)
}

/// `g_i = silu(g_i) · u_i` over the common length: `g / (1 + exp_f32(0 − g)) · u`, as the
/// scalar reference.
///
/// # Safety
/// None beyond NEON (every aarch64 CPU); `unsafe` only to match the kernel table's type.
#[target_feature(enable = "neon")]
pub unsafe fn silu_mul_f32(g: &mut [f32], u: &[f32]) {
    let n = g.len().min(u.len());
    let np = n & !3;
    let one = vdupq_n_f32(1.0);
    let (gs, _) = g[..np].as_chunks_mut::<4>();
    for (gv, uv) in gs.iter_mut().zip(u[..np].as_chunks::<4>().0) {
        let x = load_f32(gv);
        let e = exp4_or_scalar(vsubq_f32(vdupq_n_f32(0.0), x));
        let r = vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), load_f32(uv));
        store_f32(gv, r);
    }
    for (gv, uv) in g[np..n].iter_mut().zip(&u[np..n]) {
        *gv = *gv / (1.0 + exp_f32(0.0 - *gv)) * uv;
    }
}
