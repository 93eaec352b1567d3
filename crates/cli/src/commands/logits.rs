//! `statelm logits`: teacher-forced top-K logits at every position of an input.

use crate::Ctx;
use anyhow::Result;

/// Teacher-forced top-K logits at every position of an input.
#[derive(Debug, clap::Args)]
pub struct LogitsArgs {}

/// Runs the command.
pub fn run(args: &LogitsArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm logits` is not implemented yet")
}
