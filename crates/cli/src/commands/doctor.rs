//! `statelm doctor`: describe this device and the memory-pressure sources statelm will use.

use crate::Ctx;
use anyhow::Result;

/// Describe this device and the memory-pressure sources statelm will use.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

/// Runs the command.
pub fn run(args: &DoctorArgs, ctx: &Ctx) -> Result<()> {
    let _ = (args, ctx);
    anyhow::bail!("`statelm doctor` is not implemented yet")
}
