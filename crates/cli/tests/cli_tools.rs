//! `statelm tokenize`, `logits` and `perplexity` against the libraries and the llama.cpp
//! reference outputs.

mod cli_common;

use cli_common::{assert_clean_failure, gemma, run, text, write};
use serde_json::Value;

fn json_of(o: &std::process::Output) -> Value {
    let (out, err) = text(o);
    assert!(o.status.success(), "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn tokenize_json_matches_the_library() {
    let Some(model) = gemma() else { return };
    let file = statelm_gguf::GgufFile::open(&model).unwrap();
    let tok = statelm_tokenizer::Tokenizer::from_gguf(&file).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for input in [
        "The capital of France is",
        "  héllo\n\twörld 🦀 <start_of_turn>user",
        "",
    ] {
        for (flags, add, special) in [
            (vec![], true, false),
            (vec!["--no-bos"], false, false),
            (vec!["--special"], true, true),
        ] {
            let want = tok.encode(input, add, special).unwrap();
            let mut args = vec!["tokenize", "-m", &model, "--json"];
            args.extend(&flags);
            let mut with_text = args.clone();
            with_text.push(input);
            let v = json_of(&run(&with_text, ""));
            let got: Vec<u32> = serde_json::from_value(v["ids"].clone()).unwrap();
            assert_eq!(got, want, "{input:?} {flags:?}");
            assert_eq!(v["count"], want.len());
            // The same through --file and stdin.
            let f = write(dir.path(), "t.txt", input.as_bytes());
            let mut with_file = args.clone();
            with_file.extend(["--file", f.to_str().unwrap()]);
            assert_eq!(json_of(&run(&with_file, ""))["ids"], v["ids"]);
            let mut with_stdin = args.clone();
            with_stdin.push("-");
            assert_eq!(json_of(&run(&with_stdin, input))["ids"], v["ids"]);
        }
    }
    // Without --json: one `ID  "piece"` line per token.
    let o = run(&["tokenize", "-m", &model, "Hello world"], "");
    let (out, _) = text(&o);
    let ids: Vec<u32> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, tok.encode("Hello world", true, false).unwrap());
    assert!(out.contains("\" world\""), "{out}");
}

#[test]
fn invalid_utf8_files_are_clear_errors() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.txt", b"fine text \xff\xfe more");
    let bad = bad.to_str().unwrap();
    for args in [
        vec!["tokenize", "-m", &model, "--file", bad],
        vec!["perplexity", "-m", &model, "-f", bad],
    ] {
        let o = run(&args, "");
        assert_clean_failure(&o, &format!("{args:?}"));
        let (_, err) = text(&o);
        assert!(
            err.contains("not valid UTF-8 (invalid byte at offset 10)"),
            "{err}"
        );
    }
    let o = run(
        &["tokenize", "-m", &model, "--file", "/nonexistent.txt"],
        "",
    );
    assert_clean_failure(&o, "missing file");
}

#[test]
fn logits_match_the_library_and_the_reference() {
    let Some(model_path) = gemma() else { return };
    let o = run(
        &[
            "logits",
            "-m",
            &model_path,
            "--text",
            "The capital of France is",
            "--top",
            "20",
            "--json",
        ],
        "",
    );
    let v = json_of(&o);
    let tokens: Vec<u32> = serde_json::from_value(v["tokens"].clone()).unwrap();
    let positions = v["positions"].as_array().unwrap();
    assert_eq!(positions.len(), tokens.len());
    // The library, teacher-forced the same way (f32 cache), gives the same numbers.
    let model = statelm_model::Model::load(&model_path, &Default::default()).unwrap();
    let mut state = model
        .new_state_with(statelm_model::StateOptions {
            capacity: tokens.len(),
            kv_type: statelm_model::KvType::F32,
        })
        .unwrap();
    let opts = statelm_model::ForwardOptions {
        logits: Some(statelm_model::LogitsMode::LastN(tokens.len())),
        ..Default::default()
    };
    let logits = model.forward_with(&mut state, &tokens, opts).unwrap();
    for (i, p) in positions.iter().enumerate() {
        let row = logits.row(i);
        assert_eq!(p["token"], tokens[i]);
        assert_eq!(p["top"].as_array().unwrap().len(), 20);
        let top0 = statelm_model::argmax(row);
        assert_eq!(p["top"][0][0], top0, "position {i}");
        let lse = p["lse"].as_f64().unwrap() as f32;
        assert!(
            (lse - statelm_model::ops::log_sum_exp(row)).abs() < 1e-3,
            "position {i}"
        );
    }
    // And llama.cpp's reference (f32 KV, no flash attention) agrees at the last position.
    let reference =
        statelm_model::testing::reference_dir().join("logits-gemma-3-270m-q4_k_m.f32kv-nofa.json");
    let r: Value = serde_json::from_slice(&std::fs::read(reference).unwrap()).unwrap();
    let short = &r[0];
    assert_eq!(short["prompt"], "The capital of France is");
    assert_eq!(v["tokens"], short["prompt_ids"]);
    let step = &short["steps"][0];
    let last = positions.last().unwrap();
    assert_eq!(last["top"][0][0], step["top"][0][0]);
    let d = (last["lse"].as_f64().unwrap() - step["lse"].as_f64().unwrap()).abs();
    assert!(d < 0.5, "lse differs from llama.cpp by {d}");
    // --tokens gives the same as --text.
    let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let o = run(
        &[
            "logits",
            "-m",
            &model_path,
            "--tokens",
            &ids.join(","),
            "--top",
            "20",
            "--json",
        ],
        "",
    );
    assert_eq!(json_of(&o)["positions"], v["positions"]);
    let o = run(
        &["logits", "-m", &model_path, "--tokens", "2,999999999"],
        "",
    );
    assert_clean_failure(&o, "token outside the vocabulary");
}

/// `--prefill N` runs llama.cpp's protocol (the prompt as one batch, then one token per call):
/// with `--numerics llama-cpp` and an f32 cache it reproduces the reference file's logits
/// (llama.cpp, f32 KV, no flash attention) at every step, as the README claims.
#[test]
fn logits_prefill_reproduces_the_reference_protocol() {
    let Some(model_path) = gemma() else { return };
    let reference =
        statelm_model::testing::reference_dir().join("logits-gemma-3-270m-q4_k_m.f32kv-nofa.json");
    let r: Value = serde_json::from_slice(&std::fs::read(reference).unwrap()).unwrap();
    let p = &r[0];
    let prompt: Vec<u64> = serde_json::from_value(p["prompt_ids"].clone()).unwrap();
    let steps = p["steps"].as_array().unwrap();
    let mut tokens: Vec<String> = prompt.iter().map(u64::to_string).collect();
    tokens.extend(
        steps[..steps.len() - 1]
            .iter()
            .map(|s| s["token"].to_string()),
    );
    let prefill = prompt.len().to_string();
    let o = run(
        &[
            "--numerics",
            "llama-cpp",
            "logits",
            "-m",
            &model_path,
            "--tokens",
            &tokens.join(","),
            "--prefill",
            &prefill,
            "--kv-type",
            "f32",
            "--top",
            "20",
            "--json",
        ],
        "",
    );
    let rows = json_of(&o)["positions"].as_array().unwrap().clone();
    assert_eq!(rows.len(), steps.len());
    let mut worst = 0f64;
    for (row, step) in rows.iter().zip(steps) {
        let ours: std::collections::HashMap<u64, f64> = (row["top"].as_array().unwrap().iter())
            .map(|t| (t[0].as_u64().unwrap(), t[1].as_f64().unwrap()))
            .collect();
        assert_eq!(row["top"][0][0], step["top"][0][0]);
        for t in step["top"].as_array().unwrap() {
            if let Some(l) = ours.get(&t[0].as_u64().unwrap()) {
                worst = worst.max((l - t[1].as_f64().unwrap()).abs());
            }
        }
    }
    assert!(worst < 1e-3, "largest |Δlogit| against llama.cpp: {worst}");
}

#[test]
fn perplexity_of_a_small_file() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let fox = "The quick brown fox jumps over the lazy dog. ".repeat(30);
    let f = write(dir.path(), "fox.txt", fox.as_bytes());
    let o = run(
        &[
            "perplexity",
            "-m",
            &model,
            "-f",
            f.to_str().unwrap(),
            "--ctx",
            "64",
            "--json",
        ],
        "",
    );
    let v = json_of(&o);
    let ppl = v["perplexity"].as_f64().unwrap();
    let windows = v["windows"].as_u64().unwrap();
    assert!(windows >= 2, "{v}");
    assert_eq!(
        v["scored_tokens"].as_u64().unwrap(),
        windows * (64 - 1 - 32),
        "{v}"
    );
    // A repeated sentence is very predictable once seen.
    assert!((1.0..5.0).contains(&ppl), "{v}");
    let o = run(
        &[
            "perplexity",
            "-m",
            &model,
            "-f",
            f.to_str().unwrap(),
            "--ctx",
            "64",
        ],
        "",
    );
    let (out, _) = text(&o);
    assert!(out.starts_with("perplexity "), "{out}");
}

/// `statelm perplexity` and the quantizer's check are one routine: the command's figure on a
/// file equals the library's `quantize::perplexity` on its text (same window, f32 cache).
#[test]
fn the_command_and_the_quantizer_check_agree() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let text = "A lighthouse keeper logs the wind, the sea and every ship. ".repeat(12);
    let f = write(dir.path(), "log.txt", text.as_bytes());
    let o = run(
        &[
            "perplexity",
            "-m",
            &model,
            "-f",
            f.to_str().unwrap(),
            "--ctx",
            "48",
            "--kv-type",
            "f32",
            "--json",
        ],
        "",
    );
    let v = json_of(&o);
    let m = statelm_model::Model::load(&model, &Default::default()).unwrap();
    let lib = statelm_model::quantize::perplexity(&m, &text, 48).unwrap();
    // Equal up to the JSON round trip of an f64 (serde_json's parser may miss the last bit).
    let cli = v["perplexity"].as_f64().unwrap();
    assert!(
        (cli - lib.ppl).abs() <= 1e-12 * lib.ppl,
        "{v} vs {}",
        lib.ppl
    );
    assert_eq!(v["scored_tokens"].as_u64().unwrap(), lib.scored as u64);
    assert_eq!(v["windows"].as_u64().unwrap(), lib.windows as u64);
}
