//! Shared helpers for tests on the real models and reference files.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use statelm_gguf::GgufFile;
use statelm_tokenizer::Tokenizer;

pub const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// `$STATELM_CACHE/models` (default `~/.cache/statelm/models`).
pub fn models_dir() -> PathBuf {
    let cache = std::env::var_os("STATELM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/statelm")
        });
    cache.join("models")
}

/// `$STATELM_REFERENCE_DIR` or the repository's own copy, `<workspace>/reference`.
pub fn reference_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STATELM_REFERENCE_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../reference")
}

fn skip_allowed() -> bool {
    std::env::var("STATELM_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1")
}

/// Loads a model's tokenizer, or `None` (with a note) when the file is
/// missing and `STATELM_SKIP_MODEL_TESTS=1`.
fn load(file: &str) -> Option<Tokenizer> {
    let path = models_dir().join(file);
    if !path.exists() {
        if skip_allowed() {
            eprintln!(
                "note: {} missing, skipping (STATELM_SKIP_MODEL_TESTS=1)",
                path.display()
            );
            return None;
        }
        panic!(
            "{} is missing: run `bash scripts/pull-models` first",
            path.display()
        );
    }
    let f = GgufFile::open(&path).expect("open gguf");
    Some(Tokenizer::from_gguf(&f).expect("tokenizer from gguf"))
}

pub fn gemma() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| load(GEMMA)).as_ref()
}

pub fn qwen() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| load(QWEN)).as_ref()
}

/// Reads a reference JSON file, or `None` (with a note) when missing and
/// skipping is allowed.
pub fn reference(name: &str) -> Option<serde_json::Value> {
    let path = reference_dir().join(name);
    match std::fs::read_to_string(&path) {
        Ok(s) => Some(serde_json::from_str(&s).expect("reference json")),
        Err(e) if skip_allowed() => {
            eprintln!("note: {} unreadable ({e}), skipping", path.display());
            None
        }
        Err(e) => panic!("{}: {e}", path.display()),
    }
}
