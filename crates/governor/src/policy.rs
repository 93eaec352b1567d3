//! The pure policy ladder: from a pressure level and the sessions' state to a
//! list of [`Action`]s, each with a human reason. Nothing is dropped without an
//! action that says so.
//!
//! The ladder (the effective level is the max of the OS level and the level of
//! the budget's own `used / ceiling`, which raises it to Warning at most):
//! - any level: a resident session over its token budget is trimmed to its
//!   pinned prefix plus the most recent half of the budget ([`Action::Trim`]);
//! - Warning: budgets lowered ([`Action::LowerBudgets`]) and idle sessions
//!   spilled to disk, oldest first ([`Action::Spill`]);
//! - Critical: budgets lowered further, idle sessions spilled, every other
//!   session hard-trimmed to its pinned prefix and a short suffix
//!   ([`Action::TrimHard`]); when nothing is left to spill or hard-trim and the
//!   pressure persists, one session is evicted ([`Action::Evict`]): one not
//!   generating, else one whose turn the engine can pause (recompute and go on) rather
//!   than end, else the least recently used;
//! - Normal again: lowered budgets are restored ([`Action::RestoreBudgets`]).

use crate::util::format_bytes;
use crate::{PressureLevel, Thresholds};

/// What the policy knows about one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionInfo {
    /// Session id.
    pub id: u64,
    /// Tokens in its KV cache.
    pub tokens: usize,
    /// Bytes its state holds in memory; 0 means not resident (spilled), and the
    /// policy leaves it alone.
    pub bytes: u64,
    /// Its token budget (already lowered, if budgets were lowered).
    pub token_budget: usize,
    /// Tokens at the start that must be kept (system prompt).
    pub pinned_prefix: usize,
    /// Not used recently: a candidate for spilling.
    pub idle: bool,
    /// Generating right now.
    pub active: bool,
    /// Generating, and evicting its cache pauses the turn, which recomputes what the cache
    /// held and goes on when the pressure eases, instead of ending it.
    pub resumable: bool,
    /// When it was last used, on any monotonic scale (smaller = older).
    pub last_used: u64,
    /// Already hard-trimmed during the current pressure episode.
    pub hard_trimmed: bool,
}

/// The input of [`Policy::decide`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PolicyInput {
    /// The combined OS pressure level.
    pub level: PressureLevel,
    /// All sessions.
    pub sessions: Vec<SessionInfo>,
    /// The memory budget's ceiling in bytes.
    pub ceiling: u64,
    /// Bytes the budget accounts as used.
    pub used: u64,
    /// The budget factor in force (1.0 = configured budgets; see [`Action::LowerBudgets`]).
    pub budget_factor: f64,
}

impl PolicyInput {
    /// An input without sessions and with budgets as configured.
    pub fn new(level: PressureLevel, ceiling: u64, used: u64) -> PolicyInput {
        PolicyInput {
            level,
            sessions: Vec::new(),
            ceiling,
            used,
            budget_factor: 1.0,
        }
    }
}

/// Something the engine must do, with the reason to tell the user.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Keep the first `keep_prefix` and the last `keep_suffix` tokens; drop the middle.
    Trim {
        /// Session id.
        session: u64,
        /// Tokens kept from the start (the pinned prefix).
        keep_prefix: usize,
        /// Most recent tokens kept.
        keep_suffix: usize,
        /// Why.
        reason: String,
    },
    /// Write the session's state to disk and free its memory (reloaded on next use).
    Spill {
        /// Session id.
        session: u64,
        /// Why.
        reason: String,
    },
    /// Set token budgets (and the memory ceiling) to `factor` × the configured ones.
    /// Absolute, not cumulative: repeating it changes nothing.
    LowerBudgets {
        /// Fraction of the configured budgets, in (0, 1).
        factor: f64,
        /// Why.
        reason: String,
    },
    /// Set budgets back to the configured ones (factor 1.0).
    RestoreBudgets {
        /// Why.
        reason: String,
    },
    /// Emergency trim: keep the pinned prefix and a short recent suffix.
    TrimHard {
        /// Session id.
        session: u64,
        /// Tokens kept from the start (the pinned prefix).
        keep_prefix: usize,
        /// Most recent tokens kept.
        keep_suffix: usize,
        /// Why.
        reason: String,
    },
    /// Drop the session's state from memory without saving it.
    Evict {
        /// Session id.
        session: u64,
        /// Why.
        reason: String,
    },
}

impl Action {
    /// The session this action is about (`None` for budget actions).
    pub fn session(&self) -> Option<u64> {
        match self {
            Action::Trim { session, .. }
            | Action::Spill { session, .. }
            | Action::TrimHard { session, .. }
            | Action::Evict { session, .. } => Some(*session),
            Action::LowerBudgets { .. } | Action::RestoreBudgets { .. } => None,
        }
    }

    /// The human reason.
    pub fn reason(&self) -> &str {
        match self {
            Action::Trim { reason, .. }
            | Action::Spill { reason, .. }
            | Action::LowerBudgets { reason, .. }
            | Action::RestoreBudgets { reason }
            | Action::TrimHard { reason, .. }
            | Action::Evict { reason, .. } => reason,
        }
    }
}

/// The knobs of the ladder.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Policy {
    /// Thresholds applied to the budget's `used / ceiling`.
    pub thresholds: Thresholds,
    /// Fraction of the token budget kept as recent suffix by [`Action::Trim`] (0.5).
    pub trim_keep_fraction: f64,
    /// Budget factor at Warning (0.75).
    pub warning_factor: f64,
    /// Budget factor at Critical (0.5).
    pub critical_factor: f64,
    /// Recent tokens kept by [`Action::TrimHard`] (128).
    pub hard_trim_suffix: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            thresholds: Thresholds::default(),
            trim_keep_fraction: 0.5,
            warning_factor: 0.75,
            critical_factor: 0.5,
            hard_trim_suffix: 128,
        }
    }
}

/// [`Policy::decide`] with the default policy.
pub fn decide(input: &PolicyInput) -> Vec<Action> {
    Policy::default().decide(input)
}

impl Policy {
    /// The effective level and a phrase saying where it comes from.
    fn effective_level(&self, input: &PolicyInput) -> (PressureLevel, String) {
        // The budget's own figures raise the level to Warning at most: admission control
        // already keeps every allocation under the ceiling, so hard trims and evictions are
        // kept for pressure the OS or the host reports.
        let own = self
            .thresholds
            .level(Some(input.used), Some(input.ceiling))
            .min(PressureLevel::Warning);
        if own > input.level {
            let pct = input.used as f64 * 100.0 / input.ceiling.max(1) as f64;
            let why = format!(
                "memory budget {pct:.0}% used ({} of {})",
                format_bytes(input.used),
                format_bytes(input.ceiling)
            );
            (own, why)
        } else {
            (
                input.level,
                format!("OS memory pressure is {}", input.level),
            )
        }
    }

    /// Decides the actions for `input`. Budget actions come first, then spills
    /// (oldest first), then trims, then at most one eviction. Each resident
    /// session gets at most one action.
    pub fn decide(&self, input: &PolicyInput) -> Vec<Action> {
        let (level, why) = self.effective_level(input);
        let mut actions = self.budget_action(level, input.budget_factor, &why);
        let mut resident: Vec<&SessionInfo> =
            input.sessions.iter().filter(|s| s.bytes > 0).collect();
        resident.sort_by_key(|s| (s.last_used, s.id));
        let mut trims = Vec::new();
        for s in &resident {
            let action = match level {
                PressureLevel::Normal => self.trim(s),
                PressureLevel::Warning | PressureLevel::Critical if s.idle => Some(spill(s, &why)),
                PressureLevel::Warning => self.trim(s),
                PressureLevel::Critical => self.trim_hard(s, &why).or_else(|| self.trim(s)),
            };
            match action {
                Some(a @ Action::Spill { .. }) => actions.push(a),
                Some(a) => trims.push(a),
                None => {}
            }
        }
        actions.append(&mut trims);
        let freeing = actions
            .iter()
            .any(|a| matches!(a, Action::Spill { .. } | Action::TrimHard { .. }));
        if level == PressureLevel::Critical && !freeing {
            let touched: Vec<u64> = actions.iter().filter_map(Action::session).collect();
            // Idle first, then a turn that can be paused without losing anything streamed.
            let victim = resident
                .iter()
                .filter(|s| !touched.contains(&s.id))
                .min_by_key(|s| (s.active, !s.resumable, s.last_used, s.id));
            if let Some(s) = victim {
                actions.push(Action::Evict {
                    session: s.id,
                    reason: format!(
                        "{why} and persists after hard trims with nothing left to spill: \
                         session {} evicted from memory ({} tokens, {}) without saving{}",
                        s.id,
                        s.tokens,
                        format_bytes(s.bytes),
                        paused_turn(s)
                    ),
                });
            }
        }
        actions
    }

    /// What a warning the host just delivered (iOS `didReceiveMemoryWarning`, Android
    /// `onTrimMemory`, `statelm_memory_warning`) demands: memory back *now*, from every session,
    /// the one in use first — a phone sends one warning before it kills the app.
    ///
    /// * Warning: budgets are lowered; idle sessions are spilled; every other session that
    ///   holds anything keeps its pinned prefix and the most recent tokens up to half of what it
    ///   holds (at least half of its cache is given back), generating or not.
    /// * Critical: budgets are lowered further and every resident session's cache is evicted
    ///   (its history is kept, so its next turn recomputes it within the budget; a turn under
    ///   way is paused and recomputed when the pressure eases).
    /// * Normal: the ordinary ladder ([`Policy::decide`]).
    pub fn host_event(&self, level: PressureLevel, input: &PolicyInput) -> Vec<Action> {
        if level == PressureLevel::Normal {
            return self.decide(input);
        }
        let why = format!("the host reported {level} memory pressure");
        let mut actions = self.budget_action(level, input.budget_factor, &why);
        let mut resident: Vec<&SessionInfo> =
            input.sessions.iter().filter(|s| s.bytes > 0).collect();
        // The one generating first: it is what the host is about to kill the app for.
        resident.sort_by_key(|s| (!s.active, s.last_used, s.id));
        for s in resident {
            let action = match level {
                PressureLevel::Critical => Some(Action::Evict {
                    session: s.id,
                    reason: format!(
                        "{why}: session {}'s cache ({} tokens, {}) freed; its history is kept \
                         and its next turn recomputes it within the budget{}",
                        s.id,
                        s.tokens,
                        format_bytes(s.bytes),
                        paused_turn(s)
                    ),
                }),
                _ if s.idle => Some(spill(s, &why)),
                _ => halve(s, &why),
            };
            actions.extend(action);
        }
        actions
    }

    fn budget_action(&self, level: PressureLevel, current: f64, why: &str) -> Vec<Action> {
        let target = match level {
            PressureLevel::Normal => 1.0,
            PressureLevel::Warning => self.warning_factor,
            PressureLevel::Critical => self.critical_factor,
        };
        if level == PressureLevel::Normal {
            if current < 1.0 {
                return vec![Action::RestoreBudgets {
                    reason: "memory pressure is over: token budgets restored".into(),
                }];
            }
            return Vec::new();
        }
        if current <= target {
            return Vec::new();
        }
        vec![Action::LowerBudgets {
            factor: target,
            reason: format!(
                "{why}: token budgets lowered to {:.0}% of the configured ones",
                target * 100.0
            ),
        }]
    }

    /// Trim to the pinned prefix + the most recent part of the budget, if over budget.
    fn trim(&self, s: &SessionInfo) -> Option<Action> {
        if s.tokens <= s.token_budget {
            return None;
        }
        let keep_prefix = s.pinned_prefix.min(s.token_budget);
        let half = (s.token_budget as f64 * self.trim_keep_fraction) as usize;
        let keep_suffix = half.min(s.token_budget - keep_prefix);
        let mut reason = format!(
            "session {} has {} tokens, over its budget of {}: kept the {} pinned and the {} \
             most recent tokens, dropped {} from the middle",
            s.id,
            s.tokens,
            s.token_budget,
            keep_prefix,
            keep_suffix,
            s.tokens - keep_prefix - keep_suffix
        );
        if keep_prefix < s.pinned_prefix {
            reason.push_str(&format!(
                " (the pinned prefix of {} tokens alone exceeds the budget and was cut)",
                s.pinned_prefix
            ));
        }
        Some(Action::Trim {
            session: s.id,
            keep_prefix,
            keep_suffix,
            reason,
        })
    }

    /// Hard trim for Critical, unless already done or nothing would be dropped.
    fn trim_hard(&self, s: &SessionInfo, why: &str) -> Option<Action> {
        let keep_prefix = s.pinned_prefix.min(s.tokens);
        let keep_suffix = self.hard_trim_suffix.min(s.tokens - keep_prefix);
        if s.hard_trimmed || keep_prefix + keep_suffix >= s.tokens {
            return None;
        }
        Some(Action::TrimHard {
            session: s.id,
            keep_prefix,
            keep_suffix,
            reason: format!(
                "{why}: session {} cut to its {} pinned and {} most recent tokens \
                 ({} tokens dropped) to avoid being killed",
                s.id,
                keep_prefix,
                keep_suffix,
                s.tokens - keep_prefix - keep_suffix
            ),
        })
    }
}

/// Keeps the pinned prefix and the most recent tokens up to half of what `s` holds (`None`
/// when that would drop nothing).
fn halve(s: &SessionInfo, why: &str) -> Option<Action> {
    let half = s.tokens / 2;
    let keep_prefix = s.pinned_prefix.min(half);
    let keep_suffix = half - keep_prefix;
    (half < s.tokens && s.tokens > 1).then(|| Action::Trim {
        session: s.id,
        keep_prefix,
        keep_suffix,
        reason: format!(
            "{why}: session {} gave back half of its context: kept the {} pinned and the {} \
             most recent of its {} tokens",
            s.id, keep_prefix, keep_suffix, s.tokens
        ),
    })
}

/// What an eviction does to a turn under way, for its reason text.
fn paused_turn(s: &SessionInfo) -> &'static str {
    match s.resumable {
        true => {
            "; its turn is paused and resumes (what the cache held recomputed) when the \
             pressure eases"
        }
        false => "",
    }
}

fn spill(s: &SessionInfo, why: &str) -> Action {
    Action::Spill {
        session: s.id,
        reason: format!(
            "{why}: idle session {} ({} tokens, {}) saved to disk and freed; \
             it is restored on next use",
            s.id,
            s.tokens,
            format_bytes(s.bytes)
        ),
    }
}
