//! Admission against the process's real footprint on the real Gemma model, read back from the
//! kernel's own accounting (this test binary's resident set: it is alone in its process, so
//! the figure is its own). The limit leaves room for about two conversations above what the
//! process holds warm; five conversations then run one after another: the engine must spill
//! the older ones (announcing it on their next turn) rather than grow past the limit, and every
//! turn must be answered.

mod common;

use common::*;
use statelm_engine::{EngineConfig, Event, Input, RealMemory};
use statelm_governor::FootprintReader;

/// A prompt of a few hundred tokens, different per conversation.
fn prompt(i: usize) -> String {
    let words = [
        "memory", "limit", "cache", "token", "budget", "spill", "page", "heap",
    ];
    let body: Vec<&str> = (0..300).map(|k| words[(k * 7 + i) % words.len()]).collect();
    format!("Conversation {i}: {}.", body.join(" "))
}

#[tokio::test]
async fn sessions_spill_to_keep_the_resident_set_under_the_real_limit() {
    let dir = tempfile::tempdir().unwrap();
    let Some(model) = gemma() else { return };
    let mut reader = FootprintReader::proc("/proc");
    // What one conversation adds to the resident set (its KV cache, the engine's scratch, the
    // allocator's slack), measured on a probe engine that stays alive, so that what it holds
    // stays counted in the baseline.
    let probe_cfg = EngineConfig {
        real_memory: RealMemory {
            enabled: false,
            ..RealMemory::default()
        },
        ..config(dir.path())
    };
    let (_, probe) = engine(probe_cfg).unwrap();
    // Every weight page resident first (they count in the resident set once touched).
    let warmup = probe.create_session(Default::default()).await.unwrap();
    run(&probe, greedy(warmup, Input::Text("Hello".into()), 2)).await;
    let before = reader.read().unwrap().used;
    let a = session(&probe).await.unwrap();
    run(&probe, greedy(a, Input::Text(prompt(0)), 2)).await;
    let warm = reader.read().unwrap().used;
    let growth = warm.saturating_sub(before).max(1 << 20);
    let margin = 8 << 20;
    // Room for about two such conversations, not six.
    let limit = warm + margin + 2 * growth;
    let cfg = EngineConfig {
        max_sessions: 8,
        real_memory: RealMemory {
            enabled: true,
            limit: Some(limit),
            margin,
        },
        ..config(dir.path())
    };
    let engine = statelm_engine::Engine::start(model.clone(), cfg);
    let mut ids = Vec::new();
    for i in 0..6 {
        let s = session(&engine).await.unwrap();
        let r = run(&engine, greedy(s, Input::Text(prompt(i)), 2)).await;
        assert!(r.done.is_some(), "turn {i}: {r:?}");
        ids.push(s);
    }
    let stats = engine.stats().await;
    eprintln!(
        "real_memory: warm {warm}, one conversation {growth}, limit {limit}; footprint at the \
         last check {:?} of {:?}; spills {} refusals {}",
        stats.footprint_bytes, stats.footprint_limit, stats.spills, stats.admission_refusals
    );
    assert_eq!(stats.footprint_limit, Some(limit));
    assert!(stats.spills >= 1, "{stats:?}");
    assert_eq!(stats.admission_refusals, 0);
    assert!(stats.footprint_bytes.is_some_and(|f| f <= limit));
    // The first conversation was spilled to make room: its next turn says so, and is answered.
    assert!(engine.session_info(ids[0]).await.unwrap().spilled);
    let r = run(&engine, greedy(ids[0], Input::Append(" And".into()), 2)).await;
    assert!(r.done.is_some(), "{r:?}");
    assert!(
        r.events.iter().any(|e| matches!(e, Event::Spilled { .. })),
        "{:?}",
        r.events
    );
    assert!(r.events.iter().any(|e| matches!(e, Event::Restored)));
    drop(probe);
}
