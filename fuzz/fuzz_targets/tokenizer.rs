//! Fuzzes both real tokenizers (Gemma's SPM, Qwen's byte-level BPE; from the model cache, or
//! `STATELM_FUZZ_MODELS`): any text encodes without a panic and decodes back to itself
//! (neither tokenizer normalizes; SPM's U+2581 aside), a conversation built from the input encodes with its
//! contents as text, and any id sequence streams through the detokenizer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statelm_tokenizer::{ChatMessage, StreamingDetokenizer, Tokenizer, TokenizerKind};
use std::path::PathBuf;
use std::sync::OnceLock;

fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STATELM_FUZZ_MODELS") {
        return d.into();
    }
    let cache = std::env::var_os("STATELM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/statelm")
        });
    cache.join("models")
}

fn tokenizers() -> &'static [Tokenizer] {
    static T: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let dir = models_dir();
        let names = [
            "gemma-3-270m-q4_k_m.gguf",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ];
        let toks: Vec<Tokenizer> = names
            .iter()
            .filter_map(|n| statelm_gguf::GgufFile::open(dir.join(n)).ok())
            .map(|f| Tokenizer::from_gguf(&f).expect("the model's tokenizer loads"))
            .collect();
        assert!(
            !toks.is_empty(),
            "no model in {} (run `statelm pull --all`)",
            dir.display()
        );
        toks
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let toks = tokenizers();
    let tok = &toks[sel as usize % toks.len()];
    let text = String::from_utf8_lossy(rest);
    let ids = tok
        .encode(&text, false, false)
        .expect("valid UTF-8 under the size limit encodes");
    // SentencePiece writes spaces as U+2581, so that character decodes as a space (as in
    // llama.cpp): the one exception to an exact round trip.
    let expected = match tok.kind() {
        TokenizerKind::Spm => text.replace('\u{2581}', " "),
        TokenizerKind::Bpe => text.to_string(),
    };
    assert_eq!(tok.decode(&ids), expected, "round trip");
    let _ = tok.encode(&text, true, true).expect("with specials too");
    // A conversation from the input: contents stay text, so the template's markers are all
    // the control tokens there are.
    let parts: Vec<&str> = text.splitn(3, '\u{1}').collect();
    let roles = ["system", "user", "assistant"];
    let messages: Vec<ChatMessage> = (parts.iter().zip(roles))
        .map(|(p, r)| ChatMessage::new(r, *p))
        .collect();
    if let (Ok(ids), Ok(empty)) = (
        tok.encode_chat(&messages, true),
        tok.encode_chat(
            &messages
                .iter()
                .map(|m| ChatMessage::new(m.role.clone(), ""))
                .collect::<Vec<_>>(),
            true,
        ),
    ) {
        let controls = |v: &[u32]| v.iter().filter(|&&t| tok.is_control(t)).count();
        assert_eq!(
            controls(&ids),
            controls(&empty),
            "contents added control tokens"
        );
    }
    // Arbitrary ids through the streaming detokenizer.
    let mut d = StreamingDetokenizer::with_special(sel & 1 == 1);
    for c in rest.chunks(4) {
        let mut b = [0u8; 4];
        b[..c.len()].copy_from_slice(c);
        let _ = d.push(tok, u32::from_le_bytes(b) % (tok.vocab_size() as u32 + 8));
    }
    let _ = d.finish();
});
