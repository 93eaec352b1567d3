//! `statelm doctor`: describe this device and the memory-pressure sources statelm will use.

use crate::commands::device;
use crate::Ctx;
use anyhow::Result;
use statelm_plan::tier::{default_tier, TierOverrides};

/// Describe this device (memory, cgroup ceiling, CPUs, SIMD, kernels, default tier) and the
/// memory-pressure sources the governor will listen to.
///
/// `STATELM_DEVICE=iphone-15-pro` or `STATELM_DEVICE_MEMORY=4GiB` simulate another device.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DoctorArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: &DoctorArgs, ctx: &Ctx) -> Result<()> {
    let _ = ctx;
    let p = device::profile()?;
    let tier = default_tier(&p, &TierOverrides::default());
    let sources = statelm_governor::describe_sources();
    if args.json {
        let mut v = device::to_json(&p, &tier);
        v["memory_sources"] = serde_json::json!(sources);
        v["architectures"] = serde_json::json!(statelm_model::Arch::ALL.map(|a| a.name()));
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    device::print_text(&p, &tier);
    println!("models        {}", statelm_model::Arch::supported_list());
    if sources.is_empty() {
        println!("sources       none found: the governor will rely on the token budget alone");
    }
    for (i, s) in sources.iter().enumerate() {
        println!(
            "{}{s}",
            if i == 0 {
                "sources       "
            } else {
                "              "
            }
        );
    }
    Ok(())
}
