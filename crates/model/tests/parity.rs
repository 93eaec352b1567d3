//! Parity with llama.cpp, teacher-forced, on the real models (`reference/`).
//!
//! Bars (from the issue): with an f32 KV cache against llama.cpp's most precise run
//! (`.f32kv-nofa`), top-1 agreement ≥ 99% of all steps and mean |Δlogit| ≤ 0.1 over each step's
//! 20 reference ids; with the default f16 cache, no worse than llama.cpp's own default is
//! against the same file (table in the reference README). The exact run covers every prompt;
//! the fast-numerics and f16-cache runs the eleven under 512 tokens (see [`SHORT`]).

mod common;

use common::{teacher_force_file, teacher_force_prompts};
use statelm_model::{testing, KvType, LoadOptions, Model, Numerics};

/// The bar for the f32 run in llama.cpp's numerics: (top-1 agreement, mean |Δlogit|). It is
/// bit-identical to the reference (every top-1, and |Δ| under the reference files' rounding),
/// so that is what is asserted — the issue's own bar (99 %, 0.1) would let a regression to
/// about 1 % disagreement pass.
const F32_BAR: (f64, f64) = (1.0, 1e-4);

/// The longest prompt (tokens) of the fast-numerics and f16-cache runs. The two long prompts
/// (593 and 1055 tokens) are two thirds of a run's time on a CPU without VNNI (~100 s of each
/// run's ~145 s there), so they run once, in the exact run (llama.cpp's numerics, f32 cache:
/// bit for bit), which holds the long-context paths to the strictest bar. On the eleven
/// shorter prompts (352 steps) the other two runs stay inside the bars below, which were set
/// over all thirteen: Gemma fast 97.27 % / 0.1933, f16 96.48 % / 0.2274; Qwen fast
/// 99.43 % / 0.0680, f16 99.72 % / 0.0709 (AVX2 host, 2026-12-06).
const SHORT: usize = 512;

/// Top-1 flips forgiven when the environment selects a subset of the prompts
/// (`STATELM_PARITY_PROMPTS`, `STATELM_PARITY_ONLY`): over one prompt's 32 steps a single
/// near-tie flip is 3 points, so a subset is held to the mean |Δlogit| bars as they are and
/// to the top-1 bars less two steps. The default run (every prompt) forgives nothing.
const SUBSET_FLIPS: f64 = 2.0;

/// A top-1 bar lowered by [`SUBSET_FLIPS`] steps when only a subset of prompts runs.
fn subset_top1_bar(bar: f64, steps: usize) -> f64 {
    if common::subset_selected() {
        bar - SUBSET_FLIPS / steps.max(1) as f64
    } else {
        bar
    }
}

/// Holds a model to the bars. With `Numerics::LlamaCpp` every product sums in the order of
/// llama.cpp's x86 backend at the reference's commit (llama-cpp-python 0.3.35 reproduces the
/// reference files exactly; `tools/parity`), so the f32 run is bit-identical to the reference
/// (both models: 100% / 0.0000). `fast_bar` holds the default `Numerics::Fast` (f32 GEMM prefill) to the spread
/// of llama.cpp's own settings, as before.
fn check(
    path: Option<std::path::PathBuf>,
    reference: &str,
    fast_bar: (f64, f64),
    llama_default: (f64, f64),
) {
    let Some(path) = path else { return };
    let load = |numerics| {
        let opts = LoadOptions {
            numerics,
            ..LoadOptions::default()
        };
        Model::load(&path, &opts).unwrap()
    };
    let fast = teacher_force_prompts(&load(Numerics::Fast), reference, KvType::F32, SHORT);
    eprintln!(
        "{reference}: fast numerics, f32 KV top-1 {:.4}, mean |Δ| {:.4}",
        fast.top1(),
        fast.mean_abs()
    );
    assert!(
        fast.top1() >= subset_top1_bar(fast_bar.0, fast.steps) && fast.mean_abs() <= fast_bar.1
    );
    let model = load(Numerics::LlamaCpp);
    let f32kv = teacher_force_file(&model, reference, KvType::F32);
    eprintln!(
        "{reference}: f32 KV top-1 {:.4}, mean |Δ| {:.4}",
        f32kv.top1(),
        f32kv.mean_abs()
    );
    // Every kernel table, x86 or ARM (NEON sums in the AVX2 kernels' order), is held to this,
    // subsets of prompts too: exact agreement forgives no flip.
    let (top1_bar, mean_bar) = F32_BAR;
    assert!(
        f32kv.top1() >= top1_bar,
        "f32 KV top-1 agreement {:.3} < {top1_bar}",
        f32kv.top1()
    );
    assert!(
        f32kv.mean_abs() <= mean_bar,
        "f32 KV mean |Δlogit| {:.4} > {mean_bar}",
        f32kv.mean_abs()
    );
    let f16kv = teacher_force_prompts(&model, reference, KvType::F16, SHORT);
    eprintln!(
        "{reference}: f16 KV top-1 {:.4}, mean |Δ| {:.4}",
        f16kv.top1(),
        f16kv.mean_abs()
    );
    // "No worse than llama.cpp's own default", within the noise of one run: a single top-1 flip
    // is 0.28 points on these 352 steps, and any change of summation order flips a few
    // near-ties (llama.cpp's own f16 and f32 runs disagree on 5 of them). So: top-1 within half
    // a point of llama.cpp's default, and the mean within 5% of it.
    let (top1, mean_bar) = llama_default;
    let top1_bar = subset_top1_bar(top1, f16kv.steps);
    assert!(
        f16kv.top1() >= top1_bar - 0.005,
        "f16 KV top-1 {:.4} < llama.cpp's {top1_bar} - 0.005",
        f16kv.top1()
    );
    assert!(
        f16kv.mean_abs() <= mean_bar * 1.05,
        "f16 KV mean {:.4} > llama.cpp's {mean_bar} (+5%)",
        f16kv.mean_abs()
    );
}

#[test]
fn gemma3_matches_llama_cpp() {
    check(
        testing::gemma_path(),
        "logits-gemma-3-270m-q4_k_m.f32kv-nofa.json",
        (0.95, 0.25),
        (0.947, 0.249),
    );
}

#[test]
fn qwen2_matches_llama_cpp() {
    check(
        testing::qwen_path(),
        "logits-qwen2.5-coder-0.5b-instruct-q4_k_m.f32kv-nofa.json",
        (0.985, 0.1),
        (0.987, 0.069),
    );
}
