//! Admission against the process's real footprint: before memory grows, the engine reads what
//! the kernel counts (cgroup working set, or resident set) and keeps it under the real limit
//! with a margin — spilling idle sessions, then shrinking the prefill chunk and its scratch,
//! then spilling sessions that wait for their next step — and tells each session it spilled.

use crate::core::Core;
use crate::error::EngineError;
use crate::events::SessionId;
use statelm_governor::{format_bytes, Footprint};

/// The smallest prefill chunk pressure lowers it to.
pub(crate) const MIN_CHUNK: usize = 16;

/// Decode steps between two real-memory checks (a decode step grows the KV cache by one cell;
/// it allocates in steps of 256 cells, which the check's `needed` covers).
pub(crate) const DECODE_CHECK_EVERY: usize = 16;

/// What a check found.
struct Reading {
    footprint: Footprint,
    /// Bytes the footprint must stay under.
    target: u64,
}

impl Core {
    /// Reads the footprint and the limit it must stay under (`None`: no real limit, or
    /// real-memory admission is off, or the reading failed).
    fn read_real(&mut self) -> Option<Reading> {
        let reader = self.footprint.as_mut()?;
        let footprint = match reader.read() {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "reading the process's footprint failed; real-memory admission is off");
                self.footprint = None;
                return None;
            }
        };
        let rm = self.config.real_memory;
        let limit = match (footprint.limit, rm.limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_footprint = Some((footprint, limit));
        let limit = limit?;
        let critical = self.config.policy.thresholds.critical.clamp(0.0, 1.0);
        let margin = rm.margin.max((limit as f64 * (1.0 - critical)) as u64);
        Some(Reading {
            footprint,
            target: limit.saturating_sub(margin),
        })
    }

    /// Makes room for `needed` more bytes under the real limit less its margin: spills idle
    /// sessions (oldest first), then halves the prefill chunk (freeing the scratch), then
    /// spills sessions waiting for their next step, reading the footprint back after each.
    /// Fails with `OverMemory` when nothing is left to free.
    pub fn real_room(&mut self, needed: u64, what: &str) -> Result<(), EngineError> {
        let mut acted = false;
        loop {
            let Some(r) = self.read_real() else {
                return Ok(());
            };
            let used = r.footprint.used;
            if used.saturating_add(needed) <= r.target {
                self.ease(used, needed, r.target, acted);
                return Ok(());
            }
            acted = true;
            self.tight = true;
            if self.release_grammars(what) {
                continue;
            }
            let reason =
                |id: SessionId, how: &str| {
                    format!(
                    "{what} needs {} with {} of the process's real limit of {} in use ({} kept \
                     free): {how} session {id} was saved to disk and freed; it is restored on \
                     next use",
                    format_bytes(needed),
                    format_bytes(used),
                    format_bytes(r.target),
                    format_bytes(r.footprint.limit.unwrap_or(r.target).saturating_sub(r.target)),
                )
                };
            if let Some(id) = self.victim(false) {
                if self.spill(id, reason(id, "idle")) {
                    continue;
                }
            }
            if self.chunk > MIN_CHUNK {
                self.shrink_chunk((self.chunk / 2).max(MIN_CHUNK));
                continue;
            }
            if let Some(id) = self.victim(true) {
                if self.spill(id, reason(id, "waiting")) {
                    continue;
                }
            }
            return Err(EngineError::OverMemory {
                what: what.to_string(),
                needed,
                used,
                ceiling: r.target,
            });
        }
    }

    /// The next session to spill: the least recently used resident idle one, or with `busy`
    /// one whose generation waits for its next step (the stepping one is not in the table).
    pub fn victim(&self, busy: bool) -> Option<SessionId> {
        self.sessions
            .values()
            .filter(|s| !s.is_spilled() && s.busy.is_some() == busy)
            .min_by_key(|s| (s.last_used, s.id))
            .map(|s| s.id)
    }

    /// Lowers the prefill chunk, and the scratch with it, to the smallest there is.
    pub(crate) fn minimize_chunk(&mut self) {
        if self.chunk > MIN_CHUNK {
            self.shrink_chunk(MIN_CHUNK);
        }
    }

    /// Gives the prefill chunk its configured size back (the scratch grows when next used).
    pub(crate) fn restore_chunk(&mut self) {
        self.chunk = self.config.prefill_chunk;
        self.scratch.set_ubatch(self.chunk);
    }

    /// Sets the prefill chunk and the scratch's micro-batch to `chunk`, handing freed scratch
    /// memory back to the kernel.
    fn shrink_chunk(&mut self, chunk: usize) {
        tracing::info!(
            from = self.chunk,
            to = chunk,
            "memory pressure: prefill chunk lowered"
        );
        self.chunk = chunk;
        self.scratch.set_ubatch(chunk);
        self.scratch_high_water = self.scratch.bytes() as u64;
        statelm_governor::release_free_memory();
    }

    /// After a check that passed: the pressure is over when there is room for twice the
    /// scratch again; the chunk grows back a step at a time.
    fn ease(&mut self, used: u64, needed: u64, target: u64, acted: bool) {
        if acted {
            return;
        }
        let room = target.saturating_sub(used.saturating_add(needed));
        let scratch = self.scratch_high_water.max(1 << 20);
        if room >= 4 * scratch {
            self.tight = false;
            if self.chunk < self.config.prefill_chunk {
                self.chunk = (self.chunk * 2).min(self.config.prefill_chunk);
                self.scratch.set_ubatch(self.chunk);
            }
        }
    }
}
