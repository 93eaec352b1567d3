//! Buffers the forward pass writes into. They belong to the computation, not to a
//! conversation (as llama.cpp's compute buffers belong to its `llama_context`, not to a
//! sequence): one [`Scratch`] per compute thread serves every [`crate::State`] it runs, so N
//! conversations cost N KV caches and one set of buffers. Its size follows the micro-batch
//! ([`Scratch::ubatch`]), which can be lowered under memory pressure to shrink it.

use crate::attention::AttnScratch;
use crate::rope::RopeAngles;
use statelm_gguf::GgmlType;
use statelm_quant::{BatchOrder, QMatrix, QuantizedActs, ThreadPool};
use std::fmt;
use std::sync::Mutex;

/// The forward pass's working memory, sized for the largest micro-batch run so far.
///
/// Made by [`crate::Model::new_scratch`] and passed as `&mut Scratch` to
/// [`crate::Model::forward_into`]; a decode loop that keeps one allocates nothing once warm.
/// It holds no conversation: any State of any model can be run with it (buffers are resized
/// as needed), one call at a time.
pub struct Scratch {
    /// Largest number of tokens one micro-batch computes (at most the model's `ubatch`).
    ubatch: usize,
    /// Residual stream `[n, n_embd]`.
    pub(crate) x: Vec<f32>,
    /// Normed input of a sub-block `[n, n_embd]`.
    pub(crate) xb: Vec<f32>,
    /// Output of a sub-block `[n, n_embd]`.
    pub(crate) xb2: Vec<f32>,
    /// Queries `[n, q_dim]`.
    pub(crate) q: Vec<f32>,
    /// Keys `[n, k_dim]`.
    pub(crate) k: Vec<f32>,
    /// Values `[n, v_dim]`.
    pub(crate) v: Vec<f32>,
    /// Attention output `[n, n_head * v_head_dim]`.
    pub(crate) att: Vec<f32>,
    /// FFN gate `[n, n_ff]`.
    pub(crate) hb: Vec<f32>,
    /// FFN up `[n, n_ff]`.
    pub(crate) hb2: Vec<f32>,
    /// The cache's keys as f32 `[cells, k_dim]`.
    pub(crate) kf: Vec<f32>,
    /// The cache's values as f32 `[cells, v_dim]`.
    pub(crate) vf: Vec<f32>,
    /// Quantized copies of the current matmul input.
    pub(crate) acts: ActsCache,
    /// RoPE angles for global layers and for sliding-window layers.
    pub(crate) rope: [RopeAngles; 2],
    /// Per-task buffers of attention (kept across decode steps, freed after a prefill).
    pub(crate) attn: Vec<Mutex<AttnScratch>>,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch::with_ubatch(usize::MAX)
    }
}

impl fmt::Debug for Scratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scratch")
            .field("ubatch", &self.ubatch)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// Resizes `v` to `n` elements (allocation only grows).
pub(crate) fn fit(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

impl Scratch {
    /// Empty buffers for micro-batches of at most `ubatch` tokens (the model's own `ubatch`
    /// caps it at use).
    pub fn with_ubatch(ubatch: usize) -> Scratch {
        Scratch {
            ubatch: ubatch.max(1),
            x: Vec::new(),
            xb: Vec::new(),
            xb2: Vec::new(),
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            att: Vec::new(),
            hb: Vec::new(),
            hb2: Vec::new(),
            kf: Vec::new(),
            vf: Vec::new(),
            acts: ActsCache::default(),
            rope: Default::default(),
            attn: Vec::new(),
        }
    }

    /// Largest number of tokens one micro-batch computes with this scratch.
    pub fn ubatch(&self) -> usize {
        self.ubatch
    }

    /// Sets the micro-batch. Lowering it frees the buffers at once (they grow back to the
    /// new, smaller size on the next call): the way to give scratch memory back under
    /// pressure. Results do not depend on it beyond floating-point summation order.
    pub fn set_ubatch(&mut self, ubatch: usize) {
        let ubatch = ubatch.max(1);
        if ubatch < self.ubatch {
            self.release();
        }
        self.ubatch = ubatch;
    }

    /// Frees every buffer (they grow back on the next call).
    pub fn release(&mut self) {
        *self = Scratch::with_ubatch(self.ubatch);
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        let f = [
            &self.x, &self.xb, &self.xb2, &self.q, &self.k, &self.v, &self.att, &self.hb,
            &self.hb2, &self.kf, &self.vf,
        ];
        let attn: usize = self
            .attn
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).bytes())
            .sum();
        f.iter().map(|v| v.capacity() * 4).sum::<usize>() + self.acts.bytes() + attn
    }

    /// Frees what only a prefill-sized batch needs (its attention buffers grow with
    /// `batch × cells`, and the GEMM path's f32 activation copies). Decode-sized batches keep
    /// theirs, so decode reuses them.
    pub(crate) fn release_batch_buffers(&mut self, n_tokens: usize) {
        self.acts.release_gemm_copies();
        if n_tokens >= statelm_quant::GEMM_MIN_VECS {
            self.attn = Vec::new();
        }
    }
}

/// The current matmul input quantized for each vec-dot type it was needed in, so that
/// matrices sharing an input (q/k/v, gate/up) quantize it once.
#[derive(Default)]
pub(crate) struct ActsCache {
    entries: Vec<ActsEntry>,
    /// `Numerics::Fast` (set per batch): large batches may take the f32 GEMM, small ones sum
    /// exactly as single-token decode; otherwise batches sum in llama.cpp's batch order.
    pub f32_gemm: bool,
}

/// One vec-dot type's copy of the current input.
struct ActsEntry {
    ty: GgmlType,
    quantized: QuantizedActs,
    /// `quantized` dequantized again (the GEMM path's input).
    dequantized: Vec<f32>,
    /// Whether `quantized` / `dequantized` hold the current input.
    fresh: (bool, bool),
}

impl ActsCache {
    /// Forgets the quantized copies: the input changed.
    pub fn invalidate(&mut self) {
        for e in &mut self.entries {
            e.fresh = (false, false);
        }
    }

    /// Frees the f32 copies of the GEMM path: they are `n × cols` floats per vec-dot type (2.5
    /// MiB for a 128-token Qwen batch) and only a prefill uses them, so a State does not keep
    /// them between calls (they are transient memory of the forward pass, not State memory).
    pub fn release_gemm_copies(&mut self) {
        for e in &mut self.entries {
            e.dequantized = Vec::new();
            e.fresh.1 = false;
        }
    }

    fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.quantized.capacity() + e.dequantized.capacity() * 4)
            .sum()
    }

    /// The entry holding `x` quantized for `w`'s vec-dot type, quantized now unless fresh.
    fn quantized_for(
        &mut self,
        w: &QMatrix<'_>,
        x: &[f32],
        n: usize,
    ) -> Result<usize, statelm_quant::QuantError> {
        let ty = statelm_quant::vec_dot_type(w.ty());
        let idx = match self.entries.iter().position(|e| e.ty == ty) {
            Some(i) => i,
            None => {
                self.entries.push(ActsEntry {
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

    /// [`ActsCache::project`] for several matrices that share the input `x` (q/k/v, gate/up):
    /// a decode step (`n == 1`) runs them as one pool dispatch (one join instead of `N`);
    /// larger batches run them one after another. Each output is what `project` writes.
    pub fn project_many<const N: usize>(
        &mut self,
        pool: &ThreadPool,
        jobs: [(&QMatrix<'_>, &mut [f32]); N],
        x: &[f32],
        n: usize,
    ) -> Result<(), statelm_quant::QuantError> {
        if n != 1 {
            for (w, y) in jobs {
                self.project(pool, w, x, n, y)?;
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
            statelm_quant::MatvecJob { w, acts, y }
        });
        statelm_quant::Kernels::global().matvec_many(pool, jobs)
    }

    /// `y[n, rows] = x[n, cols] · wᵀ`. Activations are quantized for `w`'s vec-dot type first
    /// (once per input: copies are kept until [`ActsCache::invalidate`]), as ggml does. Small
    /// batches then take the integer kernels; batches of at least
    /// [`statelm_quant::GEMM_MIN_VECS`] (K-quants: [`statelm_quant::I8_K_GEMM_MIN_VECS`]) take
    /// the int8 GEMM where the kernel table has a SIMD micro-kernel for the weights
    /// (Q4_0/Q5_0/Q8_0, and Q4_K/Q5_K/Q6_K — the same integer products; for Q4_K/Q5_K the
    /// very sums of decode), else the
    /// f32 GEMM over the dequantized copy — the same products, summed in another order, several
    /// times faster.
    pub fn project(
        &mut self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        x: &[f32],
        n: usize,
        y: &mut [f32],
    ) -> Result<(), statelm_quant::QuantError> {
        let idx = self.quantized_for(w, x, n)?;
        let e = &mut self.entries[idx];
        let kernels = statelm_quant::Kernels::global();
        let large = self.f32_gemm && n >= statelm_quant::GEMM_MIN_VECS;
        let i8_from = kernels.i8_gemm_min_vecs(w.ty());
        if self.f32_gemm && i8_from.is_some_and(|m| n >= m) {
            kernels.matmul_i8(pool, w, &e.quantized, y)
        } else if large && kernels.prefers_f32_gemm() {
            let xq = fit(&mut e.dequantized, n * w.cols());
            if !e.fresh.1 {
                e.quantized.dequantize(xq)?;
                e.fresh.1 = true;
            }
            kernels.matmul_f32(pool, w, xq, n, y)
        } else if n == 1 {
            statelm_quant::matvec(pool, w, &e.quantized, y)
        } else {
            let order = if self.f32_gemm {
                BatchOrder::Invariant
            } else {
                BatchOrder::Ggml
            };
            kernels.matmul_in(pool, w, &e.quantized, y, order)
        }
    }
}
