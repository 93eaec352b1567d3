//! AVX2 dots of K-quant weights against Q8_K activations.
//!
//! Codes are unsigned (0..=15, 0..=31, 0..=63) so `maddubs` multiplies them
//! with the signed activations without saturation; sub-block scales are
//! applied with `madd` on i16 lanes. The integer sums are exact; the f32
//! accumulation follows the scalar kernels (and ggml's x86 kernels) exactly:
//! Q4_K one FMA per super-block (per 64-element chunk in the four-vector
//! kernel), Q6_K eight f32 lanes, Q5_K `d·isum − dmin·msum` per super-block.

use super::{at, hsum_epi32, hsum_ps, le16, load128, load256, prefetch_ahead};
use crate::formats::float::f16_to_f32;
use crate::formats::q4_k::unpack_scales;
use crate::kernels::scalar::min_sum;
use crate::kernels::{q8k_bsums, q8k_d};
use std::arch::x86_64::*;

/// Walks super-blocks of `wb` bytes against `V` Q8_K vectors: `decode` runs
/// once per weight super-block and returns a closure that yields its
/// contribution to one vector's sum.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn walk<const V: usize, D, F>(w: &[u8], a: [&[u8]; V], wb: usize, decode: D) -> [f32; V]
where
    D: Fn(&[u8]) -> F,
    F: Fn(&[u8]) -> f32 + Copy,
{
    let nb = a.iter().fold(w.len() / wb, |m, v| m.min(v.len() / 292));
    let mut ys = a.map(|v| v[..nb * 292].chunks_exact(292));
    let mut sum = [0f32; V];
    for x in w[..nb * wb].chunks_exact(wb) {
        for off in (0..wb).step_by(64) {
            prefetch_ahead(x, off);
        }
        let block = decode(x);
        for (s, it) in sum.iter_mut().zip(ys.iter_mut()) {
            let Some(y) = it.next() else { break };
            *s += block(y);
        }
    }
    sum
}

/// The eight sub-block scales of a Q4_K/Q5_K super-block as i16, in both 128-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scales_i16(sc: &[u8; 8]) -> __m256i {
    let b = _mm_set_epi64x(0, u64::from_le_bytes(*sc) as i64);
    _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(b))
}

/// i16 lane `j` of `s16` (the same 8 i16 in both halves) in every lane: one byte shuffle.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn splat_i16(s16: __m256i, j: usize) -> __m256i {
    let b = (2 * j) as u8;
    _mm256_shuffle_epi8(s16, _mm256_set1_epi16(i16::from_le_bytes([b, b + 1])))
}

/// `sc_{2c} Σ q y + sc_{2c+1} Σ q y` over 64-element chunk `c` (two sub-blocks) of a Q4_K/Q5_K
/// super-block, as 8 i32 lanes, given the chunk's codes (low half, high half) and the scales
/// from [`scales_i16`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn affine_chunk(y: &[u8], s16: __m256i, [lo, hi]: [__m256i; 2], c: usize) -> __m256i {
    let p0 = _mm256_maddubs_epi16(lo, load256(at(y, 4 + 64 * c)));
    let p1 = _mm256_maddubs_epi16(hi, load256(at(y, 36 + 64 * c)));
    let p0 = _mm256_madd_epi16(p0, splat_i16(s16, 2 * c));
    let p1 = _mm256_madd_epi16(p1, splat_i16(s16, 2 * c + 1));
    _mm256_add_epi32(p0, p1)
}

/// `Σ_j sc_j Σ q y` of a Q4_K/Q5_K super-block as 8 i32 lanes, given each 64-element chunk's
/// codes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn affine_sumi(y: &[u8], s16: __m256i, codes: &[[__m256i; 2]; 4]) -> __m256i {
    let mut sumi = _mm256_setzero_si256();
    for (c, &code) in codes.iter().enumerate() {
        sumi = _mm256_add_epi32(sumi, affine_chunk(y, s16, code, c));
    }
    sumi
}

/// The codes of a Q4_K super-block, each 64-element chunk as (low nibbles, high nibbles).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_codes(x: &[u8]) -> [[__m256i; 2]; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    std::array::from_fn(|c| {
        let q = load256(at(x, 16 + 32 * c));
        [
            _mm256_and_si256(q, m4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
        ]
    })
}

/// One Q4_K/Q5_K super-block's contribution: `d isum - dmin msum`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn affine_block(
    xd: [f32; 2],
    y: &[u8],
    codes: &[[__m256i; 2]; 4],
    s16: __m256i,
    mn: &[u8; 8],
) -> f32 {
    let sums = isum_msum(affine_sumi(y, s16, codes), mn, y);
    let (isum, msum) = (_mm_cvtsi128_si32(sums), _mm_extract_epi32::<1>(sums));
    let yd = q8k_d(y);
    let d = xd[0] * yd;
    let dmin = xd[1] * yd;
    d * isum as f32 - dmin * msum as f32
}

/// `(Σ_j sc_j Σ q y, Σ_j m_j bsum_j)` of each 64-element chunk (two sub-blocks) of a Q4_K
/// super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_chunk_sums(
    y: &[u8],
    s16: __m256i,
    mn: &[u8; 8],
    codes: &[[__m256i; 2]; 4],
) -> [(i32, i32); 4] {
    let b = q8k_bsums(y);
    std::array::from_fn(|c| {
        let isum = hsum_epi32(affine_chunk(y, s16, codes[c], c));
        (isum, min_sum(&mn[2 * c..2 * c + 2], &b[4 * c..4 * c + 4]))
    })
}

/// Q4_K against `V` Q8_K vectors in the order of [`crate::kernels::scalar::dot4_q4_k_q8_k`]
/// (ggml's 4-row GEMM: one FMA per 64-element chunk).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_acts<const V: usize>(w: &[u8], a: [&[u8]; V]) -> [f32; V] {
    let nb = a.iter().fold(w.len() / 144, |m, v| m.min(v.len() / 292));
    let (mut acc, mut acc_min) = ([0f32; V], [0f32; V]);
    for (i, x) in w[..nb * 144].chunks_exact(144).enumerate() {
        for off in (0..144).step_by(64) {
            prefetch_ahead(x, off);
        }
        let (sc, mn) = unpack_scales(at(x, 4));
        let s16 = scales_i16(&sc);
        let codes = q4_k_codes(x);
        let xd = [f16_to_f32(le16(x, 0)), f16_to_f32(le16(x, 2))];
        for v in 0..V {
            let y = &a[v][i * 292..(i + 1) * 292];
            let yd = q8k_d(y);
            let (d, dmin) = (xd[0] * yd, xd[1] * yd);
            for (isum, msum) in q4_k_chunk_sums(y, s16, &mn, &codes) {
                acc[v] = (isum as f32).mul_add(d, acc[v]);
                acc_min[v] = (msum as f32).mul_add(dmin, acc_min[v]);
            }
        }
    }
    std::array::from_fn(|v| acc[v] - acc_min[v])
}

/// Q4_K weights · Q8_K activations, in ggml's repacked-GEMV order.
///
/// The decode kernel, bit-identical to [`crate::kernels::scalar::dot_q4_k_q8_k`] with little
/// scalar work per super-block. The exact code sum and min sum leave the vector unit together
/// (one pair of horizontal adds), the min sum is one `madd` of the mins with the pair sums of
/// `bsums`, the two f16 factors widen with one F16C instruction, and `acc`/`acc_min` are the
/// two lanes of one FMA: each lane's operations and their order are the scalar kernel's.
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let nb = (w.len() / 144).min(a.len() / 292);
    let mut acc = _mm_setzero_ps();
    for (x, y) in w[..nb * 144].chunks_exact(144).zip(a.chunks_exact(292)) {
        for off in (0..144).step_by(64) {
            prefetch_ahead(x, off);
        }
        let (sc, mn) = unpack_scales(at(x, 4));
        let s16 = scales_i16(&sc);
        let sumi = affine_sumi(y, s16, &q4_k_codes(x));
        let sums = _mm_cvtepi32_ps(isum_msum(sumi, &mn, y));
        // [d_x, dmin_x] · d_y, as the scalar kernel's two products.
        let xd = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*at::<4>(x, 0))));
        let d = _mm_mul_ps(xd, _mm_set1_ps(q8k_d(y)));
        acc = _mm_fmadd_ps(sums, d, acc);
    }
    _mm_cvtss_f32(acc) - _mm_cvtss_f32(_mm_shuffle_ps::<0b01>(acc, acc))
}

/// `[Σ sumi, Σ_j mn_j (bsum_2j + bsum_2j+1), …]` of a Q4_K/Q5_K super-block against Q8_K block
/// `y`: the code sum's lanes and the min sum in the low two i32 lanes (exact integers).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn isum_msum(sumi: __m256i, mn: &[u8; 8], y: &[u8]) -> __m128i {
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(sumi),
        _mm256_extracti128_si256::<1>(sumi),
    );
    let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(u64::from_le_bytes(*mn) as i64));
    let pairs = _mm_hadd_epi16(load128(at(y, 260)), load128(at(y, 276)));
    let m = _mm_madd_epi16(mins, pairs);
    let h = _mm_hadd_epi32(s, m);
    _mm_hadd_epi32(h, h)
}

/// Q4_K weights · four Q8_K activation vectors, in ggml's 4-row GEMM order (one FMA per
/// 64-element chunk instead of per super-block: not bit-identical to four single dots).
///
/// # Safety
/// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_k_q8_k(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    q4_k_acts::<4>(w, a)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_k_acts<const V: usize>(w: &[u8], a: [&[u8]; V]) -> [f32; V] {
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    walk(w, a, 176, |x| {
        let (sc, mn) = unpack_scales(at(x, 4));
        let qh = load256(at(x, 16));
        let codes: [[__m256i; 2]; 4] = std::array::from_fn(|c| {
            let q = load256(at(x, 48 + 32 * c));
            // Bits 2c and 2c + 1 of each qh byte, moved to bit 4.
            let h = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c as i32));
            let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(h, one));
            let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<1>(h), one));
            [
                _mm256_or_si256(_mm256_and_si256(q, m4), h0),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q), m4), h1),
            ]
        });
        let xd = [f16_to_f32(le16(x, 0)), f16_to_f32(le16(x, 2))];
        let s16 = scales_i16(&sc);
        move |y: &[u8]| affine_block(xd, y, &codes, s16, &mn)
    })
}

/// The 8 code vectors of a Q6_K super-block (unsigned 0..=63), in element order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_codes(x: &[u8]) -> [__m256i; 8] {
    let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x03));
    let top = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, m2));
    let mut q = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let l0 = load256(at(x, 64 * h));
        let l1 = load256(at(x, 64 * h + 32));
        let hb = load256(at(x, 128 + 32 * h));
        let hi4 = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), top(hb));
        q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), top(_mm256_srli_epi16::<2>(hb)));
        q[4 * h + 2] = _mm256_or_si256(hi4(l0), top(_mm256_srli_epi16::<4>(hb)));
        q[4 * h + 3] = _mm256_or_si256(hi4(l1), top(_mm256_srli_epi16::<6>(hb)));
    }
    q
}

/// One Q6_K super-block's eight i32 lanes (see [`crate::kernels::scalar::dot_q6_k_q8_k`]):
/// `Σ sc q y` on unsigned codes minus the code offset `32 Σ sc bsum`, lane by lane as ggml.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_lanes(y: &[u8], q: &[__m256i; 8], sc: &[i8; 16]) -> __m256i {
    // SAFETY: `sc` is 16 readable bytes; `loadu` has no alignment requirement.
    let sc8 = unsafe { _mm_loadu_si128(sc.as_ptr().cast()) };
    let sc16 = _mm256_cvtepi8_epi16(sc8);
    // Scales 0–7 (then 8–15) as i16 in both halves; code vector k takes scale 2k in its
    // low half and 2k + 1 in its high half, picked by one in-lane byte shuffle.
    let halves = [
        _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sc16)),
        _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(sc16)),
    ];
    let mut sumi = _mm256_setzero_si256();
    for (k, qk) in q.iter().enumerate() {
        let p = _mm256_maddubs_epi16(*qk, load256(at(y, 4 + 32 * k)));
        let scales = _mm256_shuffle_epi8(halves[k / 4], scale_pair_shuffle(k % 4));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
    }
    let bsums = load256(at(y, 260));
    let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums, sc16));
    _mm256_sub_epi32(sumi, offset)
}

/// The byte shuffle that fills the low half with i16 lane `2j` and the high
/// half with lane `2j + 1` (of a register holding the same 8 i16 in both halves).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair_shuffle(j: usize) -> __m256i {
    let lo = (4 * j) as i8;
    let hi = lo + 2;
    let pair = |b: i8| i16::from_le_bytes([b as u8, (b + 1) as u8]);
    _mm256_set_m128i(_mm_set1_epi16(pair(hi)), _mm_set1_epi16(pair(lo)))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_acts<const V: usize>(w: &[u8], a: [&[u8]; V]) -> [f32; V] {
    let nb = a.iter().fold(w.len() / 210, |m, v| m.min(v.len() / 292));
    let mut acc = [_mm256_setzero_ps(); V];
    for (i, x) in w[..nb * 210].chunks_exact(210).enumerate() {
        for off in (0..210).step_by(64) {
            prefetch_ahead(x, off);
        }
        let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
        let q = q6_k_codes(x);
        let xd = f16_to_f32(le16(x, 208));
        for v in 0..V {
            let y = &a[v][i * 292..(i + 1) * 292];
            let d = _mm256_set1_ps(q8k_d(y) * xd);
            let lanes = _mm256_cvtepi32_ps(q6_k_lanes(y, &q, &sc));
            acc[v] = _mm256_fmadd_ps(d, lanes, acc[v]);
        }
    }
    acc.map(|v| hsum_ps(v))
}

/// Defines the one-vector and four-vector kernels of a K-quant format.
macro_rules! kquant_pair {
    ($one:ident, $four:ident, $acts:ident, $name:literal) => {
        #[doc = concat!($name, " weights · Q8_K activations.")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $one(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            $acts(w, [a])[0]
        }

        #[doc = concat!($name, " weights · four Q8_K activation vectors (bit-identical to four single dots).")]
        ///
        /// # Safety
        /// CPU must support avx2+fma+f16c; slices lengths as checked by caller.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $four(_n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            $acts(w, a)
        }
    };
}

kquant_pair!(dot_q5_k_q8_k, dot4_q5_k_q8_k, q5_k_acts, "Q5_K");
kquant_pair!(dot_q6_k_q8_k, dot4_q6_k_q8_k, q6_k_acts, "Q6_K");
