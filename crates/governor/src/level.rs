//! Pressure levels, readings, thresholds and the [`MemorySource`] trait.

use std::time::{Duration, Instant};

use crate::GovernorError;

/// How much memory pressure the process is under. Ordered: `Normal < Warning < Critical`.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PressureLevel {
    /// Plenty of memory.
    #[default]
    Normal,
    /// Memory is getting tight: spill idle state, lower budgets.
    Warning,
    /// The process is close to being killed: hard-trim and evict.
    Critical,
}

impl PressureLevel {
    /// Lower-case name (`"normal"`, `"warning"`, `"critical"`).
    pub fn as_str(self) -> &'static str {
        match self {
            PressureLevel::Normal => "normal",
            PressureLevel::Warning => "warning",
            PressureLevel::Critical => "critical",
        }
    }
}

impl std::fmt::Display for PressureLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reading of a memory source. Fields a source cannot know are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryReading {
    /// The ceiling the process lives under (cgroup limit, or physical RAM for /proc);
    /// `None` when unlimited.
    pub limit: Option<u64>,
    /// Bytes charged (cgroup usage including page cache; for /proc, RAM in use).
    pub usage: Option<u64>,
    /// Bytes that cannot be reclaimed: usage minus inactive file pages, as the
    /// kernel and the kubelet count it (mmap'd weights mostly are reclaimable).
    pub working_set: Option<u64>,
    /// Bytes still available before the ceiling (`limit - working_set`, or MemAvailable).
    pub available: Option<u64>,
    /// Resident set size of this process, when the source knows it.
    pub rss: Option<u64>,
    /// The level this source derives from thresholds and kernel events.
    pub level: PressureLevel,
}

/// Fractions of the limit at which the working set raises the level.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Thresholds {
    /// `working_set / limit` at or above which the level is Warning (default 0.80).
    pub warning: f64,
    /// `working_set / limit` at or above which the level is Critical (default 0.92).
    pub critical: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            warning: 0.80,
            critical: 0.92,
        }
    }
}

impl Thresholds {
    /// The level for `used` bytes out of `limit`; Normal when the limit is unknown or zero.
    pub fn level(&self, used: Option<u64>, limit: Option<u64>) -> PressureLevel {
        match (used, limit) {
            (Some(used), Some(limit)) if limit > 0 => {
                let fraction = used as f64 / limit as f64;
                if fraction >= self.critical {
                    PressureLevel::Critical
                } else if fraction >= self.warning {
                    PressureLevel::Warning
                } else {
                    PressureLevel::Normal
                }
            }
            _ => PressureLevel::Normal,
        }
    }
}

/// A provider of memory readings and, optionally, of pressure events.
pub trait MemorySource: Send {
    /// Short stable name (`"cgroup-v2"`, `"cgroup-v1"`, `"proc"`, `"host"`).
    fn name(&self) -> &'static str;

    /// A human description for `statelm doctor` (path, limit, event mechanism).
    fn describe(&self) -> String {
        self.name().to_string()
    }

    /// Reads the current state. Missing files give typed errors, never panics.
    fn read(&mut self) -> Result<MemoryReading, GovernorError>;

    /// Waits up to `timeout` for a pressure event. Returns `Ok(Some(level))` when
    /// an event arrived, `Ok(None)` on timeout. The default sleeps for `timeout`
    /// (polled sources); event sources block in `poll(2)` instead: no busy loop.
    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        std::thread::sleep(timeout);
        Ok(None)
    }
}

impl<S: MemorySource + ?Sized> MemorySource for Box<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        (**self).read()
    }
    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        (**self).wait(timeout)
    }
}

/// Keeps a level raised by an event for a hold time, then lets it decay.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventLatch {
    level: PressureLevel,
    until: Option<Instant>,
    hold: Duration,
}

impl EventLatch {
    /// A latch that keeps each raised level for `hold`.
    pub(crate) fn new(hold: Duration) -> Self {
        EventLatch {
            level: PressureLevel::Normal,
            until: None,
            hold,
        }
    }

    /// Raises to `level` (never lowers a stronger live level) and restarts the hold.
    pub(crate) fn raise(&mut self, level: PressureLevel) {
        let current = self.current();
        self.level = current.max(level);
        self.until = Some(Instant::now() + self.hold);
    }

    /// The held level, or Normal once the hold has expired.
    pub(crate) fn current(&self) -> PressureLevel {
        match self.until {
            Some(until) if Instant::now() < until => self.level,
            _ => PressureLevel::Normal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_classify() {
        let t = Thresholds::default();
        assert_eq!(t.level(Some(10), Some(100)), PressureLevel::Normal);
        assert_eq!(t.level(Some(80), Some(100)), PressureLevel::Warning);
        assert_eq!(t.level(Some(92), Some(100)), PressureLevel::Critical);
        assert_eq!(t.level(Some(200), Some(100)), PressureLevel::Critical);
        assert_eq!(t.level(Some(200), None), PressureLevel::Normal);
        assert_eq!(t.level(None, Some(100)), PressureLevel::Normal);
        assert_eq!(t.level(Some(1), Some(0)), PressureLevel::Normal);
    }

    #[test]
    fn levels_are_ordered() {
        assert!(PressureLevel::Normal < PressureLevel::Warning);
        assert!(PressureLevel::Warning < PressureLevel::Critical);
        assert_eq!(PressureLevel::Critical.to_string(), "critical");
    }

    #[test]
    fn latch_holds_then_decays() {
        let mut latch = EventLatch::new(Duration::from_millis(30));
        assert_eq!(latch.current(), PressureLevel::Normal);
        latch.raise(PressureLevel::Critical);
        latch.raise(PressureLevel::Warning);
        assert_eq!(latch.current(), PressureLevel::Critical);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(latch.current(), PressureLevel::Normal);
    }
}
