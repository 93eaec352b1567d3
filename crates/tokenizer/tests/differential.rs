//! The heap-based merge loops (lazy invalidation) against naive O(n²)
//! reference implementations, on random vocabularies with many score/rank
//! ties and random texts.

use std::collections::HashMap;

use proptest::prelude::*;
use statelm_tokenizer::{SpecialIds, Tokenizer, TokenizerKind, TokenizerSpec};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

fn spec(
    kind: TokenizerKind,
    tokens: Vec<String>,
    scores: Vec<f32>,
    merges: Vec<String>,
) -> TokenizerSpec {
    TokenizerSpec {
        kind,
        pre: if kind == TokenizerKind::Bpe {
            "qwen2".into()
        } else {
            String::new()
        },
        architecture: String::new(),
        token_types: vec![1; tokens.len()],
        tokens,
        scores,
        merges,
        special: SpecialIds {
            bos: Some(0),
            eos: Some(0),
            ..SpecialIds::default()
        },
        add_bos: Some(false),
        add_eos: Some(false),
        add_space_prefix: Some(false),
        chat_template: None,
    }
}

/// Random SPM vocabulary over {a, b, ▁} pieces of 1..=4 chars, scores in
/// {-1, -2, -3} (many ties). Single chars are always tokens.
fn spm_vocab(seed: u64) -> (Vec<String>, Vec<f32>) {
    let mut rng = Lcg(seed);
    let alphabet = ["a", "b", "▁"];
    let mut toks: Vec<String> = alphabet.iter().map(|s| s.to_string()).collect();
    for _ in 0..30 {
        let len = 2 + rng.next(3);
        let t: String = (0..len).map(|_| alphabet[rng.next(3)]).collect();
        if !toks.contains(&t) {
            toks.push(t);
        }
    }
    let scores = toks.iter().map(|_| -1.0 - rng.next(3) as f32).collect();
    (toks, scores)
}

fn naive_spm(text: &str, ids: &HashMap<&str, usize>, scores: &[f32]) -> Vec<u32> {
    let mut syms: Vec<String> = text.chars().map(String::from).collect();
    loop {
        let mut best: Option<(usize, f32)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            let cat = format!("{}{}", syms[i], syms[i + 1]);
            if let Some(&id) = ids.get(cat.as_str()) {
                if best.is_none_or(|(_, s)| scores[id] > s) {
                    best = Some((i, scores[id]));
                }
            }
        }
        let Some((i, _)) = best else { break };
        let r = syms.remove(i + 1);
        syms[i].push_str(&r);
    }
    syms.iter().map(|s| ids[s.as_str()] as u32).collect()
}

/// Random BPE merges over {a, b, c}: each merges two existing strings; the
/// result is a token only 80% of the time (exercising the string fallback).
fn bpe_vocab(seed: u64) -> (Vec<String>, Vec<String>) {
    let mut rng = Lcg(seed);
    let mut toks: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let mut strings = toks.clone();
    let mut merges = Vec::new();
    for _ in 0..25 {
        let l = strings[rng.next(strings.len())].clone();
        let r = strings[rng.next(strings.len())].clone();
        let m = format!("{l}{r}");
        if m.len() > 6 || merges.contains(&format!("{l} {r}")) {
            continue;
        }
        merges.push(format!("{l} {r}"));
        if !strings.contains(&m) {
            strings.push(m.clone());
            if rng.next(5) != 0 {
                toks.push(m);
            }
        }
    }
    (toks, merges)
}

fn naive_bpe(text: &str, ids: &HashMap<&str, usize>, merges: &[String]) -> Vec<u32> {
    let rank: HashMap<(&str, &str), usize> = merges
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, m)| m.split_once(' ').map(|(l, r)| ((l, r), i)))
        .collect();
    let mut syms: Vec<String> = text.chars().map(String::from).collect();
    loop {
        let mut best: Option<(usize, usize)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            if let Some(&r) = rank.get(&(syms[i].as_str(), syms[i + 1].as_str())) {
                if best.is_none_or(|(_, b)| r < b) {
                    best = Some((i, r));
                }
            }
        }
        let Some((i, _)) = best else { break };
        let r = syms.remove(i + 1);
        syms[i].push_str(&r);
    }
    let mut out = Vec::new();
    for s in &syms {
        match ids.get(s.as_str()) {
            Some(&id) => out.push(id as u32),
            None => out.extend(
                s.chars()
                    .filter_map(|c| ids.get(c.to_string().as_str()))
                    .map(|&i| i as u32),
            ),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn spm_heap_matches_naive(seed in any::<u64>(), text in "[ab ]{0,40}") {
        let (toks, scores) = spm_vocab(seed);
        let ids: HashMap<&str, usize> = toks.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
        let want = naive_spm(&text.replace(' ', "▁"), &ids, &scores);
        let tok = Tokenizer::new(spec(TokenizerKind::Spm, toks.clone(), scores.clone(), vec![])).unwrap();
        prop_assert_eq!(tok.encode(&text, false, false).unwrap(), want);
    }

    #[test]
    fn bpe_heap_matches_naive(seed in any::<u64>(), text in "[abc]{0,40}") {
        let (toks, merges) = bpe_vocab(seed);
        let ids: HashMap<&str, usize> = toks.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
        let want = naive_bpe(&text, &ids, &merges);
        let tok = Tokenizer::new(spec(TokenizerKind::Bpe, toks.clone(), vec![], merges.clone())).unwrap();
        prop_assert_eq!(tok.encode(&text, false, false).unwrap(), want);
    }
}
