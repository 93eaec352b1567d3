//! `statelm run`: generate text from a prompt, streaming tokens to stdout.

use crate::Ctx;
use anyhow::Result;

/// Generate text from a prompt, streaming tokens to stdout.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Runs the command.
pub fn run(args: &RunArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm run` is not implemented yet")
}
