//! Durable sessions on the real Gemma model: a conversation resumed from its history log and
//! KV snapshot continues exactly as the unkilled one does (greedy), damaged files are dropped
//! or ignored with a `Resumed` event that says so, and names are checked.

mod common;

use common::*;
use statelm_engine::{Engine, EngineConfig, EngineError, Event, Input, SessionOptions};
use std::path::Path;

const TURNS: [&str; 3] = [
    "The capital of France is",
    " Paris. The capital of Italy is",
    " Rome. The capital of Spain is",
];

fn durable_config(spill: &Path, sessions: &Path) -> EngineConfig {
    EngineConfig {
        session_dir: Some(sessions.to_path_buf()),
        ..config(spill)
    }
}

fn input(turn: usize) -> Input {
    if turn == 0 {
        Input::Text(TURNS[0].into())
    } else {
        Input::Append(TURNS[turn].into())
    }
}

fn resumed(run: &Run) -> (usize, usize, usize, String) {
    run.events
        .iter()
        .find_map(|e| match e {
            Event::Resumed {
                history_tokens,
                restored_tokens,
                reprefilled_tokens,
                reason,
                ..
            } => Some((
                *history_tokens,
                *restored_tokens,
                *reprefilled_tokens,
                reason.clone(),
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Resumed event: {:?}", run.events))
}

#[tokio::test]
async fn a_resumed_conversation_continues_like_the_unkilled_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (spill, live, killed) = (
        tmp.path().join("spill"),
        tmp.path().join("live"),
        tmp.path().join("killed"),
    );
    let Some((model, reference)) = engine(config(&spill)) else {
        return;
    };
    // The unkilled conversation.
    let r = session(&reference).await.unwrap();
    let mut want = Vec::new();
    for t in 0..3 {
        want.push(run(&reference, greedy(r, input(t), 8)).await.tokens);
    }
    let ref_history = reference.session_info(r).await.unwrap().history_tokens;
    drop(reference);

    // The durable one: turn 1, closed (snapshot written), reopened, turn 2 (logged).
    let engine = Engine::start(model.clone(), durable_config(&spill, &live));
    let a = engine.open_session("conv", SessionOptions::default()).await;
    let a = a.unwrap();
    assert_eq!(run(&engine, greedy(a, input(0), 8)).await.tokens, want[0]);
    engine.close_session(a).await.unwrap();
    let a = engine.open_session("conv", SessionOptions::default()).await;
    let a = a.unwrap();
    assert_eq!(
        engine
            .open_session("conv", Default::default())
            .await
            .unwrap(),
        a,
        "a name that is open gives its session"
    );
    let second = run(&engine, greedy(a, input(1), 8)).await;
    assert_eq!(second.tokens, want[1]);
    let (_, restored, reprefilled, _) = resumed(&second);
    assert!(restored > 0, "the snapshot of turn 1 was used");
    assert!(
        reprefilled <= 1,
        "only the last sampled token: {reprefilled}"
    );
    // Killed here: the log holds both turns, the snapshot only the first.
    copy_dir(&live, &killed);
    drop(engine);

    let engine = Engine::start(model.clone(), durable_config(&spill, &killed));
    let b = engine.open_session("conv", SessionOptions::default()).await;
    let b = b.unwrap();
    let info = engine.session_info(b).await.unwrap();
    let third = run(&engine, greedy(b, input(2), 8)).await;
    let (history, restored, reprefilled, reason) = resumed(&third);
    assert_eq!(history, info.history_tokens);
    assert!(restored > 0 && reprefilled > 1, "{reason}");
    assert_eq!(restored + reprefilled, history, "{reason}");
    assert_eq!(third.tokens, want[2], "the same continuation as unkilled");
    assert_eq!(
        engine.session_info(b).await.unwrap().history_tokens,
        ref_history
    );
    drop(engine);

    // Damaged files: a torn log tail and a corrupt snapshot. The log's good records are kept,
    // the snapshot ignored, everything re-prefilled, and the event says so.
    let damaged = tmp.path().join("damaged");
    copy_dir(&killed, &damaged);
    let snap = damaged.join("conv.stlmsess");
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&snap, bytes).unwrap();
    let log = damaged.join("conv.stlmlog");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 9, 9]);
    std::fs::write(&log, bytes).unwrap();
    let engine = Engine::start(model, durable_config(&spill, &damaged));
    let c = engine.open_session("conv", SessionOptions::default()).await;
    let c = c.unwrap();
    let fourth = run(&engine, greedy(c, Input::Append(" Madrid.".into()), 4)).await;
    let (history, restored, reprefilled, reason) = resumed(&fourth);
    assert!(history > info.history_tokens, "turn 3 was logged: {reason}");
    assert_eq!((restored, reprefilled), (0, history), "{reason}");
    assert!(reason.contains("torn"), "{reason}");
    assert!(reason.contains("snapshot ignored"), "{reason}");
    assert!(fourth.done.is_some(), "{fourth:?}");
}

#[tokio::test]
async fn names_and_directories_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((model, plain)) = engine(config(tmp.path())) else {
        return;
    };
    let e = plain.open_session("a", SessionOptions::default()).await;
    assert!(matches!(e, Err(EngineError::InvalidRequest(_))), "{e:?}");
    drop(plain);
    let dir = tmp.path().join("sessions");
    let engine = Engine::start(model, durable_config(tmp.path(), &dir));
    for bad in ["../x", "a/b", "", ".x", "x y"] {
        let e = engine.open_session(bad, SessionOptions::default()).await;
        assert!(
            matches!(e, Err(EngineError::InvalidSessionName { .. })),
            "{bad:?}: {e:?}"
        );
    }
    let s = engine
        .open_session("fresh", SessionOptions::default())
        .await;
    let s = s.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("fresh.stlmlog")), 0o600);
    }
    run(&engine, greedy(s, input(0), 2)).await;
    // A reset empties the files too: reopening gives an empty conversation.
    engine.reset_session(s).await.unwrap();
    engine.close_session(s).await.unwrap();
    let s = engine
        .open_session("fresh", SessionOptions::default())
        .await;
    let info = engine.session_info(s.unwrap()).await.unwrap();
    assert_eq!(info.history_tokens, 0);
    // A log that is not one is a typed error, not a panic.
    std::fs::write(dir.join("junk.stlmlog"), b"not a log at all").unwrap();
    let e = engine.open_session("junk", SessionOptions::default()).await;
    assert!(matches!(e, Err(EngineError::BadSessionFile(_))), "{e:?}");
}
