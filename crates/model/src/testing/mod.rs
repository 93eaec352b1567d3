//! Helpers for tests (in this and other crates) that need the real models or the reference
//! outputs (behind the `testing` feature: test code only, never a shipped binary).

use crate::registry::MODELS;
use std::path::PathBuf;

pub use crate::registry::cache_dir;

/// Whether tests that need real models should be skipped (`STATELM_SKIP_MODEL_TESTS=1`).
pub fn skip_model_tests() -> bool {
    std::env::var("STATELM_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1")
}

/// Path of a pulled model by file name; `None` (with a note) when tests may skip it, and a
/// panic with instructions when the model is missing and skipping was not asked for.
pub fn model_path(file_name: &str) -> Option<PathBuf> {
    let p = cache_dir().join("models").join(file_name);
    if p.exists() {
        return Some(p);
    }
    if skip_model_tests() {
        eprintln!(
            "skipping: {} is missing (STATELM_SKIP_MODEL_TESTS=1)",
            p.display()
        );
        return None;
    }
    panic!(
        "{} is missing: run `bash scripts/pull-models` (or `statelm pull`) first, \
         or set STATELM_SKIP_MODEL_TESTS=1",
        p.display()
    );
}

/// The Gemma 3 270M model path (see [`model_path`]).
pub fn gemma_path() -> Option<PathBuf> {
    model_path(MODELS[0].file_name)
}

/// The Qwen2.5-Coder 0.5B model path (see [`model_path`]).
pub fn qwen_path() -> Option<PathBuf> {
    model_path(MODELS[1].file_name)
}

/// The SmolLM2 135M Instruct model path (see [`model_path`]).
pub fn smollm2_path() -> Option<PathBuf> {
    model_path(MODELS[2].file_name)
}

/// The llama.cpp reference directory: `$STATELM_REFERENCE_DIR`, else the repository's own
/// copy, `<workspace>/reference`. Panics when it is missing: the parity tests need it.
pub fn reference_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STATELM_REFERENCE_DIR") {
        return PathBuf::from(d);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("reference");
    assert!(
        p.join("README.md").exists(),
        "reference outputs not found at {} (set STATELM_REFERENCE_DIR)",
        p.display()
    );
    p
}

mod synthetic;
pub use synthetic::{
    make_thinking, parity_set, write_synthetic_model, write_synthetic_model_with, SyntheticSpec,
    PARITY_CTX,
};
