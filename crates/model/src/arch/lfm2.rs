//! `lfm2` (LFM2, LFM2.5): a hybrid of gated short convolutions and attention. Layers whose
//! `attention.head_count_kv` entry is 0 mix tokens by `out_proj(c ⊙ conv(b ⊙ x))`, where
//! `in_proj` gives `b`, `c` and `x` and `conv` is a causal depthwise convolution over the
//! last `shortconv.l_cache` inputs; the others attend with per-head q/k RMS norms and NEOX RoPE.
//! Every layer has the same SiLU-gated FFN. The final norm is `token_embd_norm`.

use super::Keys;
use crate::config::{ModelConfig, ShortConv};
use crate::ModelError;

pub(super) fn describe(k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.shortconv = Some(ShortConv {
        l_cache: k.req_u32("shortconv.l_cache")? as usize,
    });
    c.qk_norm = true;
    c.output_norm = "token_embd_norm.weight";
    Ok(())
}
