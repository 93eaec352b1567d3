//! `smollm3`: a llama block in which every fourth layer (`(il + 1) % 4 == 0`) has no RoPE.
//! llama.cpp hard-codes the step (no GGUF key carries it); so do we.

use super::Keys;
use crate::config::{ModelConfig, RopeStyle};
use crate::ModelError;

pub(super) fn describe(_k: &Keys<'_>, c: &mut ModelConfig) -> Result<(), ModelError> {
    c.rope.style = RopeStyle::Interleaved;
    c.rope.no_rope_step = Some(4);
    Ok(())
}
