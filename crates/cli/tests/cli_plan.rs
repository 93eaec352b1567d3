//! `statelm plan`, `statelm quantize`, `statelm doctor` and `statelm inspect --device` end to end.

use serde_json::Value;
use statelm_gguf::GgmlType;
use statelm_model::testing::{self, write_synthetic_model, SyntheticSpec};
use statelm_model::Arch;
use std::process::Command;

fn statelm(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_statelm"));
    cmd.args(args)
        .env_remove("STATELM_DEVICE")
        .env_remove("STATELM_DEVICE_MEMORY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run statelm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str], env: &[(&str, &str)]) -> Value {
    let (ok, out, err) = statelm(args, env);
    assert!(ok, "statelm {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn plan_table_has_a_row_per_device() {
    let v = json(&["plan", "--table", "--json"], &[]);
    let rows = v["devices"].as_array().unwrap();
    let devices = statelm_governor::devices();
    assert_eq!(rows.len(), devices.len());
    for (row, d) in rows.iter().zip(&devices) {
        assert_eq!(row["id"], d.id.as_str());
        let (q4, q8) = (
            row["max_params_4bit"].as_u64().unwrap(),
            row["max_params_8bit"].as_u64().unwrap(),
        );
        assert!(q4 > q8 && q8 > 0, "{row}");
    }
    // The tier follows physical RAM: 8 GB → q8_0/2048, 6 GB → q4/1024.
    let tier = |id: &str| {
        let r = rows.iter().find(|r| r["id"] == id).unwrap();
        (
            r["tier"]["quant"].clone(),
            r["tier"]["token_budget"].clone(),
        )
    };
    assert_eq!(tier("iphone-15-pro"), ("q8_0".into(), 2048.into()));
    assert!(
        rows.iter().all(|r| r.get("guide").is_none()),
        "guide rows are not matched by RAM"
    );
    // The guide's rows stand apart, labelled by chip, with their tier.
    let guide = v["guide"].as_array().unwrap();
    let chips = |c: &str| guide.iter().find(|g| g["chips"] == c).unwrap();
    assert_eq!(
        chips("A17 Pro/A18 Pro")["params_4bit"].as_f64(),
        Some(3.5e9)
    );
    assert_eq!(chips("A17 Pro/A18 Pro")["tier"]["quant"], "q8_0");
    assert_eq!(chips("A15/A16")["tier"]["quant"], "q4");
    assert_eq!(chips("A15/A16")["tier"]["token_budget"], 1024);
    assert!(
        chips("A15/A16")["planned_4bit_ram_minus_2gb"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(!v["assumptions"].as_array().unwrap().is_empty());
    let (ok, text, _) = statelm(&["plan", "--table"], &[]);
    assert!(
        ok && text.contains("iphone-15-pro")
            && text.contains("A17 Pro/A18 Pro")
            && text.contains("Assumptions"),
        "{text}"
    );
}

#[test]
fn plan_a_model_under_one_gib() {
    let Some(gemma) = testing::gemma_path() else {
        return;
    };
    let path = gemma.to_str().unwrap();
    let v = json(&["plan", "-m", path, "--memory", "1GiB", "--json"], &[]);
    assert_eq!(v["ceiling"].as_u64(), Some(1 << 30));
    assert_eq!(v["fits"], true);
    let total = v["total"].as_u64().unwrap();
    let parts = [
        "weights_total",
        "weight_vectors",
        "kv_at_context",
        "scratch",
        "token_history",
        "logits",
        "tokenizer",
        "runtime",
    ];
    let sum: u64 = parts.iter().map(|k| v[*k].as_u64().unwrap()).sum();
    assert_eq!(sum, total);
    assert!(v["kv_per_token_beyond_window"].as_u64() < v["kv_per_token"].as_u64());
    assert_eq!(v["tiers"].as_array().unwrap().len(), 2);
    // Prompt lookup's verification batches return one logits row per checked token.
    let lookup = json(
        &[
            "plan", "-m", path, "--memory", "1GiB", "--lookup", "8", "--json",
        ],
        &[],
    );
    let row = v["logits"].as_u64().unwrap();
    assert_eq!(lookup["logits"].as_u64(), Some(9 * row));
    assert!(lookup["total"].as_u64().unwrap() > total);
    let q8 = json(
        &[
            "plan",
            "-m",
            path,
            "--device",
            "iphone-15-pro",
            "--kv-type",
            "q8_0",
            "--context",
            "4096",
            "--json",
        ],
        &[],
    );
    assert_eq!(q8["kv_type"], "q8_0");
    assert_eq!(q8["ceiling"].as_u64(), Some(4 << 30));
    let (ok, _, err) = statelm(&["plan", "-m", path, "--device", "nokia-3310"], &[]);
    assert!(!ok && err.contains("unknown device"), "{err}");
}

#[test]
fn quantize_a_synthetic_model() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.gguf");
    let spec = SyntheticSpec {
        weight_type: GgmlType::F16,
        ..SyntheticSpec::tiny(Arch::Llama)
    };
    write_synthetic_model(&src, &spec).unwrap();
    let out = dir.path().join("m-q8_0.gguf");
    let args = [
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--type",
        "q8_0",
        "--perplexity",
        "--window",
        "32",
        "--json",
    ];
    let v = json(&args, &[]);
    assert_eq!(v["target"], "q8_0");
    assert!(v["file_bytes_out"].as_u64() < v["file_bytes_in"].as_u64());
    assert!(v["perplexity"]["output"].as_f64().unwrap().is_finite());
    let (ok, _, err) = statelm(
        &[
            "quantize",
            src.to_str().unwrap(),
            "x.gguf",
            "--type",
            "q3_k",
        ],
        &[],
    );
    assert!(!ok && err.contains("unknown type"), "{err}");
}

#[test]
fn doctor_and_device_profile_honour_simulation() {
    let v = json(&["doctor", "--json"], &[("STATELM_DEVICE_MEMORY", "4GiB")]);
    assert_eq!(v["effective_memory"].as_u64(), Some(4 << 30));
    assert_eq!(v["tier"]["quant"], "q4");
    assert!(v["memory_sources"].is_array());
    let v = json(
        &["inspect", "--device", "--json"],
        &[("STATELM_DEVICE", "laptop-16gb")],
    );
    assert_eq!(v["tier"]["quant"], "q8_0");
    assert!(v["kernel_isa"].as_str().is_some_and(|s| !s.is_empty()));
    let (ok, text, _) = statelm(&["doctor"], &[]);
    assert!(
        ok && text.contains("kernels") && text.contains("tier"),
        "{text}"
    );
}

/// `--tier` on a directory of variants: a small device gets the 4-bit file, a large one the
/// Q8_0 file, and each load says what it chose in one line.
#[test]
fn tier_flag_picks_the_variant_for_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = SyntheticSpec::tiny(Arch::Llama);
    spec.weight_type = GgmlType::Q4_0;
    write_synthetic_model(dir.path().join("m-q4_0.gguf"), &spec).unwrap();
    spec.weight_type = GgmlType::Q8_0;
    write_synthetic_model(dir.path().join("m-q8_0.gguf"), &spec).unwrap();
    let d = dir.path().to_str().unwrap();
    for (mem, want, budget) in [
        ("4GiB", "m-q4_0.gguf", 1024),
        ("16GiB", "m-q8_0.gguf", 2048),
    ] {
        let (ok, out, err) = statelm(
            &[
                "--tier", "default", "run", "-m", d, "-p", "ab", "-n", "2", "--json",
            ],
            &[("STATELM_DEVICE_MEMORY", mem)],
        );
        assert!(ok, "{err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("tier "))
            .expect("a tier line");
        assert!(line.contains(want), "{mem}: {line}");
        // The tier's token budget is the one the generation runs with.
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["token_budget"], budget, "{mem}: {v}");
    }
    // A budget on the command line wins over the tier's.
    let (ok, out, err) = statelm(
        &[
            "--tier", "default", "run", "-m", d, "-p", "ab", "-n", "2", "--json", "--ctx", "300",
        ],
        &[("STATELM_DEVICE_MEMORY", "4GiB")],
    );
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["token_budget"], 300, "{v}");
}
