//! What the engine thread owns besides the running jobs: the model, the configuration, the
//! session table, the counters and the memory accounting (admission control).

use crate::config::EngineConfig;
use crate::dry::Breakers;
use crate::error::EngineError;
use crate::events::{Event, SessionId};
use crate::info::{EngineStats, RequestSample};
use crate::session::Session;
use statelm_governor::{format_bytes, Footprint, FootprintReader, PressureLevel};
use statelm_model::{Model, Scratch, StateOptions};
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
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    pub trims: u64,
    pub spills: u64,
    pub evictions: u64,
    pub restores: u64,
    pub refusals: u64,
    pub panics: u64,
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
    /// A budget restore under way: since when, and from which factor (it comes back in
    /// steps, [`crate::pressure`]).
    pub restoring: Option<(std::time::Instant, f64)>,
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
    /// The forward pass's buffers: one for every session (the engine computes one step at a
    /// time), sized by the prefill chunk in force.
    pub scratch: Scratch,
    /// The most bytes the scratch has held since its chunk last changed (what it grows back
    /// to), for the accounted ceiling.
    pub scratch_high_water: u64,
    /// The prefill chunk in force: `config.prefill_chunk`, halved (down to
    /// [`crate::footprint::MIN_CHUNK`]) under real memory pressure, restored when it eases.
    pub chunk: usize,
    /// Reads the process's real footprint (`None`: real-memory admission is off).
    pub footprint: Option<FootprintReader>,
    /// The last footprint read and the limit it was held to.
    pub last_footprint: Option<(Footprint, Option<u64>)>,
    /// The last real check had to make room: run resident sessions first.
    pub tight: bool,
    /// DRY's breaker tokens for the last breaker strings asked for (one vocabulary scan per
    /// distinct list, not per request).
    pub dry_breakers: Option<(Vec<String>, Arc<Breakers>)>,
    /// The tokens that open a user turn in the chat template (where whole-turn trims cut);
    /// `None`: the template has none, trims fall back to the token rule.
    pub turn_header: Option<Vec<u32>>,
    /// The grammar engine's vocabulary trie and compiled grammars (counted in
    /// [`Core::used_bytes`], released under pressure); shared with the handle, which compiles.
    pub grammars: Arc<crate::sampling::constraint::Grammars>,
    /// The app's lifecycle state (in the background nothing is computed).
    pub lifecycle: crate::Lifecycle,
    /// The device's thermal state (it sets the forward pass's threads).
    pub thermal: crate::Thermal,
}

impl Core {
    /// A core with no sessions.
    pub fn new(
        model: Arc<Model>,
        config: EngineConfig,
        grammars: Arc<crate::sampling::constraint::Grammars>,
    ) -> Core {
        let chunk = config.prefill_chunk;
        let footprint = config.real_memory.enabled.then(|| {
            match statelm_governor::keep_huge_pages_out() {
                Ok(on) => tracing::debug!(huge_pages_off = on, "working set without huge pages"),
                Err(e) => tracing::warn!(error = %e, "transparent huge pages stay on: the working set may overstate what is in use"),
            }
            FootprintReader::detect()
        });
        Core {
            scratch: Scratch::with_ubatch(chunk),
            chunk,
            footprint,
            last_footprint: None,
            tight: false,
            dry_breakers: None,
            turn_header: model.tokenizer().user_turn_header(),
            model,
            config,
            sessions: HashMap::new(),
            counters: Counters::default(),
            factor: 1.0,
            restoring: None,
            level: PressureLevel::Normal,
            own_level: PressureLevel::Normal,
            os_level: PressureLevel::Normal,
            recent: VecDeque::new(),
            next_session: 1,
            scratch_high_water: 0,
            tag: crate::rng::Rng::from_entropy().next_u64(),
            grammars,
            lifecycle: crate::Lifecycle::Foreground,
            thermal: crate::Thermal::Nominal,
        }
    }

    /// The breaker tokens DRY needs for `sampling` (none when DRY is off).
    pub fn breakers_for(&mut self, sampling: &crate::SamplingParams) -> Arc<Breakers> {
        if sampling.dry_multiplier <= 0.0 {
            return Arc::default();
        }
        let wanted = &sampling.dry_sequence_breakers;
        if let Some((strings, b)) = &self.dry_breakers {
            if strings == wanted {
                return b.clone();
            }
        }
        let tok = self.model.tokenizer();
        let pieces = (0..tok.vocab_size() as u32).map(|id| tok.token_bytes(id).unwrap_or(&[]));
        let b = Arc::new(Breakers::new(pieces, wanted));
        self.dry_breakers = Some((wanted.clone(), b.clone()));
        b
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

    /// Bytes in use by the engine's own accounting: the weights, every resident State and the
    /// scratch (at its high-water mark), plus `extra`.
    pub fn used_bytes(&self, extra: u64) -> u64 {
        let states: u64 = self.sessions.values().map(Session::resident_bytes).sum();
        self.model.file_bytes() + states + self.scratch_high_water + self.grammars.bytes() + extra
    }

    /// Frees the grammar engine's caches and its idle vocabulary trie, the first rung of
    /// admission (caches go before anyone's conversation); whether anything was freed.
    pub fn release_grammars(&mut self, what: &str) -> bool {
        let freed = self.grammars.release(true);
        if freed > 0 {
            tracing::info!(
                freed = %format_bytes(freed),
                "{what}: the grammar engine's caches were freed (rebuilt on the next constrained request)"
            );
            statelm_governor::release_free_memory();
        }
        freed > 0
    }

    /// KV bytes a State of `tokens` tokens holds ([`statelm_model::kv::kv_bytes_for`]).
    pub fn kv_estimate(&self, tokens: usize) -> u64 {
        let ring_extra =
            (self.model.numerics() == statelm_model::Numerics::Fast).then_some(self.model.ubatch());
        statelm_model::kv::kv_bytes_for(
            self.model.config(),
            self.config.kv_type,
            self.config.session_capacity,
            ring_extra,
            tokens,
        )
    }

    /// Notes how much the scratch holds after a step.
    pub fn observe_scratch(&mut self) {
        self.scratch_high_water = self.scratch_high_water.max(self.scratch.bytes() as u64);
    }

    /// Bytes session `s` is expected to grow by to hold `tokens` tokens (KV cache and history).
    pub fn growth(&self, s: &Session, tokens: usize) -> u64 {
        let (kv, history) = s.state.as_ref().map_or((0, 0), |st| {
            (st.kv_bytes() as u64, (st.bytes() - st.kv_bytes()) as u64)
        });
        self.kv_estimate(tokens).saturating_sub(kv) + (4 * tokens as u64).saturating_sub(history)
    }

    /// Admission control: makes room for `needed` more bytes under the accounted ceiling (with
    /// `extra` bytes held by a session outside the table), spilling idle sessions oldest first,
    /// then under the real limit ([`Core::real_room`]). Fails with `OverMemory` when spilling
    /// every one is not enough.
    pub fn make_room(&mut self, needed: u64, extra: u64, what: &str) -> Result<(), EngineError> {
        self.accounted_room(needed, extra, what)?;
        self.real_room(needed, what)
    }

    /// Counts `e` in `admission_refusals` when it refuses a request for memory. The one place
    /// a refusal is counted is where it reaches the caller (a failed request, a session not
    /// created or loaded): admission saying no, then a trim or a recompute fitting the
    /// conversation after all, is not a refusal.
    pub(crate) fn count_refusal(&mut self, e: &EngineError) {
        if matches!(e, EngineError::OverMemory { .. }) {
            self.counters.refusals += 1;
        }
    }

    /// [`Core::make_room`] under the accounted ceiling only.
    fn accounted_room(&mut self, needed: u64, extra: u64, what: &str) -> Result<(), EngineError> {
        let Some(ceiling) = self.config.memory_ceiling else {
            return Ok(());
        };
        loop {
            let used = self.used_bytes(extra);
            if used.saturating_add(needed) <= ceiling {
                return Ok(());
            }
            if self.release_grammars(what) {
                continue;
            }
            let victim = self
                .sessions
                .values()
                .filter(|s| s.busy.is_none() && !s.is_spilled())
                .min_by_key(|s| (s.last_used, s.id))
                .map(|s| s.id);
            let Some(id) = victim else {
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
                statelm_governor::release_free_memory();
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
            drafted_tokens_total: c.drafted_tokens,
            accepted_tokens_total: c.accepted_tokens,
            trims: c.trims,
            spills: c.spills,
            evictions: c.evictions,
            restores: c.restores,
            admission_refusals: c.refusals,
            panics: c.panics,
            // The handle adds these (the engine thread does not see the monitor).
            memory_source_errors: 0,
            memory_source_error: None,
            kv_bytes_total: kv,
            state_bytes_total: st,
            scratch_bytes: self.scratch.bytes() as u64,
            grammar_bytes: self.grammars.bytes(),
            threads: self.model.threads_in_use(),
            thermal: self.thermal,
            lifecycle: self.lifecycle,
            prefill_chunk: self.chunk,
            footprint_bytes: self.last_footprint.map(|(f, _)| f.used),
            footprint_limit: self.last_footprint.and_then(|(_, l)| l),
            weights_bytes: self.model.file_bytes(),
            memory_ceiling: self.config.memory_ceiling,
            pressure: self.level.max(self.own_level),
            budget_factor: self.factor,
            mean_time_to_first_token: ttft,
            mean_decode_tokens_per_s: tps,
            recent: self.recent.iter().copied().collect(),
        }
    }
}
