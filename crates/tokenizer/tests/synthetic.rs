//! Tokenizer behaviour on small hand-made vocabularies (no model files).

use statelm_gguf::{Array, GgufFile, GgufWriter, Value};
use statelm_tokenizer::{
    ChatMessage, PreTokenizer, SpecialIds, StreamingDetokenizer, TemplateSource, TemplateVars,
    Tokenizer, TokenizerError, TokenizerKind, TokenizerSpec,
};

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER: i32 = 4;
const BYTE: i32 = 6;

fn spec(kind: TokenizerKind, tokens: &[(&str, f32, i32)]) -> TokenizerSpec {
    TokenizerSpec {
        kind,
        pre: String::new(),
        architecture: String::new(),
        tokens: tokens.iter().map(|t| t.0.to_string()).collect(),
        scores: tokens.iter().map(|t| t.1).collect(),
        token_types: tokens.iter().map(|t| t.2).collect(),
        merges: Vec::new(),
        special: SpecialIds::default(),
        add_bos: None,
        add_eos: None,
        add_space_prefix: None,
        chat_template: None,
    }
}

/// An SPM vocabulary: 0 <unk>, 1 <s>, 2 </s>, 3.. 258 bytes, then pieces.
fn spm(pieces: &[(&str, f32, i32)]) -> TokenizerSpec {
    let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
    let mut toks: Vec<(&str, f32, i32)> = vec![
        ("<unk>", 0.0, 2),
        ("<s>", 0.0, CONTROL),
        ("</s>", 0.0, CONTROL),
    ];
    toks.extend(bytes.iter().map(|b| (b.as_str(), 0.0, BYTE)));
    toks.extend_from_slice(pieces);
    spec(TokenizerKind::Spm, &toks)
}

fn texts(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&i| tok.token_text(i).unwrap_or("?").to_string())
        .collect()
}

#[test]
fn spm_merges_by_score_then_leftmost() {
    let s = spm(&[
        ("▁", -1.0, NORMAL),
        ("a", -2.0, NORMAL),
        ("b", -3.0, NORMAL),
        ("aa", -5.0, NORMAL),
        ("ab", -4.0, NORMAL),
        ("▁a", -6.0, NORMAL),
    ]);
    let tok = Tokenizer::new(s).unwrap();
    assert_eq!(tok.kind(), TokenizerKind::Spm);
    assert!(tok.add_bos() && tok.add_space_prefix());
    // Space prefix; "aa" beats "▁a" (tie at -5: leftmost); "ab" beats "aa".
    let ids = tok.encode("aaa", true, false).unwrap();
    assert_eq!(texts(&tok, &ids), ["<s>", "▁", "aa", "a"]);
    let ids = tok.encode("aab", false, false).unwrap();
    assert_eq!(texts(&tok, &ids), ["▁a", "ab"]);
    assert_eq!(tok.decode(&ids), "aab");
}

#[test]
fn spm_byte_fallback_and_decode() {
    let mut s = spm(&[("▁", -1.0, NORMAL), ("a", -2.0, NORMAL)]);
    s.add_space_prefix = Some(false);
    let tok = Tokenizer::new(s).unwrap();
    let ids = tok.encode("aé a", false, false).unwrap();
    assert_eq!(texts(&tok, &ids), ["a", "<0xC3>", "<0xA9>", "▁", "a"]);
    assert_eq!(tok.decode(&ids), "aé a");
    let mut d = StreamingDetokenizer::new();
    assert_eq!(d.push(&tok, ids[0]), "a");
    assert_eq!(d.push(&tok, ids[1]), "");
    assert_eq!(d.push(&tok, ids[2]), "é");
}

#[test]
fn user_defined_always_control_only_with_parse_special() {
    let mut s = spm(&[
        ("a", -2.0, NORMAL),
        ("<t>", 0.0, USER),
        ("<t><u>", 0.0, USER),
        ("<c>", 0.0, CONTROL),
        ("<", -9.0, NORMAL),
        (">", -9.0, NORMAL),
        ("c", -9.0, NORMAL),
    ]);
    s.add_space_prefix = Some(false);
    let tok = Tokenizer::new(s).unwrap();
    // The longer user-defined token wins over its prefix.
    let ids = tok.encode("a<t><u><t>a", false, false).unwrap();
    assert_eq!(texts(&tok, &ids), ["a", "<t><u>", "<t>", "a"]);
    let ids = tok.encode("<c>a", false, false).unwrap();
    assert_eq!(texts(&tok, &ids), ["<", "c", ">", "a"]);
    let ids = tok.encode("<c>a", false, true).unwrap();
    assert_eq!(texts(&tok, &ids), ["<c>", "a"]);
    assert_eq!(tok.decode(&ids), "a");
}

/// A byte-level BPE vocabulary over a few letters.
fn bpe(merges: &[&str], extra: &[&str]) -> TokenizerSpec {
    let mut toks: Vec<(&str, f32, i32)> = ["a", "b", "c", "Ġ"]
        .iter()
        .map(|t| (*t, 0.0, NORMAL))
        .collect();
    toks.extend(extra.iter().map(|t| (*t, 0.0, NORMAL)));
    toks.push(("<|end|>", 0.0, CONTROL));
    let mut s = spec(TokenizerKind::Bpe, &toks);
    s.merges = merges.iter().map(|m| m.to_string()).collect();
    s.pre = "qwen2".into();
    s.special.eos = Some(toks.len() as u32 - 1);
    s.add_bos = Some(false);
    s
}

#[test]
fn bpe_merges_by_rank_then_leftmost() {
    let s = bpe(
        &["b c", "a b", "a a", "ab c", "Ġ a"],
        &["bc", "ab", "aa", "abc", "Ġa"],
    );
    let tok = Tokenizer::new(s).unwrap();
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::Qwen2));
    // "b c" has the lowest rank, so "abc" is a + bc, not ab + c.
    assert_eq!(
        texts(&tok, &tok.encode("abc", true, false).unwrap()),
        ["a", "bc"]
    );
    assert_eq!(
        texts(&tok, &tok.encode("aaa", false, false).unwrap()),
        ["aa", "a"]
    );
    assert_eq!(
        texts(&tok, &tok.encode("aab a", false, false).unwrap()),
        ["a", "ab", "Ġa"]
    );
    // The control token ends generation and hides on decode.
    let ids = tok.encode("ab<|end|>", false, true).unwrap();
    assert_eq!(texts(&tok, &ids), ["ab", "<|end|>"]);
    assert!(tok.is_eog(ids[1]));
    assert_eq!(tok.decode(&ids), "ab");
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let mut s = bpe(&[], &[]);
    s.pre = "nonesuch".into();
    let err = Tokenizer::new(s).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::UnsupportedPreTokenizer(p) if p == "nonesuch"),
        "{err}"
    );
    assert!(err.to_string().contains("nonesuch"));
}

#[test]
fn bad_vocabularies_are_errors() {
    let mut s = bpe(&[], &[]);
    s.tokens.push("a".into());
    s.token_types.push(NORMAL);
    s.scores.push(0.0);
    assert!(matches!(
        Tokenizer::new(s),
        Err(TokenizerError::InvalidVocab(_))
    ));
    let mut s = bpe(&[], &[]);
    s.scores.truncate(1);
    assert!(matches!(
        Tokenizer::new(s),
        Err(TokenizerError::InvalidVocab(_))
    ));
    let s = spec(TokenizerKind::Spm, &[]);
    assert!(matches!(
        Tokenizer::new(s),
        Err(TokenizerError::InvalidVocab(_))
    ));
}

fn gguf(model: &str, with_tokens: bool) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("tokenizer.ggml.model", Value::String(model.into()));
    if with_tokens {
        let toks = ["<unk>", "<s>", "</s>", "▁", "h", "i", "▁hi", "hi"];
        w.set(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(toks.iter().map(|t| t.to_string()).collect())),
        );
        w.set(
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(vec![
                0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -1.0,
            ])),
        );
        w.set(
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(vec![2, 3, 3, 1, 1, 1, 1, 1])),
        );
        w.set("tokenizer.ggml.add_eos_token", Value::Bool(true));
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).unwrap();
    GgufFile::from_bytes(bytes).unwrap()
}

#[test]
fn from_gguf_reads_metadata() {
    let tok = Tokenizer::from_gguf(&gguf("llama", true)).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(1), Some(2)));
    assert_eq!(tok.eog_ids(), &[2]);
    let ids = tok.encode("hi", true, false).unwrap();
    assert_eq!(ids, [1, 6, 2]); // BOS (default for SPM), "▁hi", EOS (metadata)
    assert_eq!(tok.decode(&ids), "hi");
    assert_eq!(
        tok.chat_template_source(),
        TemplateSource::BuiltIn("llama3")
    );
}

#[test]
fn from_gguf_errors() {
    let err = Tokenizer::from_gguf(&gguf("t5", true)).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::UnsupportedModel(m) if m == "t5"),
        "{err}"
    );
    let err = Tokenizer::from_gguf(&gguf("llama", false)).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::Gguf { key, .. } if key == "tokenizer.ggml.tokens"),
        "{err}"
    );
}

#[test]
fn broken_chat_template_is_an_error_at_render() {
    let mut s = bpe(&[], &[]);
    s.chat_template = Some("{% for m in messages %}{{ m.content }".into());
    let tok = Tokenizer::new(s).unwrap();
    let err = tok.render_chat(&[], true).unwrap_err();
    assert!(matches!(err, TokenizerError::ChatTemplate { .. }), "{err}");
    let mut s = bpe(&[], &[]);
    s.chat_template = Some("{{ raise_exception('no system role') }}".into());
    let err = Tokenizer::new(s)
        .unwrap()
        .render_chat(&[], true)
        .unwrap_err();
    assert!(err.to_string().contains("no system role"), "{err}");
}

/// The end of Qwen3's template: `enable_thinking=false` pre-fills an empty thinking block.
const THINKING_TAIL: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n\
{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";

#[test]
fn template_variables_reach_the_template() {
    let mut s = bpe(&[], &[]);
    s.chat_template = Some(THINKING_TAIL.into());
    let tok = Tokenizer::new(s).unwrap();
    let msgs = [ChatMessage::new("user", "hi")];
    let plain = tok.render_chat(&msgs, true).unwrap();
    assert_eq!(
        plain,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let off = TemplateVars::new().with("enable_thinking", false);
    let rendered = tok.render_chat_with(&msgs, true, &off).unwrap();
    assert_eq!(rendered, format!("{plain}<think>\n\n</think>\n\n"));
    let on = TemplateVars::new().with("enable_thinking", true);
    assert_eq!(tok.render_chat_with(&msgs, true, &on).unwrap(), plain);
    // The turn texts follow the variables, so turn-by-turn chat renders the same prompt.
    let turns = tok.turn_texts_with(&off).unwrap();
    assert!(
        turns.after_user.ends_with("<think>\n\n</think>\n\n"),
        "{turns:?}"
    );
    // A name the renderer sets itself is refused, naming it.
    let bad = TemplateVars::new().with("messages", "x");
    let err = tok.render_chat_with(&msgs, true, &bad).unwrap_err();
    assert!(err.to_string().contains("`messages`"), "{err}");
}
