//! cgroup v1 memory source: `memory.limit_in_bytes`, `memory.usage_in_bytes`,
//! `memory.stat`, `memory.oom_control` and `memory.pressure_level` notifications
//! (an eventfd per level registered through `cgroup.event_control`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroup_v2::DEFAULT_EVENT_HOLD;
use crate::level::EventLatch;
use crate::util::read_u64;
use crate::util::{cgroup_reading, format_bytes, kv_get, parse_limit, read_limit, read_text};
use crate::{GovernorError, MemoryReading, MemorySource, PressureLevel, Thresholds};

/// One registered `memory.pressure_level` listener.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug)]
struct PressureEvent {
    eventfd: std::os::fd::OwnedFd,
    level: PressureLevel,
}

/// Memory source for a cgroup v1 memory directory (e.g. `/sys/fs/cgroup/memory/x`).
///
/// The limit is `memory.limit_in_bytes`, bounded by `hierarchical_memory_limit`
/// from `memory.stat`; the unlimited value (9223372036854771712) is `None`.
/// `memory.pressure_level` "medium" events raise Warning and "critical" events
/// raise Critical — capped at Warning while the working set is under the warning
/// threshold of a known limit (vmpressure also fires on dirty page cache); an
/// increase of `oom_kill` or `under_oom 1` raise Critical.
#[derive(Debug)]
pub struct CgroupV1Source {
    dir: PathBuf,
    thresholds: Thresholds,
    latch: EventLatch,
    oom_latch: EventLatch,
    last_oom_kill: Option<u64>,
    events_error: Option<String>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    events: Vec<PressureEvent>,
}

/// Parsed `memory.oom_control`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OomControl {
    pub(crate) under_oom: bool,
    pub(crate) oom_kill: u64,
}

impl OomControl {
    pub(crate) fn parse(text: &str) -> OomControl {
        OomControl {
            under_oom: kv_get(text, "under_oom").unwrap_or(0) != 0,
            oom_kill: kv_get(text, "oom_kill").unwrap_or(0),
        }
    }
}

impl CgroupV1Source {
    /// A source for `dir`; fails with [`GovernorError::Missing`] when it has no
    /// `memory.usage_in_bytes`.
    pub fn at(dir: impl Into<PathBuf>) -> Result<CgroupV1Source, GovernorError> {
        let dir = dir.into();
        let usage = dir.join("memory.usage_in_bytes");
        if !usage.is_file() {
            return Err(GovernorError::Missing { path: usage });
        }
        Ok(CgroupV1Source {
            dir,
            thresholds: Thresholds::default(),
            latch: EventLatch::new(DEFAULT_EVENT_HOLD),
            oom_latch: EventLatch::new(DEFAULT_EVENT_HOLD),
            last_oom_kill: None,
            events_error: None,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            events: Vec::new(),
        })
    }

    /// Uses `thresholds` instead of the default 80 % / 92 %.
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> CgroupV1Source {
        self.thresholds = thresholds;
        self
    }

    /// Holds event-raised levels for `hold` instead of 5 s.
    pub fn with_event_hold(mut self, hold: Duration) -> CgroupV1Source {
        self.latch = EventLatch::new(hold);
        self.oom_latch = EventLatch::new(hold);
        self
    }

    /// The cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The effective limit: `memory.limit_in_bytes` bounded by the hierarchy.
    pub fn limit(&self) -> Result<Option<u64>, GovernorError> {
        let own = read_limit(&self.dir.join("memory.limit_in_bytes"))?;
        let stat_path = self.dir.join("memory.stat");
        let hier = match read_text(&stat_path) {
            Ok(stat) => match kv_get(&stat, "hierarchical_memory_limit") {
                Some(v) => parse_limit(&stat_path, &v.to_string())?,
                None => None,
            },
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(e),
        };
        Ok(match (own, hier) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// The number of processes the OOM killer killed in this cgroup (`oom_kill`).
    pub fn oom_kills(&self) -> Result<u64, GovernorError> {
        Ok(OomControl::parse(&read_text(&self.dir.join("memory.oom_control"))?).oom_kill)
    }

    /// True when `memory.pressure_level` listeners are registered.
    pub fn pressure_events_enabled(&self) -> bool {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        return !self.events.is_empty();
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        false
    }

    /// Registers eventfds for the "medium" (→ Warning) and "critical" (→ Critical)
    /// `memory.pressure_level` notifications. Needs write access to
    /// `cgroup.event_control`; on error the source keeps working, polled.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub fn enable_pressure_events(&mut self) -> Result<(), GovernorError> {
        let registered: Result<Vec<_>, GovernorError> = [
            ("medium", PressureLevel::Warning),
            ("critical", PressureLevel::Critical),
        ]
        .into_iter()
        .map(|(name, level)| {
            let eventfd = register_pressure_event(&self.dir, name)?;
            Ok(PressureEvent { eventfd, level })
        })
        .collect();
        match registered {
            Ok(events) => {
                self.events = events;
                self.events_error = None;
                Ok(())
            }
            Err(e) => {
                self.events_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Pressure-level events need Linux.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub fn enable_pressure_events(&mut self) -> Result<(), GovernorError> {
        Err(GovernorError::Unsupported(
            "memory.pressure_level needs Linux".into(),
        ))
    }

    fn check_oom(&mut self) {
        let Ok(text) = read_text(&self.dir.join("memory.oom_control")) else {
            return;
        };
        let oom = OomControl::parse(&text);
        let killed = self.last_oom_kill.is_some_and(|last| oom.oom_kill > last);
        if killed || oom.under_oom {
            tracing::warn!(dir = %self.dir.display(), oom_kill = oom.oom_kill, "OOM in cgroup");
            self.oom_latch.raise(PressureLevel::Critical);
        }
        self.last_oom_kill = Some(oom.oom_kill);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn wait_events(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        use std::os::fd::AsFd;
        let fds: Vec<_> = self
            .events
            .iter()
            .map(|e| (e.eventfd.as_fd(), rustix::event::PollFlags::IN))
            .collect();
        let ready = crate::util::poll_ready(&fds, timeout)?;
        let mut fired = None;
        for (event, ready) in self.events.iter().zip(ready) {
            if ready {
                // Reset the eventfd counter; it is non-blocking, so a race is harmless.
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(&event.eventfd, &mut buf);
                fired = fired.max(Some(event.level));
            }
        }
        if let Some(level) = fired {
            self.latch.raise(level);
        }
        Ok(fired)
    }
}

/// Combines the threshold level with a `memory.pressure_level` event level.
///
/// vmpressure measures reclaim *efficiency*, not closeness to the limit: writing
/// a large file into a small cgroup (dirty pages awaiting writeback) fires
/// "critical" while the working set is tiny (observed on Linux 6.18). So when the
/// limit is known and the working set is under the warning threshold, an event
/// counts as Warning at most. OOM kills are not capped.
fn combine_levels(threshold: PressureLevel, event: PressureLevel, limited: bool) -> PressureLevel {
    let event = if limited && threshold == PressureLevel::Normal {
        event.min(PressureLevel::Warning)
    } else {
        event
    };
    threshold.max(event)
}

/// Creates an eventfd and registers it for `level` notifications of `dir`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn register_pressure_event(dir: &Path, level: &str) -> Result<std::os::fd::OwnedFd, GovernorError> {
    use rustix::event::{eventfd, EventfdFlags};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| GovernorError::event("eventfd", e))?;
    let pressure_path = dir.join("memory.pressure_level");
    let pressure =
        std::fs::File::open(&pressure_path).map_err(|e| GovernorError::io(&pressure_path, e))?;
    let control_path = dir.join("cgroup.event_control");
    let line = format!("{} {} {level}", efd.as_raw_fd(), pressure.as_raw_fd());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&control_path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| GovernorError::io(&control_path, e))?;
    // The kernel keeps its own references; the pressure_level file may close now.
    Ok(efd)
}

impl MemorySource for CgroupV1Source {
    fn name(&self) -> &'static str {
        "cgroup-v1"
    }

    fn describe(&self) -> String {
        let limit = match self.limit() {
            Ok(Some(l)) => format!("limit {}", format_bytes(l)),
            Ok(None) => "no limit".to_string(),
            Err(e) => format!("limit unreadable: {e}"),
        };
        let events = match (&self.events_error, self.pressure_events_enabled()) {
            (_, true) => "pressure_level events".to_string(),
            (Some(e), false) => format!("polled; pressure_level events unavailable: {e}"),
            (None, false) => "polled".to_string(),
        };
        format!("cgroup v1 {} ({limit}, {events})", self.dir.display())
    }

    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        let usage = read_u64(&self.dir.join("memory.usage_in_bytes"))?;
        let limit = self.limit()?;
        let inactive = match read_text(&self.dir.join("memory.stat")) {
            Ok(stat) => {
                kv_get(&stat, "total_inactive_file").or_else(|| kv_get(&stat, "inactive_file"))
            }
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(e),
        };
        self.check_oom();
        let mut reading = cgroup_reading(
            limit,
            usage,
            inactive,
            &self.thresholds,
            PressureLevel::Normal,
        );
        reading.level = combine_levels(reading.level, self.latch.current(), limit.is_some())
            .max(self.oom_latch.current());
        Ok(reading)
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if !self.events.is_empty() {
            let result = self.wait_events(timeout);
            if let Err(e) = &result {
                tracing::warn!(error = %e, "pressure_level events failed; polling instead");
                self.events.clear();
            }
            return result;
        }
        std::thread::sleep(timeout);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PressureLevel::*;

    #[test]
    fn events_are_capped_while_the_working_set_is_low() {
        assert_eq!(combine_levels(Normal, Critical, true), Warning);
        assert_eq!(combine_levels(Warning, Critical, true), Critical);
        assert_eq!(combine_levels(Normal, Critical, false), Critical);
        assert_eq!(combine_levels(Critical, Normal, true), Critical);
        assert_eq!(combine_levels(Normal, Warning, true), Warning);
    }

    #[test]
    fn oom_control_parses() {
        let o = OomControl::parse("oom_kill_disable 0\nunder_oom 1\noom_kill 3\n");
        assert_eq!(
            o,
            OomControl {
                under_oom: true,
                oom_kill: 3
            }
        );
        assert_eq!(OomControl::parse(""), OomControl::default());
    }
}
