//! `mistral3` (dense Ministral 3): a llama block with YaRN RoPE (its betas and log multiplier
//! read here, as llama.cpp reads them for this architecture) and, when
//! `attention.temperature_scale` is set, Llama 4's attention temperature: queries at position
//! `p` × `1 + scale · ln(⌊p / n_ctx_orig⌋ + 1)`.

use super::Keys;
use crate::config::{AttnTemperature, ModelConfig, RopeStyle};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.rope.style = RopeStyle::Interleaved;
    c.rope.factors = k.rope_factors(c.rope.dim / 2)?;
    if let Some(b) = k.f32("rope.scaling.yarn_beta_fast")? {
        c.rope.beta_fast = b;
    }
    if let Some(b) = k.f32("rope.scaling.yarn_beta_slow")? {
        c.rope.beta_slow = b;
    }
    let log_mul = k.f32("rope.scaling.yarn_log_multiplier")?.unwrap_or(0.0);
    if log_mul != 0.0 && c.rope.ext_factor != 0.0 {
        // llama.cpp: mscale(factor, 1) / mscale(factor, log_mul) instead of mscale(factor, 1).
        let f = 1.0 / c.rope.freq_scale;
        if f > 1.0 {
            c.rope.attn_factor /= 0.1 * log_mul * f.ln() + 1.0;
        }
    }
    if let Some(scale) = k.f32("attention.temperature_scale")?.filter(|&s| s != 0.0) {
        c.attn_temperature = Some(AttnTemperature {
            scale,
            floor: c.rope.n_ctx_orig.max(1),
        });
    }
    Ok(())
}
