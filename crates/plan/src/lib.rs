//! Device tiers and the capacity planner.
//!
//! - [`capacity`]: how much memory a model needs at a given context, line by line, from the
//!   GGUF header alone or for a hypothetical model of a given size;
//! - [`tier`]: which weight precision and token budget a device gets, from the memory it
//!   really has (a governor [`statelm_governor::DeviceProfile`]), and loading the matching
//!   variant of a model.
//!
//! The engine turns a tier into its configuration; the CLI (`statelm plan`, `device`,
//! `--tier`) and the C ABI (`"tier": "auto"`) use the same decisions.

#![forbid(unsafe_code)]

pub mod capacity;
pub mod tier;

pub use capacity::{plan, Footprint, ModelSketch, PlanOptions};
pub use tier::{default_tier, QuantTier, Tier, TierOverrides, TierPolicy};
