//! Every pre-tokenizer name against llama.cpp, through a vocabulary that shows word splits.
//!
//! `tools/parity/pretok_reference.py` recorded llama.cpp's ids for a fixed text set under
//! each `tokenizer.ggml.pre` name, over a vocabulary of the 256 byte tokens plus every
//! substring (up to 12 byte-level characters) of the texts, with a merge for each split of
//! each substring, shortest first. BPE then turns each word of up to 12 characters into one
//! token, so any difference in where a splitter cuts shows up as different ids. This test
//! builds the same vocabulary in the same order and compares. No model file is needed.

use std::collections::BTreeSet;

use serde_json::Value;
use statelm_tokenizer::{SpecialIds, Tokenizer, TokenizerKind, TokenizerSpec};

const MAX_LEN: usize = 12;

/// GPT-2's byte-to-character table.
fn byte_chars() -> Vec<char> {
    let mut bs: Vec<u32> = (u32::from(b'!')..=u32::from(b'~'))
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut table = vec!['\0'; 256];
    for (b, c) in bs.iter().zip(&cs) {
        table[*b as usize] = char::from_u32(*c).expect("char");
    }
    table
}

/// The reference script's vocabulary: byte tokens, then substrings by (length, text).
fn substring_vocab(texts: &[&str]) -> (Vec<String>, Vec<String>) {
    let chars = byte_chars();
    let mut subs = BTreeSet::new();
    for t in texts {
        let e: Vec<char> = t.bytes().map(|b| chars[b as usize]).collect();
        for i in 0..e.len() {
            for j in i + 2..=e.len().min(i + MAX_LEN) {
                subs.insert((j - i, e[i..j].iter().collect::<String>()));
            }
        }
    }
    let mut tokens: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    let mut merges = Vec::new();
    for (_, t) in subs {
        let cs: Vec<char> = t.chars().collect();
        for k in 1..cs.len() {
            let (a, b) = cs.split_at(k);
            merges.push(format!(
                "{} {}",
                a.iter().collect::<String>(),
                b.iter().collect::<String>()
            ));
        }
        tokens.push(t);
    }
    (tokens, merges)
}

fn tokenizer(pre: &str, tokens: &[String], merges: &[String]) -> Tokenizer {
    Tokenizer::new(TokenizerSpec {
        kind: TokenizerKind::Bpe,
        pre: pre.into(),
        architecture: "llama".into(),
        tokens: tokens.to_vec(),
        scores: vec![0.0; tokens.len()],
        token_types: vec![1; tokens.len()],
        merges: merges.to_vec(),
        special: SpecialIds {
            bos: Some(0),
            eos: Some(0),
            ..SpecialIds::default()
        },
        add_bos: Some(false),
        add_eos: Some(false),
        add_space_prefix: Some(false),
        chat_template: None,
    })
    .unwrap_or_else(|e| panic!("pre-tokenizer {pre}: {e}"))
}

#[test]
fn every_pre_tokenizer_splits_as_llama_cpp() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../reference/tokenize-pretypes.json"
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("reference")).expect("json");
    let rows = doc["rows"].as_array().expect("rows");
    let mut texts: Vec<&str> = Vec::new();
    for r in rows {
        let t = r["text"].as_str().expect("text");
        if !texts.contains(&t) {
            texts.push(t);
        }
    }
    let (tokens, merges) = substring_vocab(&texts);
    let vocab = doc["vocab"].as_str().expect("vocab");
    assert!(
        vocab.starts_with(&format!("256 bytes + {} substrings", tokens.len() - 256)),
        "the vocabulary differs from the script's: {vocab}"
    );
    let mut current: Option<(String, Tokenizer)> = None;
    let mut failures = Vec::new();
    for r in rows {
        let pre = r["pre"].as_str().expect("pre");
        if current.as_ref().is_none_or(|(p, _)| p != pre) {
            current = Some((pre.to_string(), tokenizer(pre, &tokens, &merges)));
        }
        let tok = &current.as_ref().expect("tokenizer").1;
        let text = r["text"].as_str().expect("text");
        let want: Vec<u32> = r["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        let got = tok.encode(text, false, false).expect("encode");
        if got != want {
            let words = |ids: &[u32]| -> Vec<String> {
                ids.iter()
                    .map(|&i| String::from_utf8_lossy(tok.token_bytes(i).unwrap_or(b"?")).into())
                    .collect()
            };
            failures.push(format!(
                "{pre} {text:?}\n  llama.cpp: {:?}\n  statelm:   {:?}",
                words(&want),
                words(&got)
            ));
        }
    }
    let mut by_pre = std::collections::BTreeMap::new();
    for f in &failures {
        *by_pre.entry(f.split(' ').next().unwrap_or("")).or_insert(0) += 1;
    }
    let shown: Vec<&String> = by_pre
        .keys()
        .filter_map(|p| failures.iter().find(|f| f.starts_with(&format!("{p} "))))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} rows differ ({by_pre:?}); the first of each:\n{}",
        failures.len(),
        rows.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
