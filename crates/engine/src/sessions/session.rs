//! One session: its State (or where it was spilled), its conversation history and the events
//! waiting for its next stream.

use crate::error::EngineError;
use crate::events::{Event, RequestId, SessionId};
use crate::info::SessionInfo;
use crate::request::SessionOptions;
use statelm_model::{Model, State, StateOptions};
use std::path::PathBuf;
use std::time::Instant;

/// One conversation with the model.
#[derive(Debug)]
pub(crate) struct Session {
    /// Its id.
    pub id: SessionId,
    /// Options it was created with.
    pub opts: SessionOptions,
    /// Its State; `None` while spilled.
    pub state: Option<State>,
    /// Where its State was spilled.
    pub spill_path: Option<PathBuf>,
    /// The spill file's authentication tag (what restoring it must find).
    pub spill_tag: statelm_model::files::FileTag,
    /// Tokens in the State when it was spilled.
    pub spilled_tokens: usize,
    /// Cells to cut from the end of the spilled State when it is read back: drafts of prompt
    /// lookup refused while the State was on disk (see [`Session::cut`]).
    pub cut_on_restore: usize,
    /// Every token of the conversation, including ones trimmed out of the State.
    pub history: Vec<u32>,
    /// `history[..evaluated]` is reflected in the State.
    pub evaluated: usize,
    /// The State is a trimmed view of `history[..evaluated]` rather than exactly it.
    pub trimmed: bool,
    /// Tokens at the start of the State that trimming keeps.
    pub pinned: usize,
    /// Its token budget as configured.
    pub budget: usize,
    /// The budget lowered to what fits in memory, for the request under way (admission's
    /// last rung, [`crate::fit`]).
    pub fit: Option<crate::fit::Fit>,
    /// Events to deliver at the start of its next stream.
    pub pending: Vec<Event>,
    /// The generation running on it.
    pub busy: Option<RequestId>,
    /// When it was last used (created or finished a request).
    pub last_used: Instant,
    /// Already hard-trimmed in the current pressure episode.
    pub hard_trimmed: bool,
    /// Decode speed of its last generation.
    pub last_tps: f64,
    /// Its history log and snapshot path, if it is a durable (named) session.
    pub durable: Option<crate::durable::Durable>,
    /// Where each n-gram of its history last ended (prompt-lookup drafts).
    pub lookup: crate::lookup::NgramIndex,
    /// Its tenant and last prompt, if it belongs to the pool.
    pub pool: Option<crate::pool::Pooled>,
}

impl Session {
    /// A new, empty session.
    pub fn new(id: SessionId, opts: SessionOptions, state: State, budget: usize) -> Session {
        Session {
            id,
            pinned: opts.pinned_prefix.unwrap_or(0),
            opts,
            state: Some(state),
            spill_path: None,
            spill_tag: [0; 32],
            spilled_tokens: 0,
            cut_on_restore: 0,
            history: Vec::new(),
            evaluated: 0,
            trimmed: false,
            budget,
            fit: None,
            pending: Vec::new(),
            busy: None,
            last_used: Instant::now(),
            hard_trimmed: false,
            last_tps: 0.0,
            durable: None,
            lookup: crate::lookup::NgramIndex::new(crate::lookup::DEFAULT_NGRAM_MAX),
            pool: None,
        }
    }

    /// The budget in force with the engine's budget `factor` (never below the minimum), and
    /// within what fits in memory when admission had to lower it.
    pub fn effective_budget(&self, factor: f64) -> usize {
        let b = (self.budget as f64 * factor) as usize;
        let b = b.clamp(
            crate::config::MIN_TOKEN_BUDGET.min(self.budget),
            self.budget,
        );
        self.fit.as_ref().map_or(b, |f| b.min(f.tokens))
    }

    /// Tokens in the State (or in the spilled one).
    pub fn state_len(&self) -> usize {
        self.state.as_ref().map_or(self.spilled_tokens, State::len)
    }

    /// Bytes its State holds in memory (0 while spilled).
    pub fn resident_bytes(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.bytes() as u64)
    }

    /// Whether its State is on disk.
    pub fn is_spilled(&self) -> bool {
        self.state.is_none()
    }

    /// What `session_info` reports.
    pub fn info(&self, factor: f64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            state_tokens: self.state_len(),
            history_tokens: self.history.len(),
            kv_bytes: self.state.as_ref().map_or(0, State::kv_bytes),
            state_bytes: self.state.as_ref().map_or(0, State::bytes),
            token_budget: self.budget,
            effective_budget: self.effective_budget(factor),
            pinned_prefix: self.pinned,
            spilled: self.is_spilled(),
            busy: self.busy.is_some(),
            trimmed: self.trimmed || self.evaluated + 1 < self.history.len(),
            last_decode_tokens_per_s: self.last_tps,
        }
    }

    /// Writes the State to `path` and frees it. On failure the State stays in memory.
    pub fn spill(&mut self, path: PathBuf) -> Result<(), EngineError> {
        let Some(state) = self.state.as_ref() else {
            return Ok(());
        };
        if let Some(dir) = path.parent() {
            statelm_model::files::ensure_private_dir(dir)?;
        }
        self.spill_tag = state.save_to_file_authenticated(&path)?;
        self.spilled_tokens = state.len();
        self.state = None;
        self.spill_path = Some(path);
        Ok(())
    }

    /// Reads a spilled State back (and deletes its file). `Ok(false)`: it was not spilled.
    pub fn restore(&mut self, model: &Model) -> Result<bool, EngineError> {
        if self.state.is_some() {
            return Ok(false);
        }
        let path = self.spill_path.take().ok_or(EngineError::BadSessionFile(
            "spilled session has no spill file".into(),
        ))?;
        let loaded = State::load_from_file_authenticated(&path, model, &self.spill_tag);
        let _ = std::fs::remove_file(&path);
        let mut state = loaded?;
        let cut = std::mem::take(&mut self.cut_on_restore);
        state.truncate(state.len().saturating_sub(cut));
        self.state = Some(state);
        Ok(true)
    }

    /// Cuts the last `n` cells of the State, resident or spilled (then when it is read back).
    pub fn cut(&mut self, n: usize) {
        match self.state.as_mut() {
            Some(state) => {
                let len = state.len();
                state.truncate(len - n.min(len));
            }
            None => {
                self.cut_on_restore += n.min(self.spilled_tokens);
                self.spilled_tokens -= n.min(self.spilled_tokens);
            }
        }
    }

    /// Drops the cache (a fresh State of the same shape), keeping the history: the next request
    /// recomputes the conversation within the budget.
    pub fn evict(&mut self, model: &Model, opts: StateOptions) -> Result<(), EngineError> {
        self.state = Some(model.new_state_with(opts)?);
        self.discard_spill_file();
        self.evaluated = 0;
        self.trimmed = false;
        Ok(())
    }

    /// Deletes the spill file, if any.
    pub fn discard_spill_file(&mut self) {
        self.cut_on_restore = 0;
        if let Some(p) = self.spill_path.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Trims the resident State to its pinned prefix and the `keep_suffix` most recent tokens.
    /// Returns `(dropped, kept, reprefill)`, or `None` when nothing was dropped. A re-prefill
    /// leaves the kept tokens pending: the next forward call (or feed) recomputes them.
    pub fn trim(&mut self, keep_prefix: usize, keep_suffix: usize) -> Option<(usize, usize, bool)> {
        let state = self.state.as_mut()?;
        let outcome = state.retain(keep_prefix, keep_suffix);
        // Hand the dropped cells' memory back, not only stop using it.
        state.shrink();
        match outcome {
            statelm_model::RetainOutcome::Unchanged => None,
            statelm_model::RetainOutcome::Shifted { dropped, kept } => {
                self.trimmed = true;
                Some((dropped, kept, false))
            }
            statelm_model::RetainOutcome::Reprefill { dropped, kept } => {
                self.trimmed = true;
                Some((dropped, kept, true))
            }
        }
    }

    /// Trims the resident State to the context ranges `keep` (sorted, disjoint, the last one
    /// ending at the State's end), dropping the gaps between them from the newest back.
    /// Returns `(dropped, kept, reprefill)` as [`Session::trim`] does.
    pub fn trim_keeping(
        &mut self,
        keep: &[std::ops::Range<usize>],
    ) -> Option<(usize, usize, bool)> {
        let (mut dropped, mut reprefill) = (0, false);
        for i in (0..keep.len()).rev() {
            let gap_start = if i == 0 { 0 } else { keep[i - 1].end };
            let len = self.state_len();
            if gap_start < keep[i].start {
                if let Some((d, _, r)) = self.trim(gap_start, len - keep[i].start) {
                    dropped += d;
                    reprefill |= r;
                }
            }
        }
        (dropped > 0).then(|| (dropped, self.state_len(), reprefill))
    }

    /// Replaces the history with `history` (the lookup index is kept when it extends the old
    /// one, else rebuilt when next used).
    pub fn set_history(&mut self, history: Vec<u32>) {
        if !history.starts_with(&self.history) {
            self.lookup.clear();
        }
        self.history = history;
    }

    /// Cuts the history to its first `n` tokens.
    pub fn truncate_history(&mut self, n: usize) {
        if n < self.history.len() {
            self.history.truncate(n);
            self.lookup.clear();
        }
    }

    /// The most recent tokens of the context, for the repetition penalties.
    pub fn recent(&self, n: usize) -> &[u32] {
        &self.history[self.history.len().saturating_sub(n)..]
    }
}
