//! `statelm chat`: interactive chat that keeps the conversation's State across turns.

use crate::Ctx;
use anyhow::Result;

/// Interactive chat that keeps the conversation's State across turns.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {}

/// Runs the command.
pub fn run(args: &ChatArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm chat` is not implemented yet")
}
