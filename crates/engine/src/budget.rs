//! Token-budget trimming, planned as pure arithmetic.
//!
//! A session's context is the State's tokens followed by the tokens about to be fed. When it
//! would pass the budget, the middle is dropped: the pinned prefix stays, and so does the most
//! recent part — half of the budget, or the whole new prompt when that is longer and fits, or
//! else the prompt's tail. Some room (`reserve`) is left for generation so that decoding does
//! not trim again at once.

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
/// quarter of the budget). `Ok(None)`: it fits as it is.
pub(crate) fn plan_prefill(
    state_len: usize,
    feed_len: usize,
    pinned: usize,
    budget: usize,
    reserve: usize,
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
    let cut_from = total - recent; // context index where the recent part starts
    let plan = if p <= state_len {
        if cut_from >= state_len {
            // Drop the State after the pinned prefix and the start of the feed.
            PrefillTrim {
                keep_prefix: p,
                keep_suffix: 0,
                feed_head: 0,
                feed_skip: cut_from - state_len,
                dropped: cut_from - p,
                kept: p + recent,
                pinned: p,
            }
        } else {
            PrefillTrim {
                keep_prefix: p,
                keep_suffix: state_len - cut_from,
                feed_head: 0,
                feed_skip: 0,
                dropped: cut_from - p,
                kept: p + recent,
                pinned: p,
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
            kept: p + recent,
            pinned: p,
        }
    };
    Ok(Some(plan))
}

/// Plans the trim before decoding one more token into a State of `state_len` tokens, when
/// the answer may still feed `remaining` tokens (this one included): `Some((keep_prefix,
/// keep_suffix))` when `state_len + 1` would pass the budget. Keeps the pinned prefix and as
/// many of the most recent tokens as leave room for the rest of the answer — so one trim
/// serves the whole answer instead of one every few tokens — but at least half the budget
/// (an answer longer than that is trimmed again when it fills the budget once more).
pub(crate) fn plan_decode(
    state_len: usize,
    pinned: usize,
    budget: usize,
    remaining: usize,
) -> Option<(usize, usize)> {
    if state_len < budget {
        return None;
    }
    let p = effective_pinned(pinned, budget).min(state_len);
    let room = budget.saturating_sub(p + remaining);
    let s = room.max(budget / 2).min(budget - p - 1).min(state_len - p);
    Some((p, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fits_without_trimming() {
        assert_eq!(plan_prefill(100, 50, 10, 200, 16), Ok(None));
        assert_eq!(plan_decode(199, 10, 200, 50), None);
    }

    #[test]
    fn keeps_pinned_and_recent_half() {
        // 180 in the state + 40 new > 200: keep 10 pinned + the last 100 of the context.
        let t = plan_prefill(180, 40, 10, 200, 16).unwrap().unwrap();
        assert_eq!(
            (t.keep_prefix, t.keep_suffix, t.feed_head, t.feed_skip),
            (10, 60, 0, 0)
        );
        assert_eq!((t.dropped, t.kept), (110, 110));
    }

    #[test]
    fn long_prompt_keeps_its_tail() {
        // An empty state and a 1000-token prompt with budget 256: keep the last 240.
        let t = plan_prefill(0, 1000, 0, 256, 16).unwrap().unwrap();
        assert_eq!(
            (t.keep_prefix, t.feed_head, t.feed_skip, t.kept),
            (0, 0, 760, 240)
        );
        // With a 20-token pinned system prompt inside the feed.
        let t = plan_prefill(0, 1000, 20, 256, 16).unwrap().unwrap();
        assert_eq!(
            (t.feed_head, t.feed_skip, t.kept, t.dropped),
            (20, 760, 240, 760)
        );
    }

    #[test]
    fn decode_trim_keeps_pinned_and_half() {
        assert_eq!(plan_decode(200, 10, 200, 1000), Some((10, 100)));
        assert_eq!(plan_decode(200, 150, 200, 1000), Some((100, 99)));
    }

    #[test]
    fn decode_trim_makes_room_for_the_rest_of_the_answer_once() {
        // 30 tokens to go: keep 10 pinned + 160 recent, so 170 + 30 stays within 200.
        assert_eq!(plan_decode(200, 10, 200, 30), Some((10, 160)));
        // Never below half the budget, however long the answer may still run.
        assert_eq!(plan_decode(200, 10, 200, 150), Some((10, 100)));
    }

    #[test]
    fn impossible_budget_is_reported() {
        assert_eq!(plan_prefill(0, 10, 0, 0, 0), Err(DoesNotFit));
    }

    proptest! {
        #[test]
        fn prefill_plans_fit_and_account(
            state_len in 0usize..600,
            feed_len in 0usize..600,
            pinned in 0usize..300,
            budget in 8usize..512,
            reserve in 0usize..64,
        ) {
            match plan_prefill(state_len, feed_len, pinned, budget, reserve) {
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
        ) {
            match plan_decode(state_len, pinned, budget, remaining) {
                None => prop_assert!(state_len < budget),
                Some((p, s)) => {
                    prop_assert!(p + s < state_len);
                    prop_assert!(p + s < budget);
                    prop_assert!(s >= (budget / 2).min(budget - p - 1).min(state_len - p));
                    // One trim serves the rest of the answer whenever that keeps half the budget.
                    if p + remaining + budget / 2 <= budget && state_len >= budget {
                        prop_assert!(p + s + remaining <= budget);
                    }
                }
            }
        }
    }
}
