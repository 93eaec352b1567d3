//! Every architecture through the engine (tiny synthetic files with every RoPE feature their
//! architecture reads): lookup decoding gives the tokens of plain greedy decoding, a durable
//! conversation resumed after a close and after a "kill" continues as the uninterrupted one
//! does, and a budget trim is announced and generation goes on. The model crate's
//! `tests/state.rs` holds the exact parts (snapshots bit for bit, shifts equal to a fresh
//! prefill) on every architecture too.

mod common;

use common::*;
use statelm_engine::{Engine, EngineConfig, Event, Input, SamplingParams, SessionOptions};
use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model};
use std::path::Path;
use std::sync::Arc;

fn model(dir: &Path, arch: Arch) -> Arc<Model> {
    let spec = SyntheticSpec::tiny_with_rope_factors(arch);
    let path = dir.join(format!("{}.gguf", arch.name()));
    write_synthetic_model(&path, &spec).unwrap();
    Model::load(&path, &LoadOptions::default()).unwrap()
}

const TURNS: [&str; 3] = [" abc def ghi abc def ghi", " jkl abc", " mno pqr abc def"];

fn input(turn: usize) -> Input {
    if turn == 0 {
        Input::Text(TURNS[0].into())
    } else {
        Input::Append(TURNS[turn].into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_architecture_keeps_the_engines_promises() {
    for arch in Arch::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let model = model(tmp.path(), arch);
        let spill = tmp.path().join("spill");
        let name = arch.name();

        // Plain greedy, three turns: the reference.
        let reference = Engine::start(model.clone(), config(&spill));
        let r = session(&reference).await.unwrap();
        let mut want = Vec::new();
        for t in 0..3 {
            let run = run(&reference, greedy(r, input(t), 16)).await;
            assert!(run.error.is_none(), "{name}: {:?}", run.error);
            want.push(run.tokens);
        }
        // Lookup decoding: the same tokens.
        let s = session(&reference).await.unwrap();
        let mut req = greedy(s, input(0), 16);
        req.sampling = SamplingParams {
            lookup: 4,
            ..SamplingParams::greedy()
        };
        assert_eq!(run(&reference, req).await.tokens, want[0], "{name}: lookup");
        drop(reference);

        // Durable: turn 1, closed, reopened, turn 2; then "killed" and resumed for turn 3.
        let (live, killed) = (tmp.path().join("live"), tmp.path().join("killed"));
        let durable = |dir: &Path| EngineConfig {
            session_dir: Some(dir.to_path_buf()),
            ..config(&spill)
        };
        let engine = Engine::start(model.clone(), durable(&live));
        let a = engine
            .open_session("conv", SessionOptions::default())
            .await
            .unwrap();
        assert_eq!(
            run(&engine, greedy(a, input(0), 16)).await.tokens,
            want[0],
            "{name}"
        );
        engine.close_session(a).await.unwrap();
        let a = engine
            .open_session("conv", SessionOptions::default())
            .await
            .unwrap();
        assert_eq!(
            run(&engine, greedy(a, input(1), 16)).await.tokens,
            want[1],
            "{name}: after a close"
        );
        copy_dir(&live, &killed);
        drop(engine);
        let engine = Engine::start(model.clone(), durable(&killed));
        let b = engine
            .open_session("conv", SessionOptions::default())
            .await
            .unwrap();
        assert_eq!(
            run(&engine, greedy(b, input(2), 16)).await.tokens,
            want[2],
            "{name}: after a kill"
        );
        drop(engine);

        // A budget below the conversation: trimmed, announced, and the turn is answered.
        let engine = Engine::start(model.clone(), config(&spill));
        let opts = SessionOptions {
            token_budget: Some(24),
            ..SessionOptions::default()
        };
        let c = engine.create_session(opts).await.unwrap();
        let long = Input::Text(" abc def ghi jkl mno pqr stu vwx yz".repeat(3));
        let run = run(&engine, greedy(c, long, 8)).await;
        assert!(run.error.is_none(), "{name}: {:?}", run.error);
        assert_eq!(run.tokens.len(), 8, "{name}");
        assert!(
            run.events
                .iter()
                .any(|e| matches!(e, Event::ContextTrimmed { .. })),
            "{name}: no trim announced: {:?}",
            run.events
        );
    }
}
