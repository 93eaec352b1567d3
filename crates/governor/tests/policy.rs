//! The policy ladder: unit cases and properties.

use proptest::prelude::*;
use statelm_governor::{decide, Action, Policy, PolicyInput, PressureLevel, SessionInfo};

const GIB: u64 = 1 << 30;

fn session(id: u64, tokens: usize, budget: usize) -> SessionInfo {
    SessionInfo {
        id,
        tokens,
        bytes: tokens as u64 * 1000,
        token_budget: budget,
        pinned_prefix: 32,
        idle: false,
        active: false,
        resumable: false,
        last_used: id,
        hard_trimmed: false,
    }
}

fn input(level: PressureLevel, sessions: Vec<SessionInfo>) -> PolicyInput {
    PolicyInput {
        sessions,
        ..PolicyInput::new(level, 4 * GIB, GIB)
    }
}

#[test]
fn normal_and_within_budget_does_nothing() {
    let i = input(
        PressureLevel::Normal,
        vec![session(1, 100, 4096), session(2, 4096, 4096)],
    );
    assert_eq!(decide(&i), vec![]);
}

#[test]
fn over_budget_keeps_pinned_prefix_and_recent_half() {
    let i = input(PressureLevel::Normal, vec![session(1, 5000, 4096)]);
    let actions = decide(&i);
    assert_eq!(actions.len(), 1);
    let Action::Trim {
        session,
        keep_prefix,
        keep_suffix,
        reason,
    } = &actions[0]
    else {
        panic!("{actions:?}");
    };
    assert_eq!((*session, *keep_prefix, *keep_suffix), (1, 32, 2048));
    assert!(reason.contains("over its budget of 4096"), "{reason}");
    assert!(reason.contains("dropped 2920"), "{reason}");
}

#[test]
fn pinned_prefix_larger_than_budget_is_cut_and_said() {
    let mut s = session(1, 500, 100);
    s.pinned_prefix = 300;
    let actions = decide(&input(PressureLevel::Normal, vec![s]));
    let Action::Trim {
        keep_prefix,
        keep_suffix,
        reason,
        ..
    } = &actions[0]
    else {
        panic!("{actions:?}");
    };
    assert_eq!((*keep_prefix, *keep_suffix), (100, 0));
    assert!(
        reason.contains("pinned prefix of 300 tokens alone exceeds"),
        "{reason}"
    );
}

#[test]
fn warning_spills_idle_oldest_first_and_lowers_budgets() {
    let mut a = session(1, 100, 4096);
    a.idle = true;
    a.last_used = 50;
    let mut b = session(2, 100, 4096);
    b.idle = true;
    b.last_used = 10;
    let mut c = session(3, 5000, 4096);
    c.active = true;
    let actions = decide(&input(PressureLevel::Warning, vec![a, b, c]));
    assert!(matches!(actions[0], Action::LowerBudgets { factor, .. } if factor == 0.75));
    assert_eq!(actions[1].session(), Some(2), "oldest idle first");
    assert!(matches!(actions[1], Action::Spill { .. }));
    assert_eq!(actions[2].session(), Some(1));
    assert!(matches!(actions[3], Action::Trim { session: 3, .. }));
    assert_eq!(actions.len(), 4);
    assert!(
        actions[1].reason().contains("saved to disk"),
        "{}",
        actions[1].reason()
    );
}

#[test]
fn lowering_is_not_repeated_and_is_restored_at_normal() {
    let mut i = input(PressureLevel::Warning, vec![]);
    i.budget_factor = 0.75;
    assert_eq!(decide(&i), vec![]);
    i.level = PressureLevel::Critical;
    assert!(matches!(decide(&i)[..], [Action::LowerBudgets { factor, .. }] if factor == 0.5));
    i.level = PressureLevel::Normal;
    assert!(matches!(decide(&i)[..], [Action::RestoreBudgets { .. }]));
}

#[test]
fn own_accounting_raises_the_level_to_warning_at_most() {
    // Admission control holds the ceiling; the budget's own figures never hard-trim or evict.
    let mut i = input(PressureLevel::Normal, vec![]);
    i.used = i.ceiling / 100 * 95;
    let actions = decide(&i);
    assert!(matches!(actions[..], [Action::LowerBudgets { factor, .. }] if factor == 0.75));
    assert!(
        actions[0].reason().contains("memory budget 95% used"),
        "{}",
        actions[0].reason()
    );
}

#[test]
fn critical_hard_trims_then_evicts() {
    let mut active = session(1, 3000, 4096);
    active.active = true;
    active.pinned_prefix = 64;
    let mut idle = session(2, 100, 4096);
    idle.idle = true;
    let first = decide(&input(PressureLevel::Critical, vec![active.clone(), idle]));
    assert!(first
        .iter()
        .any(|a| matches!(a, Action::Spill { session: 2, .. })));
    assert!(first.iter().any(|a| matches!(
        a,
        Action::TrimHard {
            session: 1,
            keep_prefix: 64,
            keep_suffix: 128,
            ..
        }
    )));
    assert!(!first.iter().any(|a| matches!(a, Action::Evict { .. })));

    // Still critical after the spill and the hard trim: evict, non-active first.
    active.hard_trimmed = true;
    active.tokens = 192;
    let mut waiting = session(3, 150, 4096);
    waiting.hard_trimmed = true;
    waiting.last_used = 99;
    let second = decide(&input(
        PressureLevel::Critical,
        vec![active.clone(), waiting],
    ));
    let evictions: Vec<_> = second
        .iter()
        .filter(|a| matches!(a, Action::Evict { .. }))
        .collect();
    assert_eq!(evictions.len(), 1, "{second:?}");
    assert_eq!(evictions[0].session(), Some(3));
    assert!(evictions[0].reason().contains("without saving"));

    // Only the active one is left: it goes too.
    let third = decide(&input(PressureLevel::Critical, vec![active]));
    assert!(third
        .iter()
        .any(|a| matches!(a, Action::Evict { session: 1, .. })));
}

#[test]
fn among_generating_sessions_one_that_streamed_nothing_is_evicted_first() {
    // Six chats prefilling at once under a cgroup limit (scripts/serve-cgroup): everything is
    // hard-trimmed, nothing idle, still critical. The turn that streamed nothing is the one
    // evicted — the engine pauses it — even though another one is older.
    let generating = |id, last_used, resumable| SessionInfo {
        active: true,
        resumable,
        hard_trimmed: true,
        last_used,
        ..session(id, 192, 4096)
    };
    let actions = decide(&input(
        PressureLevel::Critical,
        vec![generating(1, 5, false), generating(2, 9, true)],
    ));
    let evicted: Vec<_> = (actions.iter())
        .filter(|a| matches!(a, Action::Evict { .. }))
        .collect();
    assert_eq!(evicted.len(), 1, "{actions:?}");
    assert_eq!(evicted[0].session(), Some(2));
    assert!(evicted[0].reason().contains("is paused"), "{actions:?}");
    // Not generating beats both.
    let mut done = generating(3, 20, false);
    done.active = false;
    let actions = decide(&input(
        PressureLevel::Critical,
        vec![generating(1, 5, false), generating(2, 9, true), done],
    ));
    let evicted: Vec<_> = (actions.iter())
        .filter_map(|a| match a {
            Action::Evict { session, reason } => Some((*session, reason.contains("paused"))),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, vec![(3, false)], "{actions:?}");
}

#[test]
fn non_resident_sessions_are_left_alone() {
    let mut s = session(1, 9000, 4096);
    s.bytes = 0;
    assert_eq!(
        decide(&input(PressureLevel::Critical, vec![s]))
            .iter()
            .filter(|a| a.session().is_some())
            .count(),
        0
    );
}

#[test]
fn actions_serialize_with_a_tag() {
    let actions = decide(&input(PressureLevel::Normal, vec![session(7, 5000, 4096)]));
    let json = serde_json::to_value(&actions).unwrap();
    assert_eq!(json[0]["action"], "trim");
    assert_eq!(json[0]["session"], 7);
}

fn arb_session() -> impl Strategy<Value = SessionInfo> {
    (
        0u64..6,
        0usize..10_000,
        0u64..(1 << 30),
        (0usize..8192, 0usize..600),
        (any::<bool>(), any::<bool>(), 0u64..100, any::<bool>()),
        any::<bool>(),
    )
        .prop_map(
            |(id, tokens, bytes, (budget, pinned), (idle, active, last_used, hard), fresh)| {
                SessionInfo {
                    id,
                    tokens,
                    bytes,
                    token_budget: budget,
                    pinned_prefix: pinned,
                    idle,
                    active: active && !idle,
                    resumable: active && !idle && fresh,
                    last_used,
                    hard_trimmed: hard,
                }
            },
        )
}

fn arb_input() -> impl Strategy<Value = PolicyInput> {
    let level = prop_oneof![
        Just(PressureLevel::Normal),
        Just(PressureLevel::Warning),
        Just(PressureLevel::Critical)
    ];
    (
        level,
        prop::collection::vec(arb_session(), 0..6),
        1u64..(8 << 30),
        0u64..(8 << 30),
        prop_oneof![Just(1.0), Just(0.75), Just(0.5)],
    )
        .prop_map(|(level, mut sessions, ceiling, used, factor)| {
            sessions.sort_by_key(|s| s.id);
            sessions.dedup_by_key(|s| s.id);
            PolicyInput {
                level,
                sessions,
                ceiling,
                used,
                budget_factor: factor,
            }
        })
}

fn effective_level(i: &PolicyInput) -> PressureLevel {
    Policy::default()
        .thresholds
        .level(Some(i.used), Some(i.ceiling))
        .max(i.level)
}

proptest! {
    #[test]
    fn ladder_invariants(i in arb_input()) {
        let actions = decide(&i);
        let level = effective_level(&i);
        let find = |id: u64| i.sessions.iter().find(|s| s.id == id);
        let mut seen = std::collections::HashSet::new();
        let mut evictions = 0;
        let frees = actions.iter().any(|a| matches!(a, Action::Spill { .. } | Action::TrimHard { .. }));
        for a in &actions {
            prop_assert!(!a.reason().is_empty());
            let Some(id) = a.session() else { continue };
            let s = find(id).expect("action on an unknown session");
            prop_assert!(s.bytes > 0, "non-resident session touched");
            prop_assert!(seen.insert(id), "two actions for session {}", id);
            match a {
                Action::Trim { keep_prefix, keep_suffix, .. } => {
                    prop_assert!(s.tokens > s.token_budget);
                    prop_assert!(keep_prefix + keep_suffix <= s.token_budget);
                    prop_assert_eq!(*keep_prefix, s.pinned_prefix.min(s.token_budget));
                }
                Action::Spill { .. } => {
                    prop_assert!(s.idle && level >= PressureLevel::Warning);
                }
                Action::TrimHard { keep_prefix, keep_suffix, .. } => {
                    prop_assert_eq!(level, PressureLevel::Critical);
                    prop_assert!(!s.idle && !s.hard_trimmed);
                    prop_assert!(*keep_suffix <= 128);
                    prop_assert!(keep_prefix + keep_suffix < s.tokens);
                    prop_assert_eq!(*keep_prefix, s.pinned_prefix.min(s.tokens));
                }
                Action::Evict { .. } => {
                    evictions += 1;
                    prop_assert_eq!(level, PressureLevel::Critical);
                    prop_assert!(!frees, "evicted while spills or hard trims were possible");
                    prop_assert!(!s.idle);
                    // A turn that streamed something ends only when no other choice is left.
                    let rank = |x: &SessionInfo| (x.active, !x.resumable);
                    let touched = |x: &SessionInfo| actions.iter().any(|b| b.session() == Some(x.id));
                    let better = i.sessions.iter().any(|x| {
                        x.bytes > 0 && x.id != s.id && !touched(x) && rank(x) < rank(s)
                    });
                    prop_assert!(!better, "a better victim than {} was left", s.id);
                }
                _ => {}
            }
        }
        prop_assert!(evictions <= 1);
        // Nothing over budget is left without an action.
        for s in i.sessions.iter().filter(|s| s.bytes > 0) {
            if s.tokens > s.token_budget {
                prop_assert!(seen.contains(&s.id), "over-budget session {} untouched", s.id);
            }
            if s.idle && level >= PressureLevel::Warning {
                let spilled = actions
                    .iter()
                    .any(|a| matches!(a, Action::Spill { session, .. } if *session == s.id));
                prop_assert!(spilled, "idle session {} not spilled", s.id);
            }
        }
        // Quiet when there is nothing to do.
        if level == PressureLevel::Normal && i.budget_factor == 1.0 {
            let only_trims = actions.iter().all(|a| matches!(a, Action::Trim { .. }));
            prop_assert!(only_trims, "unexpected actions at Normal: {:?}", actions);
        }
    }

    #[test]
    fn pressure_only_adds_work(i in arb_input()) {
        // Sessions touched at Warning are also touched at Critical.
        let at = |level| {
            let mut j = i.clone();
            j.level = level;
            decide(&j).iter().filter_map(Action::session).collect::<std::collections::HashSet<_>>()
        };
        let warning = at(PressureLevel::Warning);
        let critical = at(PressureLevel::Critical);
        prop_assert!(warning.is_subset(&critical), "{:?} vs {:?}", warning, critical);
    }
}

#[test]
fn host_warning_halves_every_session_the_active_one_first_and_spills_idle_ones() {
    let mut active = session(3, 450, 4096);
    active.active = true;
    let mut idle = session(2, 300, 4096);
    idle.idle = true;
    let quiet = session(1, 100, 4096);
    let i = input(PressureLevel::Warning, vec![quiet, idle, active]);
    let actions = Policy::default().host_event(PressureLevel::Warning, &i);
    assert!(
        matches!(actions[0], Action::LowerBudgets { .. }),
        "{actions:?}"
    );
    let Action::Trim {
        session,
        keep_prefix,
        keep_suffix,
        reason,
    } = &actions[1]
    else {
        panic!("{actions:?}");
    };
    // The generating session comes first and keeps at most half of what it holds.
    assert_eq!((*session, *keep_prefix, *keep_suffix), (3, 32, 193));
    assert!(reason.contains("gave back half"), "{reason}");
    // Then the others, least recently used first: each halved, or spilled when idle.
    assert!(
        matches!(
            actions[2],
            Action::Trim {
                session: 1,
                keep_prefix: 32,
                keep_suffix: 18,
                ..
            }
        ),
        "{actions:?}"
    );
    assert!(
        matches!(actions[3], Action::Spill { session: 2, .. }),
        "{actions:?}"
    );
    assert_eq!(actions.len(), 4);
}

#[test]
fn host_critical_evicts_every_resident_session_and_keeps_their_history() {
    let mut active = session(2, 450, 4096);
    active.active = true;
    let mut spilled = session(3, 300, 4096);
    spilled.bytes = 0;
    let i = input(
        PressureLevel::Critical,
        vec![session(1, 100, 4096), active, spilled],
    );
    let actions = Policy::default().host_event(PressureLevel::Critical, &i);
    let evicted: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Evict { session, reason } => {
                assert!(reason.contains("history is kept"), "{reason}");
                Some(*session)
            }
            _ => None,
        })
        .collect();
    assert_eq!(evicted, vec![2, 1], "{actions:?}");
}

proptest! {
    #[test]
    fn host_warning_frees_at_least_half_of_every_non_idle_session(
        tokens in 0usize..5000, pinned in 0usize..600, active in any::<bool>()
    ) {
        let mut s = session(1, tokens, 4096);
        s.pinned_prefix = pinned;
        s.active = active;
        let actions = Policy::default().host_event(PressureLevel::Warning, &input(PressureLevel::Warning, vec![s]));
        let kept = actions.iter().find_map(|a| match a {
            Action::Trim { keep_prefix, keep_suffix, .. } => Some(keep_prefix + keep_suffix),
            _ => None,
        });
        match kept {
            Some(k) => prop_assert!(k <= tokens / 2, "kept {} of {}", k, tokens),
            None => prop_assert!(tokens <= 1, "no trim of {} tokens", tokens),
        }
    }
}
