//! Encode throughput on the real tokenizers (plain `Instant` timing).
//!
//! `cargo bench -p statelm-tokenizer --bench encode`. Prints MB/s for English
//! prose, source code and a run of one repeated character, and the ratio
//! time(1 MB) / time(100 KB) (about 10 for linear growth).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use statelm_gguf::GgufFile;
use statelm_tokenizer::Tokenizer;

const PROSE: &str = "It was the best of times, it was the worst of times, it was the age of \
wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of \
incredulity. The committee met on Tuesday to review the proposal; after a long discussion \
about costs, schedules and risks, they agreed to fund a smaller pilot first.\n\n";

const CODE: &str = "fn parse(input: &str) -> Result<Vec<u32>, Error> {\n    let mut out = \
Vec::with_capacity(input.len() / 4);\n    for (i, line) in input.lines().enumerate() {\n        \
if line.trim().is_empty() { continue; }\n        out.push(line.parse::<u32>().map_err(|e| \
Error::Parse(i, e))?);\n    }\n    Ok(out)\n}\n";

fn models_dir() -> PathBuf {
    let cache = std::env::var_os("STATELM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/statelm")
        });
    cache.join("models")
}

fn load(file: &str) -> Option<Tokenizer> {
    let path = models_dir().join(file);
    let f = GgufFile::open(&path)
        .map_err(|e| eprintln!("skip {}: {e}", path.display()))
        .ok()?;
    let t = Instant::now();
    let tok = Tokenizer::from_gguf(&f).ok()?;
    println!(
        "{file}: tokenizer built in {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    Some(tok)
}

fn sized(unit: &str, bytes: usize) -> String {
    let mut s = unit.repeat(bytes / unit.len() + 1);
    let mut end = bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

/// Best time of a few runs (at least one, about 1 s in total).
fn time(tok: &Tokenizer, text: &str) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut n = 0;
    let start = Instant::now();
    for _ in 0..20 {
        let t = Instant::now();
        n = tok.encode(text, false, false).map(|v| v.len()).unwrap_or(0);
        best = best.min(t.elapsed());
        if start.elapsed() > Duration::from_secs(1) {
            break;
        }
    }
    (best, n)
}

fn main() {
    let only = std::env::var("BENCH_ONLY").ok();
    for file in [
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ] {
        let Some(tok) = load(file) else { continue };
        for (name, unit) in [
            ("prose", PROSE),
            ("code", CODE),
            ("repeated 'a'", "a"),
            ("spaces", " "),
        ] {
            if only.as_deref().is_some_and(|o| !name.contains(o)) {
                continue;
            }
            let (small, _) = time(&tok, &sized(unit, 100 * 1024));
            let (big, n) = time(&tok, &sized(unit, 1024 * 1024));
            let mbs = 1.0 / big.as_secs_f64();
            let ratio = big.as_secs_f64() / small.as_secs_f64();
            let huge = sized(unit, 10 * 1024 * 1024);
            let t = Instant::now();
            let _ = tok.encode(&huge, false, false);
            let ten = t.elapsed().as_secs_f64();
            println!(
                "  {name:<13} 1 MB: {:>8.2} ms  {mbs:>6.1} MB/s  {n:>7} tokens  \
                 t(1MB)/t(100KB) = {ratio:>4.1}  10 MB: {ten:.2} s",
                big.as_secs_f64() * 1e3
            );
        }
    }
}
