//! Buffers the forward pass writes into. They belong to the computation, not to a
//! conversation (as llama.cpp's compute buffers belong to its `llama_context`, not to a
//! sequence): one [`Scratch`] per compute thread serves every [`crate::State`] it runs, so N
//! conversations cost N KV caches and one set of buffers. Its size follows the micro-batch
//! ([`Scratch::ubatch`]), which can be lowered under memory pressure to shrink it.

use crate::attention::AttnScratch;
use crate::rope::RopeAngles;
use statelm_quant::Projector;
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
    pub(crate) acts: Projector,
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
            acts: Projector::default(),
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
