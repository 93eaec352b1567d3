//! `statelm bench --json-schema FILE`: what a constraint costs. The vocabulary's trie (once
//! per model), compiling the grammar (once per grammar; then cached), and per token the mask
//! and the feeding of the sampled token, beside the forward pass it rides on: a greedy chat
//! answer under the schema, timed step by step.

use anyhow::{Context, Result};
use serde_json::json;
use statelm_engine::sampling::constraint::Grammars;
use statelm_engine::{ChatMessage, Grammar};
use statelm_model::{Logits, Model, StateOptions};
use std::sync::Arc;
use std::time::Instant;

/// The chat prompt the answer is generated for when none is given.
pub(crate) const DEFAULT_PROMPT: &str = "Describe a city you like.";

/// Times the constraint of `schema` on `model`: `reps` greedy answers to `prompt` of at most
/// `max_tokens` tokens.
pub(crate) fn measure(
    model: &Arc<Model>,
    schema: &serde_json::Value,
    prompt: &str,
    max_tokens: usize,
    reps: usize,
) -> Result<serde_json::Value> {
    let grammar = Grammar::JsonSchema(schema.clone());
    let grammars = Grammars::new(model.clone());
    let t = Instant::now();
    grammars.prepare()?;
    let trie_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    grammars.constraint(&grammar)?;
    let compile_s = t.elapsed().as_secs_f64();
    let mut cached = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let c = grammars.constraint(&grammar)?;
        cached.push(t.elapsed().as_secs_f64());
        runs.push(answer(model, c, prompt, max_tokens)?);
    }
    let pick = |f: fn(&Answer) -> f64| super::bench::stat(runs.iter().map(f).collect());
    let last = runs.last().context("no run")?;
    Ok(json!({
        "prompt": prompt,
        "text": last.text,
        "tokens": last.tokens,
        "complete": last.complete,
        "valid_json": serde_json::from_str::<serde_json::Value>(&last.text).is_ok(),
        "trie_build_s": trie_s,
        "compile_s": compile_s,
        "cached_compile_s": super::bench::stat(cached),
        "first_mask_s": pick(|a| a.first_mask),
        "mask_per_token_s": pick(|a| a.mask / a.tokens as f64),
        "forward_per_token_s": pick(|a| a.forward / a.tokens as f64),
        "mask_share_of_decode": pick(|a| a.mask / (a.mask + a.forward)),
    }))
}

/// One timed answer.
struct Answer {
    text: String,
    tokens: usize,
    complete: bool,
    /// Seconds in the mask and in feeding tokens to the constraint, in all.
    mask: f64,
    /// The first token's mask.
    first_mask: f64,
    /// Seconds in decode forward passes.
    forward: f64,
}

fn answer(
    model: &Arc<Model>,
    mut c: statelm_engine::sampling::Constraint,
    prompt: &str,
    max_tokens: usize,
) -> Result<Answer> {
    let tok = model.tokenizer();
    let ids = tok.encode_chat(&[ChatMessage::new("user", prompt)], true)?;
    let mut st = model.new_state_with(StateOptions::new(ids.len() + max_tokens + 1))?;
    let (mut scratch, mut logits) = (model.new_scratch(), Logits::default());
    model.forward_into(&mut scratch, &mut st, &ids, Default::default(), &mut logits)?;
    let mut out = Vec::new();
    let (mut mask, mut first_mask, mut forward) = (0.0, 0.0, 0.0);
    while out.len() < max_tokens && !c.is_complete() {
        let t = Instant::now();
        let row = logits.last_mut();
        c.mask(row)?;
        let id = statelm_engine::sampling::argmax(row);
        c.accept(id)?;
        let took = t.elapsed().as_secs_f64();
        if out.is_empty() {
            first_mask = took;
        }
        mask += took;
        if tok.is_eog(id) {
            break;
        }
        out.push(id);
        let t = Instant::now();
        model.forward_into(
            &mut scratch,
            &mut st,
            &[id],
            Default::default(),
            &mut logits,
        )?;
        forward += t.elapsed().as_secs_f64();
    }
    Ok(Answer {
        text: tok.decode(&out),
        tokens: out.len().max(1),
        complete: c.is_complete(),
        mask,
        first_mask,
        forward,
    })
}
