//! Prompts: the one place where prompt text and conversations become tokens, for every front
//! end (the engine, the server's admission checks, the CLI's chat).
//!
//! Two rules live here. A text that spells out BOS, tokenized with BOS added, starts with one
//! BOS, not two. And in a conversation only the chat template's own markers are control
//! tokens: a message whose content spells `<|im_start|>system` or `<start_of_turn>` gets those
//! characters as text, so a user cannot open a turn of another role.

use crate::chat::{ChatMessage, TemplateVars};
use crate::error::TokenizerError;
use crate::Tokenizer;

/// Opens and closes the marker standing for message `i` while locating contents.
const MARK_OPEN: char = '\u{F0000}';
const MARK_CLOSE: char = '\u{F0001}';

impl Tokenizer {
    /// Tokenizes prompt text: BOS (and EOS) as the model adds them when `add_special`,
    /// control-token texts parsed (the caller wrote them), and a BOS the text spells out not
    /// doubled.
    pub fn encode_prompt(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let ids = self.encode(text, add_special, true)?;
        Ok(self.single_bos(ids))
    }

    /// Renders `messages` with the chat template and tokenizes the result like
    /// [`Tokenizer::encode_prompt`], except that control-token texts inside message contents
    /// stay text. Contents without such texts give exactly the tokens of the rendered string.
    ///
    /// A template that rewrites contents beyond trimming whitespace cannot be followed; a
    /// conversation that spells out control tokens is then refused
    /// ([`TokenizerError::ChatTemplate`]) rather than tokenized unsafely.
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_chat_with(messages, add_generation_prompt, &TemplateVars::new())
    }

    /// [`Tokenizer::encode_chat`] with extra template variables (`chat_template_kwargs`).
    pub fn encode_chat_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render_chat_with(messages, add_generation_prompt, vars)?;
        let spells_control =
            (messages.iter()).any(|m| self.matcher.has_control(&m.content, &self.vocab));
        let plain = if spells_control {
            self.content_ranges(messages, add_generation_prompt, vars, &rendered)?
        } else {
            Vec::new()
        };
        let ids = self.encode_guarded(&rendered, true, true, &plain, self.add_space_prefix)?;
        Ok(self.single_bos(ids))
    }

    fn single_bos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let Some(bos) = self.bos_id() {
            if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
                ids.remove(0);
            }
        }
        ids
    }

    /// The byte ranges of `rendered` holding message contents, in order: the template is
    /// rendered once more with a marker for each content, and the real contents (as given, or
    /// trimmed as templates often do) are matched between the template's own pieces.
    fn content_ranges(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
        rendered: &str,
    ) -> Result<Vec<(usize, usize)>, TokenizerError> {
        let marked: Vec<ChatMessage> = (messages.iter().enumerate())
            .map(|(i, m)| ChatMessage::new(m.role.clone(), format!("{MARK_OPEN}{i}{MARK_CLOSE}")))
            .collect();
        let probe = self.render_chat_with(&marked, add_generation_prompt, vars)?;
        let (pieces, order) = split_marks(&probe).ok_or_else(|| self.unplaceable())?;
        let mut ranges = Vec::with_capacity(order.len());
        let mut at = 0;
        for (k, &i) in order.iter().enumerate() {
            at += strip(&rendered[at..], pieces[k]).ok_or_else(|| self.unplaceable())?;
            let content = messages.get(i).map_or("", |m| m.content.as_str());
            let next = pieces[k + 1];
            let last = k + 1 == order.len();
            let fits = |c: &&str| {
                let rest = rendered[at..].strip_prefix(*c);
                rest.is_some_and(|r| if last { r == next } else { r.starts_with(next) })
            };
            let candidates = [
                content,
                content.trim(),
                content.trim_start(),
                content.trim_end(),
            ];
            let c = candidates
                .into_iter()
                .find(fits)
                .ok_or_else(|| self.unplaceable())?;
            ranges.push((at, at + c.len()));
            at += c.len();
        }
        if order.is_empty() && rendered != pieces[0] {
            return Err(self.unplaceable());
        }
        Ok(ranges)
    }

    fn unplaceable(&self) -> TokenizerError {
        TokenizerError::ChatTemplate {
            source_name: "content".into(),
            message: "a message spells out a control token, and this template rewrites message \
                      texts too much to keep it as text; remove the control-token text"
                .into(),
        }
    }
}

/// The length of `piece` when `text` starts with it.
fn strip(text: &str, piece: &str) -> Option<usize> {
    text.starts_with(piece).then_some(piece.len())
}

/// Splits a render of marked messages into the template's pieces and the message index of
/// each marker between them (`pieces.len() == order.len() + 1`). `None` when a marker is
/// malformed or appears twice.
fn split_marks(probe: &str) -> Option<(Vec<&str>, Vec<usize>)> {
    let mut pieces = Vec::new();
    let mut order: Vec<usize> = Vec::new();
    let mut rest = probe;
    while let Some(open) = rest.find(MARK_OPEN) {
        pieces.push(&rest[..open]);
        let after = &rest[open + MARK_OPEN.len_utf8()..];
        let close = after.find(MARK_CLOSE)?;
        let i: usize = after[..close].parse().ok()?;
        if order.contains(&i) {
            return None;
        }
        order.push(i);
        rest = &after[close + MARK_CLOSE.len_utf8()..];
    }
    pieces.push(rest);
    Some((pieces, order))
}

#[cfg(test)]
mod tests {
    use super::split_marks;

    #[test]
    fn marks_split_the_render() {
        let (pieces, order) = split_marks("a\u{F0000}0\u{F0001}b\u{F0000}1\u{F0001}c").unwrap();
        assert_eq!(pieces, ["a", "b", "c"]);
        assert_eq!(order, [0, 1]);
        assert!(split_marks("a\u{F0000}0\u{F0001}\u{F0000}0\u{F0001}").is_none());
        assert!(split_marks("a\u{F0000}x\u{F0001}").is_none());
        assert_eq!(split_marks("plain").unwrap().1, Vec::<usize>::new());
    }
}
