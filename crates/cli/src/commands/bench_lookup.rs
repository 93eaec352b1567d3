//! `statelm bench --lookup N`: prompt-lookup decoding against plain decoding on a code edit
//! (an answer that copies its input), a rewrite (one that copies fragments) and open-ended
//! prose (where drafts rarely hit) — the same engine path as `run`/`chat`/`serve`, interleaved
//! rounds, the same text checked — and each answer's ceilings: what no draft policy or kernel
//! could beat on that text with this drafter ([`lookup::ceiling`]) and with any drafter that
//! copies from the history ([`lookup::any_match_ceiling`]); with `--verify`, the latter at the
//! measured pass costs ([`lookup::any_match_bound`]).

use anyhow::{Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use statelm_engine::lookup::{self, DEFAULT_NGRAM_MAX as NGRAM};
use statelm_engine::{
    ChatMessage, Encoded, Engine, EngineConfig, Event, GenerateRequest, Input, SamplingParams,
    SessionOptions,
};
use statelm_model::{ForwardOptions, KvType, LogitsMode, Model, StateOptions};
use std::sync::Arc;
use std::time::Instant;

/// The workload: an edit whose answer copies most of its input.
const EDIT: &str = "Rename the method `get_total` to `total` everywhere in this class and show \
the whole class:\n```python\nclass Cart:\n    def __init__(self):\n        self.items = []\n\n    \
def add(self, name, price, qty=1):\n        self.items.append((name, price, qty))\n\n    \
def get_total(self):\n        total = 0\n        for name, price, qty in self.items:\n            \
total += price * qty\n        return total\n\n    def summary(self):\n        lines = \
[f\"{name}: {qty} x {price}\" for name, price, qty in self.items]\n        \
lines.append(f\"total: {self.get_total()}\")\n        return \"\\n\".join(lines)\n```";

/// A rewrite: the answer copies short fragments of its input between new tokens.
const REWRITE: &str = "Rewrite this function with async/await instead of promise chains and \
show the whole function:\n```javascript\nfunction loadUser(id) {\n  return fetch(\"/api/users/\" \
+ id)\n    .then((res) => res.json())\n    .then((user) => {\n      return fetch(\"/api/teams/\" \
+ user.teamId)\n        .then((res) => res.json())\n        .then((team) => ({ user, team }));\n    \
})\n    .catch((err) => {\n      console.error(\"failed to load user\", err);\n      throw err;\n    \
});\n}\n```";

/// Open-ended prose: little to copy from the prompt.
const PROSE: &str =
    "Write a short story about a lighthouse keeper who finds a message in a bottle.";

/// The workloads, by name.
const WORKLOADS: [(&str, &str); 3] = [("code edit", EDIT), ("rewrite", REWRITE), ("prose", PROSE)];

/// The chat of one user message.
fn chat(prompt: &str) -> Input {
    Input::Chat(vec![ChatMessage::new("user", prompt)].into())
}

/// One greedy answer to `prompt` with `lookup`: its tokens, decode tok/s, drafted, accepted.
async fn answer(
    model: &Arc<Model>,
    prompt: &str,
    lookup: usize,
    max_tokens: usize,
) -> Result<(Vec<u32>, Value)> {
    let engine = Engine::start(model.clone(), EngineConfig::default());
    let session = engine.create_session(SessionOptions::default()).await?;
    let mut stream = engine
        .generate(GenerateRequest {
            session: session.into(),
            input: chat(prompt),
            sampling: SamplingParams {
                lookup,
                ..SamplingParams::greedy()
            },
            stop: Vec::new(),
            max_tokens,
        })
        .await?;
    let (mut tokens, mut done) = (Vec::new(), None);
    while let Some(ev) = stream.next().await {
        match ev? {
            Event::Token { id, .. } => tokens.push(id),
            Event::Done(d) => done = Some(d),
            _ => {}
        }
    }
    let d = done.context("the generation ended without its statistics")?;
    let v = json!({"tok_s": d.decode_tokens_per_s, "drafted": d.drafted_tokens,
                   "accepted": d.accepted_tokens, "generated": d.generated_tokens});
    Ok((tokens, v))
}

/// Median of `v`.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `reps` interleaved rounds of plain and `lookup` decoding of each workload (`max_tokens`
/// each): one row per workload — the built-in ones, or `prompts` (named "prompt 1", …).
pub(crate) fn measure(
    model: &Arc<Model>,
    lookup: usize,
    max_tokens: usize,
    reps: usize,
    prompts: &[String],
    verify: Option<&Value>,
) -> Result<Value> {
    let costs = verify.map(pass_costs);
    let workloads: Vec<(String, &str)> = if prompts.is_empty() {
        WORKLOADS.iter().map(|&(n, p)| (n.to_owned(), p)).collect()
    } else {
        let named = prompts.iter().enumerate();
        named
            .map(|(i, p)| (format!("prompt {}", i + 1), p.as_str()))
            .collect()
    };
    let rt = crate::common::runtime()?;
    rt.block_on(async {
        let mut rows = Vec::new();
        for (name, prompt) in workloads {
            let (mut plain, mut fast, mut last) = (Vec::new(), Vec::new(), json!({}));
            let mut answer_tokens = Vec::new();
            let mut same = true;
            for _ in 0..reps.max(1) {
                let (a, pa) = answer(model, prompt, 0, max_tokens).await?;
                let (b, pb) = answer(model, prompt, lookup, max_tokens).await?;
                same &= a == b;
                answer_tokens = a;
                plain.push(pa["tok_s"].as_f64().unwrap_or(f64::NAN));
                fast.push(pb["tok_s"].as_f64().unwrap_or(f64::NAN));
                last = pb;
            }
            let (p, f) = (median(plain), median(fast));
            let prompt = Encoded::new(model.tokenizer(), chat(prompt), None)?;
            let ceiling = lookup::ceiling(prompt.tokens(), &answer_tokens, NGRAM, lookup);
            let any = lookup::any_match_ceiling(prompt.tokens(), &answer_tokens, lookup);
            let bound = (costs.as_ref()).map(|c| {
                lookup::any_match_bound(prompt.tokens(), &answer_tokens, lookup, |k| cost(c, k))
            });
            rows.push(json!({"lookup": lookup, "workload": name, "plain_tok_s": p,
                             "lookup_tok_s": f, "ratio": f / p, "drafted": last["drafted"],
                             "accepted": last["accepted"], "generated": last["generated"],
                             "same_text": same, "ceiling": ceiling,
                             "any_match_ceiling": any, "any_match_bound": bound}));
        }
        Ok(Value::Array(rows))
    })
}

/// The measured costs of a pass of `k` columns in decode steps, by `k` (`(1, 1.0)` included),
/// from [`time_verify`]'s rows.
fn pass_costs(verify: &Value) -> Vec<(usize, f64)> {
    let rows = verify.as_array().into_iter().flatten();
    let mut points: Vec<(usize, f64)> = rows
        .filter_map(|r| {
            Some((
                r["tokens"].as_u64()? as usize,
                r["vs_decode_step"].as_f64()?,
            ))
        })
        .filter(|&(k, c)| k > 1 && c.is_finite())
        .collect();
    points.push((1, 1.0));
    points.sort_by_key(|&(k, _)| k);
    points.dedup_by_key(|p| p.0);
    points
}

/// The cost of a pass of `k` columns, linear between the measured `points` (sorted, the first
/// at `k = 1`) and beyond the last along the last segment's slope.
fn cost(points: &[(usize, f64)], k: usize) -> f64 {
    let n = points.len();
    if n < 2 {
        return k as f64 * points.first().map_or(1.0, |p| p.1);
    }
    let i = points.partition_point(|&(pk, _)| pk < k).clamp(1, n - 1);
    let (lo, hi) = (points[i - 1], points[i]);
    lo.1 + (hi.1 - lo.1) / (hi.0 - lo.0) as f64 * (k as f64 - lo.0 as f64)
}

/// The cost of one speculative verification of `k` tokens for each `k` in `ks`: a forward of
/// `k` tokens computing all `k` logits rows, after a 64-token context, with the scratch and
/// logits buffers reused as the engine reuses them; the State is cut back after each. Returns
/// the median ms per `k` and its ratio to `k = 1` (one decode step; timed too if not asked).
pub(crate) fn time_verify(model: &Model, ks: &[usize], kv: KvType, reps: usize) -> Result<Value> {
    const CONTEXT: usize = 64;
    let max = ks.iter().copied().max().unwrap_or(1).max(1);
    let toks = super::bench::tokens(model, CONTEXT + max)?;
    let mut st = model.new_state_with(StateOptions {
        capacity: CONTEXT + max,
        kv_type: kv,
    })?;
    let (mut scratch, mut logits) = (model.new_scratch(), statelm_model::Logits::default());
    model.forward_into(
        &mut scratch,
        &mut st,
        &toks[..CONTEXT],
        Default::default(),
        &mut logits,
    )?;
    let mut time = |k: usize| -> Result<super::bench::Stat> {
        let mut ms = Vec::new();
        // One untimed round first: the buffers grow to this batch's size.
        for rep in 0..=reps.max(1) {
            let opts = ForwardOptions {
                logits: Some(LogitsMode::LastN(k)),
                ..Default::default()
            };
            let t = Instant::now();
            let batch = &toks[CONTEXT..CONTEXT + k];
            model.forward_into(&mut scratch, &mut st, batch, opts, &mut logits)?;
            if rep > 0 {
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            st.truncate(CONTEXT);
        }
        Ok(super::bench::stat(ms))
    };
    let one = time(1)?.median;
    let mut rows = Vec::new();
    for &k in ks {
        let s = time(k.max(1))?;
        rows.push(json!({"tokens": k.max(1), "ms": s, "vs_decode_step": s.median / one}));
    }
    Ok(Value::Array(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_costs_interpolate_the_measured_ones() {
        let verify = json!([{"tokens": 1, "vs_decode_step": 1.0},
                            {"tokens": 3, "vs_decode_step": 1.5},
                            {"tokens": 5, "vs_decode_step": 2.5}]);
        let c = pass_costs(&verify);
        assert_eq!(c, [(1, 1.0), (3, 1.5), (5, 2.5)]);
        assert_eq!(cost(&c, 1), 1.0);
        assert_eq!(cost(&c, 2), 1.25);
        assert_eq!(cost(&c, 4), 2.0);
        assert_eq!(cost(&c, 7), 3.5);
        // Only a decode step measured: each column a step.
        assert_eq!(cost(&pass_costs(&json!([])), 4), 4.0);
    }
}
