//! Scalar reference of the f32 GEMM micro-kernel (see [`crate::gemm`]).

use crate::kernels::{PANEL_ROWS, TILE_TOKENS};

/// `acc[t][j] = Σ_k x[t * ldx + k] · panel[k * PANEL_ROWS + j]` for `t < m`,
/// `j < PANEL_ROWS`, `k < kc`, summed in `k` order per output (rows `t >= m`
/// of `acc` are left alone).
pub fn panel_f32(
    m: usize,
    kc: usize,
    x: &[f32],
    ldx: usize,
    panel: &[f32],
    acc: &mut [[f32; PANEL_ROWS]; TILE_TOKENS],
) {
    for (t, out) in acc.iter_mut().enumerate().take(m) {
        let xs = &x[t * ldx..t * ldx + kc];
        let mut s = [0f32; PANEL_ROWS];
        for (xk, w) in xs.iter().zip(panel.chunks_exact(PANEL_ROWS)) {
            for (sj, wj) in s.iter_mut().zip(w) {
                *sj = xk.mul_add(*wj, *sj);
            }
        }
        *out = s;
    }
}

/// `panel[k * PANEL_ROWS + j] = rows[j * ld + k]` for `j < PANEL_ROWS`, `k < kc`.
pub fn interleave_panel(rows: &[f32], ld: usize, kc: usize, panel: &mut [f32]) {
    for (k, out) in panel.chunks_exact_mut(PANEL_ROWS).take(kc).enumerate() {
        for (j, o) in out.iter_mut().enumerate() {
            *o = rows[j * ld + k];
        }
    }
}
