//! Scalar reference of the int8 GEMM micro-kernel (see [`crate::igemm`]).

use crate::kernels::{ActBlockMeta, I8_PANEL_BLOCK, I8_ROWS, I8_TILE_TOKENS};

/// See [`crate::kernels::I8TileFn`]: the exact integer sum per block, then one
/// fused multiply-add per block and row, in block order (rows `t >= m` of
/// `acc` are left alone). Panics (never reads out of bounds) when a slice is
/// too short.
#[allow(clippy::too_many_arguments)]
pub fn tile_i8(
    m: usize,
    nb: usize,
    panel: &[u8],
    scales: &[f32],
    x: &[u8],
    ldx: usize,
    meta: &[ActBlockMeta],
    ldm: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    for (t, out) in acc.iter_mut().enumerate().take(m) {
        let xs = &x[t * ldx..][..nb * 34];
        let ms = &meta[t * ldm..][..nb];
        let mut s = [0f32; I8_ROWS];
        for b in 0..nb {
            let codes = &xs[b * 34 + 2..][..32];
            let block = &panel[b * I8_PANEL_BLOCK..][..I8_PANEL_BLOCK];
            let ds = &scales[b * I8_ROWS..][..I8_ROWS];
            for (r, sr) in s.iter_mut().enumerate() {
                let mut i = ms[b].neg_offset_sum;
                for (k, &q) in codes.iter().enumerate() {
                    let u = block[k / 4 * (4 * I8_ROWS) + r * 4 + k % 4];
                    i += i32::from(u) * i32::from(q as i8);
                }
                *sr = (i as f32).mul_add(ds[r] * ms[b].d, *sr);
            }
        }
        *out = s;
    }
}
