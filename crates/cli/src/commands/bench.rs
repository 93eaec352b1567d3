//! `statelm bench`: measure prefill/decode speed, memory and the bandwidth roofline.

use crate::Ctx;
use anyhow::Result;

/// Measure prefill/decode speed, memory and the bandwidth roofline.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs the command.
pub fn run(args: &BenchArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm bench` is not implemented yet")
}
