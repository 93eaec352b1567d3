//! Token-budget trimming, planned as pure arithmetic.
//!
//! A session's context is the State's tokens followed by the tokens about to be fed. When it
//! would pass the budget, the middle is dropped: the pinned prefix stays, and so does the most
//! recent part — about half of the budget, or the whole new prompt when that is longer and
//! fits, or else the prompt's tail. Some room (`reserve`) is left for generation so that
//! decoding does not trim again at once.
//!
//! When the context's turn starts are known (`turns`: context indices where a user turn
//! begins), cuts fall on them: whole oldest turns are dropped, never part of one, and the
//! current message is kept whole unless it alone passes what the budget leaves.

use std::ops::Range;

/// Where a trim cut the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// At the start of a turn: only whole turns were dropped.
    Turns,
    /// Inside the answer being generated: the current message stays whole, and so does the
    /// answer's most recent part.
    Answer,
    /// Wherever the token count fell (the context has no turn starts to cut at).
    Tokens,
    /// Inside the current message, which alone passes what the budget leaves: its tail is kept.
    MessageTail,
}

/// How to fit a prefill under the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrefillTrim {
    /// State tokens kept at the start.
    pub keep_prefix: usize,
    /// State tokens kept at the end (`keep_prefix + keep_suffix <= state_len`).
    pub keep_suffix: usize,
    /// Feed tokens kept from its start (the part of the pinned prefix that is in the feed).
    pub feed_head: usize,
    /// Feed tokens dropped after `feed_head` (the rest of the feed is kept).
    pub feed_skip: usize,
    /// Tokens dropped in all.
    pub dropped: usize,
    /// Tokens kept in all (pinned prefix and recent part).
    pub kept: usize,
    /// The pinned prefix in force (smaller than asked when it was more than half the budget).
    pub pinned: usize,
    /// Where the cut fell.
    pub cut: Cut,
}

/// Why a plan is impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DoesNotFit;

/// The pinned prefix that trimming keeps: at most half of the budget.
pub(crate) fn effective_pinned(pinned: usize, budget: usize) -> usize {
    pinned.min(budget / 2)
}

/// Plans the trim that lets `feed_len` new tokens follow `state_len` tokens within `budget`,
/// keeping `pinned` tokens at the start and leaving up to `reserve` tokens of room (at most a
/// quarter of the budget), cutting at one of `turns` (sorted context indices) when it can.
/// `Ok(None)`: it fits as it is.
pub(crate) fn plan_prefill(
    state_len: usize,
    feed_len: usize,
    pinned: usize,
    budget: usize,
    reserve: usize,
    turns: &[usize],
) -> Result<Option<PrefillTrim>, DoesNotFit> {
    let total = state_len + feed_len;
    if total <= budget {
        return Ok(None);
    }
    let p = effective_pinned(pinned, budget).min(total);
    let room = budget - p;
    let r = reserve.min(budget / 4);
    if room <= r {
        return Err(DoesNotFit);
    }
    let limit = room - r;
    // The recent part: half the budget, or the whole prompt if longer and it fits, else the
    // prompt's tail; never more than the limit.
    let recent = (budget / 2)
        .max(feed_len.min(limit))
        .min(limit)
        .min(total - p);
    // Where the recent part starts: at the turn start nearest to half the budget back, if one
    // leaves a kept part within the limit.
    let earliest = total - limit.min(total - p);
    let (cut_from, cut) = choose_turn(turns, p, earliest, total - recent, total);
    let plan = if p <= state_len {
        if cut_from >= state_len {
            // Drop the State after the pinned prefix and the start of the feed.
            PrefillTrim {
                keep_prefix: p,
                keep_suffix: 0,
                feed_head: 0,
                feed_skip: cut_from - state_len,
                dropped: cut_from - p,
                kept: total - cut_from + p,
                pinned: p,
                cut,
            }
        } else {
            PrefillTrim {
                keep_prefix: p,
                keep_suffix: state_len - cut_from,
                feed_head: 0,
                feed_skip: 0,
                dropped: cut_from - p,
                kept: total - cut_from + p,
                pinned: p,
                cut,
            }
        }
    } else {
        // The pinned prefix reaches into the feed: keep the whole State, the feed's pinned
        // part, and the feed's tail.
        PrefillTrim {
            keep_prefix: state_len,
            keep_suffix: 0,
            feed_head: p - state_len,
            feed_skip: cut_from - p,
            dropped: cut_from - p,
            kept: total - cut_from + p,
            pinned: p,
            cut,
        }
    };
    Ok(Some(plan))
}

/// Picks where the kept recent part starts: the turn start in `[max(p, earliest), total)`
/// nearest to `target` (ties: the later one), else `target` itself — by the token rule when
/// the context has no turn start after the pinned prefix, or inside the current message when
/// that alone starts before `earliest`.
fn choose_turn(
    turns: &[usize],
    p: usize,
    earliest: usize,
    target: usize,
    total: usize,
) -> (usize, Cut) {
    let lo = p.max(earliest);
    let best = turns
        .iter()
        .copied()
        .filter(|&t| t >= lo && t < total)
        .min_by_key(|&t| (t.abs_diff(target), std::cmp::Reverse(t)));
    match best {
        Some(t) => (t, Cut::Turns),
        None if turns.iter().any(|&t| t >= p && t < total) => (target.max(lo), Cut::MessageTail),
        None => (target.max(lo), Cut::Tokens),
    }
}

/// A trim during decoding: the context ranges kept, in order (the first starts at 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeTrim {
    /// Kept context ranges, sorted, disjoint, none empty.
    pub keep: Vec<Range<usize>>,
    /// The pinned prefix in force.
    pub pinned: usize,
    /// Where the cut fell.
    pub cut: Cut,
}

impl DecodeTrim {
    fn new(keep: &[Range<usize>], pinned: usize, cut: Cut) -> DecodeTrim {
        let mut out: Vec<Range<usize>> = Vec::with_capacity(keep.len());
        for r in keep.iter().filter(|r| !r.is_empty()) {
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => out.push(r.clone()),
            }
        }
        DecodeTrim {
            keep: out,
            pinned,
            cut,
        }
    }

    /// Tokens kept in all.
    pub fn kept(&self) -> usize {
        self.keep.iter().map(ExactSizeIterator::len).sum()
    }

    /// Where context index `i` is after the trim (the next kept index when `i` was dropped).
    pub fn map(&self, i: usize) -> usize {
        self.keep
            .iter()
            .map(|r| r.end.min(i).saturating_sub(r.start))
            .sum()
    }
}

/// Plans the trim before decoding one more token into a State of `state_len` tokens, when
/// the answer may still feed `remaining` tokens (this one included) and began at context index
/// `answer_start`: `None` while `state_len + 1` fits the budget. Keeps the pinned prefix and
/// as much of the most recent context as leaves room for the rest of the answer — so one trim
/// serves the whole answer instead of one every few tokens — but at least half the budget
/// (an answer longer than that is trimmed again when it fills the budget once more).
///
/// With `turns` (sorted context indices of user-turn starts) it drops whole oldest turns when
/// that is enough; else it keeps the current message whole and drops the middle of the answer
/// (when the message takes at most half of what is kept); else the token rule.
pub(crate) fn plan_decode(
    state_len: usize,
    pinned: usize,
    budget: usize,
    remaining: usize,
    turns: &[usize],
    answer_start: usize,
) -> Option<DecodeTrim> {
    if state_len < budget {
        return None;
    }
    let p = effective_pinned(pinned, budget).min(state_len);
    let room = budget.saturating_sub(p + remaining);
    let s = room.max(budget / 2).min(budget - p - 1).min(state_len - p);
    let tokens = |cut| DecodeTrim::new(&[0..p, state_len - s..state_len], p, cut);
    let a = answer_start.min(state_len);
    // Where the current message starts: its turn start, or the end of the pinned prefix when
    // that turn began inside it (a template that folds the system text into the first turn).
    let current = turns
        .iter()
        .rev()
        .copied()
        .find(|&t| t < a)
        .map(|t| t.max(p));
    let Some(u) = current.filter(|&u| u < a) else {
        return Some(tokens(Cut::Tokens));
    };
    if let Some(m) = turns
        .iter()
        .copied()
        .find(|&t| t >= p && t <= u && state_len - t <= s)
    {
        return Some(DecodeTrim::new(&[0..p, m..state_len], p, Cut::Turns));
    }
    let message = a - u;
    if message > s / 2 {
        return Some(tokens(Cut::MessageTail));
    }
    let tail = s - message;
    Some(DecodeTrim::new(
        &[0..p, u..a, state_len - tail..state_len],
        p,
        Cut::Answer,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fits_without_trimming() {
        assert_eq!(plan_prefill(100, 50, 10, 200, 16, &[]), Ok(None));
        assert_eq!(plan_decode(199, 10, 200, 50, &[], 0), None);
    }

    #[test]
    fn keeps_pinned_and_recent_half() {
        // 180 in the state + 40 new > 200: keep 10 pinned + the last 100 of the context.
        let t = plan_prefill(180, 40, 10, 200, 16, &[]).unwrap().unwrap();
        assert_eq!(
            (t.keep_prefix, t.keep_suffix, t.feed_head, t.feed_skip),
            (10, 60, 0, 0)
        );
        assert_eq!((t.dropped, t.kept), (110, 110));
    }

    #[test]
    fn long_prompt_keeps_its_tail() {
        // An empty state and a 1000-token prompt with budget 256: keep the last 240.
        let t = plan_prefill(0, 1000, 0, 256, 16, &[]).unwrap().unwrap();
        assert_eq!(
            (t.keep_prefix, t.feed_head, t.feed_skip, t.kept),
            (0, 0, 760, 240)
        );
        // With a 20-token pinned system prompt inside the feed.
        let t = plan_prefill(0, 1000, 20, 256, 16, &[]).unwrap().unwrap();
        assert_eq!(
            (t.feed_head, t.feed_skip, t.kept, t.dropped),
            (20, 760, 240, 760)
        );
    }

    #[test]
    fn decode_trim_keeps_pinned_and_half() {
        assert_eq!(
            keep(plan_decode(200, 10, 200, 1000, &[], 0)),
            vec![0..10, 100..200]
        );
        assert_eq!(
            keep(plan_decode(200, 150, 200, 1000, &[], 0)),
            vec![0..100, 101..200]
        );
    }

    fn keep(t: Option<DecodeTrim>) -> Vec<Range<usize>> {
        t.expect("a trim").keep
    }

    #[test]
    fn decode_trim_makes_room_for_the_rest_of_the_answer_once() {
        // 30 tokens to go: keep 10 pinned + 160 recent, so 170 + 30 stays within 200.
        assert_eq!(
            keep(plan_decode(200, 10, 200, 30, &[], 0)),
            vec![0..10, 40..200]
        );
        // Never below half the budget, however long the answer may still run.
        assert_eq!(
            keep(plan_decode(200, 10, 200, 150, &[], 0)),
            vec![0..10, 100..200]
        );
    }

    #[test]
    fn prefill_drops_whole_oldest_turns() {
        // Pinned 10; turns start at 10, 60, 120, 170; the new message (turn 200..240) is fed.
        let turns = [10, 60, 120, 170, 200];
        let t = plan_prefill(200, 40, 10, 200, 16, &turns).unwrap().unwrap();
        // Half the budget back from 240 is 140: the nearest turn start is 120.
        assert_eq!(t.cut, Cut::Turns);
        assert_eq!((t.keep_prefix, t.keep_suffix, t.feed_skip), (10, 80, 0));
        assert_eq!((t.kept, t.dropped), (130, 110));
        // A turn start that would not fit (before the earliest cut) is never chosen.
        let t = plan_prefill(200, 40, 10, 200, 16, &[10, 20, 200])
            .unwrap()
            .unwrap();
        assert_eq!((t.cut, t.keep_suffix), (Cut::Turns, 0));
    }

    #[test]
    fn prefill_keeps_the_tail_of_a_message_too_long_for_the_budget() {
        let t = plan_prefill(50, 300, 10, 200, 16, &[10, 50])
            .unwrap()
            .unwrap();
        assert_eq!(t.cut, Cut::MessageTail);
        assert!(t.kept <= 200 - 16);
        // Without turn starts it is the token rule.
        let t = plan_prefill(50, 300, 10, 200, 16, &[]).unwrap().unwrap();
        assert_eq!(t.cut, Cut::Tokens);
    }

    #[test]
    fn decode_drops_old_turns_then_the_middle_of_the_answer() {
        // Pinned 10, an old turn at 10..100, the current message 100..130, the answer from 130.
        let t = plan_decode(200, 10, 200, 20, &[10, 100], 130).unwrap();
        assert_eq!((t.cut, t.keep.clone()), (Cut::Turns, vec![0..10, 100..200]));
        assert_eq!(t.map(130), 40);
        // The answer alone is now too long: keep the message whole and the answer's tail.
        let t = plan_decode(200, 10, 200, 120, &[10], 40).unwrap();
        assert_eq!(t.cut, Cut::Answer);
        assert_eq!(t.keep, vec![0..40, 130..200]);
        assert_eq!(t.map(40), 40);
        // A message longer than half of what is kept: the token rule.
        let t = plan_decode(200, 10, 200, 120, &[10], 150).unwrap();
        assert_eq!((t.cut, t.keep), (Cut::MessageTail, vec![0..10, 100..200]));
    }

    #[test]
    fn impossible_budget_is_reported() {
        assert_eq!(plan_prefill(0, 10, 0, 0, 0, &[]), Err(DoesNotFit));
    }

    proptest! {
        #[test]
        fn prefill_plans_fit_and_account(
            state_len in 0usize..600,
            feed_len in 0usize..600,
            pinned in 0usize..300,
            budget in 8usize..512,
            reserve in 0usize..64,
            mut turns in proptest::collection::vec(0usize..1200, 0..6),
        ) {
            turns.sort_unstable();
            turns.dedup();
            match plan_prefill(state_len, feed_len, pinned, budget, reserve, &turns) {
                Ok(None) => prop_assert!(state_len + feed_len <= budget),
                Ok(Some(t)) => {
                    let kept_state = t.keep_prefix + t.keep_suffix;
                    prop_assert!(kept_state <= state_len);
                    prop_assert!(t.feed_head + t.feed_skip <= feed_len);
                    let kept_feed = feed_len - t.feed_skip;
                    prop_assert_eq!(kept_state + kept_feed, t.kept);
                    prop_assert_eq!(t.kept + t.dropped, state_len + feed_len);
                    prop_assert!(t.kept <= budget);
                    prop_assert!(t.dropped > 0);
                    // The last feed token (the one whose logits are sampled) is always kept.
                    prop_assert!(feed_len == 0 || t.feed_head + t.feed_skip < feed_len);
                    // The pinned prefix survives.
                    let p = effective_pinned(pinned, budget).min(state_len + feed_len);
                    prop_assert!(t.keep_prefix.min(p) + t.feed_head >= p.min(t.kept));
                    // Only a suffix of the State is kept after the prefix, or the feed is cut.
                    prop_assert!(t.keep_suffix == 0 || t.feed_skip == 0);
                    // A turn cut starts the recent part at a turn start.
                    if t.cut == Cut::Turns {
                        let start = if t.feed_skip > 0 || t.keep_suffix == 0 && t.feed_head < feed_len {
                            state_len + t.feed_head + t.feed_skip
                        } else {
                            state_len - t.keep_suffix
                        };
                        prop_assert!(turns.contains(&start), "{:?} {}", t, start);
                    }
                }
                Err(DoesNotFit) => prop_assert!(false, "budgets of 8 or more always fit"),
            }
        }

        #[test]
        fn decode_plans_make_room(
            state_len in 8usize..600,
            pinned in 0usize..300,
            budget in 8usize..512,
            remaining in 1usize..600,
            mut turns in proptest::collection::vec(0usize..600, 0..6),
            answer_start in 0usize..600,
        ) {
            turns.sort_unstable();
            turns.dedup();
            match plan_decode(state_len, pinned, budget, remaining, &turns, answer_start) {
                None => prop_assert!(state_len < budget),
                Some(t) => {
                    let p = t.pinned;
                    let kept = t.kept();
                    prop_assert!(kept < state_len);
                    prop_assert!(kept < budget);
                    // At least half the budget, unless whole turns were kept (then no earlier
                    // turn start would have fit).
                    if t.cut == Cut::Turns {
                        let start = t.keep[t.keep.len() - 1].start;
                        let room = kept - p;
                        prop_assert!(turns.iter().all(|&m| m < p || m >= start || state_len - m > room));
                    } else {
                        prop_assert!(kept >= (p + budget / 2).min(budget - 1).min(state_len));
                    }
                    // Sorted, disjoint, the pinned prefix first and the newest token last.
                    prop_assert!(t.keep.windows(2).all(|w| w[0].end < w[1].start));
                    prop_assert_eq!(t.keep.last().map(|r| r.end), Some(state_len));
                    prop_assert!(p == 0 || t.keep[0] == (0..t.keep[0].end) && t.keep[0].end >= p);
                    // One trim serves the rest of the answer whenever that keeps half the budget.
                    if p + remaining + budget / 2 <= budget && t.cut != Cut::Turns {
                        prop_assert!(kept + remaining <= budget);
                    }
                    // Whole turns: the kept part after the pinned prefix starts at a turn start.
                    if t.cut == Cut::Turns {
                        prop_assert!(t.keep.len() == 1 || turns.contains(&t.keep[t.keep.len() - 1].start));
                    }
                }
            }
        }
    }
}
