//! Prefill products as f32 GEMM over weights dequantized into packed panels.
//!
//! For a batch of `n` activation vectors, integer dots against quantized
//! activations cost ~7 vector instructions per 32 multiply-adds (sign fix,
//! `maddubs`, `madd`, convert, scale, FMA), while an f32 FMA does 8 in one.
//! Above [`GEMM_MIN_VECS`] vectors it pays to dequantize each weight row once
//! and run a register-tiled f32 GEMM instead (what llama.cpp gets from BLAS):
//!
//! * rows are split into chunks (multiples of [`PANEL_ROWS`]) across the pool;
//! * per chunk and per [`KC`]-column slice, the rows are dequantized into
//!   panels of [`PANEL_ROWS`] rows stored column-interleaved
//!   (`panel[k * 16 + j]` is row `j`, column `k`: one f32x8 pair per column);
//! * every tile of [`TILE_TOKENS`] activation rows runs the micro-kernel over
//!   each panel, accumulating 6 × 16 outputs in registers across the slice.
//!
//! Each output is a sum over column slices of FMA chains in column order, so
//! it does not depend on the thread count, and the scalar and AVX2
//! micro-kernels agree bit for bit. Activations are not quantized on this
//! path, so results differ from [`crate::matmul`] by the activation
//! quantization error (tested against an f64 reference).

use crate::dispatch::Kernels;
use crate::error::{check_len, QuantError};
use crate::kernels::{PANEL_ROWS, TILE_TOKENS};
use crate::matrix::QMatrix;
use crate::matvec::OutPtr;
use crate::pool::ThreadPool;

/// Columns per panel slice: a multiple of every block size (32 and 256), and
/// small enough that a chunk's panels stay in L2.
pub const KC: usize = 256;
/// Batch size from which the model's projections take this path.
pub const GEMM_MIN_VECS: usize = 32;
/// Upper bound on rows per task (panels of one slice: 256 × 256 × 4 = 256 KiB).
const MAX_CHUNK_ROWS: usize = 256;

/// `y[i * rows + r] = w_r · x_i` for the `n` f32 vectors `x` (`[n, cols]`),
/// with the process-wide kernels.
pub fn matmul_f32(
    pool: &ThreadPool,
    w: &QMatrix<'_>,
    x: &[f32],
    n: usize,
    y: &mut [f32],
) -> Result<(), QuantError> {
    Kernels::global().matmul_f32(pool, w, x, n, y)
}

impl Kernels {
    /// [`matmul_f32`] with this kernel table.
    pub fn matmul_f32(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        x: &[f32],
        n: usize,
        y: &mut [f32],
    ) -> Result<(), QuantError> {
        let (rows, cols) = (w.rows(), w.cols());
        let overflow = QuantError::Overflow {
            what: "matmul_f32 sizes",
        };
        check_len(
            "matmul_f32 input (n * cols)",
            n.checked_mul(cols).ok_or(overflow.clone())?,
            x.len(),
        )?;
        check_len(
            "matmul_f32 output (n * rows)",
            n.checked_mul(rows).ok_or(overflow)?,
            y.len(),
        )?;
        if n == 0 || rows == 0 {
            return Ok(());
        }
        // Fail early (not inside a task) on a type without a dequantizer.
        let mut probe = vec![0f32; cols];
        w.dequantize_row(0, &mut probe)?;
        let per_thread = rows.div_ceil(pool.n_threads() * crate::matvec::CHUNKS_PER_THREAD);
        let chunk = per_thread
            .div_ceil(PANEL_ROWS)
            .clamp(1, MAX_CHUNK_ROWS / PANEL_ROWS)
            * PANEL_ROWS;
        let out = OutPtr::new(y);
        let kernel = self.panel_fn();
        pool.run(rows.div_ceil(chunk), &|t| {
            let r0 = t * chunk;
            let job = Chunk {
                w,
                x,
                n,
                rows: r0..(r0 + chunk).min(rows),
            };
            // SAFETY: task t alone writes rows r0..r0 + chunk of every output
            // vector; y (n * rows long, checked above) outlives pool.run, and
            // the kernel comes from this table (it runs on this CPU).
            unsafe { job.run(kernel, &out) };
        });
        Ok(())
    }
}

/// One task: a range of weight rows against all activation vectors.
struct Chunk<'a, 'w> {
    w: &'a QMatrix<'w>,
    x: &'a [f32],
    n: usize,
    rows: std::ops::Range<usize>,
}

impl Chunk<'_, '_> {
    /// Dequantizes this chunk's rows, columns `k0..k0 + kc`, into `panels`
    /// (rows past the matrix are zero).
    fn pack(&self, k0: usize, kc: usize, row_buf: &mut [f32], panels: &mut [f32]) {
        let (ty, bs, bb) = (
            self.w.ty(),
            self.w.ty().block_size(),
            self.w.ty().block_bytes(),
        );
        let bytes = k0 / bs * bb..(k0 + kc) / bs * bb;
        panels.fill(0.0);
        for (i, r) in self.rows.clone().enumerate() {
            let src = &self.w.row(r)[bytes.clone()];
            // The type dequantized row 0 before the tasks started, and every
            // slice is whole blocks, so this cannot fail.
            if crate::formats::dequantize_row(ty, src, &mut row_buf[..kc]).is_err() {
                continue;
            }
            let panel = &mut panels[i / PANEL_ROWS * KC * PANEL_ROWS..];
            let j = i % PANEL_ROWS;
            for (k, v) in row_buf[..kc].iter().enumerate() {
                panel[k * PANEL_ROWS + j] = *v;
            }
        }
    }

    /// Runs the chunk.
    ///
    /// # Safety
    /// `kernel` must run on this CPU; `out` must point to `n * w.rows()`
    /// writable floats of which no other thread writes rows `self.rows`.
    unsafe fn run(&self, kernel: crate::kernels::PanelFn, out: &OutPtr) {
        let (rows, cols) = (self.w.rows(), self.w.cols());
        let n_panels = self.rows.len().div_ceil(PANEL_ROWS);
        let mut panels = vec![0f32; n_panels * KC * PANEL_ROWS];
        let mut row_buf = vec![0f32; KC];
        let mut acc = [[0f32; PANEL_ROWS]; TILE_TOKENS];
        for k0 in (0..cols).step_by(KC) {
            let kc = KC.min(cols - k0);
            self.pack(k0, kc, &mut row_buf, &mut panels);
            for t0 in (0..self.n).step_by(TILE_TOKENS) {
                let m = TILE_TOKENS.min(self.n - t0);
                let xs = &self.x[t0 * cols + k0..];
                for p in 0..n_panels {
                    let panel = &panels[p * KC * PANEL_ROWS..][..kc * PANEL_ROWS];
                    // SAFETY: the kernel runs on this CPU (caller); it checks lengths.
                    unsafe { kernel(m, kc, xs, cols, panel, &mut acc) };
                    let r = self.rows.start + p * PANEL_ROWS;
                    let valid = PANEL_ROWS.min(self.rows.end - r);
                    for (t, a) in acc.iter().enumerate().take(m) {
                        let base = (t0 + t) * rows + r;
                        for (j, v) in a.iter().enumerate().take(valid) {
                            // SAFETY: base + j < n * rows and row r + j is in
                            // this task's range (caller's contract).
                            unsafe {
                                let o = out.get().add(base + j);
                                *o = if k0 == 0 { *v } else { *o + *v };
                            }
                        }
                    }
                }
            }
        }
    }
}
