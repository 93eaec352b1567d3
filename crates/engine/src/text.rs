//! From request input to tokens: prompt text, chat rendering, the pinned system prefix, and the
//! streaming detokenizer.

use crate::error::EngineError;
use crate::plan::common_prefix;
use crate::plan::Prompt;
use crate::request::{Input, SessionOptions};
use statelm_tokenizer::{
    find_turn_starts, ChatMessage, StreamingDetokenizer, TemplateVars, Tokenizer,
};

/// A tokenized request input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tokenized {
    /// The tokens and whether they replace or extend the history.
    pub prompt: Prompt,
    /// Tokens of the system prompt at the start of the context, when known.
    pub pinned: Option<usize>,
}

/// Tokenizes prompt text ([`Tokenizer::encode_prompt`]: special-token texts parsed, one BOS).
fn encode(tok: &Tokenizer, text: &str, add_special: bool) -> Result<Vec<u32>, EngineError> {
    Ok(tok.encode_prompt(text, add_special)?)
}

/// How many of `tokens` are the tokens of `prefix` (their common start).
fn pinned_len(tok: &Tokenizer, prefix: &str, tokens: &[u32]) -> Option<usize> {
    let p = encode(tok, prefix, true).ok()?;
    Some(common_prefix(&p, tokens))
}

/// The conversation with the session's system prompt inserted when it has no system message.
fn with_system(messages: &[ChatMessage], system: Option<&str>) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(sys) = system {
        if messages.first().is_none_or(|m| m.role != "system") {
            out.push(ChatMessage::new("system", sys));
        }
    }
    out.extend_from_slice(messages);
    out
}

/// The session's template variables with the request's over them.
fn merged(session: &TemplateVars, request: &TemplateVars) -> TemplateVars {
    let mut vars = session.clone();
    vars.0
        .extend(request.0.iter().map(|(k, v)| (k.clone(), v.clone())));
    vars
}

/// Tokenizes `input` for a session with options `opts` whose history is empty or not.
pub(crate) fn tokenize(
    tok: &Tokenizer,
    input: &Input,
    opts: &SessionOptions,
    history_empty: bool,
    n_vocab: usize,
) -> Result<Tokenized, EngineError> {
    let system = opts.system_prompt.as_deref();
    match input {
        Input::Text(text) => {
            let full = format!("{}{text}", system.unwrap_or(""));
            let ids = encode(tok, &full, true)?;
            let pinned = system.and_then(|s| pinned_len(tok, s, &ids));
            Ok(Tokenized {
                prompt: Prompt::Full(ids),
                pinned,
            })
        }
        Input::Chat(c) => {
            let mut conv = with_system(&c.messages, system);
            let mut vars = merged(&opts.template_vars, &c.vars);
            if let Some(t) = &c.tools {
                t.shape_prompt(tok, &mut conv, &mut vars);
            }
            // Message contents are text: only the template's markers are control tokens.
            let ids = tok.encode_chat_with(&conv, true, &vars)?;
            let pinned = match conv.first() {
                Some(m) if m.role == "system" => tok
                    .system_prefix(&m.content)
                    .and_then(|s| pinned_len(tok, &s, &ids)),
                _ => None,
            };
            Ok(Tokenized {
                prompt: Prompt::Full(ids),
                pinned,
            })
        }
        Input::Append(text) => {
            let (full, sys) = match system {
                Some(s) if history_empty => (format!("{s}{text}"), Some(s)),
                _ => (text.clone(), None),
            };
            let ids = encode(tok, &full, history_empty)?;
            let pinned = sys.and_then(|s| pinned_len(tok, s, &ids));
            Ok(Tokenized {
                prompt: Prompt::Append(ids),
                pinned,
            })
        }
        Input::UserTurn(text) if history_empty => {
            let first = Input::Chat(vec![ChatMessage::new("user", text.clone())].into());
            tokenize(tok, &first, opts, true, n_vocab)
        }
        Input::UserTurn(text) => {
            let turns = tok.turn_texts_with(&opts.template_vars).ok_or_else(|| {
                EngineError::InvalidRequest(
                    "this model's chat template cannot be continued one user turn at a time; \
                     send the whole conversation instead"
                        .into(),
                )
            })?;
            Ok(Tokenized {
                prompt: Prompt::Append(tok.encode_user_turn(&turns, text)?),
                pinned: None,
            })
        }
        Input::Encoded(e)
            if e.system_prompt == opts.system_prompt && e.template_vars == opts.template_vars =>
        {
            Ok(Tokenized {
                prompt: Prompt::Full(e.tokens.clone()),
                pinned: e.pinned,
            })
        }
        Input::Encoded(e) => tokenize(tok, &e.input, opts, history_empty, n_vocab),
        Input::Tokens(ids) => {
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(EngineError::InvalidRequest(format!(
                    "token id {bad} is outside the vocabulary ({n_vocab} tokens)"
                )));
            }
            Ok(Tokenized {
                prompt: Prompt::Full(ids.clone()),
                pinned: None,
            })
        }
    }
}

/// Context indices where a user turn starts in `state` followed by `feed` (empty without a
/// turn header).
pub(crate) fn context_turns(header: Option<&[u32]>, state: &[u32], feed: &[u32]) -> Vec<usize> {
    let Some(h) = header else {
        return Vec::new();
    };
    let context: Vec<u32> = state.iter().chain(feed).copied().collect();
    find_turn_starts(&context, h, 0)
}

/// A streaming detokenizer for text that continues a context: the leading space an SPM
/// tokenizer strips at the start of a text is kept (" Paris" after "The capital is").
pub(crate) fn continuation_detokenizer(tok: &Tokenizer) -> StreamingDetokenizer {
    let mut d = StreamingDetokenizer::new();
    if let Ok(ids) = tok.encode("a", false, false) {
        for id in ids {
            let _ = d.push(tok, id);
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Encoded;
    use statelm_tokenizer::{SpecialIds, TokenizerKind, TokenizerSpec};

    /// A byte-fallback SPM tokenizer: `<unk>`, `<s>`, `</s>` and the 256 byte tokens.
    fn bytes_tokenizer() -> Tokenizer {
        let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        Tokenizer::new(TokenizerSpec {
            kind: TokenizerKind::Spm,
            pre: String::new(),
            architecture: String::new(),
            scores: vec![0.0; tokens.len()],
            tokens,
            token_types: types,
            merges: Vec::new(),
            special: SpecialIds {
                bos: Some(1),
                eos: Some(2),
                ..SpecialIds::default()
            },
            add_bos: Some(true),
            add_eos: None,
            add_space_prefix: Some(false),
            chat_template: None,
        })
        .unwrap()
    }

    /// An encoded input is not tokenized again when the session's system prompt is the one it
    /// was encoded with (the tokens are used as they are); with another one it is.
    #[test]
    fn encoded_inputs_are_tokenized_once() {
        let tok = bytes_tokenizer();
        let mut e = Encoded::new(&tok, Input::Text("ab".into()), None).unwrap();
        assert_eq!(e.tokens(), &[1, 3 + b'a' as u32, 3 + b'b' as u32]);
        e.tokens = vec![1, 7, 7, 7];
        let input = Input::Encoded(Box::new(e));
        let opts = SessionOptions::default();
        let t = tokenize(&tok, &input, &opts, true, 300).unwrap();
        assert_eq!(t.prompt, Prompt::Full(vec![1, 7, 7, 7]), "used as encoded");
        let other = SessionOptions {
            system_prompt: Some("S".into()),
            ..SessionOptions::default()
        };
        let t = tokenize(&tok, &input, &other, true, 300).unwrap();
        let s = 3 + b'S' as u32;
        assert_eq!(
            t.prompt.into_tokens(),
            vec![1, s, 3 + b'a' as u32, 3 + b'b' as u32]
        );
    }
}
