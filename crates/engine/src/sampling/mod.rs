//! Token sampling: pure functions over logits, with the random generator injected.
//!
//! The pipeline of [`Sampler::sample`] (the order matters and is fixed):
//! 1. logit bias ([`apply_logit_bias`]),
//! 2. repetition, frequency and presence penalties over the last `penalty_last_n` tokens of the
//!    context ([`apply_penalties`], llama.cpp's definitions), then the DRY penalty over the last
//!    `dry_last_n` ([`crate::dry`]),
//! 3. temperature `<= 0`: greedy ([`argmax`], ties go to the lowest id) — nothing else applies,
//! 4. top-k ([`top_k`]), then softmax at the temperature ([`softmax`]),
//! 5. top-p ([`top_p`]), then min-p ([`min_p`]), renormalized ([`normalize`]),
//! 6. one draw from the remaining distribution ([`draw`]).
//!
//! No step sorts the whole vocabulary: top-k and top-p use `select_nth_unstable_by` and sort
//! only the few candidates they keep. Ties are always broken by the lower token id, so the
//! result depends only on the logits, the parameters and the random stream.

pub(crate) mod check;
pub mod constraint;
pub mod dry;
pub mod rng;
pub mod stop;

use crate::dry::{Breakers, Dry};
use crate::rng::Rng;
pub use constraint::{Constraint, Grammar};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// How to pick the next token. `SamplingParams::default()` follows llama.cpp's defaults
/// (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; `<= 0` means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (`>= 1`: off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one's probability (`<= 0`: off).
    pub min_p: f32,
    /// Repetition penalty (1: off): positive logits of recent tokens are divided by it,
    /// negative ones multiplied.
    pub repeat_penalty: f32,
    /// Subtracted from a recent token's logit once per occurrence (0: off).
    pub frequency_penalty: f32,
    /// Subtracted once from the logit of every token that occurred recently (0: off).
    pub presence_penalty: f32,
    /// How many of the most recent context tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Added to the logits of the given token ids (`f32::NEG_INFINITY` bans a token).
    pub logit_bias: BTreeMap<u32, f32>,
    /// Seed of the random stream (`None`: seeded from the clock, not reproducible).
    pub seed: Option<u64>,
    /// DRY repetition penalty scale (0: off; llama.cpp suggests 0.8): a token that would
    /// extend a sequence already in the context loses `dry_multiplier · dry_base^(n −
    /// dry_allowed_length)` (see [`crate::dry`]).
    pub dry_multiplier: f32,
    /// DRY growth per repeated token beyond the allowed length.
    pub dry_base: f32,
    /// Repeated sequences up to this long are not penalized by DRY.
    pub dry_allowed_length: usize,
    /// How many of the most recent context tokens DRY looks at.
    pub dry_last_n: usize,
    /// Strings whose tokens break DRY's sequences (newline, `:`, `"`, `*` by default).
    pub dry_sequence_breakers: Vec<String>,
    /// End the answer (stop reason `repetition`) once it repeats a block of tokens back to
    /// back ([`crate::dry::is_looping`]). Not a sampling step: it ends the generation.
    pub loop_guard: bool,
    /// Prompt-lookup speculative decoding: up to this many tokens drafted from the
    /// conversation's own history are checked per forward pass (0: off; at most
    /// [`crate::speculate::MAX_LOOKUP`]). The output is unchanged ([`crate::speculate`]).
    pub lookup: usize,
    /// Longest n-gram the drafts are looked up by (1 or more).
    pub ngram_max: usize,
    /// What the answer must match (JSON schema, any JSON object, regex, Lark grammar); the
    /// mask it gives comes before every other step ([`constraint`]). Thinking blocks are not
    /// constrained: the grammar starts after one closes.
    pub grammar: Option<constraint::Grammar>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: BTreeMap::new(),
            seed: None,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_last_n: 1024,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            loop_guard: false,
            lookup: 0,
            ngram_max: crate::lookup::DEFAULT_NGRAM_MAX,
            grammar: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token (ties: the lowest id).
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Whether this picks the argmax (no randomness).
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    fn has_penalties(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// One token still in the running: its id, its logit and (after [`softmax`]) its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit (after bias and penalties).
    pub logit: f32,
    /// Probability (0 until [`softmax`] runs).
    pub p: f32,
}

/// A logit as a sort key: NaN counts as minus infinity.
fn key(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x
    }
}

/// Best first: higher logit, then lower id.
fn by_logit(a: &Candidate, b: &Candidate) -> Ordering {
    key(b.logit).total_cmp(&key(a.logit)).then(a.id.cmp(&b.id))
}

/// Best first: higher probability, then lower id.
fn by_prob(a: &Candidate, b: &Candidate) -> Ordering {
    b.p.total_cmp(&a.p).then(a.id.cmp(&b.id))
}

/// Adds `bias[id]` to `logits[id]` (ids outside the vocabulary are ignored).
pub fn apply_logit_bias(logits: &mut [f32], bias: &BTreeMap<u32, f32>) {
    for (&id, &b) in bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += b;
        }
    }
}

/// Penalizes every token that occurs in `recent` (llama.cpp's definitions): a positive logit
/// is divided by `repeat`, a negative one multiplied by it; then `count × frequency + presence`
/// is subtracted. With `repeat >= 1`, `frequency >= 0` and `presence >= 0` a penalized logit
/// never rises.
pub fn apply_penalties(
    logits: &mut [f32],
    recent: &[u32],
    repeat: f32,
    frequency: f32,
    presence: f32,
) {
    let mut ids = recent.to_vec();
    ids.sort_unstable();
    let mut i = 0;
    while i < ids.len() {
        let id = ids[i];
        let count = ids[i..].iter().take_while(|&&x| x == id).count();
        i += count;
        let Some(l) = logits.get_mut(id as usize) else {
            continue;
        };
        if *l > 0.0 {
            *l /= repeat;
        } else {
            *l *= repeat;
        }
        *l -= count as f32 * frequency + presence;
    }
}

/// Index of the largest logit; ties (and an all-NaN input) go to the lowest id.
pub fn argmax(logits: &[f32]) -> u32 {
    // The maximum in eight independent lanes (vectorizable; NaN never compares greater),
    // then the first index holding it.
    const L: usize = 8;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = logits.chunks_exact(L);
    let rest = chunks.remainder();
    for chunk in chunks {
        for l in 0..L {
            lanes[l] = if chunk[l] > lanes[l] {
                chunk[l]
            } else {
                lanes[l]
            };
        }
    }
    let max = lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    if max == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == max).unwrap_or(0) as u32
}

/// The `k` best candidates, best first (as [`top_k`] keeps them; `k >= len`: all, sorted;
/// `k = 0`: all, unsorted), without materializing the whole vocabulary: one pass that keeps
/// only logits above the running k-th best.
pub fn top_k_candidates(logits: &[f32], k: usize) -> Vec<Candidate> {
    if k == 0 {
        return candidates(logits);
    }
    if k >= logits.len() {
        let mut all = candidates(logits);
        all.sort_unstable_by(by_logit);
        return all;
    }
    let cap = (4 * k).max(1024);
    let mut buf: Vec<Candidate> = Vec::with_capacity(cap + 1);
    let mut threshold = f32::NEG_INFINITY;
    const BLOCK: usize = 16;
    for (b, block) in logits.chunks(BLOCK).enumerate() {
        // Most blocks hold nothing above the threshold: skip them with a vectorizable max.
        let block_max = block
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        if block_max <= threshold && buf.len() >= k {
            continue;
        }
        for (j, &l) in block.iter().enumerate() {
            // Equal to the threshold is never enough: ids only grow, so it would lose the tie.
            if key(l) > threshold || buf.len() < k {
                let id = (b * BLOCK + j) as u32;
                buf.push(Candidate {
                    id,
                    logit: key(l),
                    p: 0.0,
                });
                if buf.len() > cap {
                    buf.select_nth_unstable_by(k - 1, by_logit);
                    buf.truncate(k);
                    threshold = buf[k - 1].logit;
                }
            }
        }
    }
    if buf.len() > k {
        buf.select_nth_unstable_by(k - 1, by_logit);
        buf.truncate(k);
    }
    buf.sort_unstable_by(by_logit);
    buf
}

/// Every token as a candidate (probabilities not yet computed).
pub fn candidates(logits: &[f32]) -> Vec<Candidate> {
    logits
        .iter()
        .enumerate()
        .map(|(i, &l)| Candidate {
            id: i as u32,
            logit: key(l),
            p: 0.0,
        })
        .collect()
}

/// Keeps exactly the `k` best candidates (higher logit first, ties to the lower id), sorted
/// best first. `k = 0` or `k >= len` keeps all (unsorted).
pub fn top_k(cands: &mut Vec<Candidate>, k: usize) {
    if k == 0 || k >= cands.len() {
        return;
    }
    cands.select_nth_unstable_by(k - 1, by_logit);
    cands.truncate(k);
    cands.sort_unstable_by(by_logit);
}

/// Sets each candidate's probability to `softmax(logit / temperature)`. Candidates whose logit
/// is minus infinity get probability 0; if all are, the best-ranked one gets 1.
pub fn softmax(cands: &mut [Candidate], temperature: f32) {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = cands
        .iter()
        .map(|c| c.logit)
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        let best = cands
            .iter()
            .enumerate()
            .min_by(|a, b| by_logit(a.1, b.1))
            .map(|(i, _)| i);
        cands.iter_mut().for_each(|c| c.p = 0.0);
        if let Some(i) = best {
            cands[i].p = 1.0;
        }
        return;
    }
    let mut sum = 0.0f64;
    for c in cands.iter_mut() {
        c.p = ((c.logit - max) / t).exp();
        sum += c.p as f64;
    }
    let inv = (1.0 / sum) as f32;
    cands.iter_mut().for_each(|c| c.p *= inv);
}

/// Rescales the probabilities to sum to 1.
pub fn normalize(cands: &mut [Candidate]) {
    let sum: f64 = cands.iter().map(|c| c.p as f64).sum();
    if sum > 0.0 {
        let inv = (1.0 / sum) as f32;
        cands.iter_mut().for_each(|c| c.p *= inv);
    }
}

/// Keeps the smallest set of most likely candidates (ties to the lower id) whose probabilities
/// sum to at least `p`, sorted most likely first. `p >= 1` keeps all. Needs [`softmax`] first;
/// does not renormalize.
pub fn top_p(cands: &mut Vec<Candidate>, p: f32) {
    if p >= 1.0 || cands.is_empty() {
        return;
    }
    let target = p.max(0.0) as f64;
    let mut m = 64usize.min(cands.len());
    loop {
        if m < cands.len() {
            cands.select_nth_unstable_by(m - 1, by_prob);
        }
        cands[..m].sort_unstable_by(by_prob);
        let mut sum = 0.0f64;
        for i in 0..m {
            sum += cands[i].p as f64;
            if sum >= target {
                cands.truncate(i + 1);
                return;
            }
        }
        if m == cands.len() {
            return;
        }
        m = (m * 4).min(cands.len());
    }
}

/// Softmax over the whole vocabulary followed by [`top_p`], without materializing the
/// vocabulary: the normalization is one pass over the logits, then the most likely tokens are
/// gathered in growing windows (64, 256, ...) until they reach `p`. The probabilities are
/// those of the full softmax (not renormalized).
pub fn top_p_candidates(logits: &[f32], p: f32, temperature: f32) -> Vec<Candidate> {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = logits
        .iter()
        .map(|&l| key(l))
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY || p >= 1.0 {
        let mut c = candidates(logits);
        softmax(&mut c, temperature);
        return c;
    }
    let z: f64 = logits
        .iter()
        .map(|&l| ((key(l) - max) / t).exp() as f64)
        .sum();
    let inv = (1.0 / z) as f32;
    let target = p.max(0.0) as f64;
    let mut m = 64usize;
    loop {
        let mut cands = top_k_candidates(logits, m.min(logits.len()));
        let mut sum = 0.0f64;
        for (i, c) in cands.iter_mut().enumerate() {
            c.p = ((c.logit - max) / t).exp() * inv;
            sum += c.p as f64;
            if sum >= target {
                cands.truncate(i + 1);
                return cands;
            }
        }
        if m >= logits.len() {
            return cands;
        }
        m *= 4;
    }
}

/// Drops candidates whose probability is below `min_p` × the largest probability. Needs
/// [`softmax`] first; does not renormalize. `min_p <= 0` keeps all.
pub fn min_p(cands: &mut Vec<Candidate>, min_p: f32) {
    if min_p <= 0.0 || cands.is_empty() {
        return;
    }
    let max = cands.iter().map(|c| c.p).fold(0.0f32, f32::max);
    let floor = min_p * max;
    cands.retain(|c| c.p >= floor);
}

/// Draws one candidate with probability proportional to `p`, using one number from `rng`.
/// Candidates are taken in their current order; an empty list gives token 0.
pub fn draw(cands: &[Candidate], rng: &mut Rng) -> u32 {
    let total: f64 = cands.iter().map(|c| c.p as f64).sum();
    let u = rng.next_f64() * total;
    let mut acc = 0.0f64;
    for c in cands {
        acc += c.p as f64;
        if u < acc {
            return c.id;
        }
    }
    // Rounding left `u` at the very end: the last candidate with a nonzero probability.
    cands
        .iter()
        .rev()
        .find(|c| c.p > 0.0)
        .or(cands.last())
        .map_or(0, |c| c.id)
}

/// Applies bias and penalties to `logits` in place (steps 1 and 2 of the pipeline).
pub fn adjust_logits(logits: &mut [f32], params: &SamplingParams, recent: &[u32]) {
    apply_logit_bias(logits, &params.logit_bias);
    if params.has_penalties() {
        let start = recent.len().saturating_sub(params.penalty_last_n);
        apply_penalties(
            logits,
            &recent[start..],
            params.repeat_penalty,
            params.frequency_penalty,
            params.presence_penalty,
        );
    }
}

/// The distribution a non-greedy draw picks from, given already adjusted logits: top-k,
/// softmax, top-p, min-p, renormalized (steps 4 and 5). Probabilities sum to 1.
pub fn distribution(logits: &[f32], params: &SamplingParams) -> Vec<Candidate> {
    let mut cands = if params.top_k == 0 && params.top_p < 1.0 {
        top_p_candidates(logits, params.top_p, params.temperature)
    } else {
        let mut c = top_k_candidates(logits, params.top_k);
        softmax(&mut c, params.temperature);
        c
    };
    top_p(&mut cands, params.top_p);
    min_p(&mut cands, params.min_p);
    normalize(&mut cands);
    cands
}

/// A sampler for one generation: the parameters, their random stream, DRY's breakers and the
/// compiled constraint (the engine compiles `params.grammar`; a sampler made here without
/// [`Sampler::constrain`] leaves the grammar to its caller).
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    breakers: std::sync::Arc<Breakers>,
    constraint: Option<Constraint>,
}

impl Sampler {
    /// A sampler seeded with `params.seed` (or from the clock), without DRY breaker tokens.
    pub fn new(params: SamplingParams) -> Sampler {
        Sampler::with_breakers(params, std::sync::Arc::default())
    }

    /// A sampler whose DRY penalty stops sequences at `breakers` (the tokens of
    /// `params.dry_sequence_breakers` in the model's vocabulary).
    pub fn with_breakers(params: SamplingParams, breakers: std::sync::Arc<Breakers>) -> Sampler {
        let rng = params.seed.map_or_else(Rng::from_entropy, Rng::new);
        Sampler {
            params,
            rng,
            breakers,
            constraint: None,
        }
    }

    /// Constrains every token [`Sampler::sample_constrained`] picks from now on.
    pub fn constrain(&mut self, constraint: Constraint) {
        self.constraint = Some(constraint);
    }

    /// Whether a constraint is attached.
    pub fn is_constrained(&self) -> bool {
        self.constraint.is_some()
    }

    /// [`Sampler::sample`] after the constraint's mask (when `active`; thinking blocks are
    /// not constrained), then feeds the token to the constraint.
    pub fn sample_constrained(
        &mut self,
        logits: &mut [f32],
        recent: &[u32],
        active: bool,
    ) -> Result<u32, crate::EngineError> {
        let Some(c) = self.constraint.as_mut().filter(|_| active) else {
            return Ok(self.sample(logits, recent));
        };
        c.mask(logits)?;
        let id = self.sample(logits, recent);
        if let Some(c) = self.constraint.as_mut() {
            c.accept(id)?;
        }
        Ok(id)
    }

    /// Whether the constraint's text is complete (no token could extend it).
    pub fn constraint_complete(&self) -> bool {
        self.constraint
            .as_ref()
            .is_some_and(Constraint::is_complete)
    }

    /// How many of `drafts` the constraint allows from here (all of them without one, or
    /// when not `active`).
    pub fn allowed_drafts(&mut self, drafts: &[u32], active: bool) -> usize {
        match self.constraint.as_mut().filter(|_| active) {
            Some(c) => c.allowed_prefix(drafts),
            None => drafts.len(),
        }
    }

    /// How many recent context tokens [`Sampler::sample`] needs.
    pub fn context_needed(&self) -> usize {
        let p = &self.params;
        let dry = if p.dry_multiplier > 0.0 {
            p.dry_last_n
        } else {
            0
        };
        p.penalty_last_n.max(dry)
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (modified in place by bias and penalties); `recent`
    /// is the context so far (the penalties look at its last `penalty_last_n` tokens, DRY at
    /// its last `dry_last_n`).
    pub fn sample(&mut self, logits: &mut [f32], recent: &[u32]) -> u32 {
        adjust_logits(logits, &self.params, recent);
        let p = &self.params;
        let dry = Dry {
            multiplier: p.dry_multiplier,
            base: p.dry_base,
            allowed_length: p.dry_allowed_length,
        };
        let start = recent.len().saturating_sub(p.dry_last_n);
        dry.apply(logits, &recent[start..], &self.breakers);
        if self.params.is_greedy() {
            return argmax(logits);
        }
        let cands = distribution(logits, &self.params);
        draw(&cands, &mut self.rng)
    }
}

#[cfg(test)]
mod tests;
