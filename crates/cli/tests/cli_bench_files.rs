//! `bench/synth_model.py`, the writer of the phone-size benchmark files: tiny files of both
//! architectures it writes load, quantize to Q4_K_M — K-quants, as the recipe gives at widths
//! that are multiples of 256 — and generate.

mod cli_common;

use cli_common::{run, text};
use serde_json::Value;
use std::process::Command;

#[test]
fn synthetic_benchmark_files_quantize_to_k_quants_and_generate() {
    let Some(qwen) = statelm_model::testing::qwen_path() else {
        return;
    };
    let has_gguf = Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_gguf {
        eprintln!("skipped: needs python3 with gguf and numpy (scripts/test installs them)");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/synth_model.py");
    let dir = tempfile::tempdir().unwrap();
    for arch in ["qwen2", "llama"] {
        let f16 = dir.path().join(format!("{arch}-f16.gguf"));
        let q = dir.path().join(format!("{arch}-q4_k_m.gguf"));
        let shape = ["--hidden", "256", "--ffn", "512", "--layers", "2"];
        let o = Command::new("python3")
            .arg(script)
            .arg(&f16)
            .args(["--arch", arch, "--heads", "4", "--kv-heads", "2"])
            .args(shape)
            .arg("--tokenizer-from")
            .arg(&qwen)
            .output()
            .unwrap();
        assert!(o.status.success(), "{arch}: {:?}", text(&o));
        let (f16, q) = (f16.to_str().unwrap(), q.to_str().unwrap());
        let o = run(&["quantize", f16, q, "--type", "q4_k_m"], "");
        assert!(o.status.success(), "{arch}: {:?}", text(&o));
        let o = run(&["inspect", "-m", q, "--json"], "");
        assert!(o.status.success(), "{arch}: {:?}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["architecture"], arch);
        let types = &v["tensors_by_type"];
        for ty in ["Q4_K", "Q6_K"] {
            assert!(types[ty]["count"].as_u64() > Some(0), "{arch} {ty}: {v}");
        }
        let o = run(&["run", "-m", q, "-p", "hi", "-n", "4"], "");
        let (out, err) = text(&o);
        assert!(o.status.success(), "{arch}: {out}\n{err}");
        assert!(err.contains("4 generated"), "{arch}: {out}\n{err}");
    }
}
