//! Prompt-lookup drafting: the next tokens guessed from the session's own history.
//!
//! Text an answer copies from its input (code edits, quoted documents, echoed schemas) repeats
//! runs of tokens already in the context. [`NgramIndex`] remembers, for every n-gram of up to
//! `ngram_max` tokens, where it last ended; a draft is what followed the latest earlier
//! occurrence of the context's last n tokens, trying the longest n first and n = 1 only when
//! `ngram_max` is 1 (see [`MIN_NGRAM`]). Indexing a token
//! costs `ngram_max` hash-map updates, a draft `ngram_max` lookups: O(1) amortized per step,
//! with no scan of the history. How many of the proposed tokens are checked is the engine's
//! draft policy's choice (acceptance and pass costs measured as the generation runs).

use crate::plan::common_prefix;
use std::collections::HashMap;

/// The longest n-gram the index keys on by default.
pub const DEFAULT_NGRAM_MAX: usize = 3;
/// The longest `ngram_max` a request may ask for.
pub const MAX_NGRAM: usize = 8;
/// The shortest match a draft follows (unless `ngram_max` is smaller). One token is too weak a
/// context: on Qwen2.5-Coder 0.5B (`--lookup 8`, greedy, two interleaved rounds) drafts after
/// one-token matches added no accepted token on prose (41 of 138 drafts accepted with them, 41
/// of 86 without; 0.86–0.95× plain with them, 1.06–1.15× without) and none on an async/await
/// rewrite (33 of 110 vs 23 of 62), while a method rename accepted 103 vs 101.
pub const MIN_NGRAM: usize = 2;

/// Where each n-gram of a token history last ended.
#[derive(Debug, Clone)]
pub struct NgramIndex {
    ngram_max: usize,
    /// `ends[n - 1]`: hash of an n-gram → the end (exclusive) of its latest indexed occurrence.
    ends: Vec<HashMap<u64, usize>>,
    /// N-grams ending at or before this index are indexed.
    covered: usize,
}

/// A hash of `tokens` (FNV-1a over the ids; equal slices hash equal, a hit is verified).
fn hash(tokens: &[u32]) -> u64 {
    tokens.iter().fold(0xcbf2_9ce4_8422_2325, |h, &t| {
        (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl NgramIndex {
    /// An empty index of n-grams of up to `ngram_max` tokens (at least 1).
    pub fn new(ngram_max: usize) -> NgramIndex {
        let ngram_max = ngram_max.max(1);
        NgramIndex {
            ngram_max,
            ends: vec![HashMap::new(); ngram_max],
            covered: 0,
        }
    }

    /// The longest n-gram it keys on.
    pub fn ngram_max(&self) -> usize {
        self.ngram_max
    }

    /// The shortest n-gram it keys on: [`MIN_NGRAM`], or `ngram_max` when that is smaller
    /// (shorter n-grams are neither indexed nor looked up).
    fn ngram_min(&self) -> usize {
        MIN_NGRAM.min(self.ngram_max)
    }

    /// Brings the index up to `history` (which extends the history it was built on): indexes
    /// every n-gram ending before its last token, so the context's own tail never matches
    /// itself.
    pub fn extend(&mut self, history: &[u32]) {
        let upto = history.len().saturating_sub(1);
        while self.covered < upto {
            self.covered += 1;
            let end = self.covered;
            for n in self.ngram_min()..=self.ngram_max.min(end) {
                self.ends[n - 1].insert(hash(&history[end - n..end]), end);
            }
        }
    }

    /// Forgets everything (the history was replaced, not extended).
    pub fn clear(&mut self) {
        for m in &mut self.ends {
            m.clear();
        }
        self.covered = 0;
    }

    /// Up to `max` tokens that followed the latest earlier occurrence of `history`'s last n
    /// tokens, for the longest n (from `ngram_max` down to [`MIN_NGRAM`], or 1 when `ngram_max`
    /// is 1) that occurred before; empty when none did. `history` must be what the index was
    /// last extended with.
    pub fn draft(&self, history: &[u32], max: usize) -> Vec<u32> {
        self.draft_match(history, max)
            .map(|(_, d)| d)
            .unwrap_or_default()
    }

    /// [`NgramIndex::draft`] with the length of the match it followed (`None`: no draft).
    pub fn draft_match(&self, history: &[u32], max: usize) -> Option<(usize, Vec<u32>)> {
        let len = history.len();
        if max == 0 {
            return None;
        }
        for n in (self.ngram_min()..=self.ngram_max.min(len)).rev() {
            let tail = &history[len - n..];
            let Some(&end) = self.ends[n - 1].get(&hash(tail)) else {
                continue;
            };
            if end < len && end >= n && history[end - n..end] == *tail {
                return Some((n, history[end..(end + max).min(len)].to_vec()));
            }
        }
        None
    }
}

/// The most tokens per forward pass prompt lookup could give on `answer` after `prompt` —
/// every proposal of up to `max` drafts checked at no cost, so a pass yields the drafts the
/// answer agrees with plus one token: `answer.len() / passes`. What a drafter of this index can
/// gain on a text, whatever the verification costs (1.0: nothing to copy; 0.0: no answer).
pub fn ceiling(prompt: &[u32], answer: &[u32], ngram_max: usize, max: usize) -> f64 {
    let mut index = NgramIndex::new(ngram_max);
    let drafted = |history: &[u32], rest: &[u32]| {
        index.extend(history);
        common_prefix(&index.draft(history, max), rest)
    };
    replay(prompt, answer, drafted, |_| 1.0)
}

/// [`ceiling`] for the best drafter that copies from the history: each pass takes, among the
/// continuations (up to `max` tokens) of *every* earlier occurrence of the context's last
/// token, the one the answer agrees with longest. No choice among matches, no longer or
/// shorter n-gram, and no tree of several candidates verified at once can yield more tokens
/// per pass by copying — what any prompt-lookup drafter can gain on the text. Quadratic in the
/// history: for measuring, not for decoding.
pub fn any_match_ceiling(prompt: &[u32], answer: &[u32], max: usize) -> f64 {
    any_match_bound(prompt, answer, max, |_| 1.0)
}

/// [`any_match_ceiling`] at real verification costs: answer tokens per decode step when each
/// pass checks exactly the drafts of the best earlier copy that the answer agrees with (never a
/// rejected one) and a pass of `k` columns costs `cost(k)` decode steps. A drafter that knew
/// the answer could not beat it: the speed-up bound of prompt lookup on this text and device.
pub fn any_match_bound(
    prompt: &[u32],
    answer: &[u32],
    max: usize,
    cost: impl Fn(usize) -> f64,
) -> f64 {
    let best_copy = |history: &[u32], rest: &[u32]| {
        let Some((&last, earlier)) = history.split_last() else {
            return 0;
        };
        let ends = (1..=earlier.len()).filter(|&e| history[e - 1] == last);
        let copies = ends.map(|e| common_prefix(&history[e..(e + max).min(history.len())], rest));
        copies.max().unwrap_or(0)
    };
    replay(prompt, answer, best_copy, cost)
}

/// Answer tokens per unit of cost when each pass over the history so far and the rest of the
/// answer accepts `agreed(history, rest)` drafts plus one token and costs `cost(columns)`.
fn replay(
    prompt: &[u32],
    answer: &[u32],
    mut agreed: impl FnMut(&[u32], &[u32]) -> usize,
    cost: impl Fn(usize) -> f64,
) -> f64 {
    let mut history = prompt.to_vec();
    let (mut done, mut spent) = (0, 0.0);
    while done < answer.len() {
        let rest = &answer[done..];
        let step = (agreed(&history, rest) + 1).min(rest.len());
        history.extend_from_slice(&rest[..step]);
        done += step;
        spent += cost(step);
    }
    if spent > 0.0 {
        answer.len() as f64 / spent
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The draft by scanning the whole history (the reference).
    fn scan(history: &[u32], ngram_max: usize, max: usize) -> Vec<u32> {
        let len = history.len();
        for n in (MIN_NGRAM.min(ngram_max)..=ngram_max.min(len)).rev() {
            let tail = &history[len - n..];
            // The latest earlier end `e` (< len) with history[e - n..e] == tail.
            if let Some(e) = (n..len).rev().find(|&e| history[e - n..e] == *tail) {
                return history[e..(e + max).min(len)].to_vec();
            }
        }
        Vec::new()
    }

    #[test]
    fn the_ceiling_counts_passes_at_no_cost() {
        // Nothing repeats: one token per pass.
        assert_eq!(ceiling(&[1, 2, 3], &[4, 5, 6, 7], 3, 8), 1.0);
        // The answer copies the prompt: "1" and "2" come one pass each (no earlier match of
        // "8 9" or "9 1"), then the match "1 2" drafts 3..8, all agreed: three passes.
        let prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let answer = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(ceiling(&prompt, &answer, 3, 8), 8.0 / 3.0);
        // Two drafts per pass at most: 1, 2, then 3 4 5 and 6 7 8.
        assert_eq!(ceiling(&prompt, &answer, 3, 2), 8.0 / 4.0);
        assert_eq!(ceiling(&prompt, &[], 3, 8), 0.0);
    }

    #[test]
    fn any_match_takes_the_best_earlier_copy() {
        // "1 2" occurs twice, followed by "3 4" and later by "5 6"; the answer copies the first.
        // The any-match drafter copies "2 3 4 7" after the answer's first token (two passes);
        // the index has no 2-gram "9 1", then drafts the latest "1 2"'s "5 6": four passes.
        let prompt = [1, 2, 3, 4, 7, 1, 2, 5, 6, 9];
        let answer = [1, 2, 3, 4, 7];
        let latest = ceiling(&prompt, &answer, 3, 8);
        let any = any_match_ceiling(&prompt, &answer, 8);
        assert!(any > latest, "any {any} latest {latest}");
        assert_eq!(any, 5.0 / 2.0);
        assert_eq!(latest, 5.0 / 4.0);
        // 1.0 when nothing repeats, 0.0 without an answer.
        assert_eq!(any_match_ceiling(&[1, 2, 3], &[4, 5, 6, 7], 8), 1.0);
        assert_eq!(any_match_ceiling(&[], &[], 8), 0.0);
        // At a cost of one step per column, copying gains nothing; at half a step per extra
        // column, the two passes (1 and 4 columns) cost 1 + 2.5 steps for five tokens.
        assert_eq!(any_match_bound(&prompt, &answer, 8, |k| k as f64), 1.0);
        let half = |k: usize| 1.0 + 0.5 * (k - 1) as f64;
        assert_eq!(any_match_bound(&prompt, &answer, 8, half), 5.0 / 3.5);
    }

    #[test]
    fn drafts_what_followed_the_longest_match() {
        // "a b c d ... a b c" → "d" and what followed it.
        let h = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        let mut ix = NgramIndex::new(3);
        ix.extend(&h);
        assert_eq!(ix.draft(&h, 2), vec![4, 5]);
        assert_eq!(ix.draft(&h, 10), vec![4, 5, 9, 1, 2, 3]);
        // Nothing repeats: no draft.
        let h = [1, 2, 3];
        let mut ix = NgramIndex::new(3);
        ix.extend(&h);
        assert!(ix.draft(&h, 4).is_empty());
        // A one-token match drafts only when the index keys on single tokens alone.
        let h = [7, 1, 5, 6, 1];
        let mut ix = NgramIndex::new(3);
        ix.extend(&h);
        assert!(ix.draft(&h, 4).is_empty());
        let mut ix = NgramIndex::new(1);
        ix.extend(&h);
        assert_eq!(ix.draft(&h, 2), vec![5, 6]);
    }

    proptest! {
        /// The any-match ceiling bounds the index's drafter on every text (its copies are
        /// among those the any-match replay considers, and a copy that agreed at one point
        /// still agrees further on).
        #[test]
        fn any_match_bounds_the_index(
            prompt in proptest::collection::vec(0u32..5, 0..40),
            answer in proptest::collection::vec(0u32..5, 0..60),
            ngram_max in 1usize..5,
            max in 1usize..9,
        ) {
            let any = any_match_ceiling(&prompt, &answer, max);
            let index = ceiling(&prompt, &answer, ngram_max, max);
            prop_assert!(any >= index, "any {} index {}", any, index);
        }

        /// Indexed incrementally, token by token, the index drafts what a full scan finds.
        #[test]
        fn incremental_index_equals_a_scan(
            tokens in proptest::collection::vec(0u32..6, 1..120),
            ngram_max in 1usize..5,
            max in 0usize..8,
        ) {
            let mut ix = NgramIndex::new(ngram_max);
            for len in 1..=tokens.len() {
                let h = &tokens[..len];
                ix.extend(h);
                prop_assert_eq!(ix.draft(h, max), scan(h, ngram_max, max), "len {}", len);
            }
            ix.clear();
            ix.extend(&tokens);
            prop_assert_eq!(ix.draft(&tokens, max), scan(&tokens, ngram_max, max));
        }
    }
}
