//! Engine configuration.

use statelm_governor::Policy;
use statelm_model::KvType;
use std::path::PathBuf;
use std::time::Duration;

/// How an engine runs. Start from `EngineConfig::default()` and change what you need.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Most sessions that may exist at once.
    pub max_sessions: usize,
    /// Capacity of each session's State, in tokens.
    pub session_capacity: usize,
    /// Default token budget of a session: its context is trimmed when it would pass this
    /// (capped at `session_capacity`). Separate from a request's `max_tokens`.
    pub token_budget: usize,
    /// Element type of the KV caches.
    pub kv_type: KvType,
    /// Where idle sessions are spilled under memory pressure (created when needed).
    pub spill_dir: PathBuf,
    /// Where durable sessions keep their history logs and KV snapshots
    /// ([`crate::EngineHandle::open_session`]); created with mode 0700 when needed. `None`:
    /// sessions cannot be opened by name.
    pub session_dir: Option<PathBuf>,
    /// Commands that may wait for the engine before callers wait to send.
    pub queue_depth: usize,
    /// Memory ceiling in bytes (weights plus every resident State); `None`: no admission
    /// control.
    pub memory_ceiling: Option<u64>,
    /// A session is idle (may be spilled) after this long without a request.
    pub idle_after: Duration,
    /// Events buffered per stream before the engine stops computing for it (backpressure).
    pub stream_buffer: usize,
    /// Largest number of prompt tokens computed in one step before the engine turns to the
    /// next active session.
    pub prefill_chunk: usize,
    /// The memory-pressure policy (thresholds, budget factors, hard-trim size).
    pub policy: Policy,
    /// How long a host memory warning ([`crate::EngineHandle::memory_warning`]) holds its level
    /// before it lapses to Normal and budgets recover (a second Warning inside it is Critical).
    pub pressure_hold: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_sessions: 16,
            session_capacity: 4096,
            token_budget: 4096,
            kv_type: KvType::default(),
            spill_dir: std::env::temp_dir().join("statelm-spill"),
            session_dir: None,
            queue_depth: 64,
            memory_ceiling: None,
            idle_after: Duration::from_secs(30),
            stream_buffer: 64,
            prefill_chunk: 128,
            policy: Policy::default(),
            pressure_hold: DEFAULT_PRESSURE_HOLD,
        }
    }
}

/// How long a host memory warning holds by default (30 s; the governor's constant).
pub use statelm_governor::DEFAULT_PRESSURE_HOLD;

/// The smallest token budget the engine accepts.
pub const MIN_TOKEN_BUDGET: usize = 8;

impl EngineConfig {
    /// The configuration with every value brought into its valid range.
    pub(crate) fn sanitized(mut self) -> EngineConfig {
        self.max_sessions = self.max_sessions.max(1);
        self.session_capacity = self.session_capacity.max(MIN_TOKEN_BUDGET);
        self.token_budget = self
            .token_budget
            .clamp(MIN_TOKEN_BUDGET, self.session_capacity);
        self.queue_depth = self.queue_depth.max(1);
        self.stream_buffer = self.stream_buffer.max(4);
        self.prefill_chunk = self.prefill_chunk.max(1);
        self
    }
}
