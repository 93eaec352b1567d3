//! K-quant int8 GEMM micro-kernels (see [`crate::kernels::KTileFn`]): a 512-bit AVX512-VNNI
//! one and a 256-bit AVX-VNNI one on `vpdpbusd` (each sub-block's exact dot in i32 lanes, then
//! `vpmulld` by the rows' integer scales), and a plain AVX2 one on `vpmaddubsw` whose i16 sums
//! stay exact: per i16, `2 · G` products of codes below `U` and activations of magnitude at most
//! 128 summed, with `G` code groups per i16 sum chosen so that `2 G (U − 1) 128 < 2^15`
//! (Q4_K: `U = 16`, `G = 8`; Q5_K: `U = 32`, `G = 4`; Q6_K: `U = 64`, `G = 2`), then `vpmaddwd`
//! by the scale widens and scales them exactly.
//!
//! The mins (Q6_K: the code offset) are `vpmaddwd` of the packed `i16` pairs against the
//! activation block's bsums; the f32 steps follow [`KFormat`], as the scalar reference does.
//!
//! # Safety (all functions)
//! The CPU must support the features each function enables.

use super::{at, load256, load_ps};
use crate::kernels::{KFormat, KPanelBlock, I8_ROWS, I8_TILE_TOKENS, Q8K_BLOCK};
use std::arch::x86_64::*;

/// The [`KFormat`] of const parameter `F` (0, 1, 2: Q4K, Q5K, Q6K).
const fn format_of(f: u8) -> KFormat {
    match f {
        0 => KFormat::Q4K,
        1 => KFormat::Q5K,
        _ => KFormat::Q6K,
    }
}

/// The operands of one call: the panel and, per token, its Q8_K blocks.
struct Ops<'a, const M: usize> {
    panel: &'a [KPanelBlock],
    xs: [&'a [[u8; Q8K_BLOCK]]; M],
}

impl<'a, const M: usize> Ops<'a, M> {
    /// Cuts `nb = panel.len()` blocks of `M` tokens from `x` (token `t` at `t * ldx`); panics
    /// (never reads out of bounds) when `x` is too short.
    fn new(panel: &'a [KPanelBlock], x: &'a [u8], ldx: usize) -> Self {
        let len = panel.len() * Q8K_BLOCK;
        let xs = std::array::from_fn(|t| x[t * ldx..][..len].as_chunks::<Q8K_BLOCK>().0);
        Ops { panel, xs }
    }
}

/// The four activation codes of group `g` (codes `4g..4g + 4`) as one i32.
#[inline(always)]
fn group(y: &[u8; Q8K_BLOCK], g: usize) -> i32 {
    i32::from_le_bytes(*at::<4>(y, 4 + 4 * g))
}

/// bsums `2p` (low half) and `2p + 1` (high half) as one i32.
#[inline(always)]
fn bsum_pair(y: &[u8; Q8K_BLOCK], p: usize) -> i32 {
    i32::from_le_bytes(*at::<4>(y, 260 + 4 * p))
}

/// The activation block's scale.
#[inline(always)]
fn scale(y: &[u8; Q8K_BLOCK]) -> f32 {
    f32::from_le_bytes(*at::<4>(y, 0))
}

/// Eight i32 from an array.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_i32x8(v: &[i32]) -> __m256i {
    let v: &[i32; 8] = v[..8].try_into().expect("eight lanes");
    // SAFETY: `v` is 8 readable i32; `loadu` needs no alignment.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// Sixteen i32 from an array.
#[inline]
#[target_feature(enable = "avx512f")]
fn load_i32x16(v: &[i32; 16]) -> __m512i {
    // SAFETY: `v` is 16 readable i32; `loadu` needs no alignment.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// 512-bit micro-kernel for exactly `M` tokens and format `F`: all sixteen rows per register.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn tile512<const M: usize, const F: u8>(o: &Ops<'_, M>, acc: &mut [[f32; I8_ROWS]]) {
    let (fmt, gpb) = (format_of(F), format_of(F).sub_len() / 4);
    let (mut c, mut cm) = ([_mm512_setzero_ps(); M], [_mm512_setzero_ps(); M]);
    for (b, p) in o.panel.iter().enumerate() {
        let mut isum = [_mm512_setzero_si512(); M];
        for j in 0..64 / gpb {
            let w: [__m512i; 8] = std::array::from_fn(|g| {
                let v: &[u8; 64] = at(&p.codes, 64 * (j * gpb + g.min(gpb - 1)));
                // SAFETY: `v` is 64 readable bytes; `loadu` needs no alignment.
                unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
            });
            let sc = load_i32x16(&p.scales[j]);
            unroll!(t in [0 1 2 3 4 5 6 7] {
                if t < M {
                    let y = &o.xs[t][b];
                    let mut d = _mm512_setzero_si512();
                    for (g, wg) in w.iter().enumerate().take(gpb) {
                        let xg = _mm512_set1_epi32(group(y, j * gpb + g));
                        d = _mm512_dpbusd_epi32(d, *wg, xg);
                    }
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(d, sc));
                }
            });
        }
        let mins: [__m512i; 8] = std::array::from_fn(|q| load_i32x16(&p.mins[q]));
        // SAFETY: `d` and `dmin` are 16 readable f32 each; `loadu` needs no alignment.
        let (dw, dmw) = unsafe {
            (
                _mm512_loadu_ps(p.d.as_ptr()),
                _mm512_loadu_ps(p.dmin.as_ptr()),
            )
        };
        unroll!(t in [0 1 2 3 4 5 6 7] {
            if t < M {
                let y = &o.xs[t][b];
                let mut ms = _mm512_setzero_si512();
                for (q, mq) in mins.iter().enumerate() {
                    let bs = _mm512_set1_epi32(bsum_pair(y, q));
                    ms = _mm512_add_epi32(ms, _mm512_madd_epi16(*mq, bs));
                }
                let dy = _mm512_set1_ps(scale(y));
                let (dd, dm) = (_mm512_mul_ps(dw, dy), _mm512_mul_ps(dmw, dy));
                match fmt {
                    KFormat::Q4K => {
                        c[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), dd, c[t]);
                        cm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), dm, cm[t]);
                    }
                    KFormat::Q5K => {
                        let a = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum[t]));
                        let s = _mm512_sub_ps(a, _mm512_mul_ps(dm, _mm512_cvtepi32_ps(ms)));
                        c[t] = _mm512_add_ps(c[t], s);
                    }
                    KFormat::Q6K => {
                        let i = _mm512_cvtepi32_ps(_mm512_add_epi32(isum[t], ms));
                        c[t] = _mm512_fmadd_ps(i, dd, c[t]);
                    }
                }
            }
        });
    }
    for ((ct, cmt), out) in c.iter().zip(&cm).zip(acc.iter_mut()) {
        // SAFETY: `out` is 16 writable f32; `storeu` needs no alignment.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_sub_ps(*ct, *cmt)) };
    }
}

/// One token's exact sub-block sum times the rows' scales, `vpdpbusd` version: `w` the
/// sub-block's code groups (the first `S / 4` of them), `x(g)` group `g`'s activation
/// broadcast, `sc` the scales as i32 lanes and as `i16` pairs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn subdot_vnni(
    fmt: KFormat,
    w: &[__m256i; 8],
    sc: (__m256i, __m256i),
    x: impl Fn(usize) -> __m256i,
) -> __m256i {
    let mut d = _mm256_setzero_si256();
    for (g, wg) in w.iter().enumerate().take(fmt.sub_len() / 4) {
        d = _mm256_dpbusd_avx_epi32(d, *wg, x(g));
    }
    _mm256_mullo_epi32(d, sc.0)
}

/// [`subdot_vnni`] on `vpmaddubsw`: runs of `G` groups summed in i16 (see the module docs),
/// each widened by `vpmaddwd` against the scales as `i16` pairs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn subdot_maddubs(
    fmt: KFormat,
    w: &[__m256i; 8],
    sc: (__m256i, __m256i),
    x: impl Fn(usize) -> __m256i,
) -> __m256i {
    let run = match fmt {
        KFormat::Q4K => 8,
        KFormat::Q5K => 4,
        KFormat::Q6K => 2,
    };
    // Plain index loops over constant bounds (the format is a const parameter of the caller):
    // they unroll, and `w` stays in registers. Iterator adapters here (`skip`, `take`) were
    // left as calls, which made this kernel 4-5x slower than its op count.
    let mut i = _mm256_setzero_si256();
    let mut r0 = 0;
    while r0 < fmt.sub_len() / 4 {
        let mut h = _mm256_maddubs_epi16(w[r0], x(r0));
        let mut g = r0 + 1;
        while g < r0 + run {
            h = _mm256_add_epi16(h, _mm256_maddubs_epi16(w[g], x(g)));
            g += 1;
        }
        i = _mm256_add_epi32(i, _mm256_madd_epi16(h, sc.1));
        r0 += run;
    }
    i
}

/// The f32 steps of one super-block for half `H` of the rows and one token (see [`KFormat`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn epilogue256<const H: usize>(
    fmt: KFormat,
    p: &KPanelBlock,
    y: &[u8; Q8K_BLOCK],
    isum: __m256i,
    c: &mut (__m256, __m256),
) {
    let mut ms = _mm256_setzero_si256();
    for q in 0..8 {
        let bs = _mm256_set1_epi32(bsum_pair(y, q));
        let mq = load_i32x8(&p.mins[q][8 * H..]);
        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mq, bs));
    }
    let dy = _mm256_set1_ps(scale(y));
    let dw: &[f32; 8] = p.d[8 * H..][..8].try_into().expect("eight lanes");
    let dmw: &[f32; 8] = p.dmin[8 * H..][..8].try_into().expect("eight lanes");
    let (dd, dm) = (
        _mm256_mul_ps(load_ps(dw), dy),
        _mm256_mul_ps(load_ps(dmw), dy),
    );
    match fmt {
        KFormat::Q4K => {
            c.0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, c.0);
            c.1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), dm, c.1);
        }
        KFormat::Q5K => {
            let a = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(isum));
            let s = _mm256_sub_ps(a, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(ms)));
            c.0 = _mm256_add_ps(c.0, s);
        }
        KFormat::Q6K => {
            let i = _mm256_cvtepi32_ps(_mm256_add_epi32(isum, ms));
            c.0 = _mm256_fmadd_ps(i, dd, c.0);
        }
    }
}

/// Defines a 256-bit micro-kernel `$name::<M, F, H>` (at most four tokens, rows `8H..8H + 8`)
/// over the sub-block sum `$subdot`.
macro_rules! tile256 {
    ($name:ident, $features:literal, $subdot:ident) => {
        #[inline]
        #[target_feature(enable = $features)]
        fn $name<const M: usize, const F: u8, const H: usize>(
            o: &Ops<'_, M>,
            acc: &mut [[f32; I8_ROWS]],
        ) {
            let (fmt, gpb) = (format_of(F), format_of(F).sub_len() / 4);
            let mut c = [(_mm256_setzero_ps(), _mm256_setzero_ps()); M];
            for (b, p) in o.panel.iter().enumerate() {
                let mut isum = [_mm256_setzero_si256(); M];
                for j in 0..64 / gpb {
                    let w: [__m256i; 8] = std::array::from_fn(|g| {
                        load256(at(&p.codes, 64 * (j * gpb + g.min(gpb - 1)) + 32 * H))
                    });
                    let sc = load_i32x8(&p.scales[j][8 * H..]);
                    let sc = (sc, _mm256_or_si256(
                        _mm256_and_si256(sc, _mm256_set1_epi32(0xffff)),
                        _mm256_slli_epi32(sc, 16),
                    ));
                    unroll!(t in [0 1 2 3] {
                        if t < M {
                            let y = &o.xs[t][b];
                            let x = |g: usize| _mm256_set1_epi32(group(y, j * gpb + g));
                            isum[t] = _mm256_add_epi32(isum[t], $subdot(fmt, &w, sc, x));
                        }
                    });
                }
                for (t, ct) in c.iter_mut().enumerate() {
                    epilogue256::<H>(fmt, p, &o.xs[t][b], isum[t], ct);
                }
            }
            for (ct, out) in c.iter().zip(acc.iter_mut()) {
                let out = &mut out[8 * H..][..8];
                // SAFETY: `out` is 8 writable f32; `storeu` needs no alignment.
                unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_sub_ps(ct.0, ct.1)) };
            }
        }
    };
}

tile256!(tile256_vnni, "avx2,fma,f16c,avxvnni", subdot_vnni);
tile256!(tile256_maddubs, "avx2,fma,f16c", subdot_maddubs);

/// Matches the runtime `(token count, format)` to a monomorphized call `$go!(M, F)`.
macro_rules! by_shape {
    ($n:expr, $fmt:expr, $go:ident, [$($k:literal)*]) => {
        match ($n, $fmt) {
            $(
                ($k, KFormat::Q4K) => $go!($k, 0),
                ($k, KFormat::Q5K) => $go!($k, 1),
                ($k, KFormat::Q6K) => $go!($k, 2),
            )*
            _ => unreachable!("token count checked"),
        }
    };
}

/// See [`crate::kernels::KTileFn`] (512-bit AVX512-VNNI version).
///
/// # Safety
/// CPU must support avx512f+avx512bw+avx512vnni. Panics (never reads out of bounds) when a
/// slice is too short.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn tile_i8_k_avx512vnni(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    assert!(m <= I8_TILE_TOKENS, "tile shape");
    macro_rules! go {
        ($k:literal, $f:literal) => {
            tile512::<$k, $f>(&Ops::new(panel, x, ldx), acc)
        };
    }
    if m > 0 {
        by_shape!(m, fmt, go, [1 2 3 4 5 6 7 8]);
    }
}

/// Runs both halves of a 256-bit micro-kernel `$tile` for `M` tokens and format `F`.
macro_rules! halves {
    ($tile:ident, $panel:expr, $x:expr, $ldx:expr, $acc:expr, $k:literal, $f:literal) => {{
        let o = Ops::<$k>::new($panel, $x, $ldx);
        $tile::<$k, $f, 0>(&o, $acc);
        $tile::<$k, $f, 1>(&o, $acc);
    }};
}

/// Defines a 256-bit [`crate::kernels::KTileFn`] from a two-half micro-kernel of at most four
/// tokens: the tokens in runs of four, each over both halves of the row group.
macro_rules! tile_i8_k_256 {
    ($(#[$doc:meta])* $name:ident, $features:literal, $tile:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub unsafe fn $name(
            fmt: KFormat,
            m: usize,
            panel: &[KPanelBlock],
            x: &[u8],
            ldx: usize,
            acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
        ) {
            assert!(m <= I8_TILE_TOKENS, "tile shape");
            let mut t0 = 0;
            while t0 < m {
                let (n, xt, acc) = ((m - t0).min(4), &x[t0 * ldx..], &mut acc[t0..]);
                macro_rules! go {
                    ($k:literal, $f:literal) => {
                        halves!($tile, panel, xt, ldx, acc, $k, $f)
                    };
                }
                by_shape!(n, fmt, go, [1 2 3 4]);
                t0 += n;
            }
        }
    };
}

tile_i8_k_256!(
    /// See [`crate::kernels::KTileFn`] (256-bit AVX-VNNI version).
    ///
    /// # Safety
    /// CPU must support avx2+fma+f16c+avxvnni. Panics (never reads out of bounds) when a slice
    /// is too short.
    tile_i8_k_avxvnni,
    "avx2,fma,f16c,avxvnni",
    tile256_vnni
);

tile_i8_k_256!(
    /// See [`crate::kernels::KTileFn`] (AVX2 version on `vpmaddubsw`, exact for every K-quant
    /// code — see the module docs).
    ///
    /// # Safety
    /// CPU must support avx2+fma+f16c. Panics (never reads out of bounds) when a slice is too
    /// short.
    tile_i8_k_avx2,
    "avx2,fma,f16c",
    tile256_maddubs
);
