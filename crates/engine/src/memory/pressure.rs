//! Memory pressure: the engine's side of the governor. Levels come from the host
//! ([`crate::EngineHandle::memory_warning`], or a governor `Monitor` attached with
//! [`crate::EngineHandle::attach_monitor`]) and from the memory ceiling itself; the governor's
//! pure [`statelm_governor::Policy`] decides, and the engine carries the actions out and tells
//! each affected session's stream (or its next one) what was done.

use crate::actor::Actor;
use crate::error::EngineError;
use crate::events::{Event, SessionId, StopReason, TrimMethod};
use crate::job::Phase;
use crate::plan::Feed;
use statelm_governor::{Action, PolicyInput, PressureLevel, SessionInfo as PolicySession};
use statelm_model::{Model, State};
use std::time::{Duration, Instant};

impl Actor {
    /// Acts on a host warning just delivered, on a level an attached monitor reported, on a
    /// host level whose hold lapsed, or on the ceiling's own level when it changed.
    pub(crate) fn check_pressure(&mut self) {
        self.step_budgets();
        let now = Instant::now();
        let (event, os, held) = {
            let mut inbox = self.shared().pressure();
            (inbox.take_event(), inbox.take_os(), inbox.held(now))
        };
        if let Some(os) = os {
            self.core.os_level = os;
        }
        if let Some(level) = event {
            self.set_level(level.max(self.core.os_level));
            self.run_host_event(level);
            return;
        }
        let level = held.max(self.core.os_level);
        if level != self.core.level {
            self.set_level(level);
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

    /// Brings lowered budgets back a step at a time once the pressure is over: a quarter of
    /// the way at once, then a quarter each [`restore_step`], so that a conversation does not
    /// grow straight back to where the pressure began.
    pub(crate) fn step_budgets(&mut self) {
        let Some((since, from)) = self.core.restoring else {
            return;
        };
        if self.core.level != PressureLevel::Normal {
            self.core.restoring = None;
            return;
        }
        let step = restore_step(self.core.config.pressure_hold);
        let k = (1 + since.elapsed().as_nanos() / step.as_nanos().max(1)).min(RESTORE_STEPS);
        let factor = from + (1.0 - from) * k as f64 / RESTORE_STEPS as f64;
        if factor != self.core.factor {
            tracing::info!(factor, "memory pressure over: budgets restored a step");
            self.core.factor = factor;
            self.mark_dirty();
        }
        if k == RESTORE_STEPS {
            self.core.factor = 1.0;
            self.core.restoring = None;
        }
    }

    /// Makes `level` the one the ladder acts on (Normal forgets earlier hard trims). Under
    /// pressure the grammar engine's compiled grammars go first, and at Critical its idle
    /// vocabulary trie too.
    fn set_level(&mut self, level: PressureLevel) {
        self.core.level = level;
        if level >= PressureLevel::Warning {
            let freed = self.core.grammars.release(level >= PressureLevel::Critical);
            if freed > 0 {
                tracing::info!(%level, freed = %statelm_governor::format_bytes(freed), "memory pressure: the grammar engine's caches were freed");
            }
        }
        if level == PressureLevel::Normal {
            self.core
                .sessions
                .values_mut()
                .for_each(|s| s.hard_trimmed = false);
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
                resumable: (self.job_of(s.id)).is_some_and(|i| self.jobs[i].is_resumable()),
                last_used: s.last_used.duration_since(epoch).as_micros() as u64,
                hard_trimmed: s.hard_trimmed,
            });
        }
        input
    }

    /// Runs the policy and carries out its actions.
    pub(crate) fn run_ladder(&mut self) {
        let actions = self.core.config.policy.decide(&self.policy_input());
        self.apply_all(actions);
    }

    /// Carries out what a host warning of `level` demands of every session
    /// ([`statelm_governor::Policy::host_event`]).
    fn run_host_event(&mut self, level: PressureLevel) {
        tracing::info!(%level, "host memory warning");
        let actions = self
            .core
            .config
            .policy
            .host_event(level, &self.policy_input());
        self.apply_all(actions);
    }

    fn apply_all(&mut self, actions: Vec<Action>) {
        let freed = !actions.is_empty();
        for action in actions {
            tracing::info!(?action, "memory governor action");
            self.apply(action);
        }
        if freed {
            statelm_governor::release_free_memory();
        }
        self.publish();
    }

    fn apply(&mut self, action: Action) {
        match action {
            Action::LowerBudgets { factor, .. } => {
                self.core.factor = factor;
                self.core.restoring = None;
            }
            Action::RestoreBudgets { .. } => {
                if self.core.factor < 1.0 && self.core.restoring.is_none() {
                    self.core.restoring = Some((Instant::now(), self.core.factor));
                    self.step_budgets();
                }
            }
            Action::Spill { session, reason } => {
                if self.core.spill(SessionId(session), reason) {
                    self.snapshot_session(SessionId(session));
                }
            }
            Action::Trim {
                session,
                keep_prefix,
                keep_suffix,
                reason,
            } => {
                self.trim(SessionId(session), keep_prefix, keep_suffix, reason, false);
                self.snapshot_session(SessionId(session));
            }
            Action::TrimHard {
                session,
                keep_prefix,
                keep_suffix,
                reason,
            } => {
                self.trim(SessionId(session), keep_prefix, keep_suffix, reason, true);
                self.snapshot_session(SessionId(session));
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
        if let Some(i) = self.job_of(id).filter(|&i| self.jobs[i].is_resumable()) {
            return self.pause(i, id, reason);
        }
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

    /// Evicts the cache of session `id`, whose job `i` is under way, and pauses the job
    /// instead of ending it: it waits while the pressure is critical (at most
    /// [`crate::EngineConfig::pressure_hold`]), then recomputes what the cache held (prompt
    /// and answer so far; drafts in flight are dropped first) and goes on.
    fn pause(&mut self, i: usize, id: SessionId, reason: String) {
        let model = self.core.model.clone();
        let opts = self.core.state_options();
        let Some(s) = self.core.sessions.get_mut(&id) else {
            return;
        };
        let job = &mut self.jobs[i];
        if let Some(sp) = job.spec.as_mut() {
            // Unchecked drafts are not part of the text: they leave the cache first.
            sp.settle(s);
        }
        let freed = if matches!(job.phase, Phase::Start) {
            // Not started: it plans its prompt against the empty cache when it runs.
            s.evict(&model, opts)
        } else if let Some(state) = s.state.as_mut() {
            (model.new_state_with(opts).map_err(EngineError::from)).map(|fresh| {
                let old = std::mem::replace(state, fresh);
                job.prefilled_tokens += old.len();
                // The cache's tokens go back in front of the rest of the prompt's feed; a
                // computed prompt whose first token is not sampled yet is computed again.
                match &mut job.phase {
                    Phase::Prefill(feed) => feed.insert_refeed(old.tokens()),
                    _ => {
                        let mut feed = Feed::new(s.evaluated);
                        feed.insert_refeed(old.tokens());
                        job.phase = Phase::Prefill(feed);
                    }
                }
            })
        } else {
            // Spilled: it holds no memory to free.
            return;
        };
        if let Err(e) = freed {
            tracing::warn!(session = id.0, error = %e, "evicting a session failed");
            return;
        }
        self.core.counters.evictions += 1;
        job.paused_until = Some(Instant::now() + self.core.config.pressure_hold);
        job.emit(Event::CacheEvicted { reason });
    }
}

/// Steps in which lowered budgets come back.
const RESTORE_STEPS: u128 = 4;

/// The time between two steps of a budget restore: a quarter of the pressure hold, within
/// 50 ms and 10 s.
pub(crate) fn restore_step(hold: Duration) -> Duration {
    (hold / 4).clamp(Duration::from_millis(50), Duration::from_secs(10))
}

/// Pressure reported from outside the engine thread, waiting for the engine to act on it.
///
/// Host warnings (iOS `didReceiveMemoryWarning`, Android `onTrimMemory`,
/// `statelm_memory_warning`, SIGUSR1/2) are events: each is acted on once, holds its level for
/// `hold` and then lapses to Normal (iOS never says the pressure is over), and a second
/// Warning while one holds means Critical (a phone warns once before it kills). Levels from
/// an attached monitor are states: they stand until the monitor reports the next one.
#[derive(Debug)]
pub(crate) struct PressureInbox {
    hold: Duration,
    /// A host warning not acted on yet (already escalated).
    event: Option<PressureLevel>,
    /// The host level in force and when its hold lapses.
    held: Option<(PressureLevel, Instant)>,
    /// A monitor level not acted on yet.
    os: Option<PressureLevel>,
}

impl PressureInbox {
    /// An empty inbox whose host warnings hold for `hold`.
    pub fn new(hold: Duration) -> PressureInbox {
        PressureInbox {
            hold,
            event: None,
            held: None,
            os: None,
        }
    }

    /// How long a host warning holds.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// Records a host warning at `now` and returns the level it stands for: a Warning while a
    /// Warning or Critical still holds is Critical; Normal clears the hold at once.
    pub fn host(&mut self, level: PressureLevel, now: Instant) -> PressureLevel {
        let level = match (level, self.held(now)) {
            (PressureLevel::Warning, held) if held >= PressureLevel::Warning => {
                PressureLevel::Critical
            }
            (level, _) => level,
        };
        self.held = (level != PressureLevel::Normal).then(|| (level, now + self.hold));
        self.event = Some(level);
        level
    }

    /// Records a level an attached monitor reported.
    pub fn os(&mut self, level: PressureLevel) {
        self.os = Some(level);
    }

    /// The host level in force at `now`: the last warning's until its hold lapses, then Normal.
    pub fn held(&self, now: Instant) -> PressureLevel {
        match self.held {
            Some((level, until)) if now < until => level,
            _ => PressureLevel::Normal,
        }
    }

    /// The host warning not acted on yet, if any.
    pub fn take_event(&mut self) -> Option<PressureLevel> {
        self.event.take()
    }

    /// The monitor level not acted on yet, if any.
    pub fn take_os(&mut self) -> Option<PressureLevel> {
        self.os.take()
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

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_millis(30_000);

    #[test]
    fn host_levels_hold_then_lapse_and_normal_clears_at_once() {
        let t0 = Instant::now();
        let mut inbox = PressureInbox::new(HOLD);
        assert_eq!(
            inbox.host(PressureLevel::Warning, t0),
            PressureLevel::Warning
        );
        assert_eq!(inbox.take_event(), Some(PressureLevel::Warning));
        assert_eq!(inbox.take_event(), None);
        assert_eq!(inbox.held(t0 + HOLD / 2), PressureLevel::Warning);
        assert_eq!(inbox.held(t0 + HOLD), PressureLevel::Normal);
        inbox.host(PressureLevel::Critical, t0);
        assert_eq!(inbox.host(PressureLevel::Normal, t0), PressureLevel::Normal);
        assert_eq!(inbox.held(t0), PressureLevel::Normal);
    }

    #[test]
    fn a_second_warning_inside_the_hold_is_critical() {
        let t0 = Instant::now();
        let mut inbox = PressureInbox::new(HOLD);
        inbox.host(PressureLevel::Warning, t0);
        let second = inbox.host(PressureLevel::Warning, t0 + HOLD / 2);
        assert_eq!(second, PressureLevel::Critical);
        assert_eq!(inbox.take_event(), Some(PressureLevel::Critical));
        // The Critical holds a full hold from the second warning.
        assert_eq!(inbox.held(t0 + HOLD), PressureLevel::Critical);
        // After the hold lapsed, a Warning is a Warning again.
        let later = t0 + 3 * HOLD;
        assert_eq!(
            inbox.host(PressureLevel::Warning, later),
            PressureLevel::Warning
        );
    }

    #[test]
    fn monitor_levels_are_separate_from_host_warnings() {
        let mut inbox = PressureInbox::new(HOLD);
        inbox.os(PressureLevel::Critical);
        assert_eq!(inbox.take_event(), None);
        assert_eq!(inbox.take_os(), Some(PressureLevel::Critical));
        assert_eq!(inbox.held(Instant::now()), PressureLevel::Normal);
    }
}
