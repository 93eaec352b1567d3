//! 512-bit versions of the eight-row K-quant matvec kernels of [`super::rows_k`] (decode on
//! AVX-512 BW + VNNI): each row's super-block is two (Q4_K) or three (Q6_K) 64-byte loads,
//! its codes multiplied by `vpmaddubsw` 64 at a time and its sub-block scales applied and
//! accumulated by `vpdpwssd` (i16 pairs into i32), half the instructions of the 256-bit
//! kernels per weight byte. The activation block is loaded, and for Q4_K rearranged to the
//! weights' nibble order, once per super-block for all eight rows.
//!
//! Every i32 lane is an exact integer, so only the partition of the products into lanes could
//! change a result — and the partitions are chosen so that folding the 512-bit register's
//! halves gives the very lanes of the 256-bit kernels: Q4_K's row sums (one FMA per
//! super-block, row `r` in lane `r`) and Q6_K's eight lanes per row (its single dot's f32
//! order). The results are bit-identical to the single dots.
//!
//! # Safety (all functions)
//! The CPU must support avx2, fma, f16c, avx512f, avx512bw, avx512vl and avx512vnni.

use super::rows::sum_lanes8;
use super::rows_k::prefetch_rows;
use super::{at, hsum_ps, le16, load128, load256};
use crate::formats::float::f16_to_f32;
use crate::formats::q4_k::unpack_scales;
use std::arch::x86_64::*;

/// Loads 64 bytes.
#[inline]
#[target_feature(enable = "avx512f")]
fn load512(b: &[u8; 64]) -> __m512i {
    // SAFETY: `b` is 64 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Two 32-byte pieces as one register, `lo` in the low half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
fn join(lo: &[u8; 32], hi: &[u8; 32]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load256(lo)), load256(hi))
}

/// The i16 index vector that fills i16 lanes `16h..16h + 16` with lane `a` (`h = 0`) and
/// `b` (`h = 1`) of the source.
#[inline]
#[target_feature(enable = "avx512f")]
fn splat_pair(a: i16, b: i16) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set1_epi16(a)),
        _mm256_set1_epi16(b),
    )
}

/// The i16 index vector that fills i16 lanes `8q..8q + 8` with lane `s + q`, `q < 4`.
#[inline]
#[target_feature(enable = "avx512f")]
fn splat_quad(s: i16) -> __m512i {
    let lo = _mm256_set_m128i(_mm_set1_epi16(s + 1), _mm_set1_epi16(s));
    let hi = _mm256_set_m128i(_mm_set1_epi16(s + 3), _mm_set1_epi16(s + 2));
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The sum of a register's two 256-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
fn fold(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Q4_K weights · Q8_K activations for eight rows, bit-identical to [`super::dot_q4_k_q8_k`].
///
/// # Safety
/// CPU must support avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni; slice lengths as
/// checked by the caller.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8_q4_k_q8_k_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    rows8_q4_k::<1>(w, [a])[0]
}

/// Q4_K weights: eight rows · 1..=4 Q8_K vectors (`out[v][row]`; bit-identical to single
/// dots): each row's super-block is decoded once for every vector.
///
/// # Safety
/// CPU must support avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni; slice lengths as
/// checked by the caller; `a` holds 1..=4 vectors.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8x4_q4_k_q8_k_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| rows8_q4_k(w, v))
}

/// Q6_K weights: eight rows · 1..=4 Q8_K vectors (`out[v][row]`; bit-identical to single
/// dots): each row's super-block is decoded once for every vector.
///
/// # Safety
/// CPU must support avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni; slice lengths as
/// checked by the caller; `a` holds 1..=4 vectors.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8x4_q6_k_q8_k_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| rows8_q6_k(w, v))
}

/// Q4_K weights · `V` Q8_K vectors for eight rows.
///
/// The codes of 64-byte half `h` of a row's nibbles: low nibbles are sub-blocks `4h` and
/// `4h + 2`, high nibbles `4h + 1` and `4h + 3` (32 codes each, one per 256-bit half), so
/// the activations are joined in that order and each sub-block's scale fills its half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows8_q4_k<const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / 144)),
        |m, v| m.min(v.len() / 292),
    );
    let rows = w.map(|r| r[..nb * 144].as_chunks::<144>().0);
    let acts = a.map(|v| v[..nb * 292].as_chunks::<292>().0);
    let m4 = _mm512_set1_epi8(0x0f);
    // Scale index per i16 lane, for the sub-block pairs (0, 2), (1, 3), (4, 6), (5, 7).
    let pick = [
        splat_pair(0, 2),
        splat_pair(1, 3),
        splat_pair(4, 6),
        splat_pair(5, 7),
    ];
    let dup = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let (mut acc, mut acc_min) = ([_mm256_setzero_ps(); V], [_mm256_setzero_ps(); V]);
    for i in 0..nb {
        prefetch_rows(&w, i, 144);
        let ys = acts.map(|v| {
            let y = &v[i];
            [
                join(at(y, 4), at(y, 68)),
                join(at(y, 36), at(y, 100)),
                join(at(y, 132), at(y, 196)),
                join(at(y, 164), at(y, 228)),
            ]
        });
        let bsums = acts.map(|v| load256(at(&v[i], 260)));
        let mut isum = [[_mm256_setzero_si256(); 8]; V];
        let mut msum = [[_mm256_setzero_si256(); 8]; V];
        let mut dd = [0u32; 8];
        for r in 0..8 {
            let x = &rows[r][i];
            let (sc, mn) = unpack_scales(at(x, 4));
            let s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(u64::from_le_bytes(sc) as i64));
            let s16 = _mm512_castsi128_si512(s16);
            let scales = pick.map(|p| _mm512_permutexvar_epi16(p, s16));
            let q = [load512(at(x, 16)), load512(at(x, 80))];
            let codes = [
                _mm512_and_si512(q[0], m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(q[0]), m4),
                _mm512_and_si512(q[1], m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(q[1]), m4),
            ];
            let m8 = _mm_shuffle_epi8(_mm_cvtsi64_si128(u64::from_le_bytes(mn) as i64), dup);
            let m16 = _mm256_cvtepu8_epi16(m8);
            for v in 0..V {
                let mut sum = _mm512_setzero_si512();
                for k in 0..4 {
                    let p = _mm512_maddubs_epi16(codes[k], ys[v][k]);
                    sum = _mm512_dpwssd_epi32(sum, p, scales[k]);
                }
                isum[v][r] = fold(sum);
                msum[v][r] = _mm256_madd_epi16(m16, bsums[v]);
            }
            dd[r] = u32::from_le_bytes(*at::<4>(x, 0));
        }
        // d and dmin of the eight rows, widened together: lanes 2r and 2r + 1 (inserted
        // lane by lane: a wide load of eight narrow stores would stall store forwarding).
        let dd = dd.map(|v| v as i32);
        let halves = _mm256_setr_epi32(dd[0], dd[1], dd[2], dd[3], dd[4], dd[5], dd[6], dd[7]);
        let both = _mm512_cvtph_ps(halves);
        let even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
        let odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
        let d = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, both));
        let dmin = _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, both));
        for v in 0..V {
            let yd = _mm256_set1_ps(f32::from_le_bytes(*at::<4>(&acts[v][i], 0)));
            let (d, dmin) = (_mm256_mul_ps(d, yd), _mm256_mul_ps(dmin, yd));
            acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(isum[v])), d, acc[v]);
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

/// Q6_K weights · Q8_K activations for eight rows, bit-identical to [`super::dot_q6_k_q8_k`].
///
/// # Safety
/// CPU must support avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni; slice lengths as
/// checked by the caller.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows8_q6_k_q8_k_avx512vnni(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    rows8_q6_k::<1>(w, [a])[0]
}

/// Q6_K weights · `V` Q8_K vectors for eight rows.
///
/// Register `k` holds codes `64k..64k + 64` (code vectors `2k` and `2k + 1` of the 256-bit
/// kernel, one per half): low (`k` even) or high nibbles of `ql[64⌊k/2⌋..]`, with the two
/// high bits of each rotated into bits 4–5 from the `qh` bytes (bit pairs 0, 1 / 2, 3 for
/// even `k`, 4, 5 / 6, 7 for odd `k`, per half). The i16 products of code vector `v` take
/// scales `2v` and `2v + 1`, which fill the register's quarters in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows8_q6_k<const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = a.iter().fold(
        w.iter().fold(usize::MAX, |m, r| m.min(r.len() / 210)),
        |m, v| m.min(v.len() / 292),
    );
    let rows = w.map(|r| r[..nb * 210].as_chunks::<210>().0);
    let acts = a.map(|v| v[..nb * 292].as_chunks::<292>().0);
    let (m4, m30) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    // Left rotations (per 32-bit lane) taking each qh bit pair to bits 4–5 of its byte.
    let rot = [
        _mm512_inserti64x4::<1>(_mm512_set1_epi32(4), _mm256_set1_epi32(2)),
        _mm512_inserti64x4::<1>(_mm512_set1_epi32(0), _mm256_set1_epi32(30)),
    ];
    let pick = [splat_quad(0), splat_quad(4), splat_quad(8), splat_quad(12)];
    let mut acc = [[_mm256_setzero_ps(); 8]; V];
    for i in 0..nb {
        prefetch_rows(&w, i, 210);
        let ys: [[__m512i; 4]; V] =
            acts.map(|v| std::array::from_fn(|k| load512(at(&v[i], 4 + 64 * k))));
        let bsums = acts.map(|v| load256(at(&v[i], 260)));
        let yd = acts.map(|v| f32::from_le_bytes(*at::<4>(&v[i], 0)));
        for r in 0..8 {
            let x = &rows[r][i];
            let sc16 = _mm256_cvtepi8_epi16(load128(at(x, 192)));
            let s16 = _mm512_castsi256_si512(sc16);
            let mut codes = [_mm512_setzero_si512(); 4];
            for h in 0..2 {
                let l = load512(at(x, 64 * h));
                let qh = _mm512_broadcast_i64x4(load256(at(x, 128 + 32 * h)));
                let nib = [
                    _mm512_and_si512(l, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                ];
                for (j, n) in nib.into_iter().enumerate() {
                    let top = _mm512_rolv_epi32(qh, rot[j]);
                    // n | (top & 0x30)
                    codes[2 * h + j] = _mm512_ternarylogic_epi32::<0xf8>(n, top, m30);
                }
            }
            let scales = pick.map(|p| _mm512_permutexvar_epi16(p, s16));
            let dx = f16_to_f32(le16(x, 208));
            for v in 0..V {
                let mut sum = _mm512_setzero_si512();
                for k in 0..4 {
                    let p = _mm512_maddubs_epi16(codes[k], ys[v][k]);
                    sum = _mm512_dpwssd_epi32(sum, p, scales[k]);
                }
                let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums[v], sc16));
                let lanes = _mm256_sub_epi32(fold(sum), offset);
                let d = _mm256_set1_ps(yd[v] * dx);
                acc[v][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[v][r]);
            }
        }
    }
    acc.map(|rows| rows.map(|v| hsum_ps(v)))
}
