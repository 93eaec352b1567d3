//! Shared helpers of the model tests: the llama.cpp reference files and teacher forcing.
#![allow(dead_code)]

use serde_json::Value;
use statelm_model::testing::reference_dir;
use statelm_model::{ForwardOptions, KvType, LogitsMode, Model, StateOptions};
use std::sync::Arc;

/// One step of a reference continuation.
pub struct Step {
    pub token: u32,
    pub top: Vec<(u32, f32)>,
    pub lse: f32,
}

/// One reference prompt with its teacher-forced steps.
pub struct RefPrompt {
    pub name: String,
    pub prompt_ids: Vec<u32>,
    pub steps: Vec<Step>,
}

impl RefPrompt {
    /// The tokens to feed: the prompt, then every step's token but the last.
    pub fn forced_tokens(&self) -> Vec<u32> {
        let mut t = self.prompt_ids.clone();
        t.extend(self.steps[..self.steps.len() - 1].iter().map(|s| s.token));
        t
    }
}

/// Reads `logits-<name>.json` from the reference directory.
pub fn load_reference(file: &str) -> Vec<RefPrompt> {
    let path = reference_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| RefPrompt {
            name: p["name"].as_str().unwrap().to_string(),
            prompt_ids: ids(&p["prompt_ids"]),
            steps: p["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Step {
                    token: s["token"].as_u64().unwrap() as u32,
                    lse: s["lse"].as_f64().unwrap() as f32,
                    top: s["top"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap() as f32))
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Agreement of our logits with a reference over many steps.
#[derive(Default, Debug, Clone)]
pub struct Agreement {
    pub steps: usize,
    pub top1_agree: usize,
    pub abs_diff_sum: f64,
    pub abs_diff_n: usize,
    pub max_abs_diff: f32,
}

impl Agreement {
    pub fn top1(&self) -> f64 {
        self.top1_agree as f64 / self.steps.max(1) as f64
    }
    pub fn mean_abs(&self) -> f64 {
        self.abs_diff_sum / self.abs_diff_n.max(1) as f64
    }
    pub fn add(&mut self, o: &Agreement) {
        self.steps += o.steps;
        self.top1_agree += o.top1_agree;
        self.abs_diff_sum += o.abs_diff_sum;
        self.abs_diff_n += o.abs_diff_n;
        self.max_abs_diff = self.max_abs_diff.max(o.max_abs_diff);
    }
}

/// Compares one row of our logits with a reference step.
pub fn compare_step(ours: &[f32], step: &Step) -> Agreement {
    let mut a = Agreement {
        steps: 1,
        ..Default::default()
    };
    if statelm_model::argmax(ours) == step.token {
        a.top1_agree = 1;
    }
    for &(id, logit) in &step.top {
        let d = (ours[id as usize] - logit).abs();
        a.abs_diff_sum += d as f64;
        a.abs_diff_n += 1;
        a.max_abs_diff = a.max_abs_diff.max(d);
    }
    a
}

/// Teacher-forces one prompt in a fresh state and compares every step. Like the reference run,
/// the prompt is prefilled as one batch and every later token is decoded one at a time.
pub fn teacher_force(model: &Arc<Model>, p: &RefPrompt, kv_type: KvType) -> Agreement {
    if std::env::var("STATELM_PARITY_BATCHED").is_ok() {
        return teacher_force_batched(model, p, kv_type);
    }
    let mut state = model
        .new_state_with(StateOptions {
            capacity: p.prompt_ids.len() + p.steps.len(),
            kv_type,
        })
        .unwrap();
    let mut total = Agreement::default();
    let mut logits = model.forward(&mut state, &p.prompt_ids).unwrap();
    for (i, step) in p.steps.iter().enumerate() {
        total.add(&compare_step(logits.last(), step));
        if i + 1 < p.steps.len() {
            logits = model.forward(&mut state, &[step.token]).unwrap();
        }
    }
    total
}

/// Teacher forcing with every position in one batch.
pub fn teacher_force_batched(model: &Arc<Model>, p: &RefPrompt, kv_type: KvType) -> Agreement {
    let tokens = p.forced_tokens();
    let mut state = model
        .new_state_with(StateOptions {
            capacity: tokens.len(),
            kv_type,
        })
        .unwrap();
    let opts = ForwardOptions {
        logits: Some(LogitsMode::LastN(p.steps.len())),
        ..Default::default()
    };
    let logits = model.forward_with(&mut state, &tokens, opts).unwrap();
    assert_eq!(logits.rows(), p.steps.len());
    let mut total = Agreement::default();
    for (i, step) in p.steps.iter().enumerate() {
        total.add(&compare_step(logits.row(i), step));
    }
    total
}

/// Whether the environment selects a subset of the prompts (see [`selected_prompts`]).
pub fn subset_selected() -> bool {
    ["STATELM_PARITY_ONLY", "STATELM_PARITY_PROMPTS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The prompts the environment selects, in file order: all of them by default.
///
/// - `STATELM_PARITY_ONLY=name,name` keeps the named prompts (for bisecting a mismatch);
/// - `STATELM_PARITY_PROMPTS=N` keeps the first N of those (`scripts/cross` runs one prompt per
///   model under emulation, where the whole file would take an hour).
///
/// An unparsable `STATELM_PARITY_PROMPTS` or a filter that selects nothing fails the test.
pub fn selected_prompts(prompts: Vec<RefPrompt>) -> Vec<RefPrompt> {
    let only = std::env::var("STATELM_PARITY_ONLY").ok();
    let count = std::env::var("STATELM_PARITY_PROMPTS").ok().map(|v| {
        v.trim()
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("STATELM_PARITY_PROMPTS={v:?} is not a count"))
    });
    let selected: Vec<RefPrompt> = prompts
        .into_iter()
        .filter(|p| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|n| n == p.name))
        })
        .take(count.unwrap_or(usize::MAX))
        .collect();
    assert!(!selected.is_empty(), "the parity filters select no prompt");
    selected
}

/// Teacher-forces every selected prompt of a reference file ([`selected_prompts`]), printing a
/// per-prompt table.
pub fn teacher_force_file(model: &Arc<Model>, file: &str, kv_type: KvType) -> Agreement {
    teacher_force_prompts(model, file, kv_type, usize::MAX)
}

/// [`teacher_force_file`] over the selected prompts of at most `max_prompt` tokens.
pub fn teacher_force_prompts(
    model: &Arc<Model>,
    file: &str,
    kv_type: KvType,
    max_prompt: usize,
) -> Agreement {
    let mut total = Agreement::default();
    let prompts = selected_prompts(load_reference(file));
    for p in prompts.iter().filter(|p| p.prompt_ids.len() <= max_prompt) {
        let a = teacher_force(model, p, kv_type);
        eprintln!(
            "{file} [{kv_type:?}] {:<14} len {:>5}: top1 {:>3}/{:<3} mean|d| {:.4} max {:.3}",
            p.name,
            p.prompt_ids.len(),
            a.top1_agree,
            a.steps,
            a.mean_abs(),
            a.max_abs_diff
        );
        total.add(&a);
    }
    eprintln!(
        "{file} [{kv_type:?}] TOTAL top1 {:.2}% mean|d| {:.4} max {:.3}",
        100.0 * total.top1(),
        total.mean_abs(),
        total.max_abs_diff
    );
    total
}
