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
//! micro-kernels agree bit for bit (tested against an f64 reference). The
//! activations are plain f32: the model passes its ggml-quantized activations
//! dequantized again ([`crate::QuantizedActs::dequantize`]), so the products
//! equal the integer path's and only the summation order differs.

use crate::dispatch::Kernels;
use crate::error::{check_len, QuantError};
use crate::kernels::{PANEL_ROWS, TILE_TOKENS};
use crate::matrix::QMatrix;
use crate::matvec::OutPtr;
use crate::pool::ThreadPool;

/// Columns per panel slice: a multiple of every block size (32 and 256), small
/// enough that a chunk's panels stay in L2 (one 16-row panel, 32 KiB, in L1
/// beside the activation tile). 512 rather than 256 halves the partial-sum
/// passes over the output (prefill +5–12% here, A/B with `statelm bench`).
pub const KC: usize = 512;
/// Batch size from which the model's projections take this path.
pub const GEMM_MIN_VECS: usize = 32;
/// Upper bound on rows per task (panels of one slice: 256 × 512 × 4 = 512 KiB).
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
            unsafe { job.run(self, &out) };
        });
        Ok(())
    }
}

/// The second operand of [`Kernels::gemm_f32`], `B(j, k)` for output column
/// `j` and reduction index `k`.
#[derive(Debug, Clone, Copy)]
pub enum BMatrix<'a> {
    /// `B(j, k) = data[j * stride + k]`: one row per output column (e.g. the
    /// keys of attention scores, one row per cache cell).
    Rows {
        /// The values.
        data: &'a [f32],
        /// Distance between rows.
        stride: usize,
    },
    /// `B(j, k) = data[k * stride + j]`: one row per reduction index (e.g.
    /// the values of attention, one row per cache cell).
    Cols {
        /// The values.
        data: &'a [f32],
        /// Distance between rows.
        stride: usize,
    },
}

impl Kernels {
    /// Single-threaded f32 GEMM: `c[t * ldc + j] = Σ_{k < kd} a[t * lda + k] ·
    /// B(j, k)` for `t < m`, `j < n` (attention's `Q·Kᵀ` and `P·V` for a
    /// batch of queries). Same micro-kernel and summation order as
    /// [`Kernels::matmul_f32`]; short slices are a typed error.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f32(
        &self,
        m: usize,
        n: usize,
        kd: usize,
        a: &[f32],
        lda: usize,
        b: BMatrix<'_>,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<(), QuantError> {
        self.gemm_f32_with(m, n, kd, a, lda, b, c, ldc, &mut Vec::new())
    }

    /// [`Kernels::gemm_f32`] packing into `panels` (grown as needed, never shrunk), so that a
    /// caller in a hot loop does not allocate.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_f32_with(
        &self,
        m: usize,
        n: usize,
        kd: usize,
        a: &[f32],
        lda: usize,
        b: BMatrix<'_>,
        c: &mut [f32],
        ldc: usize,
        panels: &mut Vec<f32>,
    ) -> Result<(), QuantError> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        let span = |count: usize, stride: usize, width: usize| {
            (count - 1)
                .checked_mul(stride)
                .and_then(|v| v.checked_add(width))
                .ok_or(QuantError::Overflow {
                    what: "gemm_f32 sizes",
                })
        };
        check_min("gemm_f32 a", span(m, lda, kd)?, a.len())?;
        check_min("gemm_f32 c", span(m, ldc, n)?, c.len())?;
        if kd == 0 {
            (0..m).for_each(|t| c[t * ldc..t * ldc + n].fill(0.0));
            return Ok(());
        }
        let need = match b {
            BMatrix::Rows { stride, .. } => span(n, stride, kd)?,
            BMatrix::Cols { stride, .. } => span(kd, stride, n)?,
        };
        let b_len = match b {
            BMatrix::Rows { data, .. } | BMatrix::Cols { data, .. } => data.len(),
        };
        check_min("gemm_f32 b", need, b_len)?;
        let mut pack = |k0: usize, kc: usize, panel_len: usize, panels: &mut [f32]| {
            // Columns past `n` in the last panel are computed but never stored: any finite
            // value will do, and they keep whatever an earlier call left.
            let at =
                |j: usize, k: usize| j / PANEL_ROWS * panel_len + k * PANEL_ROWS + j % PANEL_ROWS;
            match b {
                BMatrix::Rows { data, stride } => {
                    for j in 0..n {
                        let row = &data[j * stride + k0..][..kc];
                        row.iter()
                            .enumerate()
                            .for_each(|(k, v)| panels[at(j, k)] = *v);
                    }
                }
                BMatrix::Cols { data, stride } => {
                    for k in 0..kc {
                        let row = &data[(k0 + k) * stride..][..n];
                        row.iter()
                            .enumerate()
                            .for_each(|(j, v)| panels[at(j, k)] = *v);
                    }
                }
            }
        };
        let mut store = |t: usize, j0: usize, v: &[f32], first: bool| {
            let out = &mut c[t * ldc + j0..][..v.len()];
            if first {
                out.copy_from_slice(v);
            } else {
                out.iter_mut().zip(v).for_each(|(o, x)| *o += x);
            }
        };
        let shape = Shape { m, n, kd, lda };
        // SAFETY: the kernel comes from this table (it runs on this CPU).
        unsafe { gemm_core(self.panel_fn(), &shape, a, &mut pack, &mut store, panels) };
        Ok(())
    }
}

/// `needed <= got`, else a typed error.
fn check_min(what: &'static str, needed: usize, got: usize) -> Result<(), QuantError> {
    if got < needed {
        return Err(QuantError::BadLength {
            what,
            expected: needed,
            got,
        });
    }
    Ok(())
}

/// Problem shape of [`gemm_core`]: `m` rows of `a` (stride `lda`), `n` output
/// columns, reduction length `kd`.
struct Shape {
    m: usize,
    n: usize,
    kd: usize,
    lda: usize,
}

/// The blocked loop shared by every GEMM here: per [`KC`]-slice of the
/// reduction, `pack(k0, kc, panel_len, panels)` fills the panels of all `n`
/// output columns, then each tile of [`TILE_TOKENS`] rows of `a` runs the
/// micro-kernel on every panel and hands the sums to `store(t, j0, values,
/// first_slice)` (assign on the first slice, add on later ones). `pack` fills
/// the panels for slice `k0..k0 + kc`, each `panel_len` floats (`min(KC, kd) *
/// PANEL_ROWS`). Both are generic, so the per-tile store inlines (it runs once
/// per tile, panel and slice). `panels` is grown to fit and reused.
///
/// # Safety
/// `kernel` must run on this CPU.
unsafe fn gemm_core(
    kernel: crate::kernels::PanelFn,
    s: &Shape,
    a: &[f32],
    pack: &mut impl FnMut(usize, usize, usize, &mut [f32]),
    store: &mut impl FnMut(usize, usize, &[f32], bool),
    panels: &mut Vec<f32>,
) {
    let n_panels = s.n.div_ceil(PANEL_ROWS);
    let panel_len = KC.min(s.kd) * PANEL_ROWS;
    if panels.len() < n_panels * panel_len {
        panels.resize(n_panels * panel_len, 0.0);
    }
    let panels = &mut panels[..n_panels * panel_len];
    let mut acc = [[0f32; PANEL_ROWS]; TILE_TOKENS];
    for k0 in (0..s.kd).step_by(KC) {
        let kc = KC.min(s.kd - k0);
        pack(k0, kc, panel_len, panels);
        for t0 in (0..s.m).step_by(TILE_TOKENS) {
            let m = TILE_TOKENS.min(s.m - t0);
            let xs = &a[t0 * s.lda + k0..];
            for p in 0..n_panels {
                let panel = &panels[p * panel_len..][..kc * PANEL_ROWS];
                // SAFETY: the kernel runs on this CPU (caller); it checks lengths.
                unsafe { kernel(m, kc, xs, s.lda, panel, &mut acc) };
                let j0 = p * PANEL_ROWS;
                let valid = PANEL_ROWS.min(s.n - j0);
                for (t, v) in acc.iter().enumerate().take(m) {
                    store(t0 + t, j0, &v[..valid], k0 == 0);
                }
            }
        }
    }
}

/// One matmul task: a range of weight rows against all activation vectors.
struct Chunk<'a, 'w> {
    w: &'a QMatrix<'w>,
    x: &'a [f32],
    n: usize,
    rows: std::ops::Range<usize>,
}

impl Chunk<'_, '_> {
    /// Dequantizes this chunk's rows, columns `k0..k0 + kc`, into `panels`
    /// (rows past the matrix are zero): [`PANEL_ROWS`] rows at a time into
    /// `rows_buf` (`PANEL_ROWS * KC` floats), then interleaved column by
    /// column so the panel is written sequentially.
    fn pack(
        &self,
        kernels: &Kernels,
        k0: usize,
        kc: usize,
        panel_len: usize,
        rows_buf: &mut [f32],
        panels: &mut [f32],
    ) {
        let (ty, bs, bb) = (
            self.w.ty(),
            self.w.ty().block_size(),
            self.w.ty().block_bytes(),
        );
        let bytes = k0 / bs * bb..(k0 + kc) / bs * bb;
        let groups = self.rows.clone().step_by(PANEL_ROWS);
        for (g0, panel) in groups.zip(panels.chunks_exact_mut(panel_len)) {
            let group = g0..(g0 + PANEL_ROWS).min(self.rows.end);
            rows_buf.fill(0.0);
            for (r, buf) in group.zip(rows_buf.chunks_exact_mut(KC)) {
                let src = &self.w.row(r)[bytes.clone()];
                // The type dequantized row 0 before the tasks started, and every
                // slice is whole blocks, so this cannot fail.
                if crate::formats::dequantize_row(ty, src, &mut buf[..kc]).is_err() {
                    buf.fill(0.0);
                }
            }
            kernels.interleave_panel(rows_buf, KC, kc, panel);
        }
    }

    /// Runs the chunk.
    ///
    /// # Safety
    /// `out` must point to `n * w.rows()`
    /// writable floats of which no other thread writes rows `self.rows`.
    unsafe fn run(&self, kernels: &Kernels, out: &OutPtr) {
        let (rows, r0) = (self.w.rows(), self.rows.start);
        let mut rows_buf = vec![0f32; PANEL_ROWS * KC];
        let mut pack = |k0: usize, kc: usize, panel_len: usize, panels: &mut [f32]| {
            self.pack(kernels, k0, kc, panel_len, &mut rows_buf, panels);
        };
        let mut store = |t: usize, j0: usize, v: &[f32], first: bool| {
            // SAFETY: t < n and rows r0 + j0 .. r0 + j0 + v.len() belong to this
            // task (the caller's contract), so the run is inside y and no other
            // thread touches it while this slice lives.
            let out = unsafe {
                std::slice::from_raw_parts_mut(out.get().add(t * rows + r0 + j0), v.len())
            };
            if first {
                out.copy_from_slice(v);
            } else {
                out.iter_mut().zip(v).for_each(|(o, x)| *o += x);
            }
        };
        let shape = Shape {
            m: self.n,
            n: self.rows.len(),
            kd: self.w.cols(),
            lda: self.w.cols(),
        };
        // SAFETY: the kernel runs on this CPU (caller).
        unsafe {
            gemm_core(
                kernels.panel_fn(),
                &shape,
                self.x,
                &mut pack,
                &mut store,
                &mut Vec::new(),
            )
        };
    }
}
