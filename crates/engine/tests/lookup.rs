//! Prompt-lookup speculative decoding changes how many tokens one forward pass computes, never
//! which tokens come out: greedy and seeded sampling give the text of plain decoding, token
//! for token, on both models, while drafts are accepted.

mod common;

use common::{collect, config};
use statelm_engine::{
    ChatMessage, Engine, GenerateRequest, Input, SamplingParams, SessionId, SessionOptions,
};
use statelm_model::{LoadOptions, Model};
use std::sync::Arc;

/// A code-editing request: the answer copies most of its input.
fn edit_request() -> Vec<ChatMessage> {
    vec![ChatMessage::new(
        "user",
        "Rename the variable `total` to `sum` in this function and show the whole function:\n\
         ```python\ndef average(values):\n    total = 0\n    for v in values:\n        \
         total += v\n    if not values:\n        return 0\n    return total / len(values)\n```",
    )]
}

/// Runs `messages` in a fresh session with `sampling`; the tokens and the final statistics.
async fn generate(
    model: &Arc<Model>,
    messages: &[ChatMessage],
    sampling: SamplingParams,
) -> (Vec<u32>, statelm_engine::DoneStats) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(model.clone(), config(dir.path()));
    let s = engine
        .create_session(SessionOptions::default())
        .await
        .unwrap();
    let req = GenerateRequest {
        session: s.into(),
        input: Input::Chat(messages.to_vec()),
        sampling,
        stop: Vec::new(),
        max_tokens: 96,
    };
    let run = collect(engine.generate(req).await.unwrap()).await;
    (run.tokens.clone(), run.done().clone())
}

async fn same_tokens_as_plain_decoding(path: Option<std::path::PathBuf>) {
    let Some(path) = path else { return };
    let model = Model::load(path, &LoadOptions::default()).expect("model loads");
    let messages = edit_request();
    let seeded = SamplingParams {
        temperature: 0.8,
        seed: Some(7),
        ..SamplingParams::default()
    };
    for base in [SamplingParams::greedy(), seeded] {
        let (plain, d0) = generate(&model, &messages, base.clone()).await;
        assert_eq!(d0.drafted_tokens, 0);
        for lookup in [2, 8] {
            let sampling = SamplingParams {
                lookup,
                ..base.clone()
            };
            let (fast, d) = generate(&model, &messages, sampling).await;
            assert_eq!(
                fast, plain,
                "lookup {lookup}, temperature {}",
                base.temperature
            );
            assert!(d.accepted_tokens <= d.drafted_tokens, "{d:?}");
            eprintln!(
                "lookup {lookup} T {}: {} tokens, drafted {} accepted {}",
                base.temperature, d.generated_tokens, d.drafted_tokens, d.accepted_tokens
            );
            if base.temperature == 0.0 {
                assert!(
                    d.accepted_tokens > 0,
                    "no draft accepted on a copying answer: {d:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_gives_the_tokens_of_plain_decoding_on_qwen() {
    same_tokens_as_plain_decoding(statelm_model::testing::qwen_path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_gives_the_tokens_of_plain_decoding_on_gemma() {
    same_tokens_as_plain_decoding(statelm_model::testing::gemma_path()).await;
}

/// Admission control counts the logits rows a verification returns: under a ceiling that
/// admits a plain request with 4 MiB to spare, the same request with 15 drafts (15 more rows
/// of Gemma's 262,144 logits: 15 MiB) is refused, naming the drafts.
#[tokio::test]
async fn admission_counts_the_drafts_logits() {
    let Some(model) = common::gemma() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.real_memory.enabled = false;
    let request = |session: SessionId, lookup| {
        let mut sampling = common::no_eog(&model);
        sampling.lookup = lookup;
        GenerateRequest {
            session: session.into(),
            input: Input::Text("The capital of France is".into()),
            sampling,
            stop: Vec::new(),
            max_tokens: 24,
        }
    };
    // What a plain run leaves resident: weights and the grown State (no scratch).
    let probe = Engine::start(model.clone(), cfg.clone());
    let s = probe
        .create_session(SessionOptions::default())
        .await
        .unwrap();
    assert!(common::run(&probe, request(s, 0)).await.error.is_none());
    let st = probe.stats().await;
    let ceiling = st.weights_bytes + st.state_bytes_total + (4 << 20);
    cfg.memory_ceiling = Some(ceiling);
    for (lookup, admitted) in [(0, true), (15, false)] {
        let engine = Engine::start(model.clone(), cfg.clone());
        let s = engine
            .create_session(SessionOptions::default())
            .await
            .unwrap();
        let r = common::run(&engine, request(s, lookup)).await;
        match admitted {
            true => assert!(r.error.is_none(), "{r:?}"),
            false => {
                let e = r.error.expect("refused");
                assert!(e.contains("logits for 15 drafted tokens"), "{e}");
            }
        }
    }
}
