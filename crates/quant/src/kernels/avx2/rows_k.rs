//! Eight-row K-quant matvec kernels (decode): eight weight rows against one Q8_K vector, each
//! row's result bit-identical to its single dot ([`super::dot_q4_k_q8_k`],
//! [`super::dot_q6_k_q8_k`]).
//!
//! Per super-block the activation codes and bsums are loaded once for all eight rows, each
//! row's exact integer sums stay in vector lanes until one eight-way horizontal reduction puts
//! row `r`'s sum in lane `r`, and the f32 steps run on all eight rows at once (Q4_K: one FMA
//! of the sums and one of the min sums per super-block, row `r` in lane `r` — the very
//! operations of the single dot). Q6_K keeps its single dot's eight f32 lanes per row.
//!
//! # Safety (all functions)
//! The CPU must support avx2, fma and f16c.

use super::rows::sum_lanes8;
use super::{at, hsum_ps, le16, load256, prefetch_at};
use crate::formats::float::f16_to_f32;
use crate::formats::q4_k::unpack_scales;
use crate::kernels::rows8_prefetch_offset;
use std::arch::x86_64::*;

/// The integer sums of one Q4_K super-block `x` against the Q8_K block `y`: `Σ_j sc_j Σ q y`
/// and `Σ_j m_j (bsum_{2j} + bsum_{2j+1})`, each as eight i32 lanes to be summed, and the
/// block's `[d, dmin]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_sums(x: &[u8; 144], y: &[u8; 292], bsums: __m256i) -> (__m256i, __m256i, [f32; 2]) {
    let m4 = _mm256_set1_epi8(0x0f);
    let (sc, mn) = unpack_scales(at(x, 4));
    let s16 = super::kquants::scales_i16(&sc);
    let mut isum = _mm256_setzero_si256();
    for c in 0..4 {
        let q = load256(at(x, 16 + 32 * c));
        let codes = [
            _mm256_and_si256(q, m4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
        ];
        isum = _mm256_add_epi32(isum, super::kquants::affine_chunk(y, s16, codes, c));
    }
    // Each min twice, as i16, against the sixteen bsums: lane j = m_j (bsum_2j + bsum_2j+1).
    let dup = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let m8 = _mm_shuffle_epi8(_mm_set_epi64x(0, u64::from_le_bytes(mn) as i64), dup);
    let msum = _mm256_madd_epi16(_mm256_cvtepu8_epi16(m8), bsums);
    let d = [f16_to_f32(le16(x, 0)), f16_to_f32(le16(x, 2))];
    (isum, msum, d)
}

/// Prefetches, for each of the eight rows, the super-block (of `bytes` bytes) that the walk
/// reaches [`super::PREFETCH_DISTANCE`] bytes after block `i` (see
/// [`crate::kernels::rows8_prefetch_offset`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch_rows(w: &[&[u8]; 8], i: usize, bytes: usize) {
    for row in w {
        let at = rows8_prefetch_offset(i, bytes, row.len(), super::PREFETCH_DISTANCE);
        for off in (0..bytes).step_by(64) {
            prefetch_at(row, at + off);
        }
    }
}

/// Q4_K weights · Q8_K activations for eight rows (see the module docs).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8_q4_k_q8_k(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let nb = w.iter().fold(a.len() / 292, |m, r| m.min(r.len() / 144));
    let (mut acc, mut acc_min) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for i in 0..nb {
        prefetch_rows(&w, i, 144);
        let y: &[u8; 292] = at(a, 292 * i);
        let bsums = load256(at(y, 260));
        let sums: [_; 8] = std::array::from_fn(|r| q4_k_sums(at(w[r], 144 * i), y, bsums));
        let yd = _mm256_set1_ps(f32::from_le_bytes(*at::<4>(y, 0)));
        let d = _mm256_mul_ps(super::load_ps(&sums.map(|s| s.2[0])), yd);
        let dmin = _mm256_mul_ps(super::load_ps(&sums.map(|s| s.2[1])), yd);
        let isum = _mm256_cvtepi32_ps(sum_lanes8(sums.map(|s| s.0)));
        let msum = _mm256_cvtepi32_ps(sum_lanes8(sums.map(|s| s.1)));
        acc = _mm256_fmadd_ps(isum, d, acc);
        acc_min = _mm256_fmadd_ps(msum, dmin, acc_min);
    }
    let mut out = [0f32; 8];
    // SAFETY: `out` is 8 writable f32; `storeu` needs no alignment.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_sub_ps(acc, acc_min)) };
    out
}

/// Q6_K weights · Q8_K activations for eight rows: per row its single dot's eight f32 lanes
/// and final [`hsum_ps`]; the activation block is shared between the rows.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8_q6_k_q8_k(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let nb = w.iter().fold(a.len() / 292, |m, r| m.min(r.len() / 210));
    let mut acc = [_mm256_setzero_ps(); 8];
    for i in 0..nb {
        prefetch_rows(&w, i, 210);
        let y: &[u8; 292] = at(a, 292 * i);
        let yd = f32::from_le_bytes(*at::<4>(y, 0));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x: &[u8; 210] = at(w[r], 210 * i);
            let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
            let q = super::kquants::q6_k_codes(x);
            let d = _mm256_set1_ps(yd * f16_to_f32(le16(x, 208)));
            let lanes = _mm256_cvtepi32_ps(super::kquants::q6_k_lanes(y, &q, &sc));
            *acc = _mm256_fmadd_ps(d, lanes, *acc);
        }
    }
    acc.map(|v| hsum_ps(v))
}
