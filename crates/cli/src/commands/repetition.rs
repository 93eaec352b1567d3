//! The repetition options of `run` and `chat`: the DRY penalty and the loop guard (see
//! `statelm_engine::dry`). `chat` turns both on by default (`statelm_engine::ChatDefaults`);
//! `run` leaves them off.

use crate::common::non_negative;
use statelm_engine::SamplingParams;

/// DRY and loop-guard options.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RepetitionArgs {
    /// DRY repetition penalty: a token that would extend a sequence already in the context
    /// loses MULT × base^(length − allowed) (0: off) [default: 0.8; 0 in run with --temp 0].
    #[arg(long, value_name = "MULT", value_parser = non_negative)]
    dry_multiplier: Option<f32>,
    /// DRY growth per repeated token beyond the allowed length.
    #[arg(long, default_value_t = 1.75, value_parser = non_negative)]
    dry_base: f32,
    /// Repeated sequences up to this many tokens are not penalized by DRY.
    #[arg(long, default_value_t = 2)]
    dry_allowed_length: usize,
    /// How many recent context tokens DRY looks at.
    #[arg(long, default_value_t = 1024)]
    dry_last_n: usize,
    /// End an answer once it repeats a block of tokens back to back (stop reason
    /// "repetition") [default: on; off in run with --temp 0].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    loop_guard: Option<bool>,
}

impl RepetitionArgs {
    /// Sets the DRY fields and the loop guard of `p` (what was not given keeps `p`'s value:
    /// the model's defaults, or off for `run --temp 0`).
    pub(crate) fn apply(&self, p: &mut SamplingParams) {
        p.dry_multiplier = self.dry_multiplier.unwrap_or(p.dry_multiplier);
        p.dry_base = self.dry_base;
        p.dry_allowed_length = self.dry_allowed_length;
        p.dry_last_n = self.dry_last_n;
        p.loop_guard = self.loop_guard.unwrap_or(p.loop_guard);
    }
}

/// `statelm_engine::speculate::MAX_LOOKUP`, for clap.
const MAX_LOOKUP: i64 = statelm_engine::speculate::MAX_LOOKUP as i64;
/// `statelm_engine::lookup::MAX_NGRAM`, for clap.
const MAX_NGRAM: i64 = statelm_engine::lookup::MAX_NGRAM as i64;

/// Prompt-lookup speculative decoding options (see `statelm_engine::speculate`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LookupArgs {
    /// Prompt-lookup decoding: check up to N tokens drafted from the conversation's own
    /// history per forward pass (0: off; at most 15). The text is exactly what plain decoding
    /// gives; answers that copy their input (code edits, quotes) come faster.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=MAX_LOOKUP))]
    lookup: Option<u16>,
    /// Longest n-gram drafts are looked up by.
    #[arg(long, value_name = "N", default_value_t = statelm_engine::lookup::DEFAULT_NGRAM_MAX as u16, value_parser = clap::value_parser!(u16).range(1..=MAX_NGRAM))]
    ngram_max: u16,
}

impl LookupArgs {
    /// Sets the lookup fields of `p` (what was not given keeps `p`'s value).
    pub(crate) fn apply(&self, p: &mut SamplingParams) {
        p.lookup = self.lookup.map_or(p.lookup, usize::from);
        p.ngram_max = usize::from(self.ngram_max);
    }
}
