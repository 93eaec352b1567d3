//! Memory pressure: the engine's side of the governor. Levels come from the host
//! ([`crate::EngineHandle::memory_warning`], or a governor `Monitor` attached with
//! [`crate::EngineHandle::attach_monitor`]) and from the memory ceiling itself; the governor's
//! pure [`statelm_governor::Policy`] decides, and the engine carries the actions out and tells
//! each affected session's stream (or its next one) what was done.

use crate::actor::Actor;
use crate::events::{Event, SessionId, StopReason, TrimMethod};
use statelm_governor::{Action, PolicyInput, PressureLevel, SessionInfo as PolicySession};
use statelm_model::{Model, State};
use std::time::Instant;

impl Actor {
    /// Acts on a host-reported level, or on the ceiling's own level when it changed.
    pub(crate) fn check_pressure(&mut self) {
        if let Some(level) = self.shared_pressure() {
            self.core.level = level;
            if level == PressureLevel::Normal {
                self.core
                    .sessions
                    .values_mut()
                    .for_each(|s| s.hard_trimmed = false);
            }
            self.run_ladder();
            return;
        }
        let Some(ceiling) = self.core.config.memory_ceiling else {
            return;
        };
        let own = self.own_level(ceiling);
        if own != self.core.own_level {
            self.core.own_level = own;
            self.run_ladder();
        }
    }

    /// The engine's own level from its accounting: the sessions' bytes over the room the ceiling
    /// leaves beside the weights (weights that are most of the ceiling are not pressure), and
    /// at most Warning — admission control already keeps every State under the ceiling, so hard
    /// trims and evictions are kept for pressure the OS or the host reports.
    fn own_level(&self, ceiling: u64) -> PressureLevel {
        let weights = self.core.model.file_bytes();
        let room = ceiling.saturating_sub(weights).max(1);
        let sessions = self.core.used_bytes(0).saturating_sub(weights);
        let level = self
            .core
            .config
            .policy
            .thresholds
            .level(Some(sessions), Some(room));
        level.min(PressureLevel::Warning)
    }

    /// What the policy knows about every session.
    fn policy_input(&self) -> PolicyInput {
        let now = Instant::now();
        let idle_after = self.core.config.idle_after;
        // The policy sees the room the ceiling leaves beside the weights, and the sessions'
        // bytes in it: weights that are most of the ceiling are not pressure.
        let weights = self.core.model.file_bytes();
        let mut input = PolicyInput::new(
            self.core.level,
            self.core
                .config
                .memory_ceiling
                .map_or(u64::MAX, |c| c.saturating_sub(weights).max(1)),
            self.core.used_bytes(0).saturating_sub(weights),
        );
        input.budget_factor = self.core.factor;
        let epoch = self
            .core
            .sessions
            .values()
            .map(|s| s.last_used)
            .min()
            .unwrap_or(now);
        for s in self.core.sessions.values() {
            let active = s.busy.is_some();
            input.sessions.push(PolicySession {
                id: s.id.0,
                tokens: s.state_len(),
                bytes: s.resident_bytes(),
                token_budget: s.effective_budget(self.core.factor),
                pinned_prefix: s.pinned,
                idle: !active && now.duration_since(s.last_used) >= idle_after,
                active,
                last_used: s.last_used.duration_since(epoch).as_micros() as u64,
                hard_trimmed: s.hard_trimmed,
            });
        }
        input
    }

    /// Runs the policy and carries out its actions.
    pub(crate) fn run_ladder(&mut self) {
        let actions = self.core.config.policy.decide(&self.policy_input());
        for action in actions {
            tracing::info!(?action, "memory governor action");
            self.apply(action);
        }
        self.publish();
    }

    fn apply(&mut self, action: Action) {
        match action {
            Action::LowerBudgets { factor, .. } => self.core.factor = factor,
            Action::RestoreBudgets { .. } => self.core.factor = 1.0,
            Action::Spill { session, reason } => {
                self.core.spill(SessionId(session), reason);
            }
            Action::Trim {
                session,
                keep_prefix,
                keep_suffix,
                reason,
            } => {
                self.trim(SessionId(session), keep_prefix, keep_suffix, reason, false);
            }
            Action::TrimHard {
                session,
                keep_prefix,
                keep_suffix,
                reason,
            } => {
                self.trim(SessionId(session), keep_prefix, keep_suffix, reason, true);
            }
            Action::Evict { session, reason } => self.evict(SessionId(session), reason),
        }
    }

    /// Queues `ev` for the session's running stream, or for its next one.
    fn tell(&mut self, id: SessionId, ev: Event) {
        if let Some(i) = self.job_of(id) {
            self.jobs[i].emit(ev);
        } else if let Some(s) = self.core.sessions.get_mut(&id) {
            s.pending.push(ev);
        }
    }

    fn trim(
        &mut self,
        id: SessionId,
        keep_prefix: usize,
        keep_suffix: usize,
        reason: String,
        hard: bool,
    ) {
        let model = self.core.model.clone();
        let Some(s) = self.core.sessions.get_mut(&id) else {
            return;
        };
        let Some((dropped, kept, reprefill)) = s.trim(keep_prefix, keep_suffix) else {
            return;
        };
        if hard {
            s.hard_trimmed = true;
            if let Some(state) = s.state.take() {
                s.state = Some(compact(state, &model));
            }
        }
        self.core.counters.trims += 1;
        let method = if reprefill {
            TrimMethod::Reprefill
        } else {
            TrimMethod::Shift
        };
        self.tell(
            id,
            Event::ContextTrimmed {
                dropped,
                kept,
                reason,
                method,
            },
        );
    }

    fn evict(&mut self, id: SessionId, reason: String) {
        let model = self.core.model.clone();
        let opts = self.core.state_options();
        let Some(s) = self.core.sessions.get_mut(&id) else {
            return;
        };
        if let Err(e) = s.evict(&model, opts) {
            tracing::warn!(session = id.0, error = %e, "evicting a session failed");
            return;
        }
        self.core.counters.evictions += 1;
        self.tell(id, Event::CacheEvicted { reason });
        if let Some(i) = self.job_of(id) {
            self.finish_job(i, StopReason::Evicted);
        }
    }

    fn shared_pressure(&self) -> Option<PressureLevel> {
        self.shared().take_pressure()
    }
}

/// A copy of `state` whose buffers are sized for what it holds, so a trim actually returns
/// memory (the KV cache keeps its allocation otherwise). Falls back to `state` on failure.
fn compact(state: State, model: &Model) -> State {
    let mut buf = Vec::new();
    if state.save(&mut buf).is_err() {
        return state;
    }
    match State::load(&mut buf.as_slice(), model) {
        Ok(fresh) => fresh,
        Err(_) => state,
    }
}
