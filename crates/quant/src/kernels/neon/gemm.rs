//! NEON f32 GEMM micro-kernel: up to [`TILE_TOKENS`] activation rows against one packed panel
//! of [`PANEL_ROWS`] weight rows in 4 × `m` `float32x4_t` accumulators (24 for a full tile),
//! each output summed in `k` order with one FMA per step — the scalar reference's bits.

use super::{load_f32, store_f32};
use crate::kernels::{PANEL_ROWS, TILE_TOKENS};
use std::arch::aarch64::*;

/// Micro-kernel for exactly `M` activation rows (lengths checked by [`panel_f32`]).
#[inline]
#[target_feature(enable = "neon")]
fn tile<const M: usize>(
    kc: usize,
    x: &[f32],
    ldx: usize,
    panel: &[f32],
    acc: &mut [[f32; PANEL_ROWS]; TILE_TOKENS],
) {
    let mut c = [[vdupq_n_f32(0.0); 4]; M];
    let (rows, _) = panel[..kc * PANEL_ROWS].as_chunks::<PANEL_ROWS>();
    for (k, row) in rows.iter().enumerate() {
        let (q, _) = row.as_chunks::<4>();
        let w = [
            load_f32(&q[0]),
            load_f32(&q[1]),
            load_f32(&q[2]),
            load_f32(&q[3]),
        ];
        for (t, ct) in c.iter_mut().enumerate() {
            let xv = x[t * ldx + k];
            for (cj, wj) in ct.iter_mut().zip(w) {
                *cj = vfmaq_n_f32(*cj, wj, xv);
            }
        }
    }
    for (ct, out) in c.iter().zip(acc.iter_mut()) {
        let (q, _) = out.as_chunks_mut::<4>();
        for (o, v) in q.iter_mut().zip(ct) {
            store_f32(o, *v);
        }
    }
}

/// `acc[t][j] = Σ_k x[t * ldx + k] · panel[k * PANEL_ROWS + j]` for `t < m` (at most
/// [`TILE_TOKENS`]), `j < PANEL_ROWS`, `k < kc`, summed in `k` order per output with FMA (rows
/// `t >= m` of `acc` are left alone).
///
/// # Safety
/// None beyond NEON. Panics (never reads out of bounds) when `x` or `panel` is too short.
#[target_feature(enable = "neon")]
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
    match m {
        1 => tile::<1>(kc, x, ldx, panel, acc),
        2 => tile::<2>(kc, x, ldx, panel, acc),
        3 => tile::<3>(kc, x, ldx, panel, acc),
        4 => tile::<4>(kc, x, ldx, panel, acc),
        5 => tile::<5>(kc, x, ldx, panel, acc),
        _ => tile::<6>(kc, x, ldx, panel, acc),
    }
}

/// Transposes a 4×4 block of f32: `out[i]` is column `i` of rows `r`.
#[inline]
#[target_feature(enable = "neon")]
fn transpose4(r: [float32x4_t; 4]) -> [float32x4_t; 4] {
    let t0 = vtrn1q_f32(r[0], r[1]);
    let t1 = vtrn2q_f32(r[0], r[1]);
    let t2 = vtrn1q_f32(r[2], r[3]);
    let t3 = vtrn2q_f32(r[2], r[3]);
    let f = vreinterpretq_f64_f32;
    let b = vreinterpretq_f32_f64;
    [
        b(vtrn1q_f64(f(t0), f(t2))),
        b(vtrn1q_f64(f(t1), f(t3))),
        b(vtrn2q_f64(f(t0), f(t2))),
        b(vtrn2q_f64(f(t1), f(t3))),
    ]
}

/// `panel[k * PANEL_ROWS + j] = rows[j * ld + k]` for `j < PANEL_ROWS`, `k < kc`, by 4×4
/// register transposes (a scalar tail for `kc % 4`).
///
/// # Safety
/// None beyond NEON. Panics (never reads or writes out of bounds) when a slice is too short.
#[target_feature(enable = "neon")]
pub unsafe fn interleave_panel(rows: &[f32], ld: usize, kc: usize, panel: &mut [f32]) {
    if kc == 0 {
        return;
    }
    assert!(kc <= ld, "panel shape");
    assert!(rows.len() >= (PANEL_ROWS - 1) * ld + kc, "rows in bounds");
    assert!(panel.len() >= kc * PANEL_ROWS, "panel in bounds");
    let k4 = kc / 4 * 4;
    for j0 in (0..PANEL_ROWS).step_by(4) {
        for k in (0..k4).step_by(4) {
            let r: [float32x4_t; 4] = std::array::from_fn(|i| {
                let src: &[f32; 4] = rows[(j0 + i) * ld + k..][..4].try_into().expect("4 floats");
                load_f32(src)
            });
            for (i, col) in transpose4(r).into_iter().enumerate() {
                let dst: &mut [f32; 4] = (&mut panel[(k + i) * PANEL_ROWS + j0..][..4])
                    .try_into()
                    .expect("4 floats");
                store_f32(dst, col);
            }
        }
    }
    for k in k4..kc {
        for j in 0..PANEL_ROWS {
            panel[k * PANEL_ROWS + j] = rows[j * ld + k];
        }
    }
}
