//! Pressure stall information (PSI) triggers: `echo "some 150000 1000000" > memory.pressure`
//! on an open descriptor, then `poll(2)` for `POLLPRI`.
//!
//! See the kernel's Documentation/accounting/psi.rst. The descriptor must stay
//! open for the trigger to live; one trigger per open file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{GovernorError, PressureLevel};

/// Which PSI line a trigger watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PsiKind {
    /// Some tasks stalled on memory.
    Some,
    /// All non-idle tasks stalled on memory at once.
    Full,
}

/// One PSI trigger: fire when tasks stall at least `stall` within any `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PsiTriggerSpec {
    /// `some` or `full`.
    pub kind: PsiKind,
    /// Stall time threshold within the window.
    pub stall: Duration,
    /// Tracking window (kernel: 500 ms ..= 10 s; unprivileged: a multiple of 2 s).
    pub window: Duration,
    /// The level an event of this trigger maps to.
    pub level: PressureLevel,
}

impl PsiTriggerSpec {
    /// The default pair, in the spirit of Android's lmkd: `some 150ms/1s` → Warning,
    /// `full 100ms/1s` → Critical.
    pub fn defaults() -> Vec<PsiTriggerSpec> {
        vec![
            PsiTriggerSpec {
                kind: PsiKind::Some,
                stall: Duration::from_millis(150),
                window: Duration::from_secs(1),
                level: PressureLevel::Warning,
            },
            PsiTriggerSpec {
                kind: PsiKind::Full,
                stall: Duration::from_millis(100),
                window: Duration::from_secs(1),
                level: PressureLevel::Critical,
            },
        ]
    }

    /// The text written to the pressure file, without the terminating NUL.
    pub fn to_trigger_string(&self) -> String {
        let kind = match self.kind {
            PsiKind::Some => "some",
            PsiKind::Full => "full",
        };
        format!(
            "{kind} {} {}",
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }

    /// The same ratio over a 2 s window (what unprivileged processes may use).
    fn unprivileged(&self) -> PsiTriggerSpec {
        let scale = 2_000_000.0 / self.window.as_micros().max(1) as f64;
        PsiTriggerSpec {
            stall: Duration::from_micros((self.stall.as_micros() as f64 * scale) as u64),
            window: Duration::from_secs(2),
            ..*self
        }
    }
}

/// A live PSI trigger on a pressure file (`/proc/pressure/memory` or a cgroup v2
/// `memory.pressure`).
#[derive(Debug)]
pub struct PsiTrigger {
    file: File,
    path: PathBuf,
    spec: PsiTriggerSpec,
}

impl PsiTrigger {
    /// Opens `path` read-write and registers `spec`. If the kernel refuses the
    /// window (processes without CAP_SYS_RESOURCE need a multiple of 2 s),
    /// retries with the same stall ratio over 2 s; [`PsiTrigger::spec`] tells.
    pub fn new(path: &Path, spec: PsiTriggerSpec) -> Result<PsiTrigger, GovernorError> {
        match Self::register(path, spec) {
            // Without CAP_SYS_RESOURCE the window must be a multiple of 2 s
            // (Linux >= 6.5 answers EINVAL; some kernels EPERM).
            Err(GovernorError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidInput
                ) && !spec.window.as_micros().is_multiple_of(2_000_000) =>
            {
                Self::register(path, spec.unprivileged())
            }
            other => other,
        }
    }

    fn register(path: &Path, spec: PsiTriggerSpec) -> Result<PsiTrigger, GovernorError> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| GovernorError::io(path, e))?;
        // The kernel replaces the last byte written with NUL: send it ourselves,
        // in a single write(2).
        let mut text = spec.to_trigger_string().into_bytes();
        text.push(0);
        let written = file.write(&text).map_err(|e| GovernorError::io(path, e))?;
        if written != text.len() {
            return Err(GovernorError::parse(path, "short write of PSI trigger"));
        }
        Ok(PsiTrigger {
            file,
            path: path.to_path_buf(),
            spec,
        })
    }

    /// The trigger as registered (the window may have been widened to 2 s).
    pub fn spec(&self) -> PsiTriggerSpec {
        self.spec
    }

    /// The pressure file this trigger lives on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Blocks up to `timeout` for an event; true if the trigger fired.
    #[cfg(unix)]
    pub fn wait(&self, timeout: Duration) -> Result<bool, GovernorError> {
        Ok(wait_any(std::slice::from_ref(self), timeout)?.is_some())
    }
}

/// Waits on several triggers at once; returns the highest level that fired.
#[cfg(unix)]
pub(crate) fn wait_any(
    triggers: &[PsiTrigger],
    timeout: Duration,
) -> Result<Option<PressureLevel>, GovernorError> {
    use std::os::fd::AsFd;
    let fds: Vec<_> = triggers
        .iter()
        .map(|t| (t.file.as_fd(), rustix::event::PollFlags::PRI))
        .collect();
    let ready = crate::util::poll_ready(&fds, timeout)?;
    Ok(triggers
        .iter()
        .zip(ready)
        .filter(|(_, r)| *r)
        .map(|(t, _)| t.spec.level)
        .max())
}

/// Waits on `triggers`, raising `latch` on an event. On a descriptor error the
/// triggers are dropped (the caller falls back to polling) and the error returned.
#[cfg(unix)]
pub(crate) fn wait_latched(
    triggers: &mut Vec<PsiTrigger>,
    latch: &mut crate::level::EventLatch,
    timeout: Duration,
) -> Result<Option<PressureLevel>, GovernorError> {
    match wait_any(triggers, timeout) {
        Ok(level) => {
            if let Some(level) = level {
                latch.raise(level);
            }
            Ok(level)
        }
        Err(e) => {
            tracing::warn!(error = %e, "PSI trigger failed; falling back to polling");
            triggers.clear();
            Err(e)
        }
    }
}

/// Registers every spec on `path`; returns the triggers or the first error.
pub(crate) fn register_all(
    path: &Path,
    specs: &[PsiTriggerSpec],
) -> Result<Vec<PsiTrigger>, GovernorError> {
    specs.iter().map(|s| PsiTrigger::new(path, *s)).collect()
}

/// Short text for descriptions: `"PSI some 150ms/1000ms, full 100ms/1000ms"`.
pub(crate) fn describe(triggers: &[PsiTrigger]) -> String {
    let parts: Vec<String> = triggers
        .iter()
        .map(|t| {
            let s = t.spec;
            let kind = if s.kind == PsiKind::Some {
                "some"
            } else {
                "full"
            };
            format!(
                "{kind} {}ms/{}ms",
                s.stall.as_millis(),
                s.window.as_millis()
            )
        })
        .collect();
    format!("PSI {}", parts.join(", "))
}

/// "polled", "polled; PSI unavailable: …" or `prefix` + [`describe`].
pub(crate) fn events_text(triggers: &[PsiTrigger], error: Option<&str>, prefix: &str) -> String {
    match (triggers.is_empty(), error) {
        (false, _) => format!("{prefix}{}", describe(triggers)),
        (true, Some(e)) => format!("polled; PSI unavailable: {e}"),
        (true, None) => "polled".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_strings() {
        let d = PsiTriggerSpec::defaults();
        assert_eq!(d[0].to_trigger_string(), "some 150000 1000000");
        assert_eq!(d[1].to_trigger_string(), "full 100000 1000000");
        let u = d[0].unprivileged();
        assert_eq!(u.to_trigger_string(), "some 300000 2000000");
    }

    #[test]
    fn missing_pressure_file_is_typed() {
        let dir = tempfile::tempdir().unwrap();
        let err = PsiTrigger::new(
            &dir.path().join("memory.pressure"),
            PsiTriggerSpec::defaults()[0],
        )
        .unwrap_err();
        assert!(err.is_missing(), "{err}");
    }
}
