//! AVX2 activation quantizers. They produce exactly the bytes of the scalar
//! quantizers: Q8_0 as ggml's x86 quantizer (`x * (127 / amax)`, half to even), Q8_K as
//! its reference (`x * (-127 / max)`, half to even).

use super::{load_ps, store256};
use crate::formats::float::f32_to_f16;
use crate::formats::q8_k::{fill_bsums, BlockQ8K};
use crate::formats::write_block;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmax_ps(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hmin_ps(v: __m256) -> f32 {
    let m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_min_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// Packs 4 x 8 i32 (integral f32 values) into 32 saturated i8 in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_i8(v: [__m256; 4]) -> __m256i {
    let i = v.map(|x| _mm256_cvtps_epi32(x));
    let a = _mm256_packs_epi32(i[0], i[1]);
    let b = _mm256_packs_epi32(i[2], i[3]);
    let p = _mm256_packs_epi16(a, b);
    // packs interleaves 128-bit lanes: restore element order.
    _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load4(x: &[f32]) -> [__m256; 4] {
    std::array::from_fn(|k| load_ps(x[8 * k..8 * k + 8].try_into().expect("32 floats")))
}

/// Quantizes activations to Q8_0; same bytes as the scalar quantizer.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    let abs_mask = _mm256_set1_ps(-0.0);
    for (xb, ob) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let v = load4(xb);
        let a = v.map(|t| _mm256_andnot_ps(abs_mask, t));
        let amax = hmax_ps(_mm256_max_ps(
            _mm256_max_ps(a[0], a[1]),
            _mm256_max_ps(a[2], a[3]),
        ));
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let q = pack_i8(v.map(|t| {
            _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                t, id,
            ))
        }));
        ob[..2].copy_from_slice(&f32_to_f16(amax / 127.0).to_le_bytes());
        store256((&mut ob[2..34]).try_into().expect("34-byte block"), q);
    }
}

/// Quantizes activations to Q8_K; same bytes as the scalar quantizer.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(256).zip(out.chunks_exact_mut(292)) {
        let (mut vmax, mut vmin) = (_mm256_set1_ps(f32::MIN), _mm256_set1_ps(f32::MAX));
        for c in xb.chunks_exact(32) {
            for v in load4(c) {
                vmax = _mm256_max_ps(vmax, v);
                vmin = _mm256_min_ps(vmin, v);
            }
        }
        let (max, min) = (hmax_ps(vmax), hmin_ps(vmin));
        let ext = if max >= -min { max } else { min };
        let mut b = BlockQ8K::default();
        if ext != 0.0 && ext.is_finite() {
            let iscale = -127.0 / ext;
            let is = _mm256_set1_ps(iscale);
            let lo = _mm256_set1_epi8(-127);
            for (c, qs) in xb.chunks_exact(32).zip(b.qs.chunks_exact_mut(32)) {
                let r = load4(c).map(|v| {
                    _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm256_mul_ps(v, is),
                    )
                });
                let mut tmp = [0u8; 32];
                store256(&mut tmp, _mm256_max_epi8(pack_i8(r), lo));
                for (o, t) in qs.iter_mut().zip(tmp) {
                    *o = t as i8;
                }
            }
            fill_bsums(&mut b);
            b.d = 1.0 / iscale;
        }
        write_block(&b, ob);
    }
}
