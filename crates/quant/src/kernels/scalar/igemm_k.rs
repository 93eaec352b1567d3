//! Scalar reference of the K-quant int8 GEMM micro-kernel (see [`crate::igemm_k`]).

use crate::kernels::{KFormat, KPanelBlock, I8_ROWS, I8_TILE_TOKENS, Q8K_BLOCK};

/// The exact integers of super-block `p` against the Q8_K block `y` for row `r`:
/// `(isum, msum)` as [`crate::kernels::KTileFn`] defines them.
fn block_ints(fmt: KFormat, p: &KPanelBlock, y: &[u8; Q8K_BLOCK], r: usize) -> (i32, i32) {
    let s = fmt.sub_len();
    let mut isum = 0i32;
    for j in 0..256 / s {
        let dot: i32 = (s * j..s * (j + 1))
            .map(|k| {
                let u = p.codes[k / 4 * (4 * I8_ROWS) + r * 4 + k % 4];
                i32::from(u) * i32::from(y[4 + k] as i8)
            })
            .sum();
        isum += p.scales[j][r] * dot;
    }
    let bsum = |j: usize| i32::from(i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]));
    let msum = (0..8)
        .map(|q| {
            let c = p.mins[q][r];
            i32::from(c as i16) * bsum(2 * q) + (c >> 16) * bsum(2 * q + 1)
        })
        .sum();
    (isum, msum)
}

/// See [`crate::kernels::KTileFn`]: the exact integers per super-block, then the f32 steps of
/// `fmt`, in super-block order (rows `t >= m` of `acc` are left alone). Panics (never reads out
/// of bounds) when a slice is too short.
pub fn tile_i8_k(
    fmt: KFormat,
    m: usize,
    panel: &[KPanelBlock],
    x: &[u8],
    ldx: usize,
    acc: &mut [[f32; I8_ROWS]; I8_TILE_TOKENS],
) {
    let nb = panel.len();
    for (t, out) in acc.iter_mut().enumerate().take(m) {
        let (xs, _) = x[t * ldx..][..nb * Q8K_BLOCK].as_chunks::<Q8K_BLOCK>();
        for (r, o) in out.iter_mut().enumerate() {
            let (mut a, mut am) = (0f32, 0f32);
            for (p, y) in panel.iter().zip(xs) {
                let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let (isum, msum) = block_ints(fmt, p, y, r);
                let (dd, dm) = (p.d[r] * dy, p.dmin[r] * dy);
                match fmt {
                    KFormat::Q4K => {
                        a = (isum as f32).mul_add(dd, a);
                        am = (msum as f32).mul_add(dm, am);
                    }
                    KFormat::Q5K => a += dd * isum as f32 - dm * msum as f32,
                    KFormat::Q6K => a = ((isum + msum) as f32).mul_add(dd, a),
                }
            }
            *o = a - am;
        }
    }
}
