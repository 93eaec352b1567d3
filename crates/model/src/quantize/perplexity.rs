//! Teacher-forced perplexity over fixed windows: the yardstick for what a requantization costs.

use crate::{ForwardOptions, KvType, LogitsMode, Model, ModelError, StateOptions};

/// A short built-in English sample (plain prose, about 600 tokens) for quick perplexity checks.
pub const SAMPLE_TEXT: &str = "\
The lighthouse stood at the end of a narrow spit of land, where the road gave out and the \
rocks began. For more than a century it had warned ships away from the reef that lay just \
below the surface, a long grey spine of stone that the tide covered twice a day. The keeper \
who lived there in the last years before the light was automated kept a careful log. Every \
evening he wrote down the direction of the wind, the state of the sea, the number of vessels \
he had seen pass, and anything else that seemed worth remembering: a flock of geese flying \
south too early, a fishing boat that lost its engine and drifted for an afternoon, a winter \
storm that tore the door off the oil store.

Reading the log today, one is struck less by the drama than by the routine. Most days nothing \
happened at all. The lamp was lit at dusk and put out at dawn; the lens was cleaned; the clock \
mechanism that turned it was wound every four hours. The keeper painted the railings in the \
spring and repaired the roof in the autumn. He grew potatoes and cabbages in a walled garden \
that kept off the salt wind, and once a fortnight a boat from the harbour brought flour, \
paraffin, letters and newspapers that were already a week old.

What the log records, above all, is attention. A light that fails for a single night can cost \
lives, so the work was built around the assumption that something would eventually go wrong. \
Spare parts were kept for every moving piece. A second lamp waited in a cupboard, filled and \
trimmed, in case the first one cracked. The keeper tested the fog signal every Sunday, even \
in the middle of summer, because the day it was needed would not be the day he remembered to \
check it.

When the light was finally automated, the engineers who installed the new equipment asked to \
see the log. They wanted to know how often the old machinery had failed, and under what \
conditions, so that the new system could be designed to cope. The answer surprised them. In \
forty years there had been only three nights when the light was dark, and each time the cause \
was something no one had planned for: a gull that flew into the lantern room, a batch of \
paraffin contaminated with water, and a lightning strike that fused the clockwork.

The lesson they took from it was simple. Reliable systems are not the ones that never meet \
trouble; they are the ones that expect it, measure it, and leave enough margin to absorb it. \
A careful budget of fuel, time and spare parts did more for the ships on that coast than any \
single clever invention. The keeper himself, asked about it years later, said only that he \
had liked the quiet, and that the sea was never the same two days running.
";

/// The result of a perplexity run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// `exp(mean negative log-likelihood)`.
    pub ppl: f64,
    /// Mean negative log-likelihood per scored token (nats).
    pub mean_nll: f64,
    /// Tokens scored.
    pub scored: usize,
    /// Windows evaluated.
    pub windows: usize,
}

/// Perplexity of `model` on `text`: the text is tokenized and cut into windows of `window`
/// tokens (each starting with BOS when the model adds one); each window is run teacher-forced
/// in a fresh f32-cache state and its second half is scored (every scored token sees at least
/// `window / 2` tokens of context), as llama.cpp's `perplexity` does.
pub fn perplexity(model: &Model, text: &str, window: usize) -> Result<Perplexity, ModelError> {
    let tok = model.tokenizer();
    let with = tok.encode(text, true, false)?;
    let without = tok.encode(text, false, false)?;
    let prefix: Vec<u32> = with[..with.len().saturating_sub(without.len())].to_vec();
    let body = window.saturating_sub(prefix.len()).max(2);
    let (mut nll, mut scored, mut windows) = (0.0f64, 0usize, 0usize);
    for chunk in without.chunks(body) {
        if chunk.len() < body / 2 && windows > 0 {
            break; // a short tail would be scored with too little context
        }
        let mut tokens = prefix.clone();
        tokens.extend_from_slice(chunk);
        let (sum, n) = score_window(model, &tokens)?;
        nll += sum;
        scored += n;
        windows += 1;
    }
    let mean_nll = nll / scored.max(1) as f64;
    Ok(Perplexity {
        ppl: mean_nll.exp(),
        mean_nll,
        scored,
        windows,
    })
}

/// Sum of `-log p(token[i + 1] | tokens[..=i])` over the second half of the window.
fn score_window(model: &Model, tokens: &[u32]) -> Result<(f64, usize), ModelError> {
    let first = tokens.len() / 2;
    let rows = tokens.len() - 1 - first;
    if rows == 0 {
        return Ok((0.0, 0));
    }
    let mut state = model.new_state_with(StateOptions {
        capacity: tokens.len(),
        kv_type: KvType::F32,
    })?;
    let input = &tokens[..tokens.len() - 1];
    let opts = ForwardOptions {
        logits: Some(LogitsMode::LastN(rows)),
        ..Default::default()
    };
    let logits = model.forward_with(&mut state, input, opts)?;
    let mut sum = 0.0f64;
    for r in 0..rows {
        let row = logits.row(r);
        let target = tokens[first + 1 + r] as usize;
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let lse = max as f64
            + row
                .iter()
                .map(|&v| ((v - max) as f64).exp())
                .sum::<f64>()
                .ln();
        sum += lse - row[target] as f64;
    }
    Ok((sum, rows))
}
