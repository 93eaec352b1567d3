//! Where turns begin: the texts a chat template puts between messages, and the tokens that open
//! a user turn, so a conversation can be extended one message at a time and trimmed in whole
//! turns.

use crate::chat::{ChatMessage, TemplateVars};
use crate::Tokenizer;

/// How the text of one more turn is built from the chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnTexts {
    /// What closes an answer and opens the next user message (ChatML:
    /// `<|im_end|>\n<|im_start|>user\n`).
    pub between: String,
    /// What follows a user message up to the generation prompt (ChatML:
    /// `<|im_end|>\n<|im_start|>assistant\n`).
    pub after_user: String,
}

const SENT_U: &str = "\u{1}U\u{1}";
const SENT_A: &str = "\u{1}A\u{1}";
const SENT_V: &str = "\u{1}V\u{1}";

impl Tokenizer {
    /// Derives the turn texts by rendering the template with marker messages; `None` when the
    /// template does not render conversations in a way that can be extended turn by turn.
    pub fn turn_texts(&self) -> Option<TurnTexts> {
        self.turn_texts_with(&TemplateVars::new())
    }

    /// [`Tokenizer::turn_texts`] with extra template variables (`chat_template_kwargs`).
    pub fn turn_texts_with(&self, vars: &TemplateVars) -> Option<TurnTexts> {
        let one = self
            .render_chat_with(&[ChatMessage::new("user", SENT_U)], true, vars)
            .ok()?;
        let after_user = one.get(one.find(SENT_U)? + SENT_U.len()..)?.to_string();
        let three = self
            .render_chat_with(
                &[
                    ChatMessage::new("user", SENT_U),
                    ChatMessage::new("assistant", SENT_A),
                    ChatMessage::new("user", SENT_V),
                ],
                true,
                vars,
            )
            .ok()?;
        let a_end = three.find(SENT_A)? + SENT_A.len();
        let v_start = three.find(SENT_V)?;
        let between = three.get(a_end..v_start)?.to_string();
        let tail = three.get(v_start + SENT_V.len()..)?;
        (tail == after_user).then_some(TurnTexts {
            between,
            after_user,
        })
    }

    /// The tokens of one more user turn after an answer: [`TurnTexts::between`], the message
    /// (as text: a control token spelled in it stays text, as in [`Tokenizer::encode_chat`]),
    /// [`TurnTexts::after_user`] — what the chat template renders for that turn, so a
    /// conversation grows one message at a time. No BOS.
    pub fn encode_user_turn(
        &self,
        turns: &TurnTexts,
        content: &str,
    ) -> Result<Vec<u32>, crate::TokenizerError> {
        let text = format!("{}{content}{}", turns.between, turns.after_user);
        let start = turns.between.len();
        let plain = match self.matcher.has_control(content, &self.vocab) {
            true => vec![(start, start + content.len())],
            false => Vec::new(),
        };
        self.encode_guarded(&text, false, true, &plain, self.add_space_prefix)
    }

    /// The text a conversation whose system message is `system` starts with, up to where
    /// trimming may cut: the rendered system message (ChatML), or — for templates that fold the
    /// system text into the first user turn (Gemma) — everything before that turn's own text.
    pub fn system_prefix(&self, system: &str) -> Option<String> {
        let sys = ChatMessage::new("system", system);
        let alone = self.render_chat(std::slice::from_ref(&sys), false).ok()?;
        if alone.contains(system.trim()) {
            return Some(alone);
        }
        let probe = self
            .render_chat(&[sys, ChatMessage::new("user", SENT_U)], false)
            .ok()?;
        Some(probe[..probe.find(SENT_U)?].to_string())
    }

    /// The tokens that open a user turn (ChatML: `<|im_start|>` `user`; Gemma:
    /// `<start_of_turn>` `user`): from the first control token after the answer's end-of-turn
    /// token in [`TurnTexts::between`], without trailing whitespace tokens (which may merge
    /// with the message's text). `None` when the template has no such tokens.
    pub fn user_turn_header(&self) -> Option<Vec<u32>> {
        let between = self.turn_texts()?.between;
        let ids = self.encode(&between, false, true).ok()?;
        let after_end = ids
            .iter()
            .position(|&t| self.is_eog(t))
            .map_or(0, |i| i + 1);
        let start = after_end + ids[after_end..].iter().position(|&t| self.is_control(t))?;
        let mut header = ids[start..].to_vec();
        // A token's bytes are its decoded text: whitespace is whitespace in both vocabularies.
        let blank = |t: u32| {
            self.token_bytes(t)
                .is_some_and(|b| b.trim_ascii().is_empty())
        };
        while header.len() > 1 && header.last().is_some_and(|&t| blank(t)) {
            header.pop();
        }
        Some(header)
    }
}

/// Start positions of `header` in `tokens` at or after `from`, in order.
pub fn find_turn_starts(tokens: &[u32], header: &[u32], from: usize) -> Vec<usize> {
    if header.is_empty() || tokens.len() < header.len() {
        return Vec::new();
    }
    (from..=tokens.len() - header.len())
        .filter(|&i| tokens[i..i + header.len()] == *header)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::find_turn_starts;

    #[test]
    fn finds_every_header() {
        let t = [5, 1, 2, 9, 1, 2, 1, 1, 2];
        assert_eq!(find_turn_starts(&t, &[1, 2], 0), vec![1, 4, 7]);
        assert_eq!(find_turn_starts(&t, &[1, 2], 2), vec![4, 7]);
        assert!(find_turn_starts(&t, &[], 0).is_empty());
        assert!(find_turn_starts(&[1], &[1, 2], 0).is_empty());
    }
}
