//! Host-injected pressure: the app forwards the platform's warnings (iOS
//! `didReceiveMemoryWarning`, Android `onTrimMemory`) through a [`HostSignal`];
//! [`install_sigusr1`] maps SIGUSR1 → Warning and SIGUSR2 → Critical on a [`HostSignal`];
//! [`forward_signals`] hands the same levels to any callback (the engine's `memory_warning`,
//! so the CLI and the server follow the rule of the C ABI: hold, lapse, escalate).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{GovernorError, MemoryReading, MemorySource, PressureLevel};

/// How long a raised host level holds before it lapses to Normal unless raised again (iOS
/// never says that pressure is over): the default of every holder — [`HostSource`] and the
/// engine's `pressure_hold`.
pub const DEFAULT_PRESSURE_HOLD: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct HostState {
    level: PressureLevel,
    raised_at: Option<Instant>,
    generation: u64,
}

/// A cloneable handle through which the app host reports memory warnings.
///
/// All clones share one state; every [`HostSource`] made from it sees each raise.
#[derive(Clone, Debug, Default)]
pub struct HostSignal {
    inner: Arc<(Mutex<HostState>, Condvar)>,
}

impl HostSignal {
    /// A new signal at Normal.
    pub fn new() -> HostSignal {
        HostSignal::default()
    }

    /// Reports `level` (e.g. Warning for `didReceiveMemoryWarning`, Critical for
    /// `TRIM_MEMORY_RUNNING_CRITICAL`); `Normal` clears an earlier warning.
    pub fn raise(&self, level: PressureLevel) {
        let (lock, cvar) = &*self.inner;
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        state.level = level;
        state.raised_at = (level != PressureLevel::Normal).then(Instant::now);
        state.generation += 1;
        cvar.notify_all();
    }

    /// The last raised level and when it was raised.
    fn snapshot(&self) -> (PressureLevel, Option<Instant>, u64) {
        let state = self.inner.0.lock().unwrap_or_else(PoisonError::into_inner);
        (state.level, state.raised_at, state.generation)
    }

    /// A [`MemorySource`] reporting this signal's level.
    pub fn source(&self) -> HostSource {
        HostSource::new(self.clone())
    }
}

/// The [`MemorySource`] side of a [`HostSignal`]: its level is the last raised
/// level for [`DEFAULT_PRESSURE_HOLD`] (configurable), then Normal; `wait` wakes on each raise.
#[derive(Debug)]
pub struct HostSource {
    signal: HostSignal,
    seen: u64,
    hold: Duration,
}

impl HostSource {
    /// A source on `signal`.
    pub fn new(signal: HostSignal) -> HostSource {
        let seen = signal.snapshot().2;
        HostSource {
            signal,
            seen,
            hold: DEFAULT_PRESSURE_HOLD,
        }
    }

    /// Holds a raised level for `hold` instead of [`DEFAULT_PRESSURE_HOLD`].
    pub fn with_hold(mut self, hold: Duration) -> HostSource {
        self.hold = hold;
        self
    }

    fn current(&self) -> PressureLevel {
        match self.signal.snapshot() {
            (level, Some(at), _) if at.elapsed() < self.hold => level,
            _ => PressureLevel::Normal,
        }
    }
}

impl MemorySource for HostSource {
    fn name(&self) -> &'static str {
        "host"
    }

    fn describe(&self) -> String {
        "host-injected warnings (memory_warning / SIGUSR1, SIGUSR2)".to_string()
    }

    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        Ok(MemoryReading {
            level: self.current(),
            ..MemoryReading::default()
        })
    }

    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        let (lock, cvar) = &*self.signal.inner;
        let state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = self.seen;
        let (state, _) = cvar
            .wait_timeout_while(state, timeout, |s| s.generation == seen)
            .unwrap_or_else(PoisonError::into_inner);
        if state.generation == seen {
            return Ok(None);
        }
        self.seen = state.generation;
        Ok(Some(state.level))
    }
}

/// Forwards SIGUSR1/SIGUSR2 to a [`HostSignal`] until dropped.
///
/// Dropping it stops the forwarding thread; the signals then stay caught (and
/// ignored) rather than reverting to their default action of terminating.
#[derive(Debug)]
pub struct SignalForwarder {
    #[cfg(unix)]
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Installs handlers so that SIGUSR1 raises Warning and SIGUSR2 raises Critical
/// on `signal` (e.g. `kill -USR2 <pid>` to test an app's critical path).
pub fn install_sigusr1(signal: HostSignal) -> Result<SignalForwarder, GovernorError> {
    forward_signals(move |level| signal.raise(level))
}

/// Installs handlers so that SIGUSR1 calls `on_level(Warning)` and SIGUSR2
/// `on_level(Critical)`, on a thread of its own, until the forwarder is dropped.
#[cfg(unix)]
pub fn forward_signals(
    on_level: impl Fn(PressureLevel) + Send + 'static,
) -> Result<SignalForwarder, GovernorError> {
    use signal_hook::consts::{SIGUSR1, SIGUSR2};
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGUSR2])
        .map_err(|e| GovernorError::event("install SIGUSR1/SIGUSR2 handlers", e))?;
    let handle = signals.handle();
    let thread = std::thread::Builder::new()
        .name("statelm-sigusr".into())
        .spawn(move || {
            for sig in signals.forever() {
                let level = if sig == SIGUSR2 {
                    PressureLevel::Critical
                } else {
                    PressureLevel::Warning
                };
                tracing::info!(signal = sig, %level, "host memory signal");
                on_level(level);
            }
        })
        .map_err(|e| GovernorError::event("spawn signal thread", e))?;
    Ok(SignalForwarder {
        handle,
        thread: Some(thread),
    })
}

/// Signals are not available on this platform.
#[cfg(not(unix))]
pub fn forward_signals(
    _on_level: impl Fn(PressureLevel) + Send + 'static,
) -> Result<SignalForwarder, GovernorError> {
    Err(GovernorError::Unsupported("SIGUSR1 needs unix".into()))
}

impl Drop for SignalForwarder {
    fn drop(&mut self) {
        #[cfg(unix)]
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_wakes_wait_and_holds() {
        let signal = HostSignal::new();
        let mut source = signal.source().with_hold(Duration::from_millis(200));
        assert_eq!(source.read().unwrap().level, PressureLevel::Normal);
        assert_eq!(source.wait(Duration::from_millis(5)).unwrap(), None);
        let s2 = signal.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.raise(PressureLevel::Critical);
        });
        let start = Instant::now();
        let got = source.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(got, Some(PressureLevel::Critical));
        assert!(start.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
        assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(source.read().unwrap().level, PressureLevel::Normal);
        signal.raise(PressureLevel::Warning);
        signal.raise(PressureLevel::Normal);
        assert_eq!(source.read().unwrap().level, PressureLevel::Normal);
    }
}
