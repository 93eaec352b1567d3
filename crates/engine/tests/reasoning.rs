//! Thinking blocks: a generation inside `<think>…</think>` streams its text as
//! `Event::Reasoning` (the tokens' own events carry none), and after the block as the answer.
//! A synthetic Qwen3 file whose vocabulary's last two tokens are `<think>` and `</think>`.

mod common;

use common::*;
use statelm_engine::{Engine, Event, GenerateRequest, Input};
use statelm_gguf::{Array, Value};
use statelm_model::testing::{write_synthetic_model_with, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model};
use std::sync::Arc;

fn thinking_model(dir: &std::path::Path) -> Arc<Model> {
    let path = dir.join("think.gguf");
    write_synthetic_model_with(&path, &SyntheticSpec::tiny(Arch::Qwen3), |w| {
        let mut tokens = match w.remove("tokenizer.ggml.tokens") {
            Some(Value::Array(Array::String(t))) => t,
            other => panic!("tokens: {other:?}"),
        };
        let mut types = match w.remove("tokenizer.ggml.token_type") {
            Some(Value::Array(Array::I32(t))) => t,
            other => panic!("types: {other:?}"),
        };
        let n = tokens.len();
        tokens[n - 2] = "<think>".into();
        tokens[n - 1] = "</think>".into();
        types[n - 2] = 4;
        types[n - 1] = 4;
        w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
        w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
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
