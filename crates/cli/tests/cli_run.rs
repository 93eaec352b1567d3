//! `statelm run`, and clean failures on a corrupt model file.

mod cli_common;

use cli_common::{assert_clean_failure, gemma, run, text};

/// `statelm run -m MODEL -p "The capital of France is"` and `extra` (the README's first
/// command, on the test's copy of the default model).
fn capital(model: &str, extra: &[&str]) -> std::process::Output {
    let base = ["run", "-m", model, "-p", "The capital of France is"];
    run(&[&base[..], extra].concat(), "")
}

#[test]
fn run_streams_text_and_exits_0() {
    let Some(model) = gemma() else { return };
    let o = capital(&model, &["-n", "8", "--temp", "0"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!out.trim().is_empty(), "no text: {err}");
    // Not a terminal: the prompt is not echoed, the statistics go to stderr, no ANSI codes.
    assert!(!out.contains("The capital of France is"), "{out}");
    assert!(
        err.contains("[prompt 6 tokens (0 cached), 8 generated"),
        "{err}"
    );
    assert!(!out.contains('\x1b') && !err.contains('\x1b'));
    // Greedy with --temp 0: the same run gives the same text, also through --json.
    let o = capital(&model, &["-n", "8", "--json", "--temp", "0"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["text"].as_str().unwrap().trim(), out.trim());
    assert_eq!(v["generated_tokens"], 8);
    assert_eq!(v["stop_reason"], "max tokens");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["run"],
        vec!["run", "-p", "x", "--temp=-1"],
        vec!["run", "-p", "x", "--kv-type", "q3"],
        vec!["tokenize"],
        vec!["logits", "--text", "a", "--tokens", "1"],
        vec!["chat", "--budget", "2"],
        vec!["serve", "--port", "99999"],
    ] {
        let o = run(&args, "");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o).1);
    }
}

#[test]
fn corrupt_model_is_a_one_line_error() {
    let Some(model) = gemma() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(&model).unwrap();
    for (name, len) in [
        ("head.gguf", 4096),
        ("half.gguf", bytes.len() / 2),
        ("tiny.gguf", 10),
    ] {
        let p = cli_common::write(dir.path(), name, &bytes[..len]);
        let p = p.to_str().unwrap();
        assert_clean_failure(&run(&["inspect", "-m", p], ""), &format!("inspect {name}"));
        assert_clean_failure(
            &run(&["run", "-m", p, "-p", "hi", "-n", "2"], ""),
            &format!("run {name}"),
        );
    }
    let o = run(&["run", "-m", "/nonexistent/model.gguf", "-p", "hi"], "");
    assert_clean_failure(&o, "missing file");
}

#[test]
fn ctrl_c_stops_the_generation_with_exit_130() {
    use std::io::Read;
    use std::process::Stdio;
    let Some(model) = gemma() else { return };
    let mut child = cli_common::statelm()
        .args([
            "run",
            "-m",
            &model,
            "-p",
            "Count from 1 to 1000: 1, 2, 3,",
            "-n",
            "3000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm run starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("stop: interrupted"), "{err}");
}

#[test]
fn the_loop_guard_ends_a_repeating_answer_and_dry_breaks_it() {
    let Some(model) = gemma() else { return };
    let prompt = "A A A A A A A A A A A A";
    let go = |extra: &[&str]| {
        let mut args = vec!["run", "-m", &model, "-p", prompt, "-n", "80", "--json"];
        args.extend(extra);
        let o = run(&args, "");
        assert!(o.status.success(), "{:?}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON")
    };
    // Greedy Gemma repeats the letter to the end (greedy: no loop guard unless asked).
    let plain = go(&["--temp", "0"]);
    assert_eq!(plain["stop_reason"], "max tokens", "{plain}");
    let guarded = go(&["--temp", "0", "--loop-guard"]);
    assert!(
        guarded["stop_reason"]
            .as_str()
            .unwrap()
            .starts_with("repetition"),
        "{guarded}"
    );
    assert!(
        guarded["generated_tokens"].as_u64().unwrap() < 80,
        "{guarded}"
    );
    // DRY makes the answer leave the run of letters (sequences restart after newlines).
    let dry = go(&["--temp", "0", "--dry-multiplier", "0.8"]);
    let text = dry["text"].as_str().unwrap();
    assert!(!text.contains(&"A ".repeat(12)), "{dry}");
}

/// `--lookup` changes the speed, never the text; `--json` reports the drafts.
#[test]
fn lookup_gives_the_same_text_and_reports_drafts() {
    let Some(model) = gemma() else { return };
    let prompt = "one two three four five six, one two three four five six, one two three";
    let json = |lookup: &str| {
        let o = run(
            &[
                "run", "-m", &model, "-p", prompt, "-n", "24", "--json", "--lookup", lookup,
                "--temp", "0",
            ],
            "",
        );
        assert!(o.status.success(), "{}", text(&o).1);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON")
    };
    let (plain, fast) = (json("0"), json("6"));
    assert_eq!(plain["text"], fast["text"]);
    assert_eq!(plain["drafted_tokens"], 0);
    assert!(fast["drafted_tokens"].as_u64().unwrap() > 0, "{fast}");
    let count = |k: &str| {
        fast[k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {fast}"))
    };
    assert!(
        count("accepted_tokens") <= count("drafted_tokens"),
        "{fast}"
    );
    let o = run(&["run", "-m", &model, "-p", "x", "--lookup", "16"], "");
    assert_eq!(o.status.code(), Some(2), "out of range is a usage error");
}

/// `statelm bench` on `model` with a 4-token prefill, one rep, no roofline and `extra`: its
/// JSON report (the command must succeed).
fn quick_bench(model: &str, extra: &[&str]) -> serde_json::Value {
    let base = [
        "bench",
        "-m",
        model,
        "--prefill",
        "4",
        "--reps",
        "1",
        "--no-roofline",
    ];
    let o = run(&[&base[..], extra, &["--json"]].concat(), "");
    assert!(o.status.success(), "{}", text(&o).1);
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// `statelm bench --lookup N` times prompt lookup against plain decoding on each workload and
/// checks the text; `--verify` times verification batches.
#[test]
fn bench_lookup_reports_the_ratio_and_the_same_text() {
    let Some(model) = gemma() else { return };
    let v = quick_bench(
        &model,
        &["--decode", "12", "--lookup", "2", "--verify", "1,3"],
    );
    let rows = v["lookup"].as_array().expect("one row per workload");
    let names: Vec<_> = rows
        .iter()
        .map(|l| l["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["code edit", "rewrite", "prose"]);
    for l in rows {
        assert_eq!(l["same_text"], true, "{l}");
        // What lookup could gain on the plain answer at no verification cost.
        assert!(l["ceiling"].as_f64().is_some_and(|c| c >= 1.0), "{l}");
        let any = l["any_match_ceiling"].as_f64();
        assert!(
            any.is_some_and(|a| a >= l["ceiling"].as_f64().unwrap_or(f64::NAN)),
            "{l}"
        );
        // With --verify: that copy priced at the measured verification costs.
        let bound = l["any_match_bound"].as_f64();
        assert!(bound.is_some_and(|b| b > 0.0 && b.is_finite()), "{l}");
        assert!(l["ratio"].as_f64().is_some_and(f64::is_finite), "{l}");
        let count = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("no {k} in {l}"));
        assert!(count("accepted") <= count("drafted"), "{l}");
    }
    let verify = v["verify"].as_array().expect("verification timings");
    assert_eq!(verify.len(), 2, "{verify:?}");
    assert_eq!(verify[1]["tokens"], 3);
    assert!(verify[1]["ms"]["median"]
        .as_f64()
        .is_some_and(|ms| ms > 0.0));
}

/// `--lookup-prompt` times the user's own prompts instead of the built-in workloads.
#[test]
fn bench_lookup_takes_the_users_prompts() {
    let Some(model) = gemma() else { return };
    let prompt = "Repeat: one two three";
    let v = quick_bench(
        &model,
        &["--decode", "8", "--lookup", "2", "--lookup-prompt", prompt],
    );
    let rows = v["lookup"].as_array().expect("one row per prompt");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["workload"], "prompt 1");
    assert_eq!(rows[0]["same_text"], true);
    // Without --lookup the option is refused, not ignored.
    let o = run(&["bench", "-m", &model, "--lookup-prompt", "x"], "");
    assert!(!o.status.success());
}

/// The README's first command reads well: the model's sampling defaults with DRY and the loop
/// guard, named on the statistics line; `--temp 0` is still today's greedy text.
#[test]
fn the_quick_start_answers_without_a_loop_and_temp_0_stays_greedy() {
    let Some(model) = gemma() else { return };
    for seed in ["1", "2", "3"] {
        let o = capital(&model, &["--seed", seed]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(!err.contains("stop: repetition"), "{out}\n{err}");
        assert!(err.contains("defaults: temperature"), "{err}");
        assert!(err.contains("DRY 0.8, loop guard on"), "{err}");
    }
    let o = capital(&model, &["-n", "24", "--temp", "0"]);
    let (out, err) = text(&o);
    assert!(
        out.starts_with(" the capital of the country of France. It is the largest city in France."),
        "{out}"
    );
    assert!(err.contains("greedy (--temp 0)"), "{err}");
}

/// `statelm` alone names the first commands and the docs.
#[test]
fn statelm_alone_prints_the_first_steps() {
    let o = run(&[], "");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for cmd in [
        "statelm run",
        "statelm chat",
        "statelm serve",
        "statelm doctor",
        "docs/",
    ] {
        assert!(out.contains(cmd), "{cmd}: {out}");
    }
}
