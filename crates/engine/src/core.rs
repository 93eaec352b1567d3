//! What the engine thread owns besides the running jobs: the model, the configuration, the
//! session table, the counters and the memory accounting (admission control).

use crate::budget;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::events::{Event, SessionId};
use crate::info::{EngineStats, RequestSample};
use crate::session::Session;
use statelm_governor::{format_bytes, PressureLevel};
use statelm_model::{Model, StateOptions};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

/// How many finished requests the latency figures look at.
const RECENT: usize = 64;

/// Monotonic counters for `stats()`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counters {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub generated_tokens: u64,
    pub trims: u64,
    pub spills: u64,
    pub evictions: u64,
    pub restores: u64,
    pub refusals: u64,
}

/// The engine's state apart from the jobs.
pub(crate) struct Core {
    /// The model.
    pub model: Arc<Model>,
    /// The (sanitized) configuration.
    pub config: EngineConfig,
    /// Every session (the one a step is working on is taken out for the step).
    pub sessions: HashMap<SessionId, Session>,
    /// Counters.
    pub counters: Counters,
    /// Budget factor in force (1.0 unless lowered under pressure).
    pub factor: f64,
    /// The last pressure level acted on.
    pub level: PressureLevel,
    /// The level the memory ceiling itself indicated at the last check.
    pub own_level: PressureLevel,
    /// The level an attached monitor last reported (the OS's own signals).
    pub os_level: PressureLevel,
    /// The latest finished requests.
    pub recent: VecDeque<RequestSample>,
    /// Id of the next session.
    pub next_session: u64,
    /// Distinguishes this engine's spill files from other engines' in the same directory.
    pub tag: u64,
    /// The most non-KV bytes (scratch buffers, history) a State has held: what a State that
    /// has not run yet will grow to, for admission control.
    pub scratch_high_water: u64,
}

impl Core {
    /// A core with no sessions.
    pub fn new(model: Arc<Model>, config: EngineConfig) -> Core {
        Core {
            model,
            config,
            sessions: HashMap::new(),
            counters: Counters::default(),
            factor: 1.0,
            level: PressureLevel::Normal,
            own_level: PressureLevel::Normal,
            os_level: PressureLevel::Normal,
            recent: VecDeque::new(),
            next_session: 1,
            scratch_high_water: 0,
            tag: crate::rng::Rng::from_entropy().next_u64(),
        }
    }

    /// Options of a new State.
    pub fn state_options(&self) -> StateOptions {
        StateOptions {
            capacity: self.config.session_capacity,
            kv_type: self.config.kv_type,
        }
    }

    /// Where session `id`'s State is spilled.
    pub fn spill_path(&self, id: SessionId) -> PathBuf {
        self.config.spill_dir.join(format!(
            "session-{}-{:016x}-{}.stlmsnap",
            std::process::id(),
            self.tag,
            id.0
        ))
    }

    /// Bytes in use: the weights and every resident State, plus `extra`.
    pub fn used_bytes(&self, extra: u64) -> u64 {
        let states: u64 = self.sessions.values().map(Session::resident_bytes).sum();
        self.model.file_bytes() + states + extra
    }

    /// KV bytes a State of `tokens` tokens is estimated to hold.
    pub fn kv_estimate(&self, tokens: usize) -> u64 {
        let (cap, ring_extra) = (
            self.config.session_capacity,
            self.config.prefill_chunk.max(128),
        );
        budget::kv_bytes_for(
            self.model.config(),
            self.config.kv_type,
            cap,
            ring_extra,
            tokens,
        )
    }

    /// Notes how much non-KV memory session `s`'s State holds.
    pub fn observe_scratch(&mut self, s: &Session) {
        if let Some(st) = &s.state {
            let other = (st.bytes() - st.kv_bytes()) as u64;
            self.scratch_high_water = self.scratch_high_water.max(other);
        }
    }

    /// Bytes session `s` is expected to grow by to hold `tokens` tokens.
    pub fn growth(&self, s: &Session, tokens: usize) -> u64 {
        let (kv, other) = s.state.as_ref().map_or((0, 0), |st| {
            (st.kv_bytes() as u64, (st.bytes() - st.kv_bytes()) as u64)
        });
        self.kv_estimate(tokens).saturating_sub(kv) + self.scratch_high_water.saturating_sub(other)
    }

    /// Admission control: makes room for `needed` more bytes under the ceiling (with `extra`
    /// bytes held by a session outside the table), spilling idle sessions oldest first. Fails
    /// with `OverMemory` when spilling every one is not enough.
    pub fn make_room(&mut self, needed: u64, extra: u64, what: &str) -> Result<(), EngineError> {
        let Some(ceiling) = self.config.memory_ceiling else {
            return Ok(());
        };
        loop {
            let used = self.used_bytes(extra);
            if used.saturating_add(needed) <= ceiling {
                return Ok(());
            }
            let victim = self
                .sessions
                .values()
                .filter(|s| s.busy.is_none() && !s.is_spilled())
                .min_by_key(|s| (s.last_used, s.id))
                .map(|s| s.id);
            let Some(id) = victim else {
                self.counters.refusals += 1;
                return Err(EngineError::OverMemory {
                    what: what.to_string(),
                    needed,
                    used,
                    ceiling,
                });
            };
            let reason = format!(
                "{what} needs {} with {} of the {} memory ceiling in use: idle session {id} \
                 was saved to disk and freed; it is restored on next use",
                format_bytes(needed),
                format_bytes(used),
                format_bytes(ceiling)
            );
            if !self.spill(id, reason) {
                // Could not spill it (disk full?): nothing else to free.
                self.counters.refusals += 1;
                return Err(EngineError::OverMemory {
                    what: what.to_string(),
                    needed,
                    used,
                    ceiling,
                });
            }
        }
    }

    /// Spills session `id` (queuing a `Spilled` event for its next stream); false on failure.
    pub fn spill(&mut self, id: SessionId, reason: String) -> bool {
        let path = self.spill_path(id);
        let Some(s) = self.sessions.get_mut(&id) else {
            return false;
        };
        match s.spill(path) {
            Ok(()) => {
                s.pending.push(Event::Spilled { reason });
                self.counters.spills += 1;
                true
            }
            Err(e) => {
                tracing::warn!(session = id.0, error = %e, "spilling a session failed");
                false
            }
        }
    }

    /// Records a finished request's figures.
    pub fn record(&mut self, sample: RequestSample) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(sample);
    }

    /// The figures for `stats()` (the handle adds the queue depth).
    pub fn stats(&self, active: usize) -> EngineStats {
        let c = &self.counters;
        let n = self.recent.len().max(1) as u32;
        let ttft = self
            .recent
            .iter()
            .map(|r| r.time_to_first_token)
            .sum::<std::time::Duration>()
            / n;
        let tps = self
            .recent
            .iter()
            .map(|r| r.decode_tokens_per_s)
            .sum::<f64>()
            / n as f64;
        let resident = self.sessions.values().filter_map(|s| s.state.as_ref());
        let (kv, st) = resident.fold((0u64, 0u64), |(k, b), s| {
            (k + s.kv_bytes() as u64, b + s.bytes() as u64)
        });
        EngineStats {
            sessions: self.sessions.len(),
            spilled: self.sessions.values().filter(|s| s.is_spilled()).count(),
            active_generations: active,
            queue_depth: 0,
            requests_total: c.requests,
            prompt_tokens_total: c.prompt_tokens,
            cached_tokens_total: c.cached_tokens,
            generated_tokens_total: c.generated_tokens,
            trims: c.trims,
            spills: c.spills,
            evictions: c.evictions,
            restores: c.restores,
            admission_refusals: c.refusals,
            kv_bytes_total: kv,
            state_bytes_total: st,
            weights_bytes: self.model.file_bytes(),
            memory_ceiling: self.config.memory_ceiling,
            pressure: self.level.max(self.own_level).to_string(),
            budget_factor: self.factor,
            mean_time_to_first_token: ttft,
            mean_decode_tokens_per_s: tps,
            recent: self.recent.iter().copied().collect(),
        }
    }
}
