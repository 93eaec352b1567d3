//! `qwen2` (Qwen2, Qwen2.5) and `qwen3` (dense Qwen3): llama blocks with NEOX RoPE. Qwen2 adds
//! q/k/v biases (found by the loader when present); Qwen3 drops them and normalizes each query
//! and key head (`attn_q_norm`, `attn_k_norm`) before RoPE, with a head size read from
//! `attention.key_length` that may differ from `n_embd / n_head`.

use super::Keys;
use crate::config::ModelConfig;
use crate::ModelError;

pub(super) fn describe_qwen2(_k: &Keys<'_>, _c: &mut ModelConfig) -> Result<(), ModelError> {
    Ok(())
}

pub(super) fn describe_qwen3(_k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.qk_norm = true;
    Ok(())
}
