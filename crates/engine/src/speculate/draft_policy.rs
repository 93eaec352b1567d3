//! How many of the proposed drafts to check: the number that maximizes the expected tokens per
//! unit of time, from what this generation has seen — how often drafts after a match of each
//! n-gram length were accepted, and what a forward pass of each batch size costs on this
//! device.
//!
//! Checking `k` drafts with the sampled token costs one forward pass of `k + 1` tokens, `c(k)`
//! decode steps: on the 2-core x86 host of the README's figures 1.3 for one draft and 2.0 for
//! four with the VNNI kernels, 1.7 and 2.9 with plain AVX2; a phone's NEON kernels, by their
//! instruction counts, are nearer the latter. If the first draft is accepted with probability
//! `a₁` and each later one with `aₙ` once the ones before it were (copied text comes in runs:
//! `aₙ` is the higher), the pass yields `1 + a₁ (1 + aₙ + … + aₙᵏ⁻¹)` tokens on average, so the
//! policy checks the `k` (0 included: plain decoding) with the most tokens per decode step.
//! Both inputs are measured as the generation runs: the pass times per batch size (moving
//! averages; a size not timed yet takes the slope of the largest timed one, or a prior slope),
//! and `a₁`, `aₙ` per match length (decayed counts over priors of 1/2 and 4/5). Proposed tokens
//! that are not checked still count: the first one left out is compared with the token sampled
//! at its place (a trial that costs nothing), so a generation that drafts little notices when
//! more drafts — or drafts again — would pay.
//!
//! Only the amount of work changes: which tokens come out is decided by the sampler alone
//! ([`crate::speculate`]).

/// The cost of a pass of `k + 1` tokens, in decode steps, assumed before any batch was timed:
/// `1 + PRIOR_SLOPE · k` (the VNNI table's measured slope; a slower table shows in the first
/// timed pass). Untimed sizes then take the slope of the largest timed one.
const PRIOR_SLOPE: f64 = 0.25;
/// Prior successes of later drafts (against one failure): copied text comes in runs.
const LATER_PRIOR: f64 = 4.0;
/// Weight of a new pass time in its moving average.
const COST_EMA: f64 = 0.2;
/// Old acceptance counts decay by this factor per new trial (recent text counts most).
const DECAY: f64 = 0.97;

/// A decayed success count: (successes, trials).
type Rate = (f64, f64);

/// Adds a trial to `r`.
fn record(r: &mut Rate, hit: bool) {
    r.0 = r.0 * DECAY + f64::from(u8::from(hit));
    r.1 = r.1 * DECAY + 1.0;
}

/// The estimate of `r` with `prior` successes and one failure before any trial.
fn estimate(r: Rate, prior: f64) -> f64 {
    (r.0 + prior) / (r.1 + prior + 1.0)
}

/// The draft policy of one generation (see the module).
#[derive(Debug, Clone)]
pub(crate) struct DraftPolicy {
    /// `secs[b - 1]`: the moving average of a pass of `b` tokens (`b` up to the most drafts
    /// plus one), once seen.
    secs: Vec<Option<f64>>,
    /// Per match length `n` (index `n - 1`): decayed (accepted, trials) of first drafts and of
    /// later ones.
    accept: Vec<[Rate; 2]>,
}

impl DraftPolicy {
    /// A policy checking at most `max` drafts, for matches of up to `ngram_max` tokens.
    pub fn new(max: usize, ngram_max: usize) -> DraftPolicy {
        DraftPolicy {
            secs: vec![None; max + 1],
            accept: vec![[(0.0, 0.0); 2]; ngram_max.max(1)],
        }
    }

    /// The most drafts it ever checks.
    pub fn max(&self) -> usize {
        self.secs.len() - 1
    }

    /// Records a decoding pass of `batch` tokens that took `secs` seconds.
    pub fn observe_pass(&mut self, batch: usize, secs: f64) {
        if let Some(slot) = batch.checked_sub(1).and_then(|i| self.secs.get_mut(i)) {
            *slot = Some(match *slot {
                Some(old) => old + COST_EMA * (secs - old),
                None => secs,
            });
        }
    }

    /// Records that of `drafted` drafts after a match of `ngram` tokens, the first `accepted`
    /// were accepted (the one after them, if any, was not).
    pub fn observe_drafts(&mut self, ngram: usize, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let Some([first, later]) = ngram.checked_sub(1).and_then(|i| self.accept.get_mut(i)) else {
            return;
        };
        record(first, accepted > 0);
        let tries = accepted.saturating_sub(1) + usize::from(accepted > 0 && accepted < drafted);
        for t in 0..tries {
            record(later, t + 1 < accepted);
        }
    }

    /// Records whether a proposed token that was not checked — the proposal's first (`first`)
    /// or one after checked drafts that were all accepted — was the token sampled there.
    pub fn observe_shadow(&mut self, ngram: usize, first: bool, hit: bool) {
        if let Some(rates) = ngram.checked_sub(1).and_then(|i| self.accept.get_mut(i)) {
            record(&mut rates[usize::from(!first)], hit);
        }
    }

    /// The estimated acceptance of the first draft and of each later one after a match of
    /// `ngram` tokens.
    fn acceptance(&self, ngram: usize) -> (f64, f64) {
        let [first, later] = ngram
            .checked_sub(1)
            .and_then(|i| self.accept.get(i))
            .copied()
            .unwrap_or_default();
        (estimate(first, 1.0), estimate(later, LATER_PRIOR))
    }

    /// The cost of checking `k` drafts, in decode steps: timed, or extrapolated from the
    /// largest timed batch (the prior slope before one was timed).
    fn cost(&self, k: usize) -> f64 {
        let Some(one) = self.secs.first().copied().flatten().filter(|&t| t > 0.0) else {
            return 1.0 + PRIOR_SLOPE * k as f64;
        };
        if let Some(this) = self.secs.get(k).copied().flatten() {
            return (this / one).max(1.0);
        }
        let largest = (1..self.secs.len())
            .rev()
            .find_map(|m| Some((m, self.secs[m]?)));
        let slope = largest.map_or(PRIOR_SLOPE, |(m, t)| (t / one - 1.0).max(0.0) / m as f64);
        1.0 + slope * k as f64
    }

    /// How many of `proposed` drafts (after a match of `ngram` tokens) to check: the count with
    /// the most expected tokens per decode step, 0 when plain decoding is best.
    pub fn choose(&self, proposed: usize, ngram: usize) -> usize {
        let (first, later) = self.acceptance(ngram);
        let (mut best, mut best_rate) = (0, 1.0);
        let (mut expected, mut p) = (1.0, first);
        for k in 1..=proposed.min(self.max()) {
            expected += p;
            p *= later;
            let rate = expected / self.cost(k);
            if rate > best_rate {
                (best, best_rate) = (k, rate);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_while_they_pay_and_stops_when_they_do_not() {
        let mut p = DraftPolicy::new(8, 3);
        // The priors (first drafts accepted half the time, later ones 80 %; 0.25 decode steps
        // per extra token): a few drafts.
        assert!((1..=4).contains(&p.choose(8, 3)));
        // Every draft accepted: all of them.
        for _ in 0..20 {
            p.observe_drafts(3, 8, 8);
        }
        assert_eq!(p.choose(8, 3), 8);
        assert_eq!(p.choose(2, 3), 2);
        // Never accepted: none (another match length keeps its own record).
        for _ in 0..40 {
            p.observe_drafts(2, 1, 0);
        }
        assert_eq!(p.choose(8, 2), 0);
        assert_eq!(p.choose(8, 3), 8);
    }

    /// Checking one draft says nothing of the ones after it; the unchecked next proposed token,
    /// compared with what was sampled there, does: runs of copied text lengthen the drafts.
    #[test]
    fn shadow_trials_explore_longer_drafts() {
        let mut p = DraftPolicy::new(8, 3);
        // Later drafts rejected: one draft at a time.
        for _ in 0..30 {
            p.observe_drafts(3, 2, 1);
        }
        assert_eq!(p.choose(8, 3), 1);
        for _ in 0..60 {
            p.observe_drafts(3, 1, 1);
            p.observe_shadow(3, false, true);
        }
        assert!(p.choose(8, 3) >= 4, "{}", p.choose(8, 3));
        // Shadows of first drafts turn drafting back on after it stopped.
        for _ in 0..40 {
            p.observe_drafts(2, 1, 0);
        }
        assert_eq!(p.choose(8, 2), 0);
        for _ in 0..40 {
            p.observe_shadow(2, true, true);
        }
        assert!(p.choose(8, 2) > 0);
    }

    #[test]
    fn measured_costs_decide() {
        let mut p = DraftPolicy::new(4, 2);
        for _ in 0..10 {
            p.observe_drafts(2, 4, 2);
        }
        // First drafts accepted, later ones half the time. Cheap verification: draft several;
        // dearer than what a draft brings: none.
        for (batch, ms) in [(1, 10.0), (2, 10.5), (3, 11.0), (4, 11.5), (5, 12.0)] {
            p.observe_pass(batch, ms / 1e3);
        }
        assert!(p.choose(4, 2) >= 2);
        let mut q = p.clone();
        for _ in 0..60 {
            for (batch, ms) in [(2, 21.0), (3, 30.0), (4, 39.0), (5, 48.0)] {
                q.observe_pass(batch, ms / 1e3);
            }
        }
        assert_eq!(q.choose(4, 2), 0);
    }

    #[test]
    fn ignores_what_it_does_not_track() {
        let mut p = DraftPolicy::new(2, 2);
        p.observe_pass(0, 1.0);
        p.observe_pass(9, 1.0);
        p.observe_drafts(0, 3, 1);
        p.observe_drafts(7, 3, 1);
        p.observe_drafts(2, 0, 0);
        assert_eq!(p.acceptance(2), (0.5, 0.8));
        assert_eq!(p.choose(0, 2), 0);
    }
}
