//! Exact parity with llama.cpp's tokenizations in the shared reference files.

mod common;

use serde_json::Value;
use statelm_tokenizer::Tokenizer;

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn show(tok: &Tokenizer, ids: &[u32]) -> String {
    let parts: Vec<String> = ids
        .iter()
        .map(|&i| format!("{i}:{:?}", tok.token_text(i).unwrap_or("?")))
        .collect();
    parts.join(" ")
}

/// Checks every row; prints the first mismatches in detail; returns (ok, total).
fn check_file(tok: &Tokenizer, file: &str) -> (usize, usize) {
    let Some(rows) = common::reference(file) else {
        return (0, 0);
    };
    let rows = rows.as_array().expect("rows");
    let mut ok = 0;
    let mut shown = 0;
    for (i, row) in rows.iter().enumerate() {
        let text = row["text"].as_str().expect("text");
        let add = row["add_bos"].as_bool().expect("add_bos");
        let special = row["parse_special"].as_bool().expect("parse_special");
        let want = ids_of(&row["ids"]);
        let got = tok.encode(text, add, special).expect("encode");
        if got == want {
            ok += 1;
        } else if shown < 8 {
            shown += 1;
            let first = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            eprintln!(
                "MISMATCH {file} row {i} add_bos={add} parse_special={special} text={text:?}"
            );
            eprintln!("  first difference at token {first}");
            eprintln!(
                "  want: {}",
                show(
                    tok,
                    &want[first.saturating_sub(2)..want.len().min(first + 8)]
                )
            );
            eprintln!(
                "  got:  {}",
                show(tok, &got[first.saturating_sub(2)..got.len().min(first + 8)])
            );
        }
    }
    eprintln!("{file}: {ok}/{} rows match", rows.len());
    (ok, rows.len())
}

#[test]
fn gemma_matches_llama_cpp() {
    let Some(tok) = common::gemma() else { return };
    let (ok, total) = check_file(tok, "tokenize-gemma-3-270m.json");
    assert_eq!(ok, total, "gemma tokenization parity");
}

#[test]
fn qwen_matches_llama_cpp() {
    let Some(tok) = common::qwen() else { return };
    let (ok, total) = check_file(tok, "tokenize-qwen2.5-coder-0.5b-instruct.json");
    assert_eq!(ok, total, "qwen tokenization parity");
}

/// The prompts of the logits reference files tokenize to their `prompt_ids`
/// (llama.cpp added BOS as the metadata says).
fn check_logit_prompts(tok: &Tokenizer, file: &str) {
    let Some(rows) = common::reference(file) else {
        return;
    };
    for row in rows.as_array().expect("rows") {
        let prompt = row["prompt"].as_str().expect("prompt");
        let special = row["parse_special"].as_bool().expect("parse_special");
        let want = ids_of(&row["prompt_ids"]);
        let got = tok.encode(prompt, true, special).expect("encode");
        assert_eq!(got, want, "{file} prompt {}", row["name"]);
    }
}

#[test]
fn logits_prompts_tokenize_like_llama_cpp() {
    if let Some(tok) = common::gemma() {
        check_logit_prompts(tok, "logits-gemma-3-270m-q4_k_m.json");
    }
    if let Some(tok) = common::qwen() {
        check_logit_prompts(tok, "logits-qwen2.5-coder-0.5b-instruct-q4_k_m.json");
    }
}

/// Every generated token's `piece` in the logits reference files (llama.cpp's
/// `token_to_piece`) equals our decoded bytes for that token.
fn check_pieces(tok: &Tokenizer, files: &[&str]) -> usize {
    let mut n = 0;
    for file in files {
        let Some(rows) = common::reference(file) else {
            continue;
        };
        for row in rows.as_array().expect("rows") {
            for step in row["steps"].as_array().expect("steps") {
                let id = step["token"].as_u64().expect("token") as u32;
                let piece = step["piece"].as_str().expect("piece");
                if piece.contains('\u{FFFD}') {
                    continue; // a partial character, lossily stored in JSON
                }
                assert_eq!(
                    tok.token_bytes(id),
                    Some(piece.as_bytes()),
                    "{file}: token {id}"
                );
                n += 1;
            }
        }
    }
    n
}

#[test]
fn token_pieces_match_llama_cpp() {
    if let Some(tok) = common::gemma() {
        let files = [
            "logits-gemma-3-270m-q4_k_m.json",
            "logits-gemma-3-270m-q8_0.json",
        ];
        assert!(check_pieces(tok, &files) > 0);
    }
    if let Some(tok) = common::qwen() {
        let files = [
            "logits-qwen2.5-coder-0.5b-instruct-q4_k_m.json",
            "logits-qwen2.5-coder-0.5b-instruct-q8_0.json",
        ];
        assert!(check_pieces(tok, &files) > 0);
    }
}

#[test]
fn special_tokens_as_llama_cpp_resolves_them() {
    if let Some(tok) = common::gemma() {
        assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
        assert!(tok.add_bos() && !tok.add_space_prefix());
        // <eos>, <end_of_turn>, and "</s>" (llama.cpp's EOG text list).
        assert_eq!(tok.eog_ids(), &[1, 106, 212]);
    }
    if let Some(tok) = common::qwen() {
        assert_eq!(tok.eos_id(), Some(151645));
        assert!(!tok.add_bos());
        // "</s>" (a plain token in this vocabulary, but in llama.cpp's EOG
        // text list: the reference shows it matched only with parse_special),
        // <|endoftext|>, <|im_end|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>.
        assert_eq!(
            tok.eog_ids(),
            &[128247, 151643, 151645, 151662, 151663, 151664]
        );
        assert!(tok.is_eog(151645) && !tok.is_eog(151644));
    }
}
