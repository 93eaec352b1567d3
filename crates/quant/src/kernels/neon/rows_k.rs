//! Eight-row K-quant matvec kernels (decode on a phone, `neon+dotprod`): eight weight rows against one Q8_K
//! vector, each row's result bit-identical to its single dot ([`super::dot_q4_k_q8_k`],
//! [`super::dot_q6_k_q8_k`]) and so to the scalar reference and the x86 kernels.
//!
//! Per super-block the activation block is loaded once for all eight rows (Q4_K: its 256
//! codes stay in sixteen registers and its bsums are paired once), each row's exact integer
//! sums stay in vector lanes until pairwise adds put row `r`'s sum in lane `r % 4` of register
//! `r / 4`, and the f32 steps run on four rows per instruction: one FMA of the sums and one of
//! the min sums per super-block, the very operations of the single dot. Q6_K keeps its single
//! dot's eight f32 lanes per row (its order), sharing only the activation block.
//!
//! The weights stay in the file's block layout; nothing is repacked.

use super::kquants::{q4_k_codes, q6_k_codes, q6_k_lanes, Codes};
use super::{h2f, hsum8, idot16, load_f32, load_s8, prefetch_at, store_f32};
use crate::formats::q4_k::unpack_scales;
use crate::kernels::{at, q8k_bsums, q8k_d, rows8_prefetch_offset};
use std::arch::aarch64::*;

/// Bytes of a Q8_K activation block.
const Y: usize = 292;

/// Prefetches, for each of the eight rows, the super-block (of `bytes` bytes) that the walk
/// reaches [`super::PREFETCH_DISTANCE`] bytes after block `i` (see
/// [`crate::kernels::rows8_prefetch_offset`]).
#[inline]
#[target_feature(enable = "neon")]
fn prefetch_rows(w: &[&[u8]; 8], i: usize, bytes: usize) {
    for row in w {
        let at = rows8_prefetch_offset(i, bytes, row.len(), super::PREFETCH_DISTANCE);
        for off in (0..bytes).step_by(64) {
            prefetch_at(row, at + off);
        }
    }
}

/// The number of whole super-blocks every row and the activations hold.
fn common_blocks(w: &[&[u8]; 8], a: &[u8], bytes: usize) -> usize {
    w.iter().fold(a.len() / Y, |m, r| m.min(r.len() / bytes))
}

/// The 256 activation codes of a Q8_K block as sixteen registers.
#[inline]
#[target_feature(enable = "neon")]
fn act_codes(y: &[u8]) -> [int8x16_t; 16] {
    std::array::from_fn(|k| load_s8(at(y, 4 + 16 * k)))
}

/// `bsum_{2j} + bsum_{2j+1}` for `j = 0..8`: the activation sums the eight mins multiply
/// (each pair of 16-code sums fits an i16: |Σ| ≤ 32·128).
#[inline]
#[target_feature(enable = "neon")]
fn paired_bsums(y: &[u8]) -> int16x8_t {
    let b = q8k_bsums(y);
    // SAFETY: `b` is 16 readable i16; `ld1` needs no alignment.
    let (lo, hi) = unsafe { (vld1q_s16(b.as_ptr()), vld1q_s16(b[8..].as_ptr())) };
    vpaddq_s16(lo, hi)
}

/// One Q4_K super-block `x` against preloaded activation codes `ys`: `Σ_j sc_j Σ q y` as four
/// i32 lanes to be summed, and the exact min sum `Σ_j m_j (bsum_2j + bsum_2j+1)`.
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_row<const SDOT: bool>(
    x: &[u8; 144],
    ys: &[int8x16_t; 16],
    bpair: int16x8_t,
) -> (int32x4_t, int32x4_t) {
    q4_k_sums::<SDOT>(&Q4kRow::decode(x), ys, bpair)
}

/// One row's Q4_K super-block, unpacked: its sub-block scales and mins and its codes.
struct Q4kRow {
    sc: [u8; 8],
    mins: int16x8_t,
    codes: [Codes; 4],
}

impl Q4kRow {
    /// Unpacks super-block `x`.
    #[inline]
    #[target_feature(enable = "neon")]
    fn decode(x: &[u8; 144]) -> Q4kRow {
        let (sc, mn) = unpack_scales(at(x, 4));
        // SAFETY: `mn` is 8 readable bytes.
        let mins = vreinterpretq_s16_u16(vmovl_u8(unsafe { vld1_u8(mn.as_ptr()) }));
        Q4kRow {
            sc,
            mins,
            codes: q4_k_codes(x),
        }
    }
}

/// The sums of [`q4_k_row`] for an unpacked super-block.
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_sums<const SDOT: bool>(
    row: &Q4kRow,
    ys: &[int8x16_t; 16],
    bpair: int16x8_t,
) -> (int32x4_t, int32x4_t) {
    let mut isum = vdupq_n_s32(0);
    for (c, [lo, hi]) in row.codes.iter().enumerate() {
        let z = vdupq_n_s32(0);
        let l = idot16::<SDOT>(idot16::<SDOT>(z, lo[0], ys[4 * c]), lo[1], ys[4 * c + 1]);
        let h = idot16::<SDOT>(
            idot16::<SDOT>(z, hi[0], ys[4 * c + 2]),
            hi[1],
            ys[4 * c + 3],
        );
        isum = vmlaq_n_s32(isum, l, i32::from(row.sc[2 * c]));
        isum = vmlaq_n_s32(isum, h, i32::from(row.sc[2 * c + 1]));
    }
    let m = row.mins;
    let msum = vaddq_s32(
        vmull_s16(vget_low_s16(m), vget_low_s16(bpair)),
        vmull_high_s16(m, bpair),
    );
    (isum, msum)
}

/// Four rows' lane vectors reduced to one register, row `k` in lane `k` (exact integer adds).
#[inline]
#[target_feature(enable = "neon")]
fn gather4(v: &[int32x4_t]) -> int32x4_t {
    vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]))
}

/// Four f32 of `v` from `k`.
#[inline(always)]
fn at4(v: &[f32; 8], k: usize) -> &[f32; 4] {
    v[k..k + 4].try_into().expect("four lanes in bounds")
}

/// Q4_K · Q8_K for eight rows (see the module docs).
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_rows<const SDOT: bool>(w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let nb = common_blocks(&w, a, 144);
    let (mut acc, mut acc_min) = ([vdupq_n_f32(0.0); 2], [vdupq_n_f32(0.0); 2]);
    for i in 0..nb {
        prefetch_rows(&w, i, 144);
        let y = &a[Y * i..Y * (i + 1)];
        let (ys, bpair, yd) = (act_codes(y), paired_bsums(y), q8k_d(y));
        // Plain loops (not `array::from_fn`, whose closures LLVM leaves as calls, spilling the
        // activation registers once per row).
        let (mut isums, mut msums) = ([vdupq_n_s32(0); 8], [vdupq_n_s32(0); 8]);
        let (mut xd, mut xdmin) = ([0f32; 8], [0f32; 8]);
        for r in 0..8 {
            let x: &[u8; 144] = at(w[r], 144 * i);
            (isums[r], msums[r]) = q4_k_row::<SDOT>(x, &ys, bpair);
            (xd[r], xdmin[r]) = (h2f(at(x, 0)), h2f(at(x, 2)));
        }
        q4_k_scale((&isums, &msums), (&xd, &xdmin), yd, &mut acc, &mut acc_min);
    }
    let mut out = [0f32; 8];
    for (h, o) in out.as_chunks_mut::<4>().0.iter_mut().enumerate() {
        store_f32(o, vsubq_f32(acc[h], acc_min[h]));
    }
    out
}

/// Q6_K · Q8_K for eight rows: per row its single dot's eight f32 lanes and final [`hsum8`].
#[inline]
#[target_feature(enable = "neon")]
fn q6_k_rows<const SDOT: bool>(w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
    let nb = common_blocks(&w, a, 210);
    let mut acc = [[vdupq_n_f32(0.0); 2]; 8];
    for i in 0..nb {
        prefetch_rows(&w, i, 210);
        let y = &a[Y * i..Y * (i + 1)];
        let yd = q8k_d(y);
        for (r, acc) in acc.iter_mut().enumerate() {
            let x: &[u8; 210] = at(w[r], 210 * i);
            let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
            let d = yd * h2f(at(x, 208));
            let lanes = q6_k_lanes::<SDOT>(y, &q6_k_codes(x), &sc);
            for (l, s) in acc.iter_mut().zip(lanes) {
                *l = vfmaq_n_f32(*l, vcvtq_f32_s32(s), d);
            }
        }
    }
    acc.map(|[lo, hi]| hsum8(lo, hi))
}

/// The four-lane f32 steps of a Q4_K super-block for eight rows: `acc += isum · d · yd`,
/// `acc_min += msum · dmin · yd`, four rows per register (the single dot's operations).
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_scale(
    sums: (&[int32x4_t; 8], &[int32x4_t; 8]),
    d: (&[f32; 8], &[f32; 8]),
    yd: f32,
    acc: &mut [float32x4_t; 2],
    acc_min: &mut [float32x4_t; 2],
) {
    for h in 0..2 {
        let isum = gather4(&sums.0[4 * h..4 * h + 4]);
        let msum = gather4(&sums.1[4 * h..4 * h + 4]);
        let dd = vmulq_n_f32(load_f32(at4(d.0, 4 * h)), yd);
        let dmin = vmulq_n_f32(load_f32(at4(d.1, 4 * h)), yd);
        acc[h] = vfmaq_f32(acc[h], vcvtq_f32_s32(isum), dd);
        acc_min[h] = vfmaq_f32(acc_min[h], vcvtq_f32_s32(msum), dmin);
    }
}

/// Q4_K · `V` Q8_K vectors for eight rows: each row's super-block unpacked once, the
/// activation codes of each vector loaded per row (they no longer fit the registers).
#[inline]
#[target_feature(enable = "neon")]
fn q4_k_rows_many<const SDOT: bool, const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = a
        .iter()
        .fold(common_blocks(&w, a[0], 144), |m, v| m.min(v.len() / Y));
    let mut acc = [[vdupq_n_f32(0.0); 2]; V];
    let mut acc_min = [[vdupq_n_f32(0.0); 2]; V];
    for i in 0..nb {
        prefetch_rows(&w, i, 144);
        let ys = a.map(|v| &v[Y * i..Y * (i + 1)]);
        let bpair = ys.map(|y| paired_bsums(y));
        let (mut isums, mut msums) = ([[vdupq_n_s32(0); 8]; V], [[vdupq_n_s32(0); 8]; V]);
        let (mut xd, mut xdmin) = ([0f32; 8], [0f32; 8]);
        for r in 0..8 {
            let x: &[u8; 144] = at(w[r], 144 * i);
            let row = Q4kRow::decode(x);
            for v in 0..V {
                (isums[v][r], msums[v][r]) = q4_k_sums::<SDOT>(&row, &act_codes(ys[v]), bpair[v]);
            }
            (xd[r], xdmin[r]) = (h2f(at(x, 0)), h2f(at(x, 2)));
        }
        for v in 0..V {
            let sums = (&isums[v], &msums[v]);
            q4_k_scale(
                sums,
                (&xd, &xdmin),
                q8k_d(ys[v]),
                &mut acc[v],
                &mut acc_min[v],
            );
        }
    }
    let mut out = [[0f32; 8]; V];
    for v in 0..V {
        for (h, o) in out[v].as_chunks_mut::<4>().0.iter_mut().enumerate() {
            store_f32(o, vsubq_f32(acc[v][h], acc_min[v][h]));
        }
    }
    out
}

/// Q6_K · `V` Q8_K vectors for eight rows: each row's codes unpacked once, then per vector its
/// single dot's eight f32 lanes and final [`hsum8`].
#[inline]
#[target_feature(enable = "neon")]
fn q6_k_rows_many<const SDOT: bool, const V: usize>(w: [&[u8]; 8], a: [&[u8]; V]) -> [[f32; 8]; V] {
    let nb = a
        .iter()
        .fold(common_blocks(&w, a[0], 210), |m, v| m.min(v.len() / Y));
    let mut acc = [[[vdupq_n_f32(0.0); 2]; 8]; V];
    for i in 0..nb {
        prefetch_rows(&w, i, 210);
        let ys = a.map(|v| &v[Y * i..Y * (i + 1)]);
        for r in 0..8 {
            let x: &[u8; 210] = at(w[r], 210 * i);
            let sc: [i8; 16] = at::<16>(x, 192).map(|b| b as i8);
            let q = q6_k_codes(x);
            let dx = h2f(at(x, 208));
            for v in 0..V {
                let d = q8k_d(ys[v]) * dx;
                let lanes = q6_k_lanes::<SDOT>(ys[v], &q, &sc);
                for (l, s) in acc[v][r].iter_mut().zip(lanes) {
                    *l = vfmaq_n_f32(*l, vcvtq_f32_s32(s), d);
                }
            }
        }
    }
    acc.map(|rows| rows.map(|[lo, hi]| hsum8(lo, hi)))
}

/// Q4_K weights: eight rows · 1..=4 Q8_K vectors (neon,dotprod; `out[v][row]`, bit-identical
/// to single dots).
///
/// # Safety
/// The CPU must have neon and dotprod; slice lengths as checked by the caller.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn rows8x4_q4_k_q8_k_dotprod(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| q4_k_rows_many::<true, _>(w, v))
}

/// Q6_K weights: eight rows · 1..=4 Q8_K vectors (neon,dotprod; `out[v][row]`, bit-identical
/// to single dots).
///
/// # Safety
/// The CPU must have neon and dotprod; slice lengths as checked by the caller.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn rows8x4_q6_k_q8_k_dotprod(_n: usize, w: [&[u8]; 8], a: &[&[u8]]) -> [[f32; 8]; 4] {
    by_vectors!(a, |v| q6_k_rows_many::<true, _>(w, v))
}

/// Defines a `dotprod` eight-row entry point over a generic kernel. (No plain-NEON one: with
/// `smull` the sixteen activation registers and the widening temporaries exceed the register
/// file, and the generated loop takes more instructions per row than the single dot — 32.5 vs
/// 27.2 per 32 weights for Q4_K — so the `neon` table keeps the single dots.)
macro_rules! rows8_dotprod {
    ($name:literal, $kernel:ident, $dotprod:ident) => {
        #[doc = concat!($name, " weights: eight rows · one Q8_K vector (neon,dotprod; bit-identical to eight dots).")]
        ///
        /// # Safety
        /// The CPU must have neon and dotprod; slice lengths as checked by the caller.
        #[target_feature(enable = "neon,dotprod")]
        pub unsafe fn $dotprod(_n: usize, w: [&[u8]; 8], a: &[u8]) -> [f32; 8] {
            $kernel::<true>(w, a)
        }
    };
}

rows8_dotprod!("Q4_K", q4_k_rows, rows8_q4_k_q8_k_dotprod);
rows8_dotprod!("Q6_K", q6_k_rows, rows8_q6_k_q8_k_dotprod);
