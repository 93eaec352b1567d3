//! In-process fallback of the soak test (`scripts/soak`), for machines without a writable memory
//! cgroup: the same load loop (the driver's `examples/soak/load.rs`, included here as a module), on
//! Gemma, with a small memory ceiling and memory warnings injected between turns instead of the
//! kernel's pressure events. Checks that no turn fails or is cut short, that every session stays
//! within its token budget and the resident States within the ceiling, and that trims, spills
//! and restores happen.

mod common;

#[path = "../examples/soak/load.rs"]
#[allow(dead_code)]
mod soak;

use soak::{run_load, LoadConfig, LoadReport, TurnRecord};
use statelm_engine::{Engine, EngineConfig, PressureLevel};
use statelm_model::{KvType, Model};
use std::sync::Arc;
use std::time::Duration;

const BUDGET: usize = 128;

/// The load: 4 sessions (the odd ones resting for stretches), short turns.
fn load(sessions: usize, turns: usize) -> LoadConfig {
    LoadConfig {
        sessions,
        turns,
        words_per_turn: 40,
        max_tokens: 4,
        seed: 11,
        rest_rounds: 2,
        greedy: false,
        deadline: None,
    }
}

/// An engine configuration with small States, a private spill directory and `ceiling`.
fn config(spill: &std::path::Path, ceiling: Option<u64>) -> EngineConfig {
    EngineConfig {
        max_sessions: 4,
        session_capacity: 1024,
        token_budget: BUDGET,
        kv_type: KvType::F16,
        spill_dir: spill.to_path_buf(),
        memory_ceiling: ceiling,
        idle_after: Duration::ZERO,
        ..EngineConfig::default()
    }
}

/// Bytes one session's State reaches under the load, measured without a ceiling.
async fn footprint(model: &Arc<Model>, spill: &std::path::Path) -> u64 {
    let engine = Engine::start(model.clone(), config(spill, None));
    let report = run_load(&engine, model, &load(1, 3), None, |_, _| true).await;
    assert_eq!(report.turns_completed, 3, "probe: {:?}", report.turns);
    let peak = report.turns.iter().map(|t| t.state_bytes_total).max();
    peak.expect("the probe ran")
}

/// Memory warnings injected after some turns, as the host (or the kernel) would send them.
fn inject(engine: &statelm_engine::EngineHandle, rec: &TurnRecord) -> bool {
    match rec.turn {
        4 => engine.memory_warning(PressureLevel::Warning),
        8 => engine.memory_warning(PressureLevel::Critical),
        11 => engine.memory_warning(PressureLevel::Normal),
        _ => {}
    }
    true
}

/// Runs `load` under the ceiling `ceiling(weights, one State's footprint)`, with the policy's
/// own-level thresholds as shipped or relative to the State room (`room_thresholds`).
async fn soak_under_ceiling(
    load: LoadConfig,
    ceiling: impl FnOnce(u64, u64) -> u64,
    room_thresholds: bool,
) -> Option<(LoadReport, u64, u64)> {
    let model = common::gemma()?;
    let dir = tempfile::tempdir().unwrap();
    let state = footprint(&model, dir.path()).await;
    let weights = model.file_bytes();
    let ceiling = ceiling(weights, state);
    let mut cfg = config(dir.path(), Some(ceiling));
    if room_thresholds {
        cfg.policy.thresholds = soak::room_thresholds(cfg.policy.thresholds, weights, ceiling);
    }
    let engine = Engine::start(model.clone(), cfg);
    let report = run_load(&engine, &model, &load, None, inject).await;
    Some((report, weights, ceiling))
}

/// Every check of the soak except the kernel's.
fn check(report: &LoadReport, weights: u64, ceiling: u64, spills_expected: bool) {
    let s = &report.engine;
    eprintln!(
        "soak_inprocess: {}/{} turns, {} tokens generated, {} prefilled, {:?}; engine: trims {} \
         spills {} restores {} evictions {}; peak States {} of {} bytes of room",
        report.turns_completed,
        report.turns_planned,
        report.tokens_generated,
        report.tokens_prefilled,
        report.events,
        s.trims,
        s.spills,
        s.restores,
        s.evictions,
        report
            .turns
            .iter()
            .map(|t| t.state_bytes_total)
            .max()
            .unwrap_or(0),
        ceiling - weights
    );
    let cut: Vec<_> = (report.turns.iter().filter(|t| !t.completed()))
        .map(|t| {
            (
                t.turn,
                &t.stop_reason,
                t.generated_tokens,
                &t.error,
                &t.reasons,
            )
        })
        .collect();
    assert!(
        cut.is_empty(),
        "turns failed or cut short (turn, stop, generated, error, reasons): {cut:#?}"
    );
    assert_eq!(report.turns_completed, report.turns_planned);
    let planned = report.turns_planned as u64 * 4;
    assert_eq!(
        report.tokens_generated, planned,
        "every turn generated its tokens"
    );
    for t in &report.turns {
        assert!(
            t.state_tokens <= t.token_budget,
            "turn {}: {} tokens over the budget of {}",
            t.turn,
            t.state_tokens,
            t.token_budget
        );
        assert!(
            weights + t.state_bytes_total <= ceiling,
            "turn {}: {} bytes of States over the ceiling's room of {}",
            t.turn,
            t.state_bytes_total,
            ceiling - weights
        );
    }
    assert!(
        report
            .turns
            .iter()
            .any(|t| t.effective_budget < t.token_budget),
        "the injected warning lowered the budgets"
    );
    let e = &report.events;
    assert!(e.trimmed > 0 && s.trims > 0, "trims: {e:?} {s:?}");
    if spills_expected {
        assert!(e.spilled > 0 && s.spills > 0, "spills: {e:?} {s:?}");
        assert!(e.restored > 0 && s.restores > 0, "restores: {e:?} {s:?}");
    }
    // The injected host Critical evicts the resident caches by design (their histories are
    // kept, and every turn after it still completed in full, checked above); no generation
    // was cut by an eviction.
    assert_eq!(report.turns_evicted, 0, "no generation was evicted: {e:?}");
    assert_eq!(s.admission_refusals, 0, "{s:?}");
}

/// The soak under a ceiling with room for the weights and 2.5 States (admission control must
/// spill to run 4 sessions), warnings injected between turns, with the shipped policy.
#[tokio::test]
async fn soak_holds_budgets_and_ceiling_with_spills_and_restores() {
    let ceiling = |weights, state| weights + state * 5 / 2;
    let Some((report, weights, ceiling)) = soak_under_ceiling(load(4, 16), ceiling, false).await
    else {
        return;
    };
    check(&report, weights, ceiling, true);
}

/// Regression test for a bug this soak found: weights at 91 % of the ceiling (a model sized
/// to the device). When the engine measured its own pressure as `(weights + States) /
/// ceiling`, it rested at Warning, one prefill chunk took it to Critical, and with nothing to
/// spill the policy evicted every generation: no turn produced a token. The engine now
/// measures the States against the room the ceiling leaves beside the weights, and its own
/// accounting raises the level to Warning at most (admission control holds the ceiling).
#[tokio::test]
async fn soak_with_default_thresholds_under_a_tight_ceiling() {
    let ceiling = |weights, _| weights * 100 / 91;
    let Some((report, weights, ceiling)) = soak_under_ceiling(load(1, 6), ceiling, false).await
    else {
        return;
    };
    check(&report, weights, ceiling, false);
}
