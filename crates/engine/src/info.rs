//! Figures the engine reports: per session and for the whole engine.

use crate::events::SessionId;
use std::time::Duration;

/// What [`crate::EngineHandle::session_info`] reports about one session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionInfo {
    /// The session.
    pub id: SessionId,
    /// Tokens in its State (after any trimming).
    pub state_tokens: usize,
    /// Tokens of its conversation history (including ones trimmed out of the State).
    pub history_tokens: usize,
    /// Bytes of its KV cache (0 while spilled).
    pub kv_bytes: usize,
    /// Bytes its State holds in memory (0 while spilled).
    pub state_bytes: usize,
    /// Its token budget as configured.
    pub token_budget: usize,
    /// Its token budget now (lower under memory pressure).
    pub effective_budget: usize,
    /// Its pinned prefix.
    pub pinned_prefix: usize,
    /// Whether its State is on disk.
    pub spilled: bool,
    /// Whether a generation is running on it.
    pub busy: bool,
    /// Whether its State no longer holds the whole history (trimmed or evicted).
    pub trimmed: bool,
    /// Decode speed of its last generation (0 before any).
    pub last_decode_tokens_per_s: f64,
}

/// Figures of one finished request, for latency metrics.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RequestSample {
    /// Time to first token.
    pub time_to_first_token: Duration,
    /// Decode speed.
    pub decode_tokens_per_s: f64,
    /// Prompt tokens computed.
    pub prefilled_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
}

/// What [`crate::EngineHandle::stats`] reports (e.g. for a Prometheus `/metrics` page).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct EngineStats {
    /// Sessions that exist.
    pub sessions: usize,
    /// Of which spilled to disk.
    pub spilled: usize,
    /// Generations running.
    pub active_generations: usize,
    /// Commands waiting for the engine.
    pub queue_depth: usize,
    /// Requests finished (successfully or not).
    pub requests_total: u64,
    /// Prompt tokens of every request.
    pub prompt_tokens_total: u64,
    /// Of which reused from a State.
    pub cached_tokens_total: u64,
    /// Tokens generated.
    pub generated_tokens_total: u64,
    /// Tokens drafted by prompt lookup.
    pub drafted_tokens_total: u64,
    /// Drafted tokens accepted (generated without a forward pass of their own).
    pub accepted_tokens_total: u64,
    /// Context trims (token budget and pressure).
    pub trims: u64,
    /// States spilled to disk.
    pub spills: u64,
    /// Caches evicted.
    pub evictions: u64,
    /// States restored from disk.
    pub restores: u64,
    /// Requests refused for memory: requests that ended with `OverMemory`, sessions not
    /// created or loaded. Admission saying no, then a trim or a recompute fitting the
    /// conversation after all, is not counted.
    pub admission_refusals: u64,
    /// Generation steps that panicked (each failed its request and dropped its session).
    pub panics: u64,
    /// Failures of an attached monitor's memory sources (their level may be stale).
    pub memory_source_errors: u64,
    /// The last such failure (`source: error`).
    pub memory_source_error: Option<String>,
    /// KV bytes of every resident State.
    pub kv_bytes_total: u64,
    /// Bytes of every resident State (KV cache and history).
    pub state_bytes_total: u64,
    /// Bytes of the compute thread's scratch (one for every session).
    pub scratch_bytes: u64,
    /// Bytes counted for the grammar engine: the vocabulary's trie (built by the first
    /// constrained request, freed under critical pressure while unused) and cached compiled
    /// grammars.
    pub grammar_bytes: u64,
    /// Threads the forward pass uses now (fewer when the device is hot).
    pub threads: usize,
    /// The device's thermal state, as the host last reported it (`"nominal"` in JSON).
    pub thermal: crate::Thermal,
    /// The app's lifecycle state, as the host last reported it (`"foreground"` in JSON).
    pub lifecycle: crate::Lifecycle,
    /// The prefill chunk in force (lowered, with its scratch, under memory pressure).
    pub prefill_chunk: usize,
    /// The process's footprint at the last real-memory check (cgroup working set, or resident
    /// set), if one was read.
    pub footprint_bytes: Option<u64>,
    /// The real limit of that check (cgroup limit, or the configured one), if any.
    pub footprint_limit: Option<u64>,
    /// Bytes of the model file (mapped weights).
    pub weights_bytes: u64,
    /// The memory ceiling, if any.
    pub memory_ceiling: Option<u64>,
    /// The last memory-pressure level the engine acted on (`"normal"`, `"warning"`,
    /// `"critical"` in JSON).
    pub pressure: statelm_governor::PressureLevel,
    /// Current budget factor (1.0 unless lowered under pressure).
    pub budget_factor: f64,
    /// Mean time to first token of the recent requests.
    pub mean_time_to_first_token: Duration,
    /// Mean decode speed of the recent requests.
    pub mean_decode_tokens_per_s: f64,
    /// The most recent requests (up to 64), oldest first.
    pub recent: Vec<RequestSample>,
}
