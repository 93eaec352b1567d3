//! AVX2+FMA f32 GEMM micro-kernel: up to [`TILE_TOKENS`] activation rows
//! against one packed panel of [`PANEL_ROWS`] weight rows, accumulated in
//! 2 × `m` f32x8 registers (12 for a full tile) over the whole `kc` range.

use crate::kernels::{PANEL_ROWS, TILE_TOKENS};
use std::arch::x86_64::*;

/// Micro-kernel for exactly `M` activation rows.
///
/// # Safety
/// CPU must support avx2+fma; `x` must hold `(M - 1) * ldx + kc` floats and
/// `panel` `kc * PANEL_ROWS` floats (checked by the caller, [`panel_f32`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const M: usize>(
    kc: usize,
    x: &[f32],
    ldx: usize,
    panel: &[f32],
    acc: &mut [[f32; PANEL_ROWS]; TILE_TOKENS],
) {
    let mut c = [[_mm256_setzero_ps(); 2]; M];
    let (xp, pp) = (x.as_ptr(), panel.as_ptr());
    for k in 0..kc {
        // SAFETY: k < kc, so k * 16 + 15 < kc * 16 <= panel.len().
        let (w0, w1) = unsafe {
            let p = pp.add(k * PANEL_ROWS);
            (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
        };
        for (t, ct) in c.iter_mut().enumerate() {
            // SAFETY: t < M and k < kc, so t * ldx + k < (M - 1) * ldx + kc <= x.len().
            let xv = unsafe { _mm256_broadcast_ss(&*xp.add(t * ldx + k)) };
            ct[0] = _mm256_fmadd_ps(xv, w0, ct[0]);
            ct[1] = _mm256_fmadd_ps(xv, w1, ct[1]);
        }
    }
    for (ct, out) in c.iter().zip(acc.iter_mut()) {
        let (lo, hi) = out.split_at_mut(8);
        // SAFETY: `lo` and `hi` are 8 writable f32 each; `storeu` needs no alignment.
        unsafe {
            _mm256_storeu_ps(lo.as_mut_ptr(), ct[0]);
            _mm256_storeu_ps(hi.as_mut_ptr(), ct[1]);
        }
    }
}

/// `acc[t][j] = Σ_k x[t * ldx + k] · panel[k * PANEL_ROWS + j]` for `t < m`
/// (at most [`TILE_TOKENS`]), `j < PANEL_ROWS`, `k < kc`, summed in `k` order
/// per output with FMA (rows `t >= m` of `acc` are left alone).
///
/// # Safety
/// CPU must support avx2+fma+f16c. Panics (never reads out of bounds) when
/// `x` or `panel` is too short.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn panel_f32(
    m: usize,
    kc: usize,
    x: &[f32],
    ldx: usize,
    panel: &[f32],
    acc: &mut [[f32; PANEL_ROWS]; TILE_TOKENS],
) {
    if m == 0 || kc == 0 {
        return;
    }
    assert!(m <= TILE_TOKENS && kc <= ldx, "tile shape");
    assert!(x.len() >= (m - 1) * ldx + kc, "activation rows in bounds");
    assert!(panel.len() >= kc * PANEL_ROWS, "panel in bounds");
    // SAFETY: CPU features per this function's contract; lengths asserted above.
    unsafe {
        match m {
            1 => tile::<1>(kc, x, ldx, panel, acc),
            2 => tile::<2>(kc, x, ldx, panel, acc),
            3 => tile::<3>(kc, x, ldx, panel, acc),
            4 => tile::<4>(kc, x, ldx, panel, acc),
            5 => tile::<5>(kc, x, ldx, panel, acc),
            _ => tile::<6>(kc, x, ldx, panel, acc),
        }
    }
}

/// Transposes an 8×8 block of f32: `out[i]` is column `i` of rows `r`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // s[4h + q]: columns q (0, 1 of the low pair; 2, 3 of the high) of rows 4h..4h + 4.
    let s: [__m256; 8] = std::array::from_fn(|i| {
        let (h, q) = (i / 4, i % 4);
        let (a, b) = (t[4 * h + q / 2], t[4 * h + q / 2 + 2]);
        if q % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xee>(a, b)
        }
    });
    std::array::from_fn(|i| {
        let (a, b) = (s[i % 4], s[4 + i % 4]);
        if i < 4 {
            _mm256_permute2f128_ps::<0x20>(a, b)
        } else {
            _mm256_permute2f128_ps::<0x31>(a, b)
        }
    })
}

/// `panel[k * PANEL_ROWS + j] = rows[j * ld + k]` for `j < PANEL_ROWS`,
/// `k < kc`, by 8×8 register transposes (a scalar tail for `kc % 8`).
///
/// # Safety
/// CPU must support avx2+fma+f16c. Panics (never reads or writes out of
/// bounds) when a slice is too short.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn interleave_panel(rows: &[f32], ld: usize, kc: usize, panel: &mut [f32]) {
    if kc == 0 {
        return;
    }
    assert!(kc <= ld, "panel shape");
    assert!(rows.len() >= (PANEL_ROWS - 1) * ld + kc, "rows in bounds");
    assert!(panel.len() >= kc * PANEL_ROWS, "panel in bounds");
    let k8 = kc / 8 * 8;
    for j0 in (0..PANEL_ROWS).step_by(8) {
        for k in (0..k8).step_by(8) {
            let r: [__m256; 8] = std::array::from_fn(|i| {
                let src: &[f32; 8] = rows[(j0 + i) * ld + k..][..8].try_into().expect("8 floats");
                super::load_ps(src)
            });
            for (i, col) in transpose8(r).into_iter().enumerate() {
                let dst = &mut panel[(k + i) * PANEL_ROWS + j0..][..8];
                // SAFETY: `dst` is 8 writable f32; `storeu` has no alignment requirement.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), col) };
            }
        }
    }
    for k in k8..kc {
        for j in 0..PANEL_ROWS {
            panel[k * PANEL_ROWS + j] = rows[j * ld + k];
        }
    }
}
