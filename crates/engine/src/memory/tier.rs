//! The device's tier as an engine configuration: the one place where a tier becomes engine
//! settings, used by the CLI (`--tier`) and the C ABI (`"tier": "auto"`) alike.

use crate::config::EngineConfig;
use statelm_governor::DeviceProfile;
use statelm_model::KvType;
use statelm_plan::tier::{default_tier, QuantTier, Tier, TierOverrides};

/// The KV cache element type of a tier: f16 beside int8 weights; q8_0 beside 4-bit weights,
/// on the devices with less memory, where the cache's bytes matter most.
pub fn kv_type_of(t: &Tier) -> KvType {
    match t.quant {
        QuantTier::Q8_0 => KvType::F16,
        QuantTier::Q4 => KvType::Q8_0,
    }
}

/// The default tier of `profile` (no overrides): what [`apply_device_tier`] applies.
pub fn device_tier(profile: &DeviceProfile) -> Tier {
    default_tier(profile, &TierOverrides::default())
}

/// Applies the default tier of `profile` to `config`: its token budget (unless `budget` is
/// given) with a State capacity to match, and its KV cache type. Returns the tier.
pub fn apply_device_tier(
    profile: &DeviceProfile,
    budget: Option<usize>,
    config: &mut EngineConfig,
) -> Tier {
    let ov = TierOverrides {
        quant: None,
        budget,
    };
    let tier = default_tier(profile, &ov);
    config.token_budget = tier.token_budget;
    config.session_capacity = config.session_capacity.max(tier.token_budget);
    config.kv_type = kv_type_of(&tier);
    tier
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn phone(ram: u64, ceiling: u64) -> DeviceProfile {
        let mut p = DeviceProfile::detect();
        p.physical_memory = ram;
        p.cgroup_limit = Some(ceiling);
        p.name = Some("a phone".into());
        p
    }

    #[test]
    fn eight_gb_phones_get_2048_f16_and_six_gb_ones_1024_q8_0() {
        let mut c = EngineConfig::default();
        let t = apply_device_tier(&phone(8 * GIB, 4 * GIB), None, &mut c);
        assert_eq!(
            (t.quant, c.token_budget, c.kv_type),
            (QuantTier::Q8_0, 2048, KvType::F16)
        );
        let mut c = EngineConfig::default();
        let t = apply_device_tier(&phone(6 * GIB, 3 * GIB), None, &mut c);
        assert_eq!(
            (t.quant, c.token_budget, c.kv_type),
            (QuantTier::Q4, 1024, KvType::Q8_0)
        );
        let mut c = EngineConfig::default();
        apply_device_tier(&phone(6 * GIB, 3 * GIB), Some(512), &mut c);
        assert_eq!(c.token_budget, 512);
        assert!(c.session_capacity >= c.token_budget);
    }
}
