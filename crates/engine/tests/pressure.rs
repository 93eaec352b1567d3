//! Memory pressure on the real Gemma model: spills and restores, hard trims and evictions,
//! admission control under a memory ceiling, and a governor monitor feeding levels in.

mod common;

use common::*;
use futures::StreamExt;
use statelm_engine::{EngineConfig, EngineError, Event, Input, PressureLevel, StopReason};
use std::time::Duration;

const PROMPT: &str = "The capital of France is";

/// A 342-token prompt: computed in chunks of 4, it is under way for many steps.
fn long_prompt() -> String {
    "Count the words in this sentence, then in the next one, and so on. ".repeat(20)
}

/// A monitor that notices a raised level within a few tens of milliseconds.
fn quick_monitor() -> statelm_governor::MonitorConfig {
    statelm_governor::MonitorConfig {
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(20),
        ..statelm_governor::MonitorConfig::default()
    }
}

#[tokio::test]
async fn warning_spills_idle_sessions_and_restores_them_on_use() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        idle_after: Duration::ZERO,
        // Budgets come back in four steps a quarter of the hold apart.
        pressure_hold: Duration::from_millis(400),
        ..config(dir.path())
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    // The reference: the same two turns without pressure.
    let reference = session(&engine).await.unwrap();
    run(&engine, greedy(reference, Input::Text(PROMPT.into()), 4)).await;
    let expected = run(&engine, greedy(reference, Input::Append(" Its".into()), 4)).await;
    engine.close_session(reference).await.unwrap();

    let s = session(&engine).await.unwrap();
    run(&engine, greedy(s, Input::Text(PROMPT.into()), 4)).await;
    let before = engine.session_info(s).await.unwrap();
    engine.memory_warning(PressureLevel::Warning);
    eventually("the spill", || async {
        engine.session_info(s).await.unwrap().spilled
    })
    .await;
    let info = engine.session_info(s).await.unwrap();
    assert_eq!(
        (info.state_bytes, info.history_tokens),
        (0, before.history_tokens)
    );
    assert_eq!(info.state_tokens, before.state_tokens);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "one spill file"
    );
    // A spilled session can be saved (from its spill file) without being restored.
    let saved = tempfile::tempdir().unwrap();
    let path = saved.path().join("spilled.session");
    engine.save_session(s, &path).await.unwrap();
    assert!(engine.session_info(s).await.unwrap().spilled);
    let copy = engine.load_session(&path).await.unwrap();
    let copy_info = engine.session_info(copy).await.unwrap();
    assert_eq!(copy_info.history_tokens, before.history_tokens);
    engine.close_session(copy).await.unwrap();

    let r = run(&engine, greedy(s, Input::Append(" Its".into()), 4)).await;
    assert!(
        matches!(r.events[0], Event::Spilled { .. }),
        "{:?}",
        r.events
    );
    assert!(matches!(r.events[1], Event::Restored), "{:?}", r.events);
    assert_eq!(r.tokens, expected.tokens);
    assert_eq!(r.done().cached_tokens, before.state_tokens);
    let stats = engine.stats().await;
    assert_eq!((stats.spills, stats.restores), (1, 1));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "spill file removed"
    );
    engine.memory_warning(PressureLevel::Normal);
    eventually("budgets restored", || async {
        engine.stats().await.budget_factor == 1.0
    })
    .await;
}

/// Spill files live in a directory only this user can enter and are authenticated: another
/// (valid, same-model) snapshot planted in a session's place is refused — the conversation is
/// recomputed from its own history and says so — instead of being read as its cache.
#[tokio::test]
async fn a_planted_spill_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("spill");
    let cfg = EngineConfig {
        idle_after: Duration::ZERO,
        ..config(&spill)
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    let reference = session(&engine).await.unwrap();
    run(&engine, greedy(reference, Input::Text(PROMPT.into()), 4)).await;
    let expected = run(&engine, greedy(reference, Input::Append(" Its".into()), 4)).await;
    engine.close_session(reference).await.unwrap();
    let a = session(&engine).await.unwrap();
    run(&engine, greedy(a, Input::Text(PROMPT.into()), 4)).await;
    let b = session(&engine).await.unwrap();
    let other = "My favourite colour is green, because";
    run(&engine, greedy(b, Input::Text(other.into()), 4)).await;
    engine.memory_warning(PressureLevel::Warning);
    eventually("both spills", || async {
        engine.session_info(a).await.unwrap().spilled
            && engine.session_info(b).await.unwrap().spilled
    })
    .await;
    engine.memory_warning(PressureLevel::Normal);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&spill), 0o700, "the spill directory is private");
        for f in std::fs::read_dir(&spill).unwrap() {
            assert_eq!(mode(&f.unwrap().path()), 0o600, "spill files are private");
        }
    }
    // Put B's spill file in A's place (what a local attacker with access could do).
    let mut files: Vec<_> = (std::fs::read_dir(&spill).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    files.sort_by_key(|p| p.to_string_lossy().ends_with(&format!("-{}.stlmsnap", b.0)));
    assert_eq!(files.len(), 2);
    std::fs::copy(&files[1], &files[0]).unwrap();
    let r = run(&engine, greedy(a, Input::Append(" Its".into()), 4)).await;
    let refused = r.events.iter().any(|e| {
        matches!(e, Event::CacheEvicted { reason } if reason.contains("not the one this process wrote"))
    });
    assert!(refused, "{:?}", r.events);
    assert_eq!(
        r.tokens, expected.tokens,
        "A's own conversation, recomputed"
    );
}

#[tokio::test]
async fn an_eviction_pauses_every_turn_and_each_finishes_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        prefill_chunk: 4,
        pressure_hold: Duration::from_millis(300),
        ..config(dir.path())
    };
    // Exact numerics: the recomputed cache equals the one token-by-token decoding built.
    let Some(model) = gemma_exact() else {
        return;
    };
    let engine = statelm_engine::Engine::start(model.clone(), cfg);
    let long = long_prompt();
    let reference = session(&engine).await.unwrap();
    let expected = run(&engine, greedy(reference, Input::Text(long.clone()), 8)).await;
    engine.close_session(reference).await.unwrap();
    let reference = session(&engine).await.unwrap();
    let mut req = greedy(reference, Input::Text(PROMPT.into()), 200);
    req.sampling = no_eog(&model);
    let expected_a = run(&engine, req).await;
    engine.close_session(reference).await.unwrap();

    // A streams its answer; B has just started computing its long prompt (in chunks of 4)
    // when the host reports critical pressure: every cache goes.
    let (a, b) = (
        session(&engine).await.unwrap(),
        session(&engine).await.unwrap(),
    );
    let mut req = greedy(a, Input::Text(PROMPT.into()), 200);
    req.sampling = no_eog(&model);
    let mut stream_a = engine.generate(req).await.unwrap();
    let mut run_a = Run::default();
    let mut stream_b = None;
    while let Some(ev) = stream_a.next().await {
        let ev = ev.unwrap();
        if stream_b.is_none() && matches!(ev, Event::Token { .. }) {
            let req = greedy(b, Input::Text(long.clone()), 8);
            stream_b = Some(engine.generate(req).await.unwrap());
            eventually("B's first chunk", || async {
                engine.session_info(b).await.unwrap().state_tokens > 0
            })
            .await;
            engine.memory_warning(PressureLevel::Critical);
        }
        record(&mut run_a, ev);
    }
    let run_b = collect(stream_b.unwrap()).await;
    // A had streamed tokens: paused, its prompt and answer so far recomputed, the rest of the
    // answer as without pressure, after one eviction notice.
    let notices = (run_a.events.iter()).filter(|e| matches!(e, Event::CacheEvicted { .. }));
    assert_eq!(notices.count(), 1, "{:?}", run_a.events);
    assert_eq!(run_a.done().stop_reason, StopReason::MaxTokens);
    assert_eq!(
        run_a.tokens, expected_a.tokens,
        "A's answer, as without pressure"
    );
    assert!(run_a.done().prefilled_tokens > run_a.done().prompt_tokens);
    // B had streamed nothing: paused, recomputed once the pressure lapsed, answered in full.
    let evicted = (run_b.events.iter()).find_map(|e| match e {
        Event::CacheEvicted { reason } => Some(reason.as_str()),
        _ => None,
    });
    assert!(
        evicted.is_some_and(|r| r.contains("paused")),
        "{:?}",
        run_b.events
    );
    assert_eq!(run_b.done().stop_reason, expected.done().stop_reason);
    assert_eq!(
        run_b.tokens, expected.tokens,
        "the same answer as without pressure"
    );
    let (prompt, prefilled) = (run_b.done().prompt_tokens, run_b.done().prefilled_tokens);
    assert!(
        prefilled >= prompt,
        "recomputed tokens are counted: {prefilled} of {prompt}"
    );
}

#[tokio::test]
async fn concurrent_prompts_under_critical_pressure_are_all_answered() {
    // CI's scripts/serve-cgroup in miniature: several conversations compute their prompts at
    // once when the OS (here a monitor) reports critical pressure. Nothing is idle, so the
    // ladder's last resort evicts a generating session: it must pause that turn, not end it.
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        prefill_chunk: 4,
        ..config(dir.path())
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    let long = long_prompt();
    let mut ids = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let s = session(&engine).await.unwrap();
        let req = greedy(s, Input::Text(long.clone()), 4);
        streams.push(tokio::spawn(collect(engine.generate(req).await.unwrap())));
        ids.push(s);
    }
    for &s in &ids {
        eventually("every prompt under way", || async {
            engine.session_info(s).await.unwrap().state_tokens > 0
        })
        .await;
    }
    let signal = statelm_governor::HostSignal::new();
    let monitor_cfg = quick_monitor();
    let source = signal.source().with_hold(Duration::from_secs(2));
    let _monitor = (engine.attach_monitor(vec![Box::new(source)], monitor_cfg)).unwrap();
    signal.raise(PressureLevel::Critical);
    let mut evicted = 0;
    for stream in streams {
        let run = stream.await.unwrap();
        assert_eq!(
            run.done().stop_reason,
            StopReason::MaxTokens,
            "{:?}",
            run.events
        );
        assert_eq!(run.done().generated_tokens, 4, "{:?}", run.events);
        evicted += (run.events.iter())
            .filter(|e| matches!(e, Event::CacheEvicted { .. }))
            .count();
    }
    assert!(evicted >= 1, "the ladder's last resort was not reached");
    assert!(engine.stats().await.evictions >= 1);
}

#[tokio::test]
async fn host_warnings_free_the_active_generation_and_a_second_one_evicts_and_pauses_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some((model, engine)) = engine(config(dir.path())) else {
        return;
    };
    let s = session(&engine).await.unwrap();
    let prompt = "One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve,";
    let mut req = greedy(s, Input::Text(prompt.into()), 200);
    req.sampling = no_eog(&model);
    let mut stream = engine.generate(req).await.unwrap();
    let mut run = Run::default();
    let (mut warned, mut held) = (0, 0);
    while let Some(ev) = stream.next().await {
        let ev = ev.unwrap();
        match (&ev, warned) {
            (Event::Token { .. }, 0) => {
                held = engine.session_info(s).await.unwrap().state_tokens;
                // A phone's first warning: the generating session gives back half, now.
                engine.memory_warning(PressureLevel::Warning);
                warned = 1;
            }
            (Event::ContextTrimmed { kept, dropped, .. }, 1) => {
                assert!(*kept <= (kept + dropped) / 2, "at most half kept: {ev:?}");
                assert!(
                    kept + dropped >= held,
                    "the whole cache counted: {ev:?} of {held}"
                );
                // The second warning inside the hold means Critical: the cache goes.
                engine.memory_warning(PressureLevel::Warning);
                warned = 2;
            }
            _ => {}
        }
        record(&mut run, ev);
    }
    assert_eq!(warned, 2, "{:?}", run.events);
    assert!(
        run.events
            .iter()
            .any(|e| matches!(e, Event::CacheEvicted { .. })),
        "{:?}",
        run.events
    );
    // Alone, the paused generation goes on at once: what its cache held is recomputed and it
    // answers in full.
    assert_eq!(run.done().stop_reason, StopReason::MaxTokens);
    assert_eq!(run.done().generated_tokens, 200);
    let info = engine.session_info(s).await.unwrap();
    assert!(info.state_tokens > 0, "{info:?}");
    let stats = engine.stats().await;
    assert!(stats.trims >= 1 && stats.evictions == 1, "{stats:?}");
    let next = common::run(&engine, greedy(s, Input::Append(" thirteen".into()), 2)).await;
    assert!(next.done().cached_tokens > 0, "{:?}", next.done());
}

#[tokio::test]
async fn host_warnings_lapse_after_the_hold_and_budgets_recover() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        pressure_hold: Duration::from_millis(300),
        ..config(dir.path())
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    engine.memory_warning(PressureLevel::Warning);
    eventually("budgets lowered", || async {
        engine.stats().await.budget_factor < 1.0
    })
    .await;
    let lowered = engine.stats().await.budget_factor;
    // No Normal is ever sent (iOS sends none): the hold lapses by itself, and the budgets come
    // back in steps (a quarter of the hold apart), not all at once.
    let mut seen = Vec::new();
    for _ in 0..500 {
        let f = engine.stats().await.budget_factor;
        if seen.last() != Some(&f) {
            seen.push(f);
        }
        if f == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen.last(), Some(&1.0), "restored: {seen:?}");
    let steps = seen.iter().filter(|&&f| f > lowered && f < 1.0).count();
    assert!(
        steps >= 2,
        "budgets came back in steps from {lowered}: {seen:?}"
    );
    assert_eq!(engine.stats().await.pressure.to_string(), "normal");
}

#[tokio::test]
async fn memory_ceiling_spills_idle_sessions_before_refusing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = gemma() else { return };
    // Measure one session's footprint without a ceiling.
    let (_, probe) = engine(config(dir.path())).unwrap();
    let a = session(&probe).await.unwrap();
    run(&probe, greedy(a, Input::Text(PROMPT.into()), 2)).await;
    let footprint = probe.session_info(a).await.unwrap().state_bytes as u64;
    // The engine's one scratch, counted once whatever the number of sessions.
    let scratch = probe.stats().await.scratch_bytes;
    assert!(scratch > 0);
    drop(probe);

    // Room for the weights, the scratch, one such session and a little: a second session must
    // spill the first.
    let cfg = EngineConfig {
        memory_ceiling: Some(model.file_bytes() + scratch + footprint + footprint / 4),
        ..config(dir.path())
    };
    let (_, limited) = engine(cfg).unwrap();
    let a = session(&limited).await.unwrap();
    run(&limited, greedy(a, Input::Text(PROMPT.into()), 2)).await;
    let b = session(&limited).await.unwrap();
    let rb = run(&limited, greedy(b, Input::Text(PROMPT.into()), 2)).await;
    assert!(rb.done.is_some(), "{rb:?}");
    assert!(limited.session_info(a).await.unwrap().spilled);
    let ra = run(&limited, greedy(a, Input::Append(" and".into()), 1)).await;
    assert!(
        matches!(ra.events[0], Event::Spilled { .. }),
        "{:?}",
        ra.events
    );
    assert!(ra.events.iter().any(|e| matches!(e, Event::Restored)));

    // A ceiling below the weights admits nothing.
    let cfg = EngineConfig {
        memory_ceiling: Some(model.file_bytes() / 2),
        ..config(dir.path())
    };
    let (_, tight) = engine(cfg).unwrap();
    match session(&tight).await {
        Err(EngineError::OverMemory { used, ceiling, .. }) => {
            assert!(used > ceiling);
        }
        other => panic!("expected OverMemory, got {other:?}"),
    }
    assert_eq!(tight.stats().await.admission_refusals, 1);
}

#[tokio::test]
async fn attached_monitor_feeds_host_levels_in() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        idle_after: Duration::ZERO,
        ..config(dir.path())
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    let s = session(&engine).await.unwrap();
    run(&engine, greedy(s, Input::Text(PROMPT.into()), 2)).await;
    let signal = statelm_governor::HostSignal::new();
    let monitor_cfg = quick_monitor();
    let _monitor = engine
        .attach_monitor(vec![Box::new(signal.source())], monitor_cfg)
        .unwrap();
    signal.raise(PressureLevel::Warning);
    eventually("the monitor's spill", || async {
        engine.session_info(s).await.unwrap().spilled
    })
    .await;
    assert_eq!(engine.stats().await.pressure, PressureLevel::Warning);
    // One name for a level everywhere: the stats JSON (HTTP /health, the C ABI) says it so.
    let json = serde_json::to_value(engine.stats().await).unwrap();
    assert_eq!(json["pressure"], "warning");
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_engine_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        idle_after: Duration::ZERO,
        ..config(dir.path())
    };
    let Some((_, engine)) = engine(cfg) else {
        return;
    };
    spilled_session(&engine).await;
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let weak = engine.downgrade();
    let clone = engine.clone();
    drop(engine);
    assert!(weak.upgrade().is_some(), "a clone keeps it running");
    drop(clone); // joins the engine thread
    assert!(weak.upgrade().is_none());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "spill files deleted"
    );
}

#[tokio::test]
async fn mixed_load_keeps_every_session_consistent() {
    // Three sessions, small budgets, cancellations and pressure changes interleaved: every
    // stream must end with Done or an error, and every session must stay usable.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = EngineConfig {
        token_budget: 48,
        idle_after: Duration::ZERO,
        ..config(dir.path())
    };
    cfg.policy.hard_trim_suffix = 12;
    let Some((model, engine)) = engine(cfg) else {
        return;
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(session(&engine).await.unwrap());
    }
    let levels = [
        PressureLevel::Warning,
        PressureLevel::Critical,
        PressureLevel::Critical,
        PressureLevel::Critical, // all hard-trimmed by now: one session is evicted
        PressureLevel::Normal,
    ];
    for (round, &level) in levels.iter().enumerate() {
        let mut streams = Vec::new();
        for (i, &s) in ids.iter().enumerate() {
            let input = if round == 0 {
                Input::Text(format!("Story {i}: once upon a time"))
            } else {
                Input::Append(" Then".into())
            };
            let mut req = greedy(s, input, 6 + i);
            req.sampling = no_eog(&model);
            streams.push(engine.generate(req).await.unwrap());
        }
        let mut handles = Vec::new();
        for (i, mut stream) in streams.into_iter().enumerate() {
            let cut = (round + i) % 3 == 0; // drop this one after two tokens
            handles.push(tokio::spawn(async move {
                let mut run = Run::default();
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(ev) => record(&mut run, ev),
                        Err(e) => run.error = Some(e.to_string()),
                    }
                    if cut && run.tokens.len() == 2 {
                        return (true, run);
                    }
                }
                (false, run)
            }));
        }
        engine.memory_warning(level);
        for h in handles {
            let (cut, run) = h.await.unwrap();
            assert!(
                cut || run.done.is_some() || run.error.is_some(),
                "stream ended without Done: {run:?}"
            );
        }
        for &s in &ids {
            eventually("the session to be free", || async {
                !engine.session_info(s).await.unwrap().busy
            })
            .await;
            let info = engine.session_info(s).await.unwrap();
            assert!(info.state_tokens <= 48, "{info:?}");
            if !info.trimmed && !info.spilled {
                assert!(info.history_tokens - info.state_tokens <= 1, "{info:?}");
            }
        }
    }
    let stats = engine.stats().await;
    assert!(stats.trims > 0 && stats.evictions > 0, "{stats:?}");
    // Every session still answers.
    for &s in &ids {
        let r = run(&engine, greedy(s, Input::Append(" End".into()), 2)).await;
        assert_eq!(r.done().generated_tokens, 2, "{r:?}");
    }
}

/// A memory source that always fails.
struct Broken;

impl statelm_governor::MemorySource for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn read(&mut self) -> Result<statelm_governor::MemoryReading, statelm_governor::GovernorError> {
        Err(statelm_governor::GovernorError::Unsupported(
            "the file vanished".into(),
        ))
    }
}

/// A watched memory source that starts failing is not silent: the engine logs it and its
/// figures (behind `/health` and `/metrics`) count it and name the last error.
#[tokio::test]
async fn failing_memory_sources_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, engine)) = engine(config(dir.path())) else {
        return;
    };
    let cfg = statelm_governor::MonitorConfig {
        interval: Duration::from_millis(20),
        ..Default::default()
    };
    let _monitor = engine.attach_monitor(vec![Box::new(Broken)], cfg).unwrap();
    eventually("the error", || async {
        engine.stats().await.memory_source_errors > 0
    })
    .await;
    let last = engine.stats().await.memory_source_error.unwrap_or_default();
    assert!(
        last.contains("broken") && last.contains("vanished"),
        "{last}"
    );
}

/// A 684-token prompt (two of [`long_prompt`]).
fn longer_prompt() -> String {
    long_prompt().repeat(2)
}

/// What the weights, the scratch and a session holding `prompt` count under a ceiling,
/// measured on a probe engine without one: `(weights + scratch, the session's state bytes)`.
async fn measured(dir: &std::path::Path, prompt: &str) -> (u64, u64) {
    let (model, probe) = engine(config(dir)).unwrap();
    let a = session(&probe).await.unwrap();
    run(&probe, greedy(a, Input::Text(prompt.into()), 2)).await;
    let state = probe.session_info(a).await.unwrap().state_bytes as u64;
    (
        model.file_bytes() + probe.stats().await.scratch_bytes,
        state,
    )
}

/// The `ContextTrimmed` events of a run that say the conversation was held to what fits.
fn memory_trims(r: &Run) -> Vec<(usize, usize)> {
    r.events
        .iter()
        .filter_map(|e| match e {
            Event::ContextTrimmed {
                dropped,
                kept,
                reason,
                ..
            } if reason.contains("fit in memory") => {
                eprintln!("trimmed to fit: {reason}");
                Some((*dropped, *kept))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_new_conversation_too_long_for_memory_is_trimmed_to_fit_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    if gemma().is_none() {
        return;
    }
    let (base, one) = measured(dir.path(), &long_prompt()).await;
    // Room for a 342-token conversation and a quarter more, not for 684 tokens.
    let ceiling = base + one + one / 4;
    let cfg = EngineConfig {
        memory_ceiling: Some(ceiling),
        ..config(dir.path())
    };
    let (_, limited) = engine(cfg).unwrap();
    // A first conversation grows the scratch to its full size (and is spilled next).
    let warm = session(&limited).await.unwrap();
    run(&limited, greedy(warm, Input::Text(long_prompt()), 2)).await;
    let a = session(&limited).await.unwrap();
    let r = run(&limited, greedy(a, Input::Text(longer_prompt()), 4)).await;
    assert!(r.done.is_some(), "refused instead of trimmed: {r:?}");
    let trims = memory_trims(&r);
    assert_eq!(trims.len(), 1, "{:?}", r.events);
    // Trimmed when the prompt was planned, before any of it was computed.
    assert_eq!(r.done().prefilled_tokens, trims[0].1, "{:?}", r.done());
    let (dropped, kept) = trims[0];
    assert!(dropped > 0 && kept >= 342 / 2, "{trims:?}");
    assert_eq!(r.tokens.len(), 4);
    let stats = limited.stats().await;
    assert!(base + stats.state_bytes_total <= ceiling, "{stats:?}");
    assert_eq!(
        stats.admission_refusals, 0,
        "a refusal that became a trim is not a refused request"
    );
    // The next turn starts from the full budget again, and is trimmed again to what fits.
    let r = run(&limited, greedy(a, Input::Append(" More.".into()), 2)).await;
    assert!(r.done.is_some(), "{r:?}");
    // A ceiling that leaves room for less than the smallest budget still refuses.
    let cfg = EngineConfig {
        memory_ceiling: Some(base + one / 1000),
        ..config(dir.path())
    };
    let (_, tight) = engine(cfg).unwrap();
    let b = session(&tight).await.unwrap();
    let r = run(&tight, greedy(b, Input::Text(longer_prompt()), 4)).await;
    let err = r.error.unwrap_or_default();
    assert!(err.contains("over the memory ceiling"), "{err}");
    assert_eq!(tight.stats().await.admission_refusals, 1);
}

#[tokio::test]
async fn a_spilled_conversation_too_big_to_read_back_whole_is_recomputed_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    if gemma().is_none() {
        return;
    }
    let (base, one) = measured(dir.path(), &longer_prompt()).await;
    // Room for the 684-token conversation, not for its spill file and its State at once.
    let ceiling = base + one + one / 8;
    let cfg = EngineConfig {
        memory_ceiling: Some(ceiling),
        ..config(dir.path())
    };
    let (_, limited) = engine(cfg).unwrap();
    let a = session(&limited).await.unwrap();
    let first = run(&limited, greedy(a, Input::Text(longer_prompt()), 2)).await;
    assert!(first.done.is_some(), "{first:?}");
    // A second conversation spills the first.
    let b = session(&limited).await.unwrap();
    let rb = run(&limited, greedy(b, Input::Text(long_prompt()), 2)).await;
    assert!(rb.done.is_some(), "{rb:?}");
    assert!(limited.session_info(a).await.unwrap().spilled);
    let r = run(&limited, greedy(a, Input::Append(" Again.".into()), 3)).await;
    assert!(r.done.is_some(), "refused instead of recomputed: {r:?}");
    let evicted = r.events.iter().find_map(|e| match e {
        Event::CacheEvicted { reason } => Some(reason.clone()),
        _ => None,
    });
    let evicted = evicted.unwrap_or_else(|| panic!("no CacheEvicted: {:?}", r.events));
    assert!(evicted.contains("restoring session"), "{evicted}");
    assert!(!r.events.iter().any(|e| matches!(e, Event::Restored)));
    assert_eq!(r.tokens.len(), 3);
    // The whole conversation was computed again (it fits once it is not read back).
    let info = limited.session_info(a).await.unwrap();
    assert!(info.state_tokens > 684, "{info:?}");
    let stats = limited.stats().await;
    assert!(base + stats.state_bytes_total <= ceiling, "{stats:?}");
    assert_eq!(stats.admission_refusals, 0, "{stats:?}");
}

#[tokio::test]
async fn conversations_growing_side_by_side_are_trimmed_to_fit_at_a_prefill_chunk() {
    let dir = tempfile::tempdir().unwrap();
    if gemma().is_none() {
        return;
    }
    let (base, one) = measured(dir.path(), &longer_prompt()).await;
    // Each conversation is admitted alone; the two together pass the ceiling half-way.
    let ceiling = base + one + one / 2;
    let cfg = EngineConfig {
        memory_ceiling: Some(ceiling),
        prefill_chunk: 32,
        ..config(dir.path())
    };
    let (_, limited) = engine(cfg).unwrap();
    let (a, b) = (
        session(&limited).await.unwrap(),
        session(&limited).await.unwrap(),
    );
    let (ra, rb) = tokio::join!(
        run(&limited, greedy(a, Input::Text(longer_prompt()), 3)),
        run(&limited, greedy(b, Input::Text(longer_prompt()), 3)),
    );
    assert!(ra.done.is_some() && rb.done.is_some(), "{ra:?}\n{rb:?}");
    let trims = [memory_trims(&ra), memory_trims(&rb)].concat();
    assert!(!trims.is_empty(), "{:?}\n{:?}", ra.events, rb.events);
    let stats = limited.stats().await;
    assert!(base + stats.state_bytes_total <= ceiling, "{stats:?}");
    assert_eq!(stats.admission_refusals, 0, "{stats:?}");
}

#[tokio::test]
async fn a_turn_that_fails_after_a_spill_notice_still_carries_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        idle_after: Duration::ZERO,
        ..config(dir.path())
    };
    let Some((model, engine)) = engine(cfg) else {
        return;
    };
    let s = spilled_session(&engine).await;
    // The next turn fails (a token outside the vocabulary) once its session is in hand: the
    // spill it was told about comes first, then the error.
    let bad = model.config().n_vocab as u32 + 7;
    let r = run(&engine, greedy(s, Input::Tokens(vec![2, bad]), 2)).await;
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("vocabulary")),
        "{r:?}"
    );
    assert!(
        matches!(r.events.first(), Some(Event::Spilled { .. })),
        "{r:?}"
    );
}

/// A session with a short conversation, spilled by a host memory warning (the engine's
/// `idle_after` must be zero).
async fn spilled_session(engine: &statelm_engine::EngineHandle) -> statelm_engine::SessionId {
    let s = session(engine).await.unwrap();
    run(engine, greedy(s, Input::Text(PROMPT.into()), 2)).await;
    engine.memory_warning(PressureLevel::Warning);
    eventually("the spill", || async {
        engine.session_info(s).await.unwrap().spilled
    })
    .await;
    s
}
