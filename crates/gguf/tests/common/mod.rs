//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use statelm_gguf::{Array, GgmlType, GgufWriter, Value};

/// The Gemma 3 270M model file name.
pub const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
/// The Qwen2.5-Coder 0.5B model file name.
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// The path of a real model under `$STATELM_CACHE/models` (default
/// `~/.cache/statelm/models`). `None` (after a note on stderr) when it is
/// missing and `STATELM_SKIP_MODEL_TESTS=1`; panics when it is missing
/// otherwise.
pub fn model_path(file: &str) -> Option<PathBuf> {
    let cache = match std::env::var_os("STATELM_CACHE") {
        Some(c) if !c.is_empty() => PathBuf::from(c),
        _ => {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache").join("statelm")
        }
    };
    let path = cache.join("models").join(file);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("STATELM_SKIP_MODEL_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "skipping: {} not found (STATELM_SKIP_MODEL_TESTS=1)",
            path.display()
        );
        return None;
    }
    panic!(
        "model {} not found: run `bash scripts/pull-models` first (or set STATELM_SKIP_MODEL_TESTS=1)",
        path.display()
    );
}

/// Deterministic pseudo-random bytes (xorshift64*).
pub fn pseudo_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// A tiny deterministic PRNG (xorshift64*), so tests need no `rand`.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value, including 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One value of every scalar type, plus arrays of every element type and a
/// nested array.
pub fn every_value() -> Vec<(String, Value)> {
    let v: Vec<(&str, Value)> = vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f32", Value::F32(-1.25e-3)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.bool", Value::Bool(true)),
        ("t.str", Value::from("héllo\n\"world\"")),
        ("t.empty_str", Value::from("")),
        ("a.u8", Value::from(vec![0u8, 1, 255])),
        ("a.i8", Value::from(vec![-128i8, 0, 127])),
        ("a.u16", Value::from(vec![0u16, 65_535])),
        ("a.i16", Value::from(vec![i16::MIN, -1, i16::MAX])),
        ("a.u32", Value::from(vec![0u32, 7, u32::MAX])),
        ("a.i32", Value::from(vec![i32::MIN, -5, 5, i32::MAX])),
        ("a.u64", Value::from(vec![0u64, u64::MAX])),
        ("a.i64", Value::from(vec![i64::MIN, 0, i64::MAX])),
        ("a.f32", Value::from(vec![0.5f32, -2.0, 1e30])),
        ("a.f64", Value::from(vec![0.1f64, -1e300])),
        ("a.bool", Value::from(vec![true, false, true])),
        (
            "a.str",
            Value::from(vec!["a".to_string(), String::new(), "ü".into()]),
        ),
        ("a.empty", Value::Array(Array::U32(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2, 3]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::Bool(vec![false]), Array::F32(vec![])]),
            ])),
        ),
    ];
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// A small valid file: a few metadata values and two tensors; the data of
/// the last tensor ends exactly at the end of the file (no trailing padding),
/// so every proper prefix of the file is invalid.
pub fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::from("llama"));
    w.set("llama.block_count", Value::U32(2));
    w.set("t.f32", Value::F32(1.5));
    w.set("t.bool", Value::Bool(false));
    w.set(
        "tokenizer.ggml.tokens",
        Value::from(vec!["<s>".to_string(), "a".into()]),
    );
    w.set(
        "t.nested",
        Value::Array(Array::Array(vec![
            Array::U16(vec![1, 2]),
            Array::String(vec![]),
        ])),
    );
    w.add_tensor("q", &[32, 2], GgmlType::Q8_0, pseudo_bytes(1, 68))
        .unwrap();
    w.add_tensor("f", &[8], GgmlType::F32, pseudo_bytes(2, 32))
        .unwrap();
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}
