//! `granite` (Granite 3.x dense): a llama block with four scales — embeddings × `embedding_scale`,
//! each block's output × `residual_scale` before its residual add, attention scores ×
//! `attention.scale` (instead of `1/√head_dim`), logits ÷ `logit_scale`.

use super::Keys;
use crate::config::{ModelConfig, RopeStyle};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.rope.style = RopeStyle::Interleaved;
    c.rope.factors = k.rope_factors(c.rope.dim / 2)?;
    c.logit_scale = Some(k.req_f32("logit_scale")?);
    c.residual_scale = k.f32("residual_scale")?.filter(|&s| s != 0.0);
    c.embed_scale = k.f32("embedding_scale")?.filter(|&s| s != 0.0);
    if let Some(s) = k.f32("attention.scale")?.filter(|&s| s != 0.0) {
        c.attn_scale = s;
    }
    Ok(())
}
