//! `statelm inspect --device`: the device profile and the active memory sources.

use anyhow::Result;

/// Prints the device profile.
pub fn print(json: bool) -> Result<()> {
    let _ = json;
    anyhow::bail!("device profiles are not available yet")
}
