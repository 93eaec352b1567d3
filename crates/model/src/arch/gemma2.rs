//! `gemma2`: embeddings × √n_embd, post-attention and post-FFN norms, a GELU FFN, sliding-window
//! attention on alternate layers (even layers local), and soft-capping of the attention scores
//! (default 50) and of the final logits (default 30). The 27B model scales queries by
//! `1/√(n_embd/n_head)` instead of `1/√head_dim`, as llama.cpp does.

use super::Keys;
use crate::config::{FfnActivation, ModelConfig};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    super::gemma_common(k, c)?;
    c.sliding_window = Some(
        k.u32("attention.sliding_window")?
            .map_or(4096, |v| v as usize),
    );
    c.swa_period = k
        .u32("attention.sliding_window_pattern")?
        .map_or(2, |v| v as usize);
    c.rope.base_swa = k.f32("rope.freq_base_swa")?.unwrap_or(c.rope.base);
    c.ffn_activation = FfnActivation::GeluTanh;
    c.attn_softcap = Some(k.f32("attn_logit_softcapping")?.unwrap_or(50.0));
    c.final_logit_softcap = Some(k.f32("final_logit_softcapping")?.unwrap_or(30.0));
    if c.n_layer == 46 {
        c.attn_scale = 1.0 / ((c.n_embd / c.n_head) as f32).sqrt();
    }
    Ok(())
}
