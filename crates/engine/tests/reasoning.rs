//! Thinking blocks: a generation inside `<think>…</think>` streams its text as
//! `Event::Reasoning` (the tokens' own events carry none), and after the block as the answer.
//! A synthetic Qwen3 file whose vocabulary's last two tokens are `<think>` and `</think>`.

mod common;

use common::*;
use statelm_engine::{Engine, Event, GenerateRequest, Input, SessionOptions, TemplateVars};
use statelm_model::testing::{make_thinking, write_synthetic_model_with, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model};
use std::sync::Arc;

/// Qwen3's template tail, opening the block in the generation prompt unless
/// `enable_thinking` is false (then the block is pre-filled empty and closed).
const TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n\
{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n\
{% else %}<think>\n{% endif %}{% endif %}";

fn thinking_model(dir: &std::path::Path) -> Arc<Model> {
    let path = dir.join("think.gguf");
    write_synthetic_model_with(&path, &SyntheticSpec::tiny(Arch::Qwen3), |w| {
        make_thinking(w, Some(TEMPLATE))
    })
    .unwrap();
    Model::load(&path, &LoadOptions::default()).unwrap()
}

fn reasoning_text(run: &Run) -> String {
    run.events
        .iter()
        .filter_map(|e| match e {
            Event::Reasoning { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_block_is_reported_apart_from_the_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let model = thinking_model(tmp.path());
    let tok = model.tokenizer();
    let (open, close) = (
        tok.token_id("<think>").unwrap(),
        tok.token_id("</think>").unwrap(),
    );
    let engine = Engine::start(model.clone(), config(&tmp.path().join("spill")));
    let prompt: Vec<u32> = (0..6).map(|i| 262 + i * 5).collect();
    let request = |s, tail: &[u32]| {
        let mut ids = prompt.clone();
        ids.extend_from_slice(tail);
        // The markers banned from the answer, so that its route is known.
        let mut sampling = no_eog(&model);
        sampling.logit_bias.insert(open, f32::NEG_INFINITY);
        sampling.logit_bias.insert(close, f32::NEG_INFINITY);
        GenerateRequest {
            sampling,
            ..greedy(s, Input::Tokens(ids), 12)
        }
    };
    // The prompt opens a block (templates that start the answer with <think>): reasoning.
    let s = session(&engine).await.unwrap();
    let inside = run(&engine, request(s, &[open])).await;
    assert!(inside.error.is_none(), "{:?}", inside.error);
    let said = tok.decode(&inside.tokens);
    assert!(!said.trim().is_empty());
    assert_eq!(inside.tokens.len(), 12);
    assert_eq!(inside.text, "", "no answer text inside the block");
    assert_eq!(reasoning_text(&inside).trim(), said.trim());
    // A closed block before the answer: every token is answer text.
    let s = session(&engine).await.unwrap();
    let after = run(&engine, request(s, &[open, 270, close])).await;
    assert!(after.error.is_none(), "{:?}", after.error);
    assert_eq!(reasoning_text(&after), "");
    assert!(!after.text.trim().is_empty());
    assert_eq!(after.text.trim(), tok.decode(&after.tokens).trim());
}

/// A session's template variables render every turn: with `enable_thinking: false` the first
/// message (a rendered conversation) and the next ones (turn texts) open no block, so all is
/// answer; without, all is reasoning. A durable session keeps its variables across a close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_template_variables_render_every_turn_and_persist() {
    let tmp = tempfile::tempdir().unwrap();
    let model = thinking_model(tmp.path());
    let tok = model.tokenizer();
    let mut cfg = config(&tmp.path().join("spill"));
    cfg.session_dir = Some(tmp.path().join("sessions"));
    let engine = Engine::start(model.clone(), cfg);
    let mut sampling = no_eog(&model);
    for marker in ["<think>", "</think>"] {
        (sampling.logit_bias).insert(tok.token_id(marker).unwrap(), f32::NEG_INFINITY);
    }
    let turn = |s, text: &str| GenerateRequest {
        sampling: sampling.clone(),
        ..greedy(s, Input::UserTurn(text.into()), 4)
    };
    let off = SessionOptions {
        template_vars: TemplateVars::new().with("enable_thinking", false),
        ..SessionOptions::default()
    };
    let quiet = engine.open_session("quiet", off).await.unwrap();
    let thinking = session(&engine).await.unwrap();
    for text in ["Hello there.", "And then?"] {
        let q = run(&engine, turn(quiet, text)).await;
        assert!(q.error.is_none(), "{:?}", q.error);
        assert_eq!(reasoning_text(&q), "", "{text}: no block was opened");
        assert!(!q.text.is_empty(), "{text}");
        let t = run(&engine, turn(thinking, text)).await;
        assert!(t.error.is_none(), "{:?}", t.error);
        assert_eq!(t.text, "", "{text}: all inside the block");
        assert!(!reasoning_text(&t).is_empty(), "{text}");
    }
    engine.close_session(quiet).await.unwrap();
    let again = (engine
        .open_session("quiet", SessionOptions::default())
        .await)
        .unwrap();
    let q = run(&engine, turn(again, "Once more?")).await;
    assert!(q.error.is_none(), "{:?}", q.error);
    assert_eq!(
        reasoning_text(&q),
        "",
        "the resumed session keeps its variables"
    );
}
