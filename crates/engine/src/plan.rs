//! Prompt reuse: what of a session's State a new request can keep, and what must be computed.
//!
//! A session keeps its `history` (every token of the conversation) and a State that reflects
//! `history[..evaluated]` — exactly (`trimmed == false`: the State's tokens *are* that prefix)
//! or as a trimmed view (the pinned prefix plus a recent part). `evaluated` may lag the history
//! by the last sampled token, which is computed with the next request.

use crate::error::EngineError;

/// The prompt of a request, tokenized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Prompt {
    /// The full context.
    Full(Vec<u32>),
    /// Tokens appended to the history.
    Append(Vec<u32>),
}

impl Prompt {
    /// The tokens, full or appended.
    pub fn into_tokens(self) -> Vec<u32> {
        match self {
            Prompt::Full(t) | Prompt::Append(t) => t,
        }
    }
}

/// What a request does to a session before any budget trimming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReusePlan {
    /// The history after the prompt.
    pub history: Vec<u32>,
    /// The State is truncated to this many tokens (its length: unchanged; 0: reset).
    pub state_keep: usize,
    /// `history[feed_from..]` is fed to the State.
    pub feed_from: usize,
}

/// How many tokens `a` and `b` share from the start: the one measure of prompt reuse (the
/// engine's prompt plans, its session pool and turn-diffing).
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Plans reuse for a session with `history`, `evaluated` tokens of it in the State
/// (`state_len` tokens, a trimmed view if `trimmed`, whose last `state_tail` tokens are known
/// to be `history[evaluated - state_tail..evaluated]`).
///
/// A trimmed State is kept up to where a full prompt departs from the history when that
/// point lies in its known tail (a client resending the conversation with an answer spelled
/// differently); earlier than that, it is recomputed.
pub(crate) fn plan_reuse(
    history: &[u32],
    evaluated: usize,
    trimmed: bool,
    (state_len, state_tail): (usize, usize),
    prompt: Prompt,
) -> Result<ReusePlan, EngineError> {
    let evaluated = evaluated.min(history.len());
    let (new_history, mut state_keep, mut feed_from) = match prompt {
        Prompt::Append(tokens) => {
            let mut h = history.to_vec();
            h.extend_from_slice(&tokens);
            (h, state_len, evaluated)
        }
        Prompt::Full(tokens) if tokens.starts_with(history) => (tokens, state_len, evaluated),
        Prompt::Full(tokens) if !trimmed => {
            let l = common_prefix(&history[..evaluated], &tokens).min(state_len);
            (tokens, l, l)
        }
        Prompt::Full(tokens) => {
            let d = common_prefix(&history[..evaluated], &tokens);
            let tail_start = evaluated - state_tail.min(state_len).min(evaluated);
            if d > tail_start {
                let keep = state_len - (evaluated - d);
                (tokens, keep, d)
            } else {
                (tokens, 0, 0)
            }
        }
    };
    if new_history.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if feed_from >= new_history.len() {
        // Nothing new: recompute the last token to get its logits.
        feed_from = new_history.len() - 1;
        state_keep = state_keep.saturating_sub(1);
        if trimmed && state_keep == 0 {
            feed_from = 0;
        }
    }
    Ok(ReusePlan {
        history: new_history,
        state_keep,
        feed_from,
    })
}

/// Tokens to feed to a State, each with the history length it completes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Feed {
    tokens: Vec<u32>,
    /// `hist_after[i]`: the session's `evaluated` once `tokens[..=i]` are in the State.
    hist_after: Vec<usize>,
    pos: usize,
    /// `evaluated` before the first token.
    base: usize,
}

impl Feed {
    /// An empty feed; the session's `evaluated` is `base`.
    pub fn new(base: usize) -> Feed {
        Feed {
            base,
            ..Feed::default()
        }
    }

    /// Appends history tokens `tokens`, the first at history index `start`.
    pub fn push_history(&mut self, start: usize, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
        self.hist_after
            .extend((0..tokens.len()).map(|i| start + i + 1));
    }

    /// Appends drafted tokens: fed like the others, but not history (`evaluated` stays).
    pub fn push_drafts(&mut self, drafts: &[u32]) {
        let ev = self.hist_after.last().copied().unwrap_or(self.base);
        self.tokens.extend_from_slice(drafts);
        self.hist_after
            .extend(std::iter::repeat_n(ev, drafts.len()));
    }

    /// Inserts tokens that recompute context already counted as evaluated (the kept tokens of
    /// a re-prefill) before the rest.
    pub fn insert_refeed(&mut self, kept: &[u32]) {
        let at = self.pos;
        let ev = self.evaluated();
        self.tokens.splice(at..at, kept.iter().copied());
        self.hist_after
            .splice(at..at, std::iter::repeat_n(ev, kept.len()));
    }

    /// The session's `evaluated` after the tokens fed so far.
    pub fn evaluated(&self) -> usize {
        match self.pos {
            0 => self.base,
            p => self.hist_after[p - 1],
        }
    }

    /// The next up to `n` tokens.
    pub fn next_chunk(&self, n: usize) -> &[u32] {
        let end = (self.pos + n).min(self.tokens.len());
        &self.tokens[self.pos..end]
    }

    /// Marks `n` tokens as fed.
    pub fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.tokens.len());
    }

    /// The tokens not fed yet.
    pub fn rest(&self) -> &[u32] {
        &self.tokens[self.pos..]
    }

    /// Drops `n` of the tokens not fed yet, after the first `head` of them (a trim: the
    /// history they stand for is not computed, and `evaluated` still moves past it).
    pub fn skip(&mut self, head: usize, n: usize) {
        let from = (self.pos + head).min(self.tokens.len());
        let to = (from + n).min(self.tokens.len());
        self.tokens.drain(from..to);
        self.hist_after.drain(from..to);
    }

    /// Drops the last `n` tokens not fed yet (unchecked drafts).
    pub fn drop_tail(&mut self, n: usize) {
        let keep = self.tokens.len().saturating_sub(n).max(self.pos);
        self.tokens.truncate(keep);
        self.hist_after.truncate(keep);
    }

    /// Tokens not fed yet.
    pub fn remaining(&self) -> usize {
        self.tokens.len() - self.pos
    }

    /// Tokens in the feed.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_feeds_the_lagging_token_and_the_new_ones() {
        let p = plan_reuse(&[1, 2, 3], 2, false, (2, 0), Prompt::Append(vec![4, 5])).unwrap();
        assert_eq!(
            (p.history, p.state_keep, p.feed_from),
            (vec![1, 2, 3, 4, 5], 2, 2)
        );
    }

    #[test]
    fn common_prefix_counts_the_shared_start() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
    }

    #[test]
    fn full_prompt_extending_the_history_reuses_it() {
        let p = plan_reuse(&[1, 2, 3], 3, false, (3, 0), Prompt::Full(vec![1, 2, 3, 9])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (3, 3));
    }

    #[test]
    fn diverging_prompt_truncates_to_the_common_prefix() {
        let p = plan_reuse(&[1, 2, 3, 4], 4, false, (4, 0), Prompt::Full(vec![1, 2, 7])).unwrap();
        assert_eq!(
            (p.history, p.state_keep, p.feed_from),
            (vec![1, 2, 7], 2, 2)
        );
    }

    #[test]
    fn same_prompt_recomputes_only_the_last_token() {
        let p = plan_reuse(&[1, 2, 3], 3, false, (3, 0), Prompt::Full(vec![1, 2, 3])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (2, 2));
        let p = plan_reuse(&[1, 2, 3], 3, false, (3, 0), Prompt::Full(vec![1, 2])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (1, 1));
    }

    #[test]
    fn trimmed_state_is_reset_when_the_prompt_diverges() {
        let p = plan_reuse(&[1, 2, 3, 4], 4, true, (2, 0), Prompt::Full(vec![1, 2, 9])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (0, 0));
        // ... and kept when it extends the history.
        let p = plan_reuse(
            &[1, 2, 3, 4],
            4,
            true,
            (2, 0),
            Prompt::Full(vec![1, 2, 3, 4, 5]),
        )
        .unwrap();
        assert_eq!((p.state_keep, p.feed_from), (2, 4));
    }

    #[test]
    fn trimmed_state_keeps_its_tail_up_to_where_the_prompt_departs() {
        // The State holds history[0] (pinned) and history[3..6]; the prompt departs at 5.
        let h = [1, 2, 3, 4, 5, 6];
        let p = plan_reuse(&h, 6, true, (4, 3), Prompt::Full(vec![1, 2, 3, 4, 5, 9, 9])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (3, 5));
        // Departing before the known tail: recomputed.
        let p = plan_reuse(&h, 6, true, (4, 3), Prompt::Full(vec![1, 2, 3, 9])).unwrap();
        assert_eq!((p.state_keep, p.feed_from), (0, 0));
    }

    #[test]
    fn empty_prompt_is_an_error() {
        assert!(matches!(
            plan_reuse(&[], 0, false, (0, 0), Prompt::Full(vec![])),
            Err(EngineError::EmptyPrompt)
        ));
    }

    #[test]
    fn feed_tracks_evaluated_through_refeeds() {
        let mut f = Feed::new(5);
        f.push_history(5, &[10, 11, 12]);
        assert_eq!(f.evaluated(), 5);
        f.advance(1);
        assert_eq!(f.evaluated(), 6);
        f.insert_refeed(&[1, 2]);
        assert_eq!(f.next_chunk(10), &[1, 2, 11, 12]);
        f.advance(2);
        assert_eq!(f.evaluated(), 6);
        f.advance(2);
        assert_eq!((f.evaluated(), f.remaining()), (8, 0));
    }
}
