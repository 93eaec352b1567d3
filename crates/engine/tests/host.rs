//! The host's lifecycle and thermal states on the real Gemma model (one model load): the
//! background writes every session to disk and pauses generations, the foreground picks them
//! up where they were; a hot device gets fewer threads and the same answers.

mod common;

use common::*;
use futures::StreamExt;
use statelm_engine::{Event, Input, Lifecycle, StopReason, Thermal};
use std::time::Duration;

const PROMPT: &str = "The capital of France is";

#[tokio::test]
async fn the_background_saves_every_session_and_the_foreground_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // A few events ahead of the reader at most: the background lands mid-answer.
    let cfg = statelm_engine::EngineConfig {
        stream_buffer: 4,
        ..config(dir.path())
    };
    let Some((model, engine)) = engine(cfg) else {
        return;
    };
    let req = |s, n| {
        let mut r = greedy(s, Input::Text(PROMPT.into()), n);
        r.sampling = no_eog(&model);
        r
    };
    let reference = session(&engine).await.unwrap();
    let expected = run(&engine, req(reference, 120)).await;
    engine.close_session(reference).await.unwrap();

    // An idle session with a conversation, and one generating.
    let idle = session(&engine).await.unwrap();
    run(&engine, req(idle, 4)).await;
    let busy = session(&engine).await.unwrap();
    let mut stream = engine.generate(req(busy, 120)).await.unwrap();
    let mut got = Run::default();
    while got.tokens.len() < 10 {
        record(&mut got, stream.next().await.unwrap().unwrap());
    }
    engine.lifecycle(Lifecycle::Background);
    eventually("both sessions on disk", || async {
        let s = engine.stats().await;
        s.lifecycle == Lifecycle::Background && s.spilled == 2 && s.state_bytes_total == 0
    })
    .await;
    // Nothing is computed in the background.
    let paused_at = engine.session_info(busy).await.unwrap().history_tokens;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        engine.session_info(busy).await.unwrap().history_tokens,
        paused_at
    );
    engine.lifecycle(Lifecycle::Foreground);
    while let Some(ev) = stream.next().await {
        record(&mut got, ev.unwrap());
    }
    assert_eq!(got.done().stop_reason, StopReason::MaxTokens);
    assert_eq!(
        got.tokens, expected.tokens,
        "the answer goes on where it was"
    );
    let spilled = got
        .events
        .iter()
        .position(|e| matches!(e, Event::Spilled { .. }));
    let restored = got.events.iter().position(|e| matches!(e, Event::Restored));
    assert!(spilled.is_some() && restored > spilled, "{:?}", got.events);
    // The idle one is restored from disk on its next turn, not recomputed.
    let next = run(&engine, greedy(idle, Input::Append(" Paris".into()), 2)).await;
    assert!(next.done().cached_tokens > 0, "{:?}", next.done());
    assert!(next.events.iter().any(|e| matches!(e, Event::Restored)));
    assert_eq!(engine.stats().await.lifecycle, Lifecycle::Foreground);
}

#[tokio::test]
async fn a_hot_device_gets_fewer_threads_and_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let Some((model, engine)) = engine(config(dir.path())) else {
        return;
    };
    let all = model.threads();
    let request = |s| {
        let mut r = greedy(s, Input::Text(PROMPT.into()), 24);
        r.sampling = no_eog(&model);
        r
    };
    let s = session(&engine).await.unwrap();
    let nominal = run(&engine, request(s)).await;
    assert_eq!(engine.stats().await.threads, all);
    for (state, threads) in [
        (Thermal::Serious, (all / 2).max(1)),
        (Thermal::Critical, 1),
        (Thermal::Fair, all),
    ] {
        engine.thermal(state);
        eventually("the thread count", || async {
            let s = engine.stats().await;
            s.thermal == state && s.threads == threads
        })
        .await;
        let s = session(&engine).await.unwrap();
        let hot = run(&engine, request(s)).await;
        assert_eq!(hot.tokens, nominal.tokens, "{state}: the same answer");
    }
}
