//! `statelm quantize`: requantize a GGUF file (q8_0, q4_0, q5_0, q4_k, q6_k, q4_k_m).

use crate::Ctx;
use anyhow::Result;

/// Requantize a GGUF file (q8_0, q4_0, q5_0, q4_k, q6_k, q4_k_m).
#[derive(Debug, clap::Args)]
pub struct QuantizeArgs {}

/// Runs the command.
pub fn run(args: &QuantizeArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm quantize` is not implemented yet")
}
