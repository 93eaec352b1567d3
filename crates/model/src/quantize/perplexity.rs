//! Teacher-forced perplexity over fixed windows, as llama.cpp's `perplexity` tool computes it:
//! the yardstick for what a requantization costs, and the `statelm perplexity` command (one
//! routine for both, so they agree).

use crate::ops::log_sum_exp;
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
    /// Tokens per window (the window size, or the whole text when it is shorter).
    pub window: usize,
}

/// How [`perplexity_of_tokens`] windows and runs the text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerplexityOptions {
    /// Tokens per window.
    pub window: usize,
    /// Score at most this many windows.
    pub max_windows: Option<usize>,
    /// The KV cache type of each window's State.
    pub kv_type: KvType,
}

impl PerplexityOptions {
    /// Windows of `window` tokens, all of them, an f32 cache.
    pub fn new(window: usize) -> PerplexityOptions {
        PerplexityOptions {
            window,
            max_windows: None,
            kv_type: KvType::F32,
        }
    }
}

/// Positions whose logits are computed in one forward call (bounds the logits buffer).
const CHUNK: usize = 32;

/// Perplexity of `model` on `text` (tokenized with BOS) in windows of `window` tokens, f32
/// cache; see [`perplexity_of_tokens`].
pub fn perplexity(model: &Model, text: &str, window: usize) -> Result<Perplexity, ModelError> {
    let tokens = model.tokenizer().encode(text, true, false)?;
    perplexity_of_tokens(
        model,
        &tokens,
        &PerplexityOptions::new(window),
        &mut |_, _, _| {},
    )
}

/// Perplexity of `model` on `tokens` (the text tokenized with BOS, at least 2 tokens), as
/// llama.cpp's `perplexity` computes it: the tokens are cut into whole windows of
/// `opts.window` (a text shorter than one window is one window), each window's first token
/// replaced by BOS when the model adds one, each run teacher-forced in a fresh State, and only
/// the second half of each window scored (every scored token sees at least `window / 2`
/// tokens of context). `progress(windows done, windows, perplexity so far)` is called after
/// each window.
pub fn perplexity_of_tokens(
    model: &Model,
    tokens: &[u32],
    opts: &PerplexityOptions,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    let tok = model.tokenizer();
    let n_ctx = opts.window.max(2).min(tokens.len());
    let mut windows: Vec<&[u32]> = tokens.chunks_exact(n_ctx.max(1)).collect();
    if let Some(max) = opts.max_windows {
        windows.truncate(max.max(1));
    }
    let (mut nll, mut scored) = (0.0f64, 0usize);
    for (i, w) in windows.iter().enumerate() {
        let mut w = w.to_vec();
        if let Some(bos) = tok.bos_id().filter(|_| tok.add_bos()) {
            w[0] = bos;
        }
        let (sum, n) = score_window(model, &w, n_ctx / 2, opts.kv_type)?;
        nll += sum;
        scored += n;
        progress(i + 1, windows.len(), (nll / scored.max(1) as f64).exp());
    }
    let mean_nll = nll / scored.max(1) as f64;
    Ok(Perplexity {
        ppl: mean_nll.exp(),
        mean_nll,
        scored,
        windows: windows.len(),
        window: n_ctx,
    })
}

/// Negative log-likelihood sum and count of one window's positions from `first` on (row `p`
/// predicts `window[p + 1]`), fed in chunks of [`CHUNK`] tokens.
fn score_window(
    model: &Model,
    window: &[u32],
    first: usize,
    kv_type: KvType,
) -> Result<(f64, usize), ModelError> {
    let mut state = model.new_state_with(StateOptions {
        capacity: window.len(),
        kv_type,
    })?;
    let (mut nll, mut count, mut pos) = (0.0f64, 0usize, 0usize);
    for chunk in window.chunks(CHUNK) {
        let opts = ForwardOptions {
            logits: Some(LogitsMode::LastN(chunk.len())),
            ..ForwardOptions::default()
        };
        let logits = model.forward_with(&mut state, chunk, opts)?;
        for r in 0..logits.rows() {
            let p = pos + r;
            if p >= first && p + 1 < window.len() {
                let row = logits.row(r);
                nll += f64::from(log_sum_exp(row) - row[window[p + 1] as usize]);
                count += 1;
            }
        }
        pos += chunk.len();
    }
    Ok((nll, count))
}
