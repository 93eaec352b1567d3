//! One projection call, `y[n, rows] = x[n, cols] · wᵀ`, that picks its strategy (matvec,
//! small-batch kernels, int8 GEMM, f32 GEMM) from the shapes, the weight format and the kernel
//! table, so that callers never choose among the kernels themselves.
//!
//! The input is quantized for the weights' vec-dot type first, as ggml does; matrices that
//! share an input ([`Projector::project_many`]: q/k/v, gate/up) quantize it once per vec-dot
//! type.

use crate::dispatch::{vec_dot_type, Kernels};
use crate::error::QuantError;
use crate::gemm::GEMM_MIN_VECS;
use crate::matrix::{QMatrix, QuantizedActs};
use crate::matvec::{matvec, BatchOrder, MatvecJob};
use crate::pool::ThreadPool;
use statelm_gguf::GgmlType;

/// How a projection may order its sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Summation {
    /// The fastest order per shape: large batches may take the GEMMs; small batches sum every
    /// column exactly as a single-token matvec (so a batch equals its tokens one by one).
    #[default]
    Fast,
    /// llama.cpp's orders: one token by the matvec, batches in ggml's batch order.
    Ggml,
}

/// The buffers of projections: the current input quantized for each vec-dot type it was
/// needed in, and its dequantized copy for the f32 GEMM. Keep one per computation (not per
/// sequence); it grows to the largest batch and [`Projector::release_gemm_copies`] frees
/// what only a prefill needs.
#[derive(Default)]
pub struct Projector {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector")
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// One vec-dot type's copy of the current input.
struct Entry {
    ty: GgmlType,
    quantized: QuantizedActs,
    /// `quantized` dequantized again (the f32 GEMM's input).
    dequantized: Vec<f32>,
    /// Whether `quantized` / `dequantized` hold the current input.
    fresh: (bool, bool),
}

impl Projector {
    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        (self.entries.iter())
            .map(|e| e.quantized.capacity() + e.dequantized.capacity() * 4)
            .sum()
    }

    /// Frees the f32 copies of the GEMM path: `n × cols` floats per vec-dot type (2.5 MiB for
    /// a 128-token Qwen batch) that only a prefill uses.
    pub fn release_gemm_copies(&mut self) {
        for e in &mut self.entries {
            e.dequantized = Vec::new();
            e.fresh.1 = false;
        }
    }

    /// `y[n, rows] = x[n, cols] · wᵀ` (`y` holds at least `n × rows` values). Small batches
    /// take the integer kernels; batches of at least [`GEMM_MIN_VECS`] (K-quants:
    /// [`crate::I8_K_GEMM_MIN_VECS`]) in [`Summation::Fast`] take the int8 GEMM where the
    /// kernel table has a SIMD micro-kernel for the weights (the same integer products), else
    /// the f32 GEMM over the dequantized input — the same products, summed in another order,
    /// several times faster.
    pub fn project(
        &mut self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        order: Summation,
    ) -> Result<(), QuantError> {
        self.forget_input();
        self.project_current(pool, w, x, n, y, order)
    }

    /// [`Projector::project`] for several matrices that share the input `x` (q/k/v, gate/up),
    /// quantizing it once per vec-dot type: a decode step (`n == 1`) runs them as one pool
    /// dispatch (one join instead of `N`); larger batches one after another. Each output is
    /// what `project` writes.
    pub fn project_many<const N: usize>(
        &mut self,
        pool: &ThreadPool,
        jobs: [(&QMatrix<'_>, &mut [f32]); N],
        x: &[f32],
        n: usize,
        order: Summation,
    ) -> Result<(), QuantError> {
        self.forget_input();
        if n != 1 {
            for (w, y) in jobs {
                self.project_current(pool, w, x, n, y, order)?;
            }
            return Ok(());
        }
        let mut idx = [0; N];
        for (i, (w, _)) in idx.iter_mut().zip(&jobs) {
            *i = self.quantized_for(w, x, n)?;
        }
        let mut k = 0;
        let jobs = jobs.map(|(w, y)| {
            let acts = &self.entries[idx[k]].quantized;
            k += 1;
            MatvecJob { w, acts, y }
        });
        Kernels::global().matvec_many(pool, jobs)
    }

    /// A new input: the quantized copies are stale.
    fn forget_input(&mut self) {
        for e in &mut self.entries {
            e.fresh = (false, false);
        }
    }

    /// The entry holding `x` quantized for `w`'s vec-dot type, quantized now unless fresh.
    fn quantized_for(&mut self, w: &QMatrix<'_>, x: &[f32], n: usize) -> Result<usize, QuantError> {
        let ty = vec_dot_type(w.ty());
        let idx = match self.entries.iter().position(|e| e.ty == ty) {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    ty,
                    quantized: QuantizedActs::new(),
                    dequantized: Vec::new(),
                    fresh: (false, false),
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[idx];
        if !e.fresh.0 {
            e.quantized.quantize(ty, x, n, w.cols())?;
            e.fresh.0 = true;
        }
        Ok(idx)
    }

    /// The strategy choice, over the input quantized so far.
    fn project_current(
        &mut self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        order: Summation,
    ) -> Result<(), QuantError> {
        let idx = self.quantized_for(w, x, n)?;
        let e = &mut self.entries[idx];
        let kernels = Kernels::global();
        let fast = order == Summation::Fast;
        if fast && kernels.i8_gemm_min_vecs(w.ty()).is_some_and(|m| n >= m) {
            kernels.matmul_i8(pool, w, &e.quantized, y)
        } else if fast && n >= GEMM_MIN_VECS && kernels.prefers_f32_gemm() {
            let len = n * w.cols();
            if e.dequantized.len() < len {
                e.dequantized.resize(len, 0.0);
            }
            let xq = &mut e.dequantized[..len];
            if !e.fresh.1 {
                e.quantized.dequantize(xq)?;
                e.fresh.1 = true;
            }
            kernels.matmul_f32(pool, w, xq, n, y)
        } else if n == 1 {
            matvec(pool, w, &e.quantized, y)
        } else {
            let order = if fast {
                BatchOrder::Invariant
            } else {
                BatchOrder::Ggml
            };
            kernels.matmul_in(pool, w, &e.quantized, y, order)
        }
    }
}
