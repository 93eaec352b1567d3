//! `statelm tokenize`: tokenize text with a model's tokenizer.

use crate::Ctx;
use anyhow::Result;

/// Tokenize text with a model's tokenizer.
#[derive(Debug, clap::Args)]
pub struct TokenizeArgs {}

/// Runs the command.
pub fn run(args: &TokenizeArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm tokenize` is not implemented yet")
}
