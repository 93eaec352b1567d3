//! Prompt-lookup speculative decoding, exact by construction.
//!
//! After a token is sampled, up to `lookup` drafted tokens ([`crate::lookup`]) are fed with it
//! as one small batch, which reads the weights once for all of them and computes, bit for bit,
//! the logits each token would get alone (the model's small-batch kernels sum every column in
//! the single-token order; `statelm-model`'s `small_batches_equal_single_steps` tests it). The
//! next tokens are then sampled from those rows exactly as plain decoding samples them — same
//! sampler, same random stream, same context for the penalties — and a draft counts only when
//! the sampled token equals it. So the output is the output of plain decoding, token for token,
//! for greedy and seeded sampling alike; drafts only decide how many positions one forward
//! pass computes. (Sampling and then comparing accepts a draft `d` with probability `p(d)` and
//! otherwise draws from `p` without `d`: the usual speculative rule for a one-hot draft.)
//! Cells of rejected drafts are cut from the State before anything else happens to it.

pub(crate) mod draft_policy;
pub mod lookup;

use crate::draft_policy::DraftPolicy;
use crate::session::Session;
use statelm_model::Logits;

/// Most tokens drafted at once (a draft batch must fit one prefill chunk).
pub const MAX_LOOKUP: usize = 15;

/// Drafted tokens whose cells are in the State, waiting to be checked against what the
/// sampler picks.
#[derive(Debug)]
pub(crate) struct Drafts {
    /// The drafted tokens, in order.
    pub tokens: Vec<u32>,
    /// Logits after the sampled token and after each draft (`tokens.len() + 1` rows).
    pub rows: Logits,
    /// Drafts accepted so far (the next row to sample from).
    pub next: usize,
    /// The length of the n-gram match they followed.
    pub ngram: usize,
}

impl Drafts {
    /// Drafts still unchecked (their cells end the State).
    pub fn unchecked(&self) -> usize {
        self.tokens.len() - self.next
    }
}

/// Per-generation speculation state.
#[derive(Debug)]
pub(crate) struct Speculation {
    /// Drafts being fed (at the end of the feed in progress), not yet in flight.
    pub pending: Vec<u32>,
    /// The length of the match `pending` followed.
    pub pending_ngram: usize,
    /// The first proposed token the policy did not check, its match length, and whether it was
    /// the proposal's first: compared with the token sampled after the checked drafts (a trial
    /// that costs nothing).
    pub shadow: Option<(u32, usize, bool)>,
    /// Drafts in flight.
    pub drafts: Option<Drafts>,
    /// The logits buffer of the last drafts, handed back to the decode loop for reuse.
    spare: Option<Logits>,
    /// How many to draft next.
    pub policy: DraftPolicy,
    /// Tokens drafted (fed speculatively).
    pub drafted: usize,
    /// Drafts accepted.
    pub accepted: usize,
}

impl Speculation {
    /// Speculation drafting up to `lookup` tokens (clamped to [`MAX_LOOKUP`]) after matches
    /// of up to `ngram_max` tokens.
    pub fn new(lookup: usize, ngram_max: usize) -> Speculation {
        Speculation {
            pending: Vec::new(),
            pending_ngram: 0,
            shadow: None,
            drafts: None,
            spare: None,
            policy: DraftPolicy::new(lookup.min(MAX_LOOKUP), ngram_max),
            drafted: 0,
            accepted: 0,
        }
    }

    /// The pending drafts are in the State, with `rows` the logits after the sampled token and
    /// after each of them.
    pub fn start(&mut self, rows: Logits) {
        let tokens = std::mem::take(&mut self.pending);
        self.drafted += tokens.len();
        self.drafts = Some(Drafts {
            tokens,
            rows,
            next: 0,
            ngram: self.pending_ngram,
        });
    }

    /// Checks the sampled token `id` against the next draft: `true` when it is that draft (its
    /// cell is already in the State). Otherwise the unchecked drafts are cut from the State.
    /// The token after the drafts (all accepted, or none drafted) scores the shadow proposal.
    pub fn check(&mut self, s: &mut Session, id: u32) -> bool {
        if let Some(d) = self.drafts.as_mut().filter(|d| d.next < d.tokens.len()) {
            if d.tokens[d.next] == id {
                d.next += 1;
                self.accepted += 1;
                return true;
            }
            // The text left the drafts before the shadow's position.
            self.shadow = None;
        }
        if let Some((token, ngram, first)) = self.shadow.take() {
            self.policy.observe_shadow(ngram, first, token == id);
        }
        self.settle(s);
        false
    }

    /// Ends the drafts in flight: cuts the unchecked ones from the State and tells the policy
    /// how many were accepted.
    pub fn settle(&mut self, s: &mut Session) {
        let Some(d) = self.drafts.take() else {
            return;
        };
        self.policy.observe_drafts(d.ngram, d.tokens.len(), d.next);
        let cut = d.unchecked();
        self.spare = Some(d.rows);
        if cut > 0 {
            // The State may be on disk (spilled while the drafts were in flight).
            s.cut(cut);
        }
    }

    /// The logits row to sample from while drafts are in flight.
    pub fn row_mut(&mut self) -> Option<&mut [f32]> {
        let d = self.drafts.as_mut()?;
        Some(d.rows.row_mut(d.next))
    }

    /// The logits buffer of settled drafts, if not taken yet (so a forward pass after drafts
    /// reuses it instead of allocating).
    pub fn take_spare(&mut self) -> Option<Logits> {
        self.spare.take()
    }
}
