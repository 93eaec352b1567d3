//! Repetition control: the DRY ("don't repeat yourself") penalty, and the loop guard that ends
//! an answer which has started to repeat itself.
//!
//! DRY follows llama.cpp's `dry_*` sampler: a candidate token that would extend a sequence of
//! `n` tokens already seen in the context (the last `n` tokens occurred before, followed by the
//! candidate) loses `multiplier · base^(n − allowed_length)` from its logit, when
//! `n ≥ allowed_length`. Sequences do not extend across *breaker* tokens (tokens whose text
//! contains a breaker string: newline, `:`, `"`, `*` by default), so lines, list markers and
//! quotes — the ordinary structure of text — are never penalized, and a breaker is never
//! penalized itself.

use std::collections::HashMap;

/// Longest repeated sequence DRY measures (longer ones are penalized as this long).
const MAX_MATCH: usize = 64;
/// Largest exponent of `base` (keeps the penalty finite for any sane base).
const MAX_EXPONENT: i32 = 30;

/// The breaker tokens of a vocabulary: a bitmap over token ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakers(Vec<bool>);

impl Breakers {
    /// Marks every token whose decoded bytes (`pieces[id]`, lossily as UTF-8) contain one of
    /// `breakers` (empty strings are ignored).
    pub fn new<'a>(pieces: impl Iterator<Item = &'a [u8]>, breakers: &[String]) -> Breakers {
        let breakers: Vec<&[u8]> = breakers
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| b.as_bytes())
            .collect();
        let hit = |p: &[u8]| breakers.iter().any(|b| p.windows(b.len()).any(|w| w == *b));
        Breakers(pieces.map(hit).collect())
    }

    /// Whether token `id` breaks sequences (ids outside the vocabulary do not).
    pub fn contains(&self, id: u32) -> bool {
        self.0.get(id as usize).copied().unwrap_or(false)
    }
}

/// The DRY parameters of one generation (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dry {
    /// Scale of the penalty (`<= 0`: off).
    pub multiplier: f32,
    /// Growth of the penalty per token of repeated sequence beyond the allowed length.
    pub base: f32,
    /// Repeated sequences up to this long are free.
    pub allowed_length: usize,
}

impl Dry {
    /// Subtracts the DRY penalty from `logits` given the `context` so far (its most recent
    /// tokens; the caller bounds how many).
    pub fn apply(&self, logits: &mut [f32], context: &[u32], breakers: &Breakers) {
        if self.multiplier <= 0.0 {
            return;
        }
        for (id, n) in repeat_lengths(context, breakers) {
            if n < self.allowed_length.max(1) {
                continue;
            }
            let exp = ((n - self.allowed_length) as i32).min(MAX_EXPONENT);
            let penalty = self.multiplier * self.base.powi(exp);
            if let Some(l) = logits.get_mut(id as usize) {
                *l -= penalty.min(f32::MAX);
            }
        }
    }
}

/// For each token that followed an earlier occurrence of the context's tail, the longest such
/// tail (at most [`MAX_MATCH`], never across a breaker). Breaker candidates are left out.
pub fn repeat_lengths(context: &[u32], breakers: &Breakers) -> HashMap<u32, usize> {
    let mut best = HashMap::new();
    let Some((&last, _)) = context.split_last() else {
        return best;
    };
    if breakers.contains(last) {
        return best;
    }
    let n = context.len();
    // An earlier position `j` whose token equals the last one: the tokens before both match
    // for `k` more, and `context[j + 1]` is the token that followed.
    for j in 0..n - 1 {
        let next = context[j + 1];
        if context[j] != last || breakers.contains(next) {
            continue;
        }
        let mut k = 1;
        while k < MAX_MATCH && k <= j {
            let (a, b) = (context[j - k], context[n - 1 - k]);
            if a != b || breakers.contains(a) {
                break;
            }
            k += 1;
        }
        let e = best.entry(next).or_insert(0);
        *e = (*e).max(k);
    }
    best
}

/// Whether `answer` (the tokens generated so far) ends in a clear loop: a block of `p` tokens
/// (`1 ≤ p ≤ 64`) repeated back to back at least `max(4, ⌈32 / p⌉)` times — four times for
/// a block of eight or more tokens (a few words), 32 times for a single token. Ordinary text
/// repeats words and short phrases, not whole blocks four times in a row.
pub fn is_looping(answer: &[u32]) -> bool {
    (1..=64usize).any(|p| {
        let reps = 4.max(32usize.div_ceil(p));
        let span = p * reps;
        span <= answer.len() && {
            let tail = &answer[answer.len() - span..];
            tail[p..].iter().zip(tail).all(|(a, b)| a == b)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakers(ids: &[u32]) -> Breakers {
        let mut b = vec![false; 100];
        for &i in ids {
            b[i as usize] = true;
        }
        Breakers(b)
    }

    #[test]
    fn breakers_come_from_the_token_text() {
        let pieces: Vec<&[u8]> = vec![b"a", b"b\n", b"::", b"", b"x*y"];
        let b = Breakers::new(pieces.into_iter(), &["\n".into(), ":".into(), "*".into()]);
        assert_eq!(b.0, [false, true, true, false, true]);
        assert!(!b.contains(99));
    }

    #[test]
    fn the_longest_repeated_tail_decides_the_penalty() {
        // 1 2 3 4 ... 1 2 3 → 4 would extend "1 2 3" (length 3); 9 follows "3" once (length 1).
        let ctx = [1, 2, 3, 4, 7, 3, 9, 8, 1, 2, 3];
        let r = repeat_lengths(&ctx, &Breakers::default());
        assert_eq!(r.get(&4), Some(&3));
        assert_eq!(r.get(&9), Some(&1));
        assert_eq!(r.len(), 2);
        let dry = Dry {
            multiplier: 0.8,
            base: 1.75,
            allowed_length: 2,
        };
        let mut logits = vec![0.0f32; 10];
        dry.apply(&mut logits, &ctx, &Breakers::default());
        assert!((logits[4] + 0.8 * 1.75).abs() < 1e-6, "{logits:?}");
        assert_eq!(logits[9], 0.0, "a repeat of 1 is allowed");
        assert!(logits.iter().enumerate().all(|(i, &l)| i == 4 || l == 0.0));
    }

    #[test]
    fn sequences_stop_at_breakers() {
        // "1 5 2 3" then "1 5 2": 5 is a breaker, so the repeated tail is "2" alone and
        // the candidate 3 gets length 1; the breaker 5 itself is never a candidate.
        let ctx = [1, 5, 2, 3, 1, 5, 2];
        let b = breakers(&[5]);
        let r = repeat_lengths(&ctx, &b);
        assert_eq!(r.get(&3), Some(&1));
        let r = repeat_lengths(&[1, 5, 1], &b);
        assert!(!r.contains_key(&5));
        // A context ending in a breaker extends nothing.
        assert!(repeat_lengths(&[1, 2, 5, 1, 2, 5], &b).is_empty());
    }

    #[test]
    fn long_loops_get_a_large_finite_penalty() {
        let ctx: Vec<u32> = (0..400).map(|i| (i % 3) as u32).collect();
        let dry = Dry {
            multiplier: 1.0,
            base: 3.0,
            allowed_length: 2,
        };
        let mut logits = vec![0.0f32; 4];
        dry.apply(&mut logits, &ctx, &Breakers::default());
        // The context ends in 0, always followed by 1.
        assert!(logits[1].is_finite() && logits[1] < -1e9, "{logits:?}");
        assert_eq!([logits[0], logits[2], logits[3]], [0.0; 3]);
    }

    #[test]
    fn loops_are_clear_repeats_of_a_block() {
        let sentence: Vec<u32> = (10..18).collect();
        let mut answer: Vec<u32> = (100..140).collect();
        for reps in 1..=4 {
            answer.extend(&sentence);
            assert_eq!(is_looping(&answer), reps >= 4, "{reps} repeats");
        }
        // A single token needs 32 in a row; a short phrase ("a b") 16 times.
        assert!(!is_looping(&[7; 31]));
        assert!(is_looping(&[7; 32]));
        assert!(!is_looping(&[1, 2].repeat(15)));
        assert!(is_looping(&[1, 2].repeat(16)));
        // Ordinary text: words recur, blocks do not.
        let text: Vec<u32> = (0..500).map(|i| (i * 7919 % 97) as u32).collect();
        assert!(!is_looping(&text));
        assert!(!is_looping(&[]));
    }
}
