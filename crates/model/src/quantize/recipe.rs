//! Which type each tensor gets: llama.cpp's `llama_tensor_get_type` rules for the targets
//! statelm writes, applied to a GGUF header alone (no tensor data is read).
//!
//! The recipe, tensor by tensor in file order (llama.cpp counts `attn_v` and `ffn_down` tensors
//! in file order too, so its "layer" index is the tensor's rank among its kind, not the number in
//! its name — files converted with lexically sorted names depend on this):
//!
//! 1. Tensors with fewer than two dimensions, `*_norm.weight` tensors and LFM2's
//!    `shortconv.conv.weight` kernels are kept as they are (norms, biases and kernels stay F32).
//! 2. Everything else starts at the target's base type.
//! 3. The output projection (`output.weight`, or `token_embd.weight` when the embedding is tied)
//!    gets Q6_K unless the target is Q8_0 (or its rows are not whole blocks of the base type, in
//!    which case Q8_0).
//! 4. `_m` / `_s` mixes: Q4_K_M gives `attn_v` and `ffn_down` Q6_K on the layers where
//!    `use_more_bits(i, n)` holds (the first and last eighth, and every third layer between);
//!    Q4_K_S gives the first four `attn_v` and the first eighth of `ffn_down` Q5_K; fused
//!    `attn_qkv` gets Q5_K under Q4_K_M.
//! 5. A K-quant whose row length is not a multiple of 256 falls back to the legacy type of
//!    similar precision: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0 (F16 if even that does not fit).
//! 6. A tensor already of the chosen type is copied bit for bit (not requantized).

use statelm_gguf::{GgmlType, GgufFile};

/// A quantization target of `statelm quantize` (a llama.cpp "ftype").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantTarget {
    /// Every matrix Q8_0 (8.5 bits per weight).
    Q8_0,
    /// Q4_0 matrices (4.5 bpw); the output projection Q6_K, or Q8_0 when rows are not whole
    /// K-quant blocks.
    Q4_0,
    /// Q5_0 matrices (5.5 bpw); the output projection as for Q4_0.
    Q5_0,
    /// Q4_K matrices (4.5 bpw) with llama.cpp's Q4_K_S bumps (see the module docs).
    Q4K,
    /// Q6_K matrices (6.56 bpw).
    Q6K,
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for half of `attn_v`/`ffn_down` and the output.
    Q4KM,
}

impl QuantTarget {
    /// Every target, in the order the CLI lists them.
    pub const ALL: [QuantTarget; 6] = [
        QuantTarget::Q8_0,
        QuantTarget::Q4_0,
        QuantTarget::Q5_0,
        QuantTarget::Q4K,
        QuantTarget::Q6K,
        QuantTarget::Q4KM,
    ];

    /// Parses `q8_0`, `q4_0`, `q5_0`, `q4_k` (or `q4_k_s`), `q6_k`, `q4_k_m` (any case).
    pub fn parse(s: &str) -> Option<QuantTarget> {
        match s.trim().to_ascii_lowercase().as_str() {
            "q8_0" => Some(QuantTarget::Q8_0),
            "q4_0" => Some(QuantTarget::Q4_0),
            "q5_0" => Some(QuantTarget::Q5_0),
            "q4_k" | "q4_k_s" => Some(QuantTarget::Q4K),
            "q6_k" => Some(QuantTarget::Q6K),
            "q4_k_m" => Some(QuantTarget::Q4KM),
            _ => None,
        }
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            QuantTarget::Q8_0 => "q8_0",
            QuantTarget::Q4_0 => "q4_0",
            QuantTarget::Q5_0 => "q5_0",
            QuantTarget::Q4K => "q4_k",
            QuantTarget::Q6K => "q6_k",
            QuantTarget::Q4KM => "q4_k_m",
        }
    }

    /// The type most tensors get.
    pub fn base_type(self) -> GgmlType {
        match self {
            QuantTarget::Q8_0 => GgmlType::Q8_0,
            QuantTarget::Q4_0 => GgmlType::Q4_0,
            QuantTarget::Q5_0 => GgmlType::Q5_0,
            QuantTarget::Q4K | QuantTarget::Q4KM => GgmlType::Q4_K,
            QuantTarget::Q6K => GgmlType::Q6_K,
        }
    }

    /// The `general.file_type` value (llama.cpp's `llama_ftype`) written to the output.
    pub fn file_type(self) -> u32 {
        match self {
            QuantTarget::Q8_0 => 7,
            QuantTarget::Q4_0 => 2,
            QuantTarget::Q5_0 => 8,
            QuantTarget::Q4K => 14,
            QuantTarget::Q6K => 18,
            QuantTarget::Q4KM => 15,
        }
    }
}

/// Why a tensor got its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A 1-D tensor or a norm: kept as it is.
    Kept,
    /// The target's base type.
    Base,
    /// The output-projection rule.
    Output,
    /// More bits for a sensitive layer (`_m`/`_s` mixes).
    MoreBits,
    /// The wanted K-quant does not divide the rows; a legacy type of similar precision instead.
    Fallback {
        /// The type the rule asked for.
        wanted: GgmlType,
    },
}

/// The recipe's decision for one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorChoice {
    /// Tensor name.
    pub name: String,
    /// Dimensions (ggml order).
    pub dims: Vec<u64>,
    /// Type in the input.
    pub from: GgmlType,
    /// Type in the output.
    pub to: GgmlType,
    /// Why.
    pub reason: Reason,
}

impl TensorChoice {
    /// Whether the data is copied unchanged.
    pub fn is_copy(&self) -> bool {
        self.from == self.to
    }

    /// Elements of the tensor.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of the tensor in the output (0 if the size overflows, which a parsed file excludes).
    pub fn out_bytes(&self) -> u64 {
        self.to.bytes_for(self.n_elements()).unwrap_or(0)
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third one
/// in between.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64).rem_euclid(3) == 2
}

/// The legacy type a K-quant falls back to when rows are not whole super-blocks.
fn fallback(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => GgmlType::F16,
    }
}

/// Counters llama.cpp keeps while it walks the tensors.
#[derive(Default)]
struct Counters {
    attn_v: usize,
    n_attn_v: usize,
    ffn_down: usize,
    n_ffn_down: usize,
}

/// The recipe for every tensor of `file`, in file order.
pub fn choose_types(file: &GgufFile, target: QuantTarget) -> Vec<TensorChoice> {
    let tensors = file.tensors();
    let has_output = file.tensor("output.weight").is_some();
    let mut c = Counters {
        n_attn_v: tensors
            .iter()
            .filter(|t| t.name.contains("attn_v.weight") || t.name.contains("attn_qkv.weight"))
            .count(),
        n_ffn_down: tensors
            .iter()
            .filter(|t| t.name.contains("ffn_down"))
            .count(),
        ..Counters::default()
    };
    tensors
        .iter()
        .map(|t| {
            // LFM2's convolution kernels stay f32, as llama.cpp keeps them (its ssm_conv
            // reads f32 only; they are a few taps per channel).
            let kept = t.dims.len() < 2
                || t.name.ends_with("_norm.weight")
                || t.name.ends_with("shortconv.conv.weight");
            let (to, reason) = if kept {
                (t.ty, Reason::Kept)
            } else {
                choose_one(&t.name, t.dims[0], target, has_output, &mut c)
            };
            TensorChoice {
                name: t.name.clone(),
                dims: t.dims.clone(),
                from: t.ty,
                to,
                reason,
            }
        })
        .collect()
}

/// The type of one quantizable tensor with row length `nx`.
fn choose_one(
    name: &str,
    nx: u64,
    target: QuantTarget,
    has_output: bool,
    c: &mut Counters,
) -> (GgmlType, Reason) {
    let base = target.base_type();
    let (mut ty, mut reason) = (base, Reason::Base);
    let mut bump = |t: GgmlType| {
        ty = t;
        reason = Reason::MoreBits;
    };
    if name == "output.weight" || (!has_output && name == "token_embd.weight") {
        if !nx.is_multiple_of(base.block_size() as u64) {
            (ty, reason) = (GgmlType::Q8_0, Reason::Output);
        } else if base != GgmlType::Q8_0 {
            (ty, reason) = (GgmlType::Q6_K, Reason::Output);
        }
    } else if name.contains("attn_v.weight") {
        match target {
            QuantTarget::Q4KM if use_more_bits(c.attn_v, c.n_attn_v) => bump(GgmlType::Q6_K),
            QuantTarget::Q4K if c.attn_v < 4 => bump(GgmlType::Q5_K),
            _ => {}
        }
        c.attn_v += 1;
    } else if name.contains("ffn_down") {
        match target {
            QuantTarget::Q4KM if use_more_bits(c.ffn_down, c.n_ffn_down) => bump(GgmlType::Q6_K),
            QuantTarget::Q4K if c.ffn_down < c.n_ffn_down / 8 => bump(GgmlType::Q5_K),
            _ => {}
        }
        c.ffn_down += 1;
    } else if name.contains("attn_qkv.weight") && target == QuantTarget::Q4KM {
        bump(GgmlType::Q5_K);
    }
    if !nx.is_multiple_of(ty.block_size() as u64) {
        let wanted = ty;
        ty = fallback(ty);
        if !nx.is_multiple_of(ty.block_size() as u64) {
            ty = GgmlType::F16;
        }
        reason = Reason::Fallback { wanted };
    }
    (ty, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_llama_cpp() {
        let picked: Vec<usize> = (0..18).filter(|&i| use_more_bits(i, 18)).collect();
        assert_eq!(picked, [0, 1, 4, 7, 10, 13, 15, 16, 17]);
        let picked: Vec<usize> = (0..24).filter(|&i| use_more_bits(i, 24)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
    }

    #[test]
    fn names_round_trip() {
        for t in QuantTarget::ALL {
            assert_eq!(QuantTarget::parse(t.name()), Some(t));
        }
        assert_eq!(QuantTarget::parse("Q4_K_S"), Some(QuantTarget::Q4K));
        assert_eq!(QuantTarget::parse("q3_k"), None);
    }
}
