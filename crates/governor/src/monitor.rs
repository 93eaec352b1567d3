//! The background monitor: one thread per source waiting on its events (or
//! polling), one aggregator combining them (the max level wins) and publishing
//! level changes through a callback or a channel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{GovernorError, MemoryReading, MemorySource, PressureLevel};

/// How the monitor runs.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitorConfig {
    /// Read interval of every source; also the longest a source waits for an
    /// event, and so the latency of stopping (default 250 ms).
    pub interval: Duration,
    /// A lower combined level is published only after holding this long, so the
    /// level does not flap (default 1 s). Raises are published at once.
    pub settle: Duration,
    /// Hysteresis: a lower level is published only once the working set is also this
    /// fraction of the limit below where it was when the level rose (default 0.05: 6 MiB
    /// under a 125 MiB limit). Usage that wavers around a threshold keeps the higher level;
    /// levels from kernel events without a fraction fall by `settle` alone.
    pub margin: f64,
    /// Also publish every reading as [`MonitorEvent::Reading`] (default false).
    pub publish_readings: bool,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            interval: Duration::from_millis(250),
            settle: Duration::from_secs(1),
            margin: 0.05,
            publish_readings: false,
        }
    }
}

/// What the monitor publishes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum MonitorEvent {
    /// The combined level changed.
    LevelChanged {
        /// The new combined level.
        level: PressureLevel,
        /// The level before.
        previous: PressureLevel,
        /// The source with the highest level (the one that caused a raise).
        source: &'static str,
        /// That source's latest reading.
        reading: MemoryReading,
    },
    /// A reading (only with [`MonitorConfig::publish_readings`]).
    Reading {
        /// The source.
        source: &'static str,
        /// Its reading.
        reading: MemoryReading,
        /// The combined level after it.
        level: PressureLevel,
    },
    /// A source failed to read or wait (published once per distinct error).
    SourceError {
        /// The source.
        source: &'static str,
        /// The error text.
        error: String,
    },
}

enum Update {
    Reading(usize, MemoryReading),
    Error(usize, String),
}

#[derive(Debug, Default)]
struct Shared {
    level: PressureLevel,
    readings: Vec<(&'static str, Option<MemoryReading>)>,
}

/// Runs memory sources in the background. Dropping it stops and joins its threads.
#[derive(Debug)]
pub struct Monitor {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    aggregator: Option<JoinHandle<()>>,
    shared: Arc<Mutex<Shared>>,
}

impl Monitor {
    /// Starts monitoring `sources`, calling `callback` (on the aggregator thread)
    /// for every event. Keep the callback short.
    pub fn spawn(
        sources: Vec<Box<dyn MemorySource>>,
        config: MonitorConfig,
        callback: impl FnMut(MonitorEvent) + Send + 'static,
    ) -> Result<Monitor, GovernorError> {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(Shared {
            level: PressureLevel::Normal,
            readings: sources.iter().map(|s| (s.name(), None)).collect(),
        }));
        let (tx, rx) = mpsc::channel();
        let mut monitor = Monitor {
            stop: stop.clone(),
            threads: Vec::new(),
            aggregator: None,
            shared: shared.clone(),
        };
        for (index, source) in sources.into_iter().enumerate() {
            let (stop, tx, interval) = (stop.clone(), tx.clone(), config.interval);
            let handle = std::thread::Builder::new()
                .name(format!("statelm-mem-{}", source.name()))
                .spawn(move || run_source(index, source, &stop, &tx, interval))
                .map_err(|e| GovernorError::event("spawn monitor thread", e))?;
            monitor.threads.push(handle);
        }
        drop(tx);
        let handle = std::thread::Builder::new()
            .name("statelm-mem-monitor".into())
            .spawn(move || aggregate(rx, &shared, &config, callback))
            .map_err(|e| GovernorError::event("spawn monitor thread", e))?;
        monitor.aggregator = Some(handle);
        Ok(monitor)
    }

    /// Starts monitoring and returns a channel of events.
    pub fn with_channel(
        sources: Vec<Box<dyn MemorySource>>,
        config: MonitorConfig,
    ) -> Result<(Monitor, Receiver<MonitorEvent>), GovernorError> {
        let (tx, rx) = mpsc::channel();
        let monitor = Monitor::spawn(sources, config, move |event| {
            let _ = tx.send(event);
        })?;
        Ok((monitor, rx))
    }

    /// The combined level last published.
    pub fn level(&self) -> PressureLevel {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .level
    }

    /// The latest reading of each source that has produced one.
    pub fn readings(&self) -> Vec<(&'static str, MemoryReading)> {
        let shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared
            .readings
            .iter()
            .filter_map(|(name, r)| Some((*name, r.clone()?)))
            .collect()
    }

    /// Stops the threads and waits for them (what dropping does).
    pub fn stop(self) {}
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
        if let Some(handle) = self.aggregator.take() {
            let _ = handle.join();
        }
    }
}

/// One source's loop: read, then wait for an event or the interval.
fn run_source(
    index: usize,
    mut source: Box<dyn MemorySource>,
    stop: &AtomicBool,
    tx: &Sender<Update>,
    interval: Duration,
) {
    let mut last_error: Option<String> = None;
    let mut report = |result: Result<Option<MemoryReading>, GovernorError>| {
        let update = match result {
            Ok(Some(reading)) => {
                last_error = None;
                Update::Reading(index, reading)
            }
            Ok(None) => return true,
            Err(e) => {
                let text = e.to_string();
                if last_error.as_ref() == Some(&text) {
                    return true;
                }
                last_error = Some(text.clone());
                Update::Error(index, text)
            }
        };
        tx.send(update).is_ok()
    };
    while !stop.load(Ordering::SeqCst) {
        if !report(source.read().map(Some)) || stop.load(Ordering::SeqCst) {
            break;
        }
        if let Err(e) = source.wait(interval) {
            if !report(Err(e)) {
                break;
            }
            // Never spin on a failing wait.
            std::thread::sleep(interval);
        }
    }
}

/// When a combined level is published: a rise at once; a fall once the level has stayed lower
/// for [`MonitorConfig::settle`] with the working set [`MonitorConfig::margin`] below where it
/// was when the level being left was entered.
#[derive(Default)]
struct Hysteresis {
    /// Since when the combined level has been lower than the published one, and clear.
    lower_since: Option<Instant>,
    /// The working set's fraction of the limit when the published level rose into Warning
    /// and into Critical (index 1 and 2).
    rose_at: [Option<f64>; 3],
}

impl Hysteresis {
    /// Whether `combined` is to be published over `published`, with the working set at
    /// `now` (a fraction of the limit, if known).
    fn publish(
        &mut self,
        combined: PressureLevel,
        published: PressureLevel,
        now: Option<f64>,
        config: &MonitorConfig,
    ) -> bool {
        let publish = match combined.cmp(&published) {
            std::cmp::Ordering::Greater => {
                (rank(published) + 1..=rank(combined)).for_each(|l| self.rose_at[l] = now);
                true
            }
            std::cmp::Ordering::Less => {
                let clear = match (self.rose_at[rank(combined) + 1], now) {
                    (Some(rose), Some(now)) => now <= rose - config.margin,
                    _ => true,
                };
                if clear {
                    let since = self.lower_since.get_or_insert_with(Instant::now);
                    since.elapsed() >= config.settle
                } else {
                    self.lower_since = None;
                    false
                }
            }
            std::cmp::Ordering::Equal => {
                self.lower_since = None;
                false
            }
        };
        if publish {
            self.lower_since = None;
            (rank(combined) + 1..3).for_each(|l| self.rose_at[l] = None);
        }
        publish
    }
}

/// 0, 1, 2 for Normal, Warning, Critical.
fn rank(level: PressureLevel) -> usize {
    match level {
        PressureLevel::Normal => 0,
        PressureLevel::Warning => 1,
        PressureLevel::Critical => 2,
    }
}

/// The working set's fraction of the limit in `reading`, when it has both.
fn fraction(reading: &MemoryReading) -> Option<f64> {
    let used = reading.working_set.or(reading.usage)?;
    let limit = reading.limit.filter(|&l| l > 0)?;
    Some(used as f64 / limit as f64)
}

/// Combines levels, applies the settle delay and the margin, and calls the callback.
fn aggregate(
    rx: Receiver<Update>,
    shared: &Mutex<Shared>,
    config: &MonitorConfig,
    mut callback: impl FnMut(MonitorEvent),
) {
    let names: Vec<&'static str> = {
        let s = shared.lock().unwrap_or_else(PoisonError::into_inner);
        s.readings.iter().map(|(n, _)| *n).collect()
    };
    let mut levels = vec![PressureLevel::Normal; names.len()];
    let mut fractions: Vec<Option<f64>> = vec![None; names.len()];
    let mut hysteresis = Hysteresis::default();
    let tick = config
        .settle
        .min(config.interval)
        .max(Duration::from_millis(10));
    loop {
        match rx.recv_timeout(tick) {
            Ok(Update::Reading(i, reading)) => {
                levels[i] = reading.level;
                fractions[i] = fraction(&reading);
                let combined = levels.iter().copied().max().unwrap_or_default();
                let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
                s.readings[i].1 = Some(reading.clone());
                drop(s);
                if config.publish_readings {
                    let source = names[i];
                    callback(MonitorEvent::Reading {
                        source,
                        reading,
                        level: combined,
                    });
                }
            }
            Ok(Update::Error(i, error)) => {
                callback(MonitorEvent::SourceError {
                    source: names[i],
                    error,
                });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let combined = levels.iter().copied().max().unwrap_or_default();
        let published = shared.lock().unwrap_or_else(PoisonError::into_inner).level;
        let now = fractions.iter().flatten().copied().reduce(f64::max);
        if hysteresis.publish(combined, published, now, config) {
            let i = levels.iter().position(|l| *l == combined).unwrap_or(0);
            let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
            s.level = combined;
            let reading = s.readings[i].1.clone().unwrap_or_default();
            drop(s);
            callback(MonitorEvent::LevelChanged {
                level: combined,
                previous: published,
                source: names[i],
                reading,
            });
        }
    }
}
