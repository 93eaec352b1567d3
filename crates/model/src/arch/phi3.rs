//! `phi3` (Phi-3, Phi-3.5-mini, Phi-4-mini): fused `attn_qkv` and fused gate-up `ffn_up` (split
//! by rows at load), NEOX RoPE over the first `rope.dimension_count` dimensions of each head
//! (partial rotary), and LongRoPE: `rope_factors_long`/`_short`, the long ones when a state's
//! capacity exceeds the original context, with `rope.scaling.attn_factor` as the magnitude.
//! llama.cpp disables Phi's sliding window (`attention.sliding_window` is read and set aside);
//! so does statelm, to compute what it computes.

use super::Keys;
use crate::config::ModelConfig;
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.rope.factors = k.rope_factors(c.rope.dim / 2)?;
    k.known(&["attention.sliding_window"]);
    Ok(())
}
