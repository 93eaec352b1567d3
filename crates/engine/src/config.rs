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
    /// Where idle sessions are spilled under memory pressure (default `$TMPDIR/statelm-spill-UID`):
    /// created 0700 when needed, refused when it is a symlink or another user's; spill files
    /// are 0600 and authenticated (HMAC-SHA256 under a per-process key, the tag kept in
    /// memory), so a planted or swapped file is never read as a session's cache.
    pub spill_dir: PathBuf,
    /// Where durable sessions keep their history logs and KV snapshots
    /// ([`crate::EngineHandle::open_session`]); created with mode 0700 when needed. `None`:
    /// sessions cannot be opened by name.
    pub session_dir: Option<PathBuf>,
    /// Commands that may wait for the engine before callers wait to send.
    pub queue_depth: usize,
    /// Memory ceiling in bytes on the engine's own accounting (weights, every resident State
    /// and the compute scratch); `None`: no accounted ceiling. The real footprint is checked as
    /// well, see [`EngineConfig::real_memory`].
    pub memory_ceiling: Option<u64>,
    /// Admission against the process's real footprint, read back from the OS.
    pub real_memory: RealMemory,
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
    /// before it lapses to Normal and budgets recover (a second Warning inside it is Critical);
    /// also the longest a generation paused by an eviction waits for critical pressure to ease.
    pub pressure_hold: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_sessions: 16,
            session_capacity: 4096,
            token_budget: 4096,
            kv_type: KvType::default(),
            spill_dir: std::env::temp_dir().join(statelm_model::files::per_user("statelm-spill")),
            session_dir: None,
            queue_depth: 64,
            memory_ceiling: None,
            real_memory: RealMemory::default(),
            idle_after: Duration::from_secs(30),
            stream_buffer: 64,
            prefill_chunk: 128,
            policy: Policy::default(),
            pressure_hold: DEFAULT_PRESSURE_HOLD,
        }
    }
}

/// Admission control on the process's real footprint: before the engine lets memory grow (a
/// new session, a restore, a prefill chunk, every few decoded tokens) it reads the footprint
/// the kernel counts ([`statelm_governor::FootprintReader`]: the cgroup's working set in a
/// memory cgroup, else the resident set) and keeps it under the real limit less `margin`,
/// spilling other sessions (idle ones first) and shrinking the prefill chunk and its scratch
/// until the growth fits. The limit is the cgroup's when it has one (read at every check, so
/// a limit set later applies), and `limit` for a process outside a limited cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealMemory {
    /// Read the footprint back at all (default true; false leaves only the accounted
    /// `memory_ceiling`, as a control run that must be OOM-killed needs).
    pub enabled: bool,
    /// The limit on the resident set when the process is not in a limited cgroup.
    pub limit: Option<u64>,
    /// Room kept free under the limit: what other threads allocate between two checks, the
    /// allocator's slack and the kernel's lag in charging pages (default 16 MiB; at least
    /// 8 % of the limit is kept, the governor's own Critical threshold).
    pub margin: u64,
}

impl Default for RealMemory {
    fn default() -> Self {
        RealMemory {
            enabled: true,
            limit: None,
            margin: 16 << 20,
        }
    }
}

/// How long a host memory warning holds by default (30 s; the governor's constant).
pub use statelm_governor::DEFAULT_PRESSURE_HOLD;

/// The smallest token budget the engine accepts.
pub const MIN_TOKEN_BUDGET: usize = 8;

/// The largest `queue_depth` and `stream_buffer` (larger values are brought down to it: the
/// channels behind them refuse sizes near `usize::MAX`, and no caller needs more).
pub const MAX_QUEUE: usize = 1 << 16;

impl EngineConfig {
    /// The configuration with every value brought into its valid range.
    pub(crate) fn sanitized(mut self) -> EngineConfig {
        self.max_sessions = self.max_sessions.max(1);
        self.session_capacity = self.session_capacity.max(MIN_TOKEN_BUDGET);
        self.token_budget = self
            .token_budget
            .clamp(MIN_TOKEN_BUDGET, self.session_capacity);
        self.queue_depth = self.queue_depth.clamp(1, MAX_QUEUE);
        self.stream_buffer = self.stream_buffer.clamp(4, MAX_QUEUE);
        self.prefill_chunk = self.prefill_chunk.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_sizes_are_bounded() {
        let c = EngineConfig {
            queue_depth: usize::MAX,
            stream_buffer: usize::MAX,
            ..EngineConfig::default()
        }
        .sanitized();
        assert_eq!((c.queue_depth, c.stream_buffer), (MAX_QUEUE, MAX_QUEUE));
        // A tokio channel of that size can be made (one near usize::MAX panics).
        let _ = tokio::sync::mpsc::channel::<()>(c.queue_depth);
        let c = EngineConfig {
            queue_depth: 0,
            stream_buffer: 0,
            ..EngineConfig::default()
        }
        .sanitized();
        assert_eq!((c.queue_depth, c.stream_buffer), (1, 4));
    }
}
