//! `statelm perplexity`: perplexity of a model on a text file.

use crate::Ctx;
use anyhow::Result;

/// Perplexity of a model on a text file.
#[derive(Debug, clap::Args)]
pub struct PerplexityArgs {}

/// Runs the command.
pub fn run(args: &PerplexityArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm perplexity` is not implemented yet")
}
