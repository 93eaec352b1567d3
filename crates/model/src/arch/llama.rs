//! `llama` (Llama 2, Llama 3.x, Mistral-style files): the plain pre-norm block with
//! interleaved RoPE; Llama 3.x's `rope_freqs.weight` divides each pair's angle (llama3 scaling).

use super::Keys;
use crate::config::{ModelConfig, RopeFactors, RopeStyle};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.rope.style = RopeStyle::Interleaved;
    c.rope.factors = k.rope_factors(c.rope.dim / 2)?;
    if c.rope.dim != c.head_dim {
        return Err(ModelError::BadConfig(format!(
            "llama: rope.dimension_count {} differs from the head dimension {}",
            c.rope.dim, c.head_dim
        )));
    }
    if matches!(c.rope.factors, RopeFactors::LongShort { .. }) {
        return Err(ModelError::UnsupportedKey {
            key: k.full("rope.scaling.type"),
            reason: "LongRoPE factors on a llama file (statelm: phi3 only)".into(),
        });
    }
    Ok(())
}
