//! Eight-row K-quant kernels for small batches: eight weight rows against one to four Q8_K
//! vectors (decode itself takes the single dots on AVX2: one weight stream per thread), each
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
use super::{at, halves8, hsum_ps, le16, load256, prefetch_at};
use crate::formats::q4_k::unpack_scales;
use crate::kernels::rows8_prefetch_offset;
use std::arch::x86_64::*;

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

/// Q4_K weights: eight rows · 1..=4 Q8_K vectors (`out[v][row]`; bit-identical to single
/// dots): each row's super-block is decoded once for every vector.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8x4_q4_k_q8_k(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| rows8_q4_k(w, v))
}

/// Q6_K weights: eight rows · 1..=4 Q8_K vectors (`out[v][row]`; bit-identical to single
/// dots): each row's super-block is decoded once for every vector.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slice lengths as checked by the caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows8x4_q6_k_q8_k(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| rows8_q6_k(w, v))
}

/// The whole super-blocks (`WB` bytes) of eight rows and `V` Q8_K vectors.
fn super_blocks(w: &[&[u8]; 8], a: &[&[u8]], wb: usize) -> usize {
    a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / wb)),
        |m, v| m.min(v.len() / 292),
    )
}

/// Q4_K weights · `V` Q8_K vectors for eight rows: per row the codes are unpacked once, then
/// for each vector `Σ_j sc_j Σ q y` and `Σ_j m_j (bsum_{2j} + bsum_{2j+1})` (exact i32 lanes);
/// the f32 steps run on the eight rows at once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows8_q4_k<const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = super_blocks(&w, &a, 144);
    let m4 = _mm256_set1_epi8(0x0f);
    // Each min twice, as i16, against the sixteen bsums: lane j = m_j (bsum_2j + bsum_2j+1).
    let dup = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let (mut acc, mut acc_min) = ([_mm256_setzero_ps(); V], [_mm256_setzero_ps(); V]);
    for i in 0..nb {
        prefetch_rows(&w, i, 144);
        let ys: [&[u8; 292]; V] = a.map(|v| at(v, 292 * i));
        let bsums = ys.map(|y| load256(at(y, 260)));
        let mut isum = [[_mm256_setzero_si256(); 8]; V];
        let mut msum = [[_mm256_setzero_si256(); 8]; V];
        // The rows' d and dmin as halves, widened together after the rows (one F16C each).
        let mut d = [[0u16; 8]; 2];
        for r in 0..8 {
            let x: &[u8; 144] = at(w[r], 144 * i);
            let (sc, mn) = unpack_scales(at(x, 4));
            let s16 = super::kquants::scales_i16(&sc);
            let codes: [[__m256i; 2]; 4] = std::array::from_fn(|c| {
                let q = load256(at(x, 16 + 32 * c));
                [
                    _mm256_and_si256(q, m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                ]
            });
            let m8 = _mm_shuffle_epi8(_mm_set_epi64x(0, u64::from_le_bytes(mn) as i64), dup);
            let m16 = _mm256_cvtepu8_epi16(m8);
            for v in 0..V {
                let mut s = _mm256_setzero_si256();
                for (c, codes) in codes.into_iter().enumerate() {
                    s = _mm256_add_epi32(s, super::kquants::affine_chunk(ys[v], s16, codes, c));
                }
                isum[v][r] = s;
                msum[v][r] = _mm256_madd_epi16(m16, bsums[v]);
            }
            d[0][r] = le16(x, 0);
            d[1][r] = le16(x, 2);
        }
        let (dx, dmx) = (halves8(&d[0]), halves8(&d[1]));
        for v in 0..V {
            let yd = _mm256_set1_ps(f32::from_le_bytes(*at::<4>(ys[v], 0)));
            let dd = _mm256_mul_ps(dx, yd);
            let dmin = _mm256_mul_ps(dmx, yd);
            acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(isum[v])), dd, acc[v]);
            let m = _mm256_cvtepi32_ps(sum_lanes8(msum[v]));
            acc_min[v] = _mm256_fmadd_ps(m, dmin, acc_min[v]);
        }
    }
    let mut out = [[0f32; 8]; V];
    for v in 0..V {
        // SAFETY: `out[v]` is 8 writable f32; `storeu` needs no alignment.
        unsafe { _mm256_storeu_ps(out[v].as_mut_ptr(), _mm256_sub_ps(acc[v], acc_min[v])) };
    }
    out
}

/// Q6_K weights · `V` Q8_K vectors for eight rows: per row its codes unpacked once, then per
/// vector the single dot's eight f32 lanes and final [`hsum_ps`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows8_q6_k<const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = super_blocks(&w, &a, 210);
    let mut acc = [[_mm256_setzero_ps(); 8]; V];
    for i in 0..nb {
        prefetch_rows(&w, i, 210);
        let ys: [&[u8; 292]; V] = a.map(|v| at(v, 292 * i));
        let yd = ys.map(|y| f32::from_le_bytes(*at::<4>(y, 0)));
        let mut dxs = [0f32; 8];
        let dh: [u16; 8] = std::array::from_fn(|r| le16(w[r], 210 * i + 208));
        // SAFETY: `dxs` is 8 writable f32; `storeu` needs no alignment.
        unsafe { _mm256_storeu_ps(dxs.as_mut_ptr(), halves8(&dh)) };
        for (r, &dx) in dxs.iter().enumerate() {
            let x: &[u8; 210] = at(w[r], 210 * i);
            let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
            let q = super::kquants::q6_k_codes(x);
            for v in 0..V {
                let d = _mm256_set1_ps(yd[v] * dx);
                let lanes = _mm256_cvtepi32_ps(super::kquants::q6_k_lanes(ys[v], &q, &sc));
                acc[v][r] = _mm256_fmadd_ps(d, lanes, acc[v][r]);
            }
        }
    }
    acc.map(|rows| rows.map(|v| hsum_ps(v)))
}
