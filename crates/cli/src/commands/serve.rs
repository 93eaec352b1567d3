//! `statelm serve`: serve an OpenAI-compatible HTTP API.

use crate::Ctx;
use anyhow::Result;

/// Serve an OpenAI-compatible HTTP API.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

/// Runs the command.
pub fn run(args: &ServeArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm serve` is not implemented yet")
}
