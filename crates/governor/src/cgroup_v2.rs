//! cgroup v2 memory source: `memory.max`, `memory.high`, `memory.current`,
//! `memory.stat`, `memory.events` and PSI triggers on `memory.pressure`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::level::EventLatch;
use crate::psi::{self, PsiTrigger, PsiTriggerSpec};
use crate::util::{cgroup_reading, format_bytes, kv_get, read_limit, read_text, read_u64};
use crate::{GovernorError, MemoryReading, MemorySource, PressureLevel, Thresholds};

/// How long a level raised by a kernel event is held before decaying.
pub(crate) const DEFAULT_EVENT_HOLD: Duration = Duration::from_secs(5);

/// Counters of a cgroup v2 `memory.events` file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CgroupV2Events {
    /// Times usage fell under `memory.low` protection while reclaimed.
    pub low: u64,
    /// Times usage went over `memory.high` (the cgroup was throttled).
    pub high: u64,
    /// Times usage was about to go over `memory.max` (direct reclaim).
    pub max: u64,
    /// Times the OOM killer was invoked in the cgroup.
    pub oom: u64,
    /// Processes killed by the OOM killer in the cgroup.
    pub oom_kill: u64,
}

impl CgroupV2Events {
    /// Parses a `memory.events` file; absent counters are 0.
    pub fn parse(text: &str) -> CgroupV2Events {
        let get = |k| kv_get(text, k).unwrap_or(0);
        CgroupV2Events {
            low: get("low"),
            high: get("high"),
            max: get("max"),
            oom: get("oom"),
            oom_kill: get("oom_kill"),
        }
    }
}

/// Memory source for a cgroup v2 directory (e.g. `/sys/fs/cgroup/user.slice/x`).
///
/// The limit is the smallest of `memory.max` and `memory.high` of this cgroup
/// and of its ancestors (see [`CgroupV2Source::with_ancestors`]). An increase of
/// the `oom`/`oom_kill` counters raises Critical; PSI triggers, when enabled,
/// raise their configured level. Event levels are held for 5 s by default.
#[derive(Debug)]
pub struct CgroupV2Source {
    dir: PathBuf,
    ancestors: Vec<PathBuf>,
    thresholds: Thresholds,
    psi: Vec<PsiTrigger>,
    psi_error: Option<String>,
    latch: EventLatch,
    last_events: Option<CgroupV2Events>,
}

impl CgroupV2Source {
    /// A source for the cgroup directory `dir`; fails with
    /// [`GovernorError::Missing`] when it has no `memory.current` (no memory controller).
    pub fn at(dir: impl Into<PathBuf>) -> Result<CgroupV2Source, GovernorError> {
        let dir = dir.into();
        let current = dir.join("memory.current");
        if !current.is_file() {
            return Err(GovernorError::Missing { path: current });
        }
        Ok(CgroupV2Source {
            dir,
            ancestors: Vec::new(),
            thresholds: Thresholds::default(),
            psi: Vec::new(),
            psi_error: None,
            latch: EventLatch::new(DEFAULT_EVENT_HOLD),
            last_events: None,
        })
    }

    /// Also honours the limits of every ancestor directory up to and including
    /// `mount_root` (the cgroup2 mount point).
    pub fn with_ancestors(mut self, mount_root: &Path) -> CgroupV2Source {
        self.ancestors = self
            .dir
            .ancestors()
            .skip(1)
            .take_while(|p| p.starts_with(mount_root))
            .map(Path::to_path_buf)
            .collect();
        self
    }

    /// Uses `thresholds` instead of the default 80 % / 92 %.
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> CgroupV2Source {
        self.thresholds = thresholds;
        self
    }

    /// Holds event-raised levels for `hold` instead of 5 s.
    pub fn with_event_hold(mut self, hold: Duration) -> CgroupV2Source {
        self.latch = EventLatch::new(hold);
        self
    }

    /// Registers PSI triggers on this cgroup's `memory.pressure`; on error the
    /// source keeps working, polled.
    pub fn enable_psi(&mut self, specs: &[PsiTriggerSpec]) -> Result<(), GovernorError> {
        match psi::register_all(&self.dir.join("memory.pressure"), specs) {
            Ok(triggers) => {
                self.psi = triggers;
                self.psi_error = None;
                Ok(())
            }
            Err(e) => {
                self.psi_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// True when PSI triggers are registered.
    pub fn psi_enabled(&self) -> bool {
        !self.psi.is_empty()
    }

    /// The cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The effective limit: min of `memory.max`/`memory.high` here and in ancestors.
    pub fn limit(&self) -> Result<Option<u64>, GovernorError> {
        let mut limit: Option<u64> = None;
        for (i, dir) in std::iter::once(&self.dir)
            .chain(&self.ancestors)
            .enumerate()
        {
            for file in ["memory.max", "memory.high"] {
                let value = match read_limit(&dir.join(file)) {
                    Ok(v) => v,
                    // Ancestors (the root) may lack the files; our own must be readable.
                    Err(e) if e.is_missing() && (i > 0 || file == "memory.high") => None,
                    Err(e) => return Err(e),
                };
                limit = match (limit, value) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        Ok(limit)
    }

    /// The `memory.events` counters.
    pub fn events(&self) -> Result<CgroupV2Events, GovernorError> {
        Ok(CgroupV2Events::parse(&read_text(
            &self.dir.join("memory.events"),
        )?))
    }

    fn check_events(&mut self) {
        let Ok(events) = self.events() else { return };
        if let Some(last) = self.last_events {
            if events.oom > last.oom || events.oom_kill > last.oom_kill {
                tracing::warn!(dir = %self.dir.display(), "OOM in cgroup");
                self.latch.raise(PressureLevel::Critical);
            }
        }
        self.last_events = Some(events);
    }
}

impl MemorySource for CgroupV2Source {
    fn name(&self) -> &'static str {
        "cgroup-v2"
    }

    fn describe(&self) -> String {
        let limit = match self.limit() {
            Ok(Some(l)) => format!("limit {}", format_bytes(l)),
            Ok(None) => "no limit".to_string(),
            Err(e) => format!("limit unreadable: {e}"),
        };
        let events = psi::events_text(&self.psi, self.psi_error.as_deref(), "");
        format!("cgroup v2 {} ({limit}, {events})", self.dir.display())
    }

    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        let usage = read_u64(&self.dir.join("memory.current"))?;
        let limit = self.limit()?;
        let inactive = match read_text(&self.dir.join("memory.stat")) {
            Ok(stat) => kv_get(&stat, "inactive_file"),
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(e),
        };
        self.check_events();
        Ok(cgroup_reading(
            limit,
            usage,
            inactive,
            &self.thresholds,
            self.latch.current(),
        ))
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        #[cfg(unix)]
        if !self.psi.is_empty() {
            return psi::wait_latched(&mut self.psi, &mut self.latch, timeout);
        }
        std::thread::sleep(timeout);
        Ok(None)
    }
}
