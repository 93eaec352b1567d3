//! The last rung of admission: when spilling every other session and shrinking the scratch
//! still leaves no room for what a conversation needs next (its restore, its prompt, its next
//! prefill chunk), the conversation being computed is trimmed to what fits instead of being
//! refused. The token budget in force for the rest of the request becomes the most tokens
//! whose cache fits in the room there is; the usual turn-aware trim (pinned prefix kept) cuts
//! the context to it, and the `ContextTrimmed` event says how much was kept and why. Only when
//! even the smallest budget cannot fit is the request refused, with the `OverMemory` error
//! admission gave.

use crate::budget;
use crate::config::MIN_TOKEN_BUDGET;
use crate::core::Core;
use crate::error::EngineError;
use crate::events::{Event, TrimMethod};
use crate::job::Job;
use crate::plan::Feed;
use crate::session::Session;
use crate::text;
use statelm_governor::format_bytes;

/// A token budget lowered to what fits in memory, for the rest of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// The most tokens the conversation may hold.
    pub tokens: usize,
    /// Why, in words (what admission found).
    pub why: String,
}

impl Core {
    /// The most tokens whose cache (and history) take at most `bytes`.
    fn tokens_fitting(&self, bytes: u64) -> usize {
        let cost = |n: usize| self.kv_estimate(n) + 4 * n as u64;
        let (mut lo, mut hi) = (0, self.config.session_capacity);
        if cost(hi) <= bytes {
            return hi;
        }
        // Invariant: cost(lo) <= bytes < cost(hi) (cost(0) is 0).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if cost(mid) <= bytes {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// After admission refused `err` for session `s` (whose resident State is counted in the
    /// use it found), the budget that fits: the room left plus what the session holds itself,
    /// less `rows` bytes of draft logits and one decode check's growth. `None` when even the
    /// smallest budget does not fit (or `err` is not a refusal for memory).
    pub(crate) fn fit_after(&self, s: &Session, err: &EngineError, rows: u64) -> Option<Fit> {
        let EngineError::OverMemory {
            what,
            needed,
            used,
            ceiling,
        } = err
        else {
            return None;
        };
        let free = ceiling.saturating_sub(*used);
        let avail = (free + s.resident_bytes()).saturating_sub(rows);
        let tokens = self
            .tokens_fitting(avail)
            .saturating_sub(crate::footprint::DECODE_CHECK_EVERY)
            .min(s.effective_budget(self.factor));
        if tokens < MIN_TOKEN_BUDGET {
            return None;
        }
        Some(Fit {
            tokens,
            why: format!(
                "{what} needs {} with {} of {} in use after spilling every other session it \
                 could: this conversation is held to the {tokens} tokens that fit in memory",
                format_bytes(*needed),
                format_bytes(*used),
                format_bytes(*ceiling),
            ),
        })
    }
}

/// Trims the conversation under way in session `s` — its State followed by the rest of `feed`
/// — to the budget of `fit`, keeping the pinned prefix and the most recent turns, and tells the
/// job. Drafts not yet checked leave the feed first. False when there was nothing to trim.
pub(crate) fn trim_under_way(
    job: &mut Job,
    s: &mut Session,
    core: &mut Core,
    feed: &mut Feed,
    fit: &Fit,
) -> bool {
    if let Some(sp) = job.spec.as_mut().filter(|sp| !sp.pending.is_empty()) {
        feed.drop_tail(sp.pending.len());
        sp.pending.clear();
    }
    let state_len = s.state_len();
    let reserve = job.max_tokens.saturating_sub(job.generated).max(1);
    let turns = {
        let kept = s.state.as_ref().map_or(&[][..], |st| st.tokens());
        text::context_turns(core.turn_header.as_deref(), kept, feed.rest())
    };
    let plan = budget::plan_prefill(
        state_len,
        feed.remaining(),
        s.pinned,
        fit.tokens,
        reserve,
        &turns,
    );
    let Ok(Some(t)) = plan else {
        return false;
    };
    let mut reprefill = false;
    if t.keep_prefix + t.keep_suffix < state_len {
        reprefill = s
            .trim(t.keep_prefix, t.keep_suffix)
            .is_some_and(|(_, _, r)| r);
    }
    feed.skip(t.feed_head, t.feed_skip);
    s.trimmed = true;
    statelm_governor::release_free_memory();
    core.counters.trims += 1;
    job.emit(trimmed_event(&t, &fit.why, reprefill));
    true
}

/// The event for a prefill trim `t`, made `why` (the token budget, or what fits in memory).
pub(crate) fn trimmed_event(t: &budget::PrefillTrim, why: &str, reprefill: bool) -> Event {
    Event::ContextTrimmed {
        dropped: t.dropped,
        kept: t.kept,
        reason: format!(
            "{why}: {}",
            crate::compute::kept_words(t.cut, t.pinned, t.kept - t.pinned)
        ),
        method: if reprefill {
            TrimMethod::Reprefill
        } else {
            TrimMethod::Shift
        },
    }
}
