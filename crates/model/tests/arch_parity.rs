//! Every architecture against llama.cpp on a synthetic file (random f32 weights, the tiny
//! SentencePiece vocabulary): `reference/synthetic/NAME.json` holds llama-cpp-python 0.3.36's
//! teacher-forced logits on the file `testing::parity_set` writes as NAME (the test rewrites it
//! and checks its sha256 first; `tools/parity/synth_reference.py` says how to record them).
//!
//! The bar: top-1 agreement ≥ 99% of all steps (issue 34's) and mean |Δlogit| over llama.cpp's
//! top-20 ≤ 0.01% of the logits' spread (max − min), for both protocols (prompt as one batch
//! then one token at a time, as the reference ran; and every position in one batch), both
//! numerics modes, f32 KV cache. Issue 34 asks for 1% of the spread; with f32 weights the two
//! runtimes differ only in summation order (measured: ~1e-6 of the spread), and 1% would let a
//! missing feature pass (Gemma 2 without its attention soft-cap scores 99.2% / 0.1%), so the
//! test holds what is achieved.

use serde_json::Value;
use sha2::{Digest, Sha256};
use statelm_model::testing::{parity_set, reference_dir, write_synthetic_model, PARITY_CTX};
use statelm_model::{
    ForwardOptions, KvType, LoadOptions, LogitsMode, Model, Numerics, StateOptions,
};
use std::sync::Arc;

struct Step {
    token: u32,
    spread: f64,
    top: Vec<(u32, f64)>,
}

struct Prompt {
    ids: Vec<u32>,
    steps: Vec<Step>,
}

/// `reference/DIR/NAME.json`: the file's sha256, the context size and the prompts.
fn load(dir: &str, name: &str) -> (String, usize, Vec<Prompt>) {
    let path = reference_dir().join(dir).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let prompts = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Prompt {
            ids: ids(&p["prompt_ids"]),
            steps: p["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Step {
                    token: s["token"].as_u64().unwrap() as u32,
                    spread: s["spread"].as_f64().unwrap(),
                    top: s["top"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap()))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let n_ctx = v["n_ctx"].as_u64().unwrap() as usize;
    (v["sha256"].as_str().unwrap().to_string(), n_ctx, prompts)
}

#[derive(Default)]
struct Score {
    steps: usize,
    agree: usize,
    diff: f64,
    diff_n: usize,
    spread: f64,
}

impl Score {
    fn add(&mut self, ours: &[f32], s: &Step) {
        self.steps += 1;
        self.agree += usize::from(statelm_model::argmax(ours) == s.token);
        for &(id, v) in &s.top {
            self.diff += (f64::from(ours[id as usize]) - v).abs();
            self.diff_n += 1;
        }
        self.spread += s.spread;
    }
    fn top1(&self) -> f64 {
        self.agree as f64 / self.steps as f64
    }
    /// Mean |Δlogit| as a fraction of the mean spread.
    fn rel_diff(&self) -> f64 {
        (self.diff / self.diff_n as f64) / (self.spread / self.steps as f64)
    }
}

fn state(model: &Arc<Model>) -> statelm_model::State {
    let opts = StateOptions {
        capacity: PARITY_CTX,
        kv_type: KvType::F32,
    };
    model.new_state_with(opts).unwrap()
}

/// The prompt as one batch, then each reference token alone.
fn stepwise(model: &Arc<Model>, p: &Prompt, score: &mut Score) {
    let mut st = state(model);
    let mut logits = model.forward(&mut st, &p.ids).unwrap();
    for (i, s) in p.steps.iter().enumerate() {
        score.add(logits.last(), s);
        if i + 1 < p.steps.len() {
            logits = model.forward(&mut st, &[s.token]).unwrap();
        }
    }
}

/// Every position in one batch.
fn batched(model: &Arc<Model>, p: &Prompt, score: &mut Score) {
    let mut st = state(model);
    let mut tokens = p.ids.clone();
    tokens.extend(p.steps[..p.steps.len() - 1].iter().map(|s| s.token));
    let opts = ForwardOptions {
        logits: Some(LogitsMode::LastN(p.steps.len())),
        ..Default::default()
    };
    let logits = model.forward_with(&mut st, &tokens, opts).unwrap();
    for (i, s) in p.steps.iter().enumerate() {
        score.add(logits.row(i), s);
    }
}

#[test]
fn every_architecture_matches_llama_cpp_on_its_synthetic_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, spec) in parity_set() {
        let (sha, n_ctx, mut prompts) = load("synthetic", name);
        subset(&mut prompts);
        assert_eq!(n_ctx, PARITY_CTX, "{name}: reference context");
        let path = dir.path().join(format!("{name}.gguf"));
        write_synthetic_model(&path, &spec).unwrap();
        let ours = format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()));
        assert_eq!(
            ours, sha,
            "{name}: the synthetic file changed; record its reference again (tools/parity/synth_reference.py)"
        );
        score_all_modes(name, &path, &prompts, [(0.99, 1e-4); 2], &mut failures);
    }
    assert!(
        failures.is_empty(),
        "below the bar:\n{}",
        failures.join("\n")
    );
}

/// `scripts/cross` runs one prompt per file under qemu (the NEON tables):
/// `STATELM_PARITY_PROMPTS=N` keeps the first N.
fn subset(prompts: &mut Vec<Prompt>) {
    if let Some(n) = std::env::var("STATELM_PARITY_PROMPTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        prompts.truncate(n.max(1));
    }
}

/// Scores the file at `path` in both numerics modes and both protocols; a run below its mode's
/// bar (`bars`: Fast, then LlamaCpp; least top-1 agreement, most mean |Δ| as a fraction of the
/// spread) adds a line to `failures`.
fn score_all_modes(
    name: &str,
    path: &std::path::Path,
    prompts: &[Prompt],
    bars: [(f64, f64); 2],
    failures: &mut Vec<String>,
) {
    for (numerics, bar) in [Numerics::Fast, Numerics::LlamaCpp].into_iter().zip(bars) {
        let opts = LoadOptions {
            numerics,
            threads: 2,
            ..LoadOptions::default()
        };
        let model = Model::load(path, &opts).unwrap();
        type Run = fn(&Arc<Model>, &Prompt, &mut Score);
        let protocols: [(&str, Run); 2] = [("stepwise", stepwise), ("batched", batched)];
        for (protocol, run) in protocols {
            let mut score = Score::default();
            for p in prompts {
                run(&model, p, &mut score);
            }
            let line = format!(
                "{name:20} {numerics:?}/{protocol}: top-1 {:.4}, mean |Δ| {:.2e} of the spread",
                score.top1(),
                score.rel_diff()
            );
            eprintln!("{line}");
            if score.top1() < bar.0 || score.rel_diff() > bar.1 {
                failures.push(line);
            }
        }
    }
}

/// Real small files from the package registries (`statelm pull`), scored the same way against
/// `reference/real/NAME.json` (text prompts, the last one 72 tokens so that prefill takes the
/// GEMMs). `Numerics::LlamaCpp` is held to issue 34's bar, top-1 ≥ 99% and mean |Δ| ≤ 1% of the
/// spread (measured: the reference's own protocol bit-identical, 100% / 1e-17; all positions in
/// one batch 99.2% / 1.9e-3). `Numerics::Fast` sums in its own orders on quantized weights, so
/// it is held, as the real models' parity test holds Gemma, to 95% (measured 96.9% / 3.1e-3
/// and 97.7% / 4.0e-3: four and three near-tie flips in 128 steps). Today: SmolLM2 135M
/// Instruct (`llama`, the `smollm` pre-tokenizer, Q4_1 with a Q8_0 embedding).
#[test]
fn real_small_files_match_llama_cpp() {
    let Some(path) = statelm_model::testing::smollm2_path() else {
        return;
    };
    let name = "smollm2-135m-instruct-q4_1";
    let (sha, n_ctx, mut prompts) = load("real", name);
    assert_eq!(n_ctx, PARITY_CTX, "{name}: reference context");
    let ours = format!("{:x}", Sha256::digest(std::fs::read(&path).unwrap()));
    assert_eq!(
        ours, sha,
        "{name}: not the file the reference was recorded on"
    );
    // The prompts' ids are llama.cpp's tokenization of the texts (BOS as the file says,
    // special tokens parsed): the `smollm` pre-tokenizer on a real vocabulary.
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(reference_dir().join("real").join(format!("{name}.json")))
            .unwrap(),
    )
    .unwrap();
    let model = Model::load(&path, &LoadOptions::default()).unwrap();
    for (p, ours) in doc["prompts"].as_array().unwrap().iter().zip(&prompts) {
        let text = p["prompt"].as_str().unwrap();
        let ids = model.tokenizer().encode(text, true, true).unwrap();
        assert_eq!(ids, ours.ids, "{name}: tokens of {text:?}");
    }
    subset(&mut prompts);
    // One prompt alone (`scripts/cross`): two near-tie flips of its 32 steps forgiven.
    let forgiven = if prompts.len() < 4 { 2.0 / 32.0 } else { 0.0 };
    let mut failures = Vec::new();
    score_all_modes(
        name,
        &path,
        &prompts,
        [(0.95 - forgiven, 0.01), (0.99 - forgiven, 0.01)],
        &mut failures,
    );
    assert!(
        failures.is_empty(),
        "below the bar:\n{}",
        failures.join("\n")
    );
}
