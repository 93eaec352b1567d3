//! VNNI pair tile kernels ([`crate::kernels::PairTileFn`]): two weight rows
//! against up to four prepared pairs of Q8_0 vectors (see [`crate::pairs`]),
//! for Q5_0 and Q8_0 weights — AVX512-VNNI (a pair per 512-bit register) and
//! AVX-VNNI (a vector per 256-bit register).
//!
//! Each weight block is decoded once into a 512-bit register (its unsigned
//! codes in both halves); per pair one `vpdpbusd` from the prepared starting
//! value gives, in each i32 lane, exactly the integer the single dot's
//! `maddubs` + `madd` lane holds; `d_x · d_y` is rounded to f32 as there, and
//! each half has its own f32x8 accumulation summed by [`hsum_ps`] at the end,
//! so the results are bit-identical to the single dots of `legacy`.

use super::legacy::blocks;
use super::{at, bits_32, half_lane0, hsum_ps, load128, load256, nibbles_32, prefetch_ahead};
use crate::kernels::{PairBlock, PAIR_TILE_VECS};
use std::arch::x86_64::*;

/// The prepared pair's codes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pair_q(p: &PairBlock) -> __m512i {
    // SAFETY: `p.q` is 64 readable bytes, the width of the (unaligned) load.
    unsafe { _mm512_loadu_si512(p.q.as_ptr().cast()) }
}

/// The prepared pair's starting values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pair_start(p: &PairBlock) -> __m512i {
    // SAFETY: `p.start` is 16 readable i32, the width of the (unaligned) load.
    unsafe { _mm512_loadu_si512(p.start.as_ptr().cast()) }
}

/// The prepared pair's scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pair_d(p: &PairBlock) -> __m512 {
    // SAFETY: `p.d` is 16 readable f32, the width of the (unaligned) load.
    unsafe { _mm512_loadu_ps(p.d.as_ptr()) }
}

/// The f32x8 sums of both halves of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn hsum_halves(v: __m512) -> [f32; 2] {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    [hsum_ps(_mm512_castps512_ps256(v)), hsum_ps(hi)]
}

/// Two rows of `WB`-byte blocks (unsigned codes from `decode`) against `P`
/// prepared pairs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pair_tile<const WB: usize, const P: usize>(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    decode: impl Fn(&[u8; WB]) -> __m512i,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let nb = w.iter().fold(pairs.len() / P, |m, r| m.min(r.len() / WB));
    let xs = w.map(|r| &blocks::<WB>(r)[..nb]);
    let mut acc = [[_mm512_setzero_ps(); P]; 2];
    for (b, pb) in pairs.chunks_exact(P).take(nb).enumerate() {
        for r in 0..2 {
            let x = &xs[r][b];
            prefetch_ahead(x, 0);
            let dx = _mm512_broadcastss_ps(half_lane0(at(x, 0)));
            let u = decode(x);
            for p in 0..P {
                let i = _mm512_dpbusd_epi32(pair_start(&pb[p]), u, pair_q(&pb[p]));
                let d = _mm512_mul_ps(dx, pair_d(&pb[p]));
                acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(i), acc[r][p]);
            }
        }
    }
    let mut out = [[0f32; PAIR_TILE_VECS]; 2];
    for r in 0..2 {
        for p in 0..P {
            let [lo, hi] = hsum_halves(acc[r][p]);
            out[r][2 * p] = lo;
            out[r][2 * p + 1] = hi;
        }
    }
    out
}

/// Calls the pair tile kernel `$f` with its pair count as a constant.
macro_rules! by_pairs {
    ($f:ident, $wb:literal, $w:expr, $pairs:expr, $npairs:expr, $decode:expr) => {
        match $npairs {
            1 => $f::<$wb, 1>($w, $pairs, $decode),
            2 => $f::<$wb, 2>($w, $pairs, $decode),
            3 => $f::<$wb, 3>($w, $pairs, $decode),
            _ => $f::<$wb, 4>($w, $pairs, $decode),
        }
    };
}

/// Q5_0 weights: two rows · up to eight Q8_0 vectors in prepared pairs (offset 16;
/// bit-identical to single dots). The codes are decoded straight into 512 bits: the 16
/// nibble bytes in every 128-bit lane, shifted by 0 or 4 per lane, the fifth bit merged by
/// one masked byte add from `qh` (both halves).
///
/// # Safety
/// CPU must support avx2+fma+f16c and avx512f+avx512bw+avx512vl+avx512vnni.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn pairs_q5_0_avx512vnni(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    npairs: usize,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let shift = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    let (low, sixteen) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(16));
    by_pairs!(pair_tile, 22, w, pairs, npairs, |x: &[u8; 22]| {
        let t = _mm512_broadcast_i32x4(load128(at(x, 6)));
        let nib = _mm512_and_si512(_mm512_srlv_epi64(t, shift), low);
        let qh = u64::from(u32::from_le_bytes(*at::<4>(x, 2)));
        _mm512_mask_add_epi8(nib, qh | (qh << 32), nib, sixteen)
    })
}

/// Q8_0 weights: two rows · up to eight Q8_0 vectors in prepared pairs (offset 128: the
/// codes' sign bit flipped; bit-identical to single dots).
///
/// # Safety
/// CPU must support avx2+fma+f16c and avx512f+avx512bw+avx512vl+avx512vnni.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn pairs_q8_0_avx512vnni(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    npairs: usize,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let flip = _mm512_set1_epi8(i8::MIN);
    by_pairs!(pair_tile, 34, w, pairs, npairs, |x: &[u8; 34]| {
        _mm512_xor_si512(_mm512_broadcast_i64x4(load256(at(x, 2))), flip)
    })
}

/// Two rows of `WB`-byte blocks (unsigned codes from `decode`) against `P` prepared pairs,
/// with 256-bit AVX-VNNI: one column per register (each half of a prepared pair), the rows one
/// after the other (eight accumulators fit the sixteen registers; the prepared pairs are
/// read from L1 again for the second row).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn pair_tile256<const WB: usize, const P: usize>(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    decode: impl Fn(&[u8; WB]) -> __m256i,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let nb = w.iter().fold(pairs.len() / P, |m, r| m.min(r.len() / WB));
    let mut out = [[0f32; PAIR_TILE_VECS]; 2];
    for (r, row) in w.iter().enumerate() {
        let xs = &blocks::<WB>(row)[..nb];
        let mut acc = [[_mm256_setzero_ps(); 2]; P];
        for (x, pb) in xs.iter().zip(pairs.chunks_exact(P)) {
            prefetch_ahead(x, 0);
            let dx = _mm256_broadcastss_ps(half_lane0(at(x, 0)));
            let u = decode(x);
            for p in 0..P {
                for (h, acc) in acc[p].iter_mut().enumerate() {
                    // SAFETY: each field holds two halves of 32 bytes; `loadu` needs no
                    // alignment.
                    let (start, q, d) = unsafe {
                        (
                            _mm256_loadu_si256(pb[p].start[8 * h..].as_ptr().cast()),
                            _mm256_loadu_si256(pb[p].q[32 * h..].as_ptr().cast()),
                            _mm256_loadu_ps(pb[p].d[8 * h..].as_ptr()),
                        )
                    };
                    let i = _mm256_dpbusd_avx_epi32(start, u, q);
                    let d = _mm256_mul_ps(dx, d);
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(i), *acc);
                }
            }
        }
        for p in 0..P {
            out[r][2 * p] = hsum_ps(acc[p][0]);
            out[r][2 * p + 1] = hsum_ps(acc[p][1]);
        }
    }
    out
}

/// Q5_0 weights: two rows · up to eight Q8_0 vectors in prepared pairs (AVX-VNNI, offset 16;
/// bit-identical to single dots). The fifth bit is spread from `qh` as in the AVX2 decode.
///
/// # Safety
/// CPU must support avx2+fma+f16c+avxvnni.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn pairs_q5_0_avxvnni(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    npairs: usize,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let high = _mm256_set1_epi8(0x10);
    by_pairs!(pair_tile256, 22, w, pairs, npairs, |x: &[u8; 22]| {
        let qh = u32::from_le_bytes(*at::<4>(x, 2));
        let top = _mm256_and_si256(bits_32(qh), high);
        _mm256_or_si256(nibbles_32(at(x, 6)), top)
    })
}

/// Q8_0 weights: two rows · up to eight Q8_0 vectors in prepared pairs (AVX-VNNI, offset 128;
/// bit-identical to single dots).
///
/// # Safety
/// CPU must support avx2+fma+f16c+avxvnni.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn pairs_q8_0_avxvnni(
    w: [&[u8]; 2],
    pairs: &[PairBlock],
    npairs: usize,
) -> [[f32; PAIR_TILE_VECS]; 2] {
    let flip = _mm256_set1_epi8(i8::MIN);
    by_pairs!(pair_tile256, 34, w, pairs, npairs, |x: &[u8; 34]| {
        _mm256_xor_si256(load256(at(x, 2)), flip)
    })
}
