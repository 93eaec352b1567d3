//! Weight lookup: every tensor the decoder uses, found by name and shape-checked at load.
//!
//! Quantized matrices stay in the memory map; [`TensorRef`] records where. Small f32 vectors
//! (norms, biases) are copied out, since they are tiny and read on every token.

use crate::config::ModelConfig;
use crate::ModelError;
use statelm_gguf::{GgmlType, GgufFile, TensorInfo};
use statelm_quant::QMatrix;
use std::cell::RefCell;
use std::collections::BTreeSet;

/// Where a weight matrix lives in the file: `rows` rows of `cols` elements of type `ty`.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef {
    /// Element type.
    pub ty: GgmlType,
    /// Number of rows (output features).
    pub rows: usize,
    /// Row length (input features).
    pub cols: usize,
    offset: usize,
    len: usize,
}

impl TensorRef {
    /// The matrix over the file's bytes.
    pub fn matrix<'a>(&self, file: &'a GgufFile) -> QMatrix<'a> {
        let data = &file.bytes()[self.offset..self.offset + self.len];
        // Shapes and lengths were checked when the reference was made.
        QMatrix::new(self.ty, self.rows, self.cols, data).expect("checked at load")
    }

    /// Bytes of the matrix.
    pub fn n_bytes(&self) -> usize {
        self.len
    }

    /// Rows `start..start + count` (a part of a fused matrix: rows are whole blocks).
    fn rows(&self, start: usize, count: usize) -> TensorRef {
        let row_bytes = self.len / self.rows;
        TensorRef {
            rows: count,
            offset: self.offset + start * row_bytes,
            len: count * row_bytes,
            ..*self
        }
    }
}

/// The weights of one decoder block.
#[derive(Debug)]
pub struct LayerWeights {
    /// RMS norm before the token mixer (attention or short convolution).
    pub attn_norm: Vec<f32>,
    /// What mixes tokens: attention, or LFM2's short convolution.
    pub mixer: Mixer,
    /// Norm after attention, before the residual add (Gemma 2 and 3).
    pub post_attn_norm: Option<Vec<f32>>,
    /// RMS norm before the FFN.
    pub ffn_norm: Vec<f32>,
    /// FFN gate `[n_ff, n_embd]`.
    pub w_gate: TensorRef,
    /// FFN up `[n_ff, n_embd]`.
    pub w_up: TensorRef,
    /// FFN down `[n_embd, n_ff]`.
    pub w_down: TensorRef,
    /// Norm after the FFN, before the residual add (Gemma 2 and 3).
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// How a block mixes information between tokens.
#[derive(Debug)]
pub enum Mixer {
    /// Self-attention over the KV cache.
    Attention(AttentionWeights),
    /// LFM2's gated short convolution over the last inputs.
    ShortConv(ShortConvWeights),
}

impl Mixer {
    fn matrices(&self) -> Vec<TensorRef> {
        match self {
            Mixer::Attention(a) => vec![a.wq, a.wk, a.wv, a.wo],
            Mixer::ShortConv(sc) => vec![sc.b, sc.c, sc.x, sc.out],
        }
    }
}

/// The weights of a self-attention mixer.
#[derive(Debug)]
pub struct AttentionWeights {
    /// Query projection `[q_dim, n_embd]`.
    pub wq: TensorRef,
    /// Key projection `[k_dim, n_embd]`.
    pub wk: TensorRef,
    /// Value projection `[v_dim, n_embd]`.
    pub wv: TensorRef,
    /// Query/key/value biases (Qwen2).
    pub bq: Option<Vec<f32>>,
    /// Key bias.
    pub bk: Option<Vec<f32>>,
    /// Value bias.
    pub bv: Option<Vec<f32>>,
    /// Per-head query norm `[head_dim]` (Gemma 3, Qwen3, LFM2).
    pub q_norm: Option<Vec<f32>>,
    /// Per-head key norm `[head_dim]`.
    pub k_norm: Option<Vec<f32>>,
    /// Attention output projection `[n_embd, q_dim]`.
    pub wo: TensorRef,
}

/// The weights of a gated short convolution (LFM2): `in_proj`'s three parts, the depthwise
/// kernel and `out_proj`.
#[derive(Debug)]
pub struct ShortConvWeights {
    /// The gate before the convolution: rows `0..E` of `shortconv.in_proj` `[E, E]`.
    pub b: TensorRef,
    /// The gate after it: rows `E..2E`.
    pub c: TensorRef,
    /// The convolved input: rows `2E..3E`.
    pub x: TensorRef,
    /// `shortconv.conv`: per channel, `l_cache` taps, oldest input first `[E][l_cache]`.
    pub kernel: Vec<f32>,
    /// `shortconv.out_proj` `[E, E]`.
    pub out: TensorRef,
}

/// All weights of a model.
#[derive(Debug)]
pub struct Weights {
    /// Token embedding `[n_vocab, n_embd]`.
    pub token_embd: TensorRef,
    /// Decoder blocks.
    pub layers: Vec<LayerWeights>,
    /// Final norm.
    pub output_norm: Vec<f32>,
    /// Output projection `[n_vocab, n_embd]`; the embedding when tied.
    pub output: TensorRef,
    /// Whether the output projection is the token embedding.
    pub tied_output: bool,
}

/// Finds tensors by name and remembers which were used, so that a tensor of the file that the
/// architecture's description does not use is refused ([`Loader::finish`]).
struct Loader<'a> {
    file: &'a GgufFile,
    used: RefCell<BTreeSet<String>>,
}

impl Loader<'_> {
    fn info(&self, name: &str) -> Result<&TensorInfo, ModelError> {
        self.used.borrow_mut().insert(name.to_string());
        self.file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// Refuses the first tensor of the file that nothing used.
    fn finish(&self, c: &ModelConfig) -> Result<(), ModelError> {
        let used = self.used.borrow();
        match self.file.tensors().iter().find(|t| !used.contains(&t.name)) {
            Some(t) => Err(ModelError::UnsupportedTensor {
                name: t.name.clone(),
                arch: c.arch.name(),
            }),
            None => Ok(()),
        }
    }

    /// Q, K and V: separate matrices, or rows of one fused `attn_qkv` (Phi-3).
    fn qkv(&self, c: &ModelConfig, il: usize) -> Result<[TensorRef; 3], ModelError> {
        let (q, k, v) = (c.q_dim(), c.k_dim(), c.v_dim());
        let fused = format!("blk.{il}.attn_qkv.weight");
        if self.has(&fused) {
            let w = self.matrix(&fused, q + k + v, c.n_embd)?;
            return Ok([w.rows(0, q), w.rows(q, k), w.rows(q + k, v)]);
        }
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok([
            self.matrix(&n("attn_q.weight"), q, c.n_embd)?,
            self.matrix(&n("attn_k.weight"), k, c.n_embd)?,
            self.matrix(&n("attn_v.weight"), v, c.n_embd)?,
        ])
    }

    /// The FFN's gate and up: separate matrices, or the two halves of a fused `ffn_up` with
    /// no `ffn_gate` (Phi-3: the gate first, as ggml's SwiGLU splits it).
    fn gate_up(&self, c: &ModelConfig, il: usize) -> Result<[TensorRef; 2], ModelError> {
        let (gate, up) = (
            format!("blk.{il}.ffn_gate.weight"),
            format!("blk.{il}.ffn_up.weight"),
        );
        if !self.has(&gate) && c.arch == crate::Arch::Phi3 {
            let w = self.matrix(&up, 2 * c.n_ff, c.n_embd)?;
            return Ok([w.rows(0, c.n_ff), w.rows(c.n_ff, c.n_ff)]);
        }
        Ok([
            self.matrix(&gate, c.n_ff, c.n_embd)?,
            self.matrix(&up, c.n_ff, c.n_embd)?,
        ])
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<TensorRef, ModelError> {
        let t = self.info(name)?;
        let want = [cols as u64, rows as u64];
        if t.dims.as_slice() != want {
            return Err(ModelError::BadTensor {
                name: name.to_string(),
                reason: format!("shape {:?}, expected {:?}", t.dims, want),
            });
        }
        if !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            && !statelm_quant::Kernels::global().supports(t.ty)
        {
            return Err(ModelError::BadTensor {
                name: name.to_string(),
                reason: format!("type {} has no matrix kernel", t.ty),
            });
        }
        let r = TensorRef {
            ty: t.ty,
            rows,
            cols,
            offset: t.offset as usize,
            len: t.n_bytes as usize,
        };
        // Validate once here so `TensorRef::matrix` cannot fail later.
        QMatrix::new(r.ty, rows, cols, self.file.tensor_data(t)).map_err(|e| {
            ModelError::BadTensor {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })?;
        Ok(r)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.info(name)?;
        if t.n_elements() != len as u64 || t.dims.len() != 1 {
            return Err(ModelError::BadTensor {
                name: name.to_string(),
                reason: format!("shape {:?}, expected [{len}]", t.dims),
            });
        }
        let mut out = vec![0.0; len];
        statelm_quant::dequantize_row(t.ty, self.file.tensor_data(t), &mut out).map_err(|e| {
            ModelError::BadTensor {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })?;
        Ok(out)
    }

    fn opt_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if !self.has(name) {
            return Ok(None);
        }
        self.vector(name, len).map(Some)
    }

    fn required_if(
        &self,
        cond: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Vec<f32>>, ModelError> {
        if cond {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    fn layer(&self, c: &ModelConfig, il: usize) -> Result<LayerWeights, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mixer = if c.is_conv_layer(il) {
            Mixer::ShortConv(self.shortconv(c, il)?)
        } else {
            Mixer::Attention(self.attention(c, il)?)
        };
        let [w_gate, w_up] = self.gate_up(c, il)?;
        Ok(LayerWeights {
            attn_norm: self.vector(&n("attn_norm.weight"), c.n_embd)?,
            mixer,
            post_attn_norm: self.required_if(
                c.post_norms,
                &n("post_attention_norm.weight"),
                c.n_embd,
            )?,
            ffn_norm: self.vector(&n("ffn_norm.weight"), c.n_embd)?,
            w_gate,
            w_up,
            w_down: self.matrix(&n("ffn_down.weight"), c.n_embd, c.n_ff)?,
            post_ffn_norm: self.required_if(c.post_norms, &n("post_ffw_norm.weight"), c.n_embd)?,
        })
    }

    fn attention(&self, c: &ModelConfig, il: usize) -> Result<AttentionWeights, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let [wq, wk, wv] = self.qkv(c, il)?;
        Ok(AttentionWeights {
            wq,
            wk,
            wv,
            bq: self.opt_vector(&n("attn_q.bias"), c.q_dim())?,
            bk: self.opt_vector(&n("attn_k.bias"), c.k_dim())?,
            bv: self.opt_vector(&n("attn_v.bias"), c.v_dim())?,
            q_norm: self.required_if(c.qk_norm, &n("attn_q_norm.weight"), c.head_dim)?,
            k_norm: self.required_if(c.qk_norm, &n("attn_k_norm.weight"), c.head_dim)?,
            wo: self.matrix(&n("attn_output.weight"), c.n_embd, c.n_head * c.v_head_dim)?,
        })
    }

    /// LFM2's `shortconv.in_proj` (split into its three parts), `conv` and `out_proj`.
    fn shortconv(&self, c: &ModelConfig, il: usize) -> Result<ShortConvWeights, ModelError> {
        let n = |s: &str| format!("blk.{il}.shortconv.{s}");
        let e = c.n_embd;
        let l_cache = c.shortconv.map_or(0, |s| s.l_cache);
        let in_proj = self.matrix(&n("in_proj.weight"), 3 * e, e)?;
        let name = n("conv.weight");
        let t = self.info(&name)?;
        if t.dims.as_slice() != [l_cache as u64, e as u64] {
            return Err(ModelError::BadTensor {
                name,
                reason: format!("shape {:?}, expected [{l_cache}, {e}]", t.dims),
            });
        }
        let mut kernel = vec![0.0; l_cache * e];
        statelm_quant::dequantize_row(t.ty, self.file.tensor_data(t), &mut kernel).map_err(
            |err| ModelError::BadTensor {
                name: name.clone(),
                reason: err.to_string(),
            },
        )?;
        Ok(ShortConvWeights {
            b: in_proj.rows(0, e),
            c: in_proj.rows(e, e),
            x: in_proj.rows(2 * e, e),
            kernel,
            out: self.matrix(&n("out_proj.weight"), e, e)?,
        })
    }
}

impl Weights {
    /// Finds and checks every tensor of the model described by `config`.
    pub fn load(file: &GgufFile, config: &ModelConfig) -> Result<Weights, ModelError> {
        let l = Loader {
            file,
            used: RefCell::new(BTreeSet::new()),
        };
        let token_embd = l.matrix("token_embd.weight", config.n_vocab, config.n_embd)?;
        let layers = (0..config.n_layer)
            .map(|il| l.layer(config, il))
            .collect::<Result<Vec<_>, _>>()?;
        let (output, tied_output) = match file.tensor("output.weight") {
            Some(_) => (
                l.matrix("output.weight", config.n_vocab, config.n_embd)?,
                false,
            ),
            None => (token_embd, true),
        };
        let weights = Weights {
            token_embd,
            layers,
            output_norm: l.vector(config.output_norm, config.n_embd)?,
            output,
            tied_output,
        };
        // The RoPE factors were read with the configuration (they are part of the arithmetic).
        for name in config.rope.factors.tensor_names() {
            l.used.borrow_mut().insert((*name).to_string());
        }
        l.finish(config)?;
        Ok(weights)
    }

    /// Bytes of weights read per decoded token (every matrix once; the embedding row is tiny).
    pub fn bytes_per_token(&self) -> usize {
        let layer: usize = self
            .layers
            .iter()
            .map(|l| {
                let mut m = l.mixer.matrices();
                m.extend([l.w_gate, l.w_up, l.w_down]);
                m.iter().map(TensorRef::n_bytes).sum::<usize>()
            })
            .sum();
        layer + self.output.n_bytes()
    }
}
