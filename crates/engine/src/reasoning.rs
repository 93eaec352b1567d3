//! Thinking blocks (Qwen3, SmolLM3, DeepSeek-R1 distills): text between the vocabulary's
//! `<think>` and `</think>` tokens is the model's reasoning, reported apart from the answer
//! ([`crate::Event::Reasoning`]; `reasoning_content` in the OpenAI API, as llama-server gives
//! it). The split follows token ids, not text, so an answer that merely mentions "<think>" is
//! not cut; the two marker tokens themselves release no text. A prompt that ends inside an open
//! block (templates that start the answer with `<think>`) starts the answer in reasoning.
//! Models whose vocabulary has no such pair are never split.

use statelm_tokenizer::Tokenizer;

/// Where a generated token's text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The answer.
    Answer,
    /// The reasoning.
    Reasoning,
    /// `<think>` or `</think>`: no text.
    Marker,
}

/// Follows the thinking blocks of one generation.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReasoningSplit {
    /// The `<think>` and `</think>` token ids, when the vocabulary has both.
    markers: Option<(u32, u32)>,
    /// Inside a block.
    inside: bool,
}

impl ReasoningSplit {
    /// The split for a generation after `prompt` with the vocabulary of `tok`.
    pub(crate) fn new(tok: &Tokenizer, prompt: &[u32]) -> ReasoningSplit {
        let markers = tok.token_id("<think>").zip(tok.token_id("</think>"));
        let inside = markers.is_some_and(|(open, close)| {
            let last = |m: u32| prompt.iter().rposition(|&t| t == m);
            match (last(open), last(close)) {
                (Some(o), Some(c)) => o > c,
                (Some(_), None) => true,
                _ => false,
            }
        });
        ReasoningSplit { markers, inside }
    }

    /// Whether the generation is inside a block now.
    pub(crate) fn inside(&self) -> bool {
        self.inside
    }

    /// Routes the generated token `id`.
    pub(crate) fn route(&mut self, id: u32) -> Route {
        let Some((open, close)) = self.markers else {
            return Route::Answer;
        };
        if id == open {
            self.inside = true;
            Route::Marker
        } else if id == close {
            self.inside = false;
            Route::Marker
        } else if self.inside {
            Route::Reasoning
        } else {
            Route::Answer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(inside: bool) -> ReasoningSplit {
        ReasoningSplit {
            markers: Some((10, 11)),
            inside,
        }
    }

    #[test]
    fn tokens_between_the_markers_are_reasoning() {
        let mut s = split(false);
        let routes: Vec<Route> = [5, 10, 6, 7, 11, 8].map(|t| s.route(t)).to_vec();
        use Route::*;
        assert_eq!(
            routes,
            [Answer, Marker, Reasoning, Reasoning, Marker, Answer]
        );
    }

    #[test]
    fn no_markers_no_split() {
        let mut s = ReasoningSplit::default();
        assert_eq!(s.route(10), Route::Answer);
    }
}
