//! The engine configuration as JSON gives it — every field optional, unknown fields refused —
//! and the one range check of a configuration. The C ABI's `statelm_engine_start` reads its
//! JSON through this type, so the names, the defaults and the error messages are the engine's.

use crate::config::{EngineConfig, MAX_QUEUE};
use crate::error::EngineError;
use serde::Deserialize;
use statelm_model::KvType;
use std::path::PathBuf;
use std::time::Duration;

/// Changes to an [`EngineConfig`]: what a JSON object sets, the rest left as it is. Field
/// names are the configuration's, except `*_ms` durations and the real-memory fields, which
/// are flat (`real_memory` on/off, `memory_limit`, `memory_margin`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigPatch {
    max_sessions: Option<usize>,
    session_capacity: Option<usize>,
    token_budget: Option<usize>,
    kv_type: Option<String>,
    spill_dir: Option<PathBuf>,
    session_dir: Option<PathBuf>,
    queue_depth: Option<usize>,
    memory_ceiling: Option<u64>,
    real_memory: Option<bool>,
    memory_limit: Option<u64>,
    memory_margin: Option<u64>,
    idle_after_ms: Option<u64>,
    stream_buffer: Option<usize>,
    prefill_chunk: Option<usize>,
    policy: Option<PolicyPatch>,
    pressure_hold_ms: Option<u64>,
    /// `"auto"`: the device's tier sets the token budget and the KV type (explicit
    /// `token_budget` and `kv_type` still win).
    tier: Option<String>,
}

/// Changes to the memory-pressure [`statelm_governor::Policy`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyPatch {
    trim_keep_fraction: Option<f64>,
    warning_factor: Option<f64>,
    critical_factor: Option<f64>,
    hard_trim_suffix: Option<usize>,
}

impl ConfigPatch {
    /// `base` with these changes, checked ([`EngineConfig::check`]).
    pub fn apply(self, mut c: EngineConfig) -> Result<EngineConfig, EngineError> {
        let kv_type = (self
            .kv_type
            .as_deref()
            .map(str::parse::<KvType>)
            .transpose())
        .map_err(|e| EngineError::InvalidRequest(format!("`kv_type`: {e}")))?;
        match self.tier.as_deref() {
            None => {}
            Some("auto") => {
                let profile = statelm_governor::DeviceProfile::detect();
                crate::tier::apply_device_tier(&profile, self.token_budget, &mut c);
            }
            Some(other) => {
                return Err(EngineError::InvalidRequest(format!(
                    "`tier` must be \"auto\", got {other:?}"
                )))
            }
        }
        let set = |slot: &mut usize, v: Option<usize>| *slot = v.unwrap_or(*slot);
        set(&mut c.max_sessions, self.max_sessions);
        set(&mut c.session_capacity, self.session_capacity);
        set(&mut c.token_budget, self.token_budget);
        set(&mut c.queue_depth, self.queue_depth);
        set(&mut c.stream_buffer, self.stream_buffer);
        set(&mut c.prefill_chunk, self.prefill_chunk);
        c.kv_type = kv_type.unwrap_or(c.kv_type);
        c.spill_dir = self.spill_dir.unwrap_or(c.spill_dir);
        c.session_dir = self.session_dir.or(c.session_dir);
        c.memory_ceiling = self.memory_ceiling.or(c.memory_ceiling);
        c.real_memory.enabled = self.real_memory.unwrap_or(c.real_memory.enabled);
        c.real_memory.limit = self.memory_limit.or(c.real_memory.limit);
        c.real_memory.margin = self.memory_margin.unwrap_or(c.real_memory.margin);
        let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
        c.idle_after = ms(self.idle_after_ms, c.idle_after);
        c.pressure_hold = ms(self.pressure_hold_ms, c.pressure_hold);
        if let Some(p) = self.policy {
            let policy = &mut c.policy;
            policy.trim_keep_fraction = p.trim_keep_fraction.unwrap_or(policy.trim_keep_fraction);
            policy.warning_factor = p.warning_factor.unwrap_or(policy.warning_factor);
            policy.critical_factor = p.critical_factor.unwrap_or(policy.critical_factor);
            policy.hard_trim_suffix = p.hard_trim_suffix.unwrap_or(policy.hard_trim_suffix);
        }
        c.check()?;
        Ok(c)
    }
}

impl EngineConfig {
    /// Refuses values no engine can use, naming the field: channel sizes outside
    /// `1..=`[`MAX_QUEUE`], policy fractions outside (0, 1]. (Sizes that are merely small are
    /// brought up to their minimum when the engine starts.)
    pub fn check(&self) -> Result<(), EngineError> {
        for (name, v) in [
            ("queue_depth", self.queue_depth),
            ("stream_buffer", self.stream_buffer),
        ] {
            if v == 0 || v > MAX_QUEUE {
                return Err(EngineError::InvalidRequest(format!(
                    "`{name}` must be between 1 and {MAX_QUEUE}, got {v}"
                )));
            }
        }
        let p = &self.policy;
        for (name, v) in [
            ("policy.trim_keep_fraction", p.trim_keep_fraction),
            ("policy.warning_factor", p.warning_factor),
            ("policy.critical_factor", p.critical_factor),
        ] {
            let fraction = v > 0.0 && v <= 1.0;
            if !fraction {
                return Err(EngineError::InvalidRequest(format!(
                    "`{name}` must be in (0, 1], got {v}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(json: &str) -> Result<EngineConfig, EngineError> {
        let patch: ConfigPatch = serde_json::from_str(json)
            .map_err(|e| EngineError::InvalidRequest(format!("engine config: {e}")))?;
        patch.apply(EngineConfig::default())
    }

    #[test]
    fn fields_set_what_they_name_and_nothing_else() {
        let c = apply(
            r#"{"max_sessions": 3, "kv_type": "q8_0", "idle_after_ms": 1500,
                "real_memory": false, "memory_limit": 1000000,
                "policy": {"warning_factor": 0.25}}"#,
        )
        .unwrap();
        let d = EngineConfig::default();
        assert_eq!((c.max_sessions, c.kv_type), (3, KvType::Q8_0));
        assert_eq!(c.idle_after, Duration::from_millis(1500));
        assert_eq!(
            (c.real_memory.enabled, c.real_memory.limit),
            (false, Some(1_000_000))
        );
        assert_eq!(c.policy.warning_factor, 0.25);
        assert_eq!(c.policy.critical_factor, d.policy.critical_factor);
        assert_eq!(
            (c.token_budget, c.queue_depth),
            (d.token_budget, d.queue_depth)
        );
        assert_eq!(apply("{}").unwrap(), d);
    }

    #[test]
    fn bad_values_are_refused_with_the_field_named() {
        for (json, needle) in [
            (r#"{"max_session": 3}"#, "unknown field `max_session`"),
            (r#"{"kv_type": "f8"}"#, "`kv_type`"),
            (r#"{"queue_depth": 0}"#, "`queue_depth` must be between 1"),
            (r#"{"stream_buffer": 1000000}"#, "`stream_buffer`"),
            (
                r#"{"policy": {"warning_factor": 2}}"#,
                "`policy.warning_factor`",
            ),
            (r#"{"tier": "max"}"#, "`tier` must be \"auto\""),
        ] {
            let e = apply(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
