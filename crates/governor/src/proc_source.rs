//! `/proc` memory source: `/proc/meminfo` (MemTotal, MemAvailable) and
//! `/proc/self/status` (VmRSS), polled, optionally with a system-wide PSI trigger.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroup_v2::DEFAULT_EVENT_HOLD;
use crate::level::EventLatch;
use crate::psi::{self, PsiTrigger, PsiTriggerSpec};
use crate::util::{format_bytes, kb_field, read_text};
use crate::{GovernorError, MemoryReading, MemorySource, PressureLevel, Thresholds};

/// Memory source for the whole machine from `/proc`.
///
/// `limit` is MemTotal, `available` is MemAvailable (or MemFree + Buffers + Cached
/// on kernels without it), `usage` and `working_set` are MemTotal − available and
/// `rss` is this process's VmRSS.
#[derive(Debug)]
pub struct ProcSource {
    root: PathBuf,
    thresholds: Thresholds,
    psi: Vec<PsiTrigger>,
    psi_error: Option<String>,
    latch: EventLatch,
}

impl ProcSource {
    /// A source on the real `/proc`.
    pub fn new() -> ProcSource {
        ProcSource::at("/proc")
    }

    /// A source on a proc tree at `root` (tests use a fake directory).
    pub fn at(root: impl Into<PathBuf>) -> ProcSource {
        ProcSource {
            root: root.into(),
            thresholds: Thresholds::default(),
            psi: Vec::new(),
            psi_error: None,
            latch: EventLatch::new(DEFAULT_EVENT_HOLD),
        }
    }

    /// Uses `thresholds` instead of the default 80 % / 92 %.
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> ProcSource {
        self.thresholds = thresholds;
        self
    }

    /// Registers system-wide PSI triggers on `<root>/pressure/memory`.
    pub fn enable_psi(&mut self, specs: &[PsiTriggerSpec]) -> Result<(), GovernorError> {
        match psi::register_all(&self.root.join("pressure/memory"), specs) {
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

    /// The proc root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// MemTotal and the available bytes from `meminfo`.
    fn meminfo(&self) -> Result<(u64, u64), GovernorError> {
        let path = self.root.join("meminfo");
        let text = read_text(&path)?;
        let total = kb_field(&text, "MemTotal")
            .ok_or_else(|| GovernorError::parse(&path, "no MemTotal"))?;
        let available = kb_field(&text, "MemAvailable")
            .or_else(|| {
                let free = kb_field(&text, "MemFree")?;
                Some(free + kb_field(&text, "Buffers").unwrap_or(0) + kb_field(&text, "Cached")?)
            })
            .ok_or_else(|| GovernorError::parse(&path, "no MemAvailable nor MemFree/Cached"))?;
        Ok((total, available.min(total)))
    }
}

impl Default for ProcSource {
    fn default() -> Self {
        ProcSource::new()
    }
}

impl MemorySource for ProcSource {
    fn name(&self) -> &'static str {
        "proc"
    }

    fn describe(&self) -> String {
        let total = match self.meminfo() {
            Ok((total, _)) => format!("MemTotal {}", format_bytes(total)),
            Err(e) => format!("meminfo unreadable: {e}"),
        };
        let events = psi::events_text(&self.psi, self.psi_error.as_deref(), "system-wide ");
        format!("proc meminfo {} ({total}, {events})", self.root.display())
    }

    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        let (total, available) = self.meminfo()?;
        let used = total - available;
        let rss = match read_text(&self.root.join("self/status")) {
            Ok(status) => kb_field(&status, "VmRSS"),
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(e),
        };
        Ok(MemoryReading {
            limit: Some(total),
            usage: Some(used),
            working_set: Some(used),
            available: Some(available),
            rss,
            level: self
                .thresholds
                .level(Some(used), Some(total))
                .max(self.latch.current()),
        })
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
