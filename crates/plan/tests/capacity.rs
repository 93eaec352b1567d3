//! The capacity planner against what the runtime really allocates, on the two real models:
//! weights = the mapped tensor bytes, and `State::bytes() + Scratch::bytes()` after a real
//! prefill of N tokens (N = 512 and 2048, f16 cache) = the planner's KV + scratch + token
//! history, within 5%.
//! The tokenizer estimate is checked against the anonymous memory a load really adds,
//! measured in a child process (`RssAnon` of /proc/self/status) so other tests cannot skew it.

use statelm_gguf::GgufFile;
use statelm_model::quantize::SAMPLE_TEXT;
use statelm_model::{testing, KvType, LoadOptions, Model, StateOptions};
use statelm_plan::capacity::{plan, tokenizer_bytes, ModelSketch, PlanOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD_ENV: &str = "STATELM_PLAN_HEAP_CHILD";

fn tokens(model: &Model, n: usize) -> Vec<u32> {
    let once = model.tokenizer().encode(SAMPLE_TEXT, false, false).unwrap();
    once.iter().copied().cycle().take(n).collect()
}

fn within(a: u64, b: u64, tol: f64) -> bool {
    (a as f64 - b as f64).abs() <= tol * b as f64
}

/// `real`: the weights are most of the file (not so for a tiny synthetic model, whose file is
/// mostly its vocabulary).
fn check_model(path: Option<PathBuf>, real: bool) {
    let Some(path) = path else { return };
    let file = GgufFile::open(&path).unwrap();
    let sketch = ModelSketch::from_gguf(&file, "m").unwrap();
    let tensor_bytes: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    let model = Model::load(&path, &LoadOptions::default()).unwrap();
    for n in [512usize, 2048] {
        let mut o = PlanOptions::new(n);
        o.ubatch = LoadOptions::default().ubatch;
        o.kv_type = KvType::F16;
        let f = plan(&sketch, &o);
        assert_eq!(f.weights_total, tensor_bytes);
        assert!(!real || within(f.weights_total, model.file_bytes(), 0.05));
        let mut state = model.new_state_with(StateOptions::new(n)).unwrap();
        let mut scratch = model.new_scratch();
        let mut logits = statelm_model::Logits::default();
        let toks = tokens(&model, n);
        let fwd = Default::default();
        model
            .forward_into(&mut scratch, &mut state, &toks, fwd, &mut logits)
            .unwrap();
        // The State's bytes and the scratch that ran it.
        let real = (state.bytes() + scratch.bytes()) as u64;
        eprintln!(
            "{} N={n}: planned state {} (kv {} + scratch {} + tokens {}), real {real} \
             (kv {}); weights {} of a {}-byte file; total {} (tokenizer {})",
            path.file_name().unwrap().to_string_lossy(),
            f.state_bytes(),
            f.kv_at_context,
            f.scratch,
            f.token_history,
            state.kv_bytes(),
            f.weights_total,
            model.file_bytes(),
            f.total,
            f.tokenizer
        );
        assert!(within(f.kv_at_context, state.kv_bytes() as u64, 0.05));
        assert!(
            within(f.state_bytes(), real, 0.05),
            "{} vs {real}",
            f.state_bytes()
        );
    }
}

/// Every architecture's tiny synthetic file: fused tensors (Phi-3) and convolution layers
/// (LFM2, whose state is a fixed ring, not KV cells) are planned as the runtime allocates them.
#[test]
fn every_architecture_plan_matches_runtime() {
    for arch in statelm_model::Arch::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{}.gguf", arch.name()));
        let spec = testing::SyntheticSpec::tiny(arch);
        testing::write_synthetic_model(&path, &spec).unwrap();
        check_model(Some(path), false);
    }
}

#[test]
fn gemma_plan_matches_runtime() {
    check_model(testing::gemma_path(), true);
}

#[test]
fn qwen_plan_matches_runtime() {
    check_model(testing::qwen_path(), true);
}

fn rss_anon() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs only in the child process: loads the model and prints the anonymous memory it added.
#[test]
fn heap_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let before = rss_anon();
    let model = Model::load(Path::new(&path), &LoadOptions::default()).unwrap();
    let after = rss_anon();
    println!("HEAP {}", after.saturating_sub(before));
    drop(model);
}

fn measured_heap(path: &Path) -> Option<u64> {
    let out = Command::new(std::env::current_exe().ok()?)
        .args(["--exact", "heap_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split("HEAP ").nth(1))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn tokenizer_estimate_matches_load_heap() {
    if !cfg!(target_os = "linux") {
        return;
    }
    for path in [testing::gemma_path(), testing::qwen_path()]
        .into_iter()
        .flatten()
    {
        let file = GgufFile::open(&path).unwrap();
        let sketch = ModelSketch::from_gguf(&file, "m").unwrap();
        let estimate = tokenizer_bytes(&sketch.tokenizer) + sketch.vector_bytes;
        let measured = measured_heap(&path).expect("child process reports its heap");
        eprintln!(
            "{}: load heap {measured} bytes, planner tokenizer + vectors {estimate} ({:+.1}%), \
             {:?}",
            path.file_name().unwrap().to_string_lossy(),
            100.0 * (estimate as f64 / measured as f64 - 1.0),
            sketch.tokenizer
        );
        assert!(within(estimate, measured, 0.35), "{estimate} vs {measured}");
    }
}
