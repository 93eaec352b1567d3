//! `statelm plan`: capacity planner: which model fits which device, with a memory breakdown.

use crate::Ctx;
use anyhow::Result;

/// Capacity planner: which model fits which device, with a memory breakdown.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

/// Runs the command.
pub fn run(args: &PlanArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm plan` is not implemented yet")
}
