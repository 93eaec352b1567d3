//! `statelm inspect --device`: the device profile, the kernels chosen for it and the tier the
//! default policy would pick. `STATELM_DEVICE` / `STATELM_DEVICE_MEMORY` simulate other devices.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use statelm_governor::{format_bytes, DeviceProfile};
use statelm_plan::tier::{default_tier, Tier, TierOverrides};

/// The profile from the environment (detected, or simulated by the `STATELM_DEVICE*` variables).
pub fn profile() -> Result<DeviceProfile> {
    DeviceProfile::from_env().context("cannot build the device profile")
}

/// The profile, kernel ISA and default tier as JSON.
pub fn to_json(p: &DeviceProfile, tier: &Tier) -> Value {
    json!({
        "device": p.name.as_deref().unwrap_or("this machine (detected)"),
        "simulated": p.name.is_some(),
        "physical_memory": p.physical_memory,
        "cgroup_limit": p.cgroup_limit,
        "available_memory": p.available_memory,
        "effective_memory": p.effective_memory(),
        "cpu_count": p.cpu_count,
        "physical_cores": p.physical_cores,
        "simd": p.simd,
        "kernel_isa": statelm_quant::active_isa(),
        "tier": {
            "policy": "default",
            "quant": tier.quant.name(),
            "token_budget": tier.token_budget,
            "reason": tier.reason,
        },
    })
}

/// Prints the profile as aligned text.
pub fn print_text(p: &DeviceProfile, tier: &Tier) {
    let opt = |b: Option<u64>| b.map_or_else(|| "none".to_string(), format_bytes);
    println!(
        "device        {}",
        p.name.as_deref().unwrap_or("this machine (detected)")
    );
    println!("physical      {}", format_bytes(p.physical_memory));
    println!("cgroup limit  {}", opt(p.cgroup_limit));
    println!("available     {}", format_bytes(p.available_memory));
    println!("effective     {}", format_bytes(p.effective_memory()));
    println!(
        "cpus          {} logical, {} physical cores",
        p.cpu_count, p.physical_cores
    );
    println!("simd          {}", p.simd.join(" "));
    println!("kernels       {}", statelm_quant::active_isa());
    println!(
        "tier          {} weights, {} tokens ({})",
        tier.quant.name(),
        tier.token_budget,
        tier.reason
    );
}

/// Prints the device profile.
pub fn print(json: bool) -> Result<()> {
    let p = profile()?;
    let tier = default_tier(&p, &TierOverrides::default());
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&p, &tier))?);
    } else {
        print_text(&p, &tier);
    }
    Ok(())
}
