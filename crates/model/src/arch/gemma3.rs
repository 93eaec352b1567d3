//! `gemma3`: embeddings × √n_embd, per-head q/k norms, post-attention and post-FFN norms, a
//! GELU FFN, and five sliding-window layers (RoPE base 10 000, unscaled) to each global one.

use super::Keys;
use crate::config::{FfnActivation, ModelConfig};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    super::gemma_common(k, c)?;
    c.sliding_window = k.u32("attention.sliding_window")?.map(|v| v as usize);
    c.swa_period = k
        .u32("attention.sliding_window_pattern")?
        .map_or(6, |v| v as usize);
    c.rope.base_swa = k.f32("rope.freq_base_swa")?.unwrap_or(10_000.0);
    c.qk_norm = true;
    c.ffn_activation = FfnActivation::GeluTanh;
    c.final_logit_softcap = k.f32("final_logit_softcapping")?;
    Ok(())
}
