//! Helpers for the `statelm` binary's tests: run it, find the real models.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub fn statelm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_statelm"));
    c.env("STATELM_CACHE", statelm_model::testing::cache_dir());
    c.env_remove("RUST_LOG");
    c
}

/// Runs `statelm ARGS` with `stdin` piped in.
pub fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = statelm()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("statelm starts");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    child.wait_with_output().expect("statelm finishes")
}

/// stdout and stderr as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The default model's path as a string (`None`: skipped).
pub fn gemma() -> Option<String> {
    statelm_model::testing::gemma_path().map(|p| p.display().to_string())
}

/// Qwen2.5-Coder's path as a string (`None`: skipped).
pub fn qwen() -> Option<String> {
    statelm_model::testing::qwen_path().map(|p| p.display().to_string())
}

/// A file in `dir` with `bytes`.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write test file");
    p
}

/// Asserts a failed run: exit code 1, one `error:` line on stderr, no panic.
pub fn assert_clean_failure(o: &Output, what: &str) {
    let (out, err) = text(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: stdout {out:?} stderr {err:?}"
    );
    assert!(!err.contains("panicked"), "{what} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one error line, got {err:?}"
    );
    assert!(lines[0].starts_with("error: "), "{what}: {err:?}");
}
