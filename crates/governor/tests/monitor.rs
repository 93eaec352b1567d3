//! The background monitor: combining sources, publishing changes, stopping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use statelm_governor::{
    GovernorError, HostSignal, MemoryReading, MemorySource, Monitor, MonitorConfig, MonitorEvent,
    PressureLevel,
};

fn fast() -> MonitorConfig {
    MonitorConfig {
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(100),
        ..MonitorConfig::default()
    }
}

fn next_change(rx: &std::sync::mpsc::Receiver<MonitorEvent>) -> (PressureLevel, &'static str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left).expect("no level change within 5 s") {
            MonitorEvent::LevelChanged { level, source, .. } => return (level, source),
            _ => continue,
        }
    }
}

#[test]
fn host_warnings_flow_through_and_decay() {
    let signal = HostSignal::new();
    let source = signal.source().with_hold(Duration::from_millis(200));
    let (monitor, rx) = Monitor::with_channel(vec![Box::new(source)], fast()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(monitor.level(), PressureLevel::Normal);
    let raised = Instant::now();
    signal.raise(PressureLevel::Critical);
    assert_eq!(next_change(&rx), (PressureLevel::Critical, "host"));
    assert!(raised.elapsed() < Duration::from_secs(3));
    assert_eq!(monitor.level(), PressureLevel::Critical);
    // Hold 200 ms, then settle 100 ms before Normal is published.
    assert_eq!(next_change(&rx).0, PressureLevel::Normal);
    assert!(raised.elapsed() >= Duration::from_millis(290));
}

#[test]
fn the_highest_source_wins() {
    let (a, b) = (HostSignal::new(), HostSignal::new());
    let sources: Vec<Box<dyn MemorySource>> = vec![
        Box::new(a.source().with_hold(Duration::from_secs(60))),
        Box::new(b.source().with_hold(Duration::from_secs(60))),
    ];
    let (monitor, rx) = Monitor::with_channel(sources, fast()).unwrap();
    a.raise(PressureLevel::Warning);
    assert_eq!(next_change(&rx).0, PressureLevel::Warning);
    b.raise(PressureLevel::Critical);
    assert_eq!(next_change(&rx).0, PressureLevel::Critical);
    a.raise(PressureLevel::Normal);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(monitor.level(), PressureLevel::Critical, "b still critical");
    b.raise(PressureLevel::Normal);
    assert_eq!(next_change(&rx).0, PressureLevel::Normal);
    assert_eq!(monitor.readings().len(), 2);
}

/// A source that counts its calls and fails every read.
struct Broken(Arc<AtomicUsize>);

impl MemorySource for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(GovernorError::Unsupported("always broken".into()))
    }
    fn wait(&mut self, _timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        Err(GovernorError::Unsupported("no events".into()))
    }
}

#[test]
fn failing_sources_report_once_and_do_not_spin() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (monitor, rx) =
        Monitor::with_channel(vec![Box::new(Broken(calls.clone()))], fast()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(monitor);
    let reads = calls.load(Ordering::SeqCst);
    assert!(
        (1..=30).contains(&reads),
        "{reads} reads in 300 ms at 20 ms interval"
    );
    let errors: Vec<_> = rx.try_iter().collect();
    // The read error and the wait error alternate, so each transition is reported,
    // but never more than once per loop.
    assert!(
        !errors.is_empty() && errors.len() <= 2 * reads,
        "{errors:?}"
    );
    assert!(errors.iter().all(|e| matches!(
        e,
        MonitorEvent::SourceError {
            source: "broken",
            ..
        }
    )));
}

#[test]
fn drop_stops_promptly() {
    let signal = HostSignal::new();
    let config = MonitorConfig {
        interval: Duration::from_millis(100),
        ..MonitorConfig::default()
    };
    let monitor = Monitor::spawn(vec![Box::new(signal.source())], config, |_| {}).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let start = Instant::now();
    monitor.stop();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn readings_can_be_published() {
    let signal = HostSignal::new();
    let config = MonitorConfig {
        publish_readings: true,
        ..fast()
    };
    let (_monitor, rx) = Monitor::with_channel(vec![Box::new(signal.source())], config).unwrap();
    let event = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        matches!(event, MonitorEvent::Reading { source: "host", .. }),
        "{event:?}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn detected_sources_run_in_a_monitor() {
    let sources = statelm_governor::detect();
    let names: Vec<_> = sources.iter().map(|s| s.name()).collect();
    let (monitor, _rx) = Monitor::with_channel(sources, fast()).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let readings = monitor.readings();
    assert_eq!(readings.len(), names.len(), "{readings:?}");
    for (name, r) in readings {
        println!("{name}: {r:?}");
        assert!(r.usage.is_some());
    }
}

/// A working set that follows a script of fractions of a 100 MiB limit, one step a read,
/// its level from the default thresholds (Warning at 80 %).
struct Scripted {
    steps: Arc<Mutex<std::collections::VecDeque<f64>>>,
    last: f64,
}

impl MemorySource for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        if let Some(f) = self.steps.lock().unwrap().pop_front() {
            self.last = f;
        }
        let limit = 100 << 20;
        let used = (self.last * limit as f64) as u64;
        Ok(MemoryReading {
            limit: Some(limit),
            usage: Some(used),
            working_set: Some(used),
            available: Some(limit - used),
            rss: None,
            level: statelm_governor::Thresholds::default().level(Some(used), Some(limit)),
        })
    }
    fn wait(&mut self, timeout: Duration) -> Result<Option<PressureLevel>, GovernorError> {
        std::thread::sleep(timeout);
        Ok(None)
    }
}

/// Counts the Warning -> Normal transitions while the working set follows `script`, one step
/// each 20 ms, with a hold of 100 ms and `margin`.
fn falls_along(script: Vec<f64>, margin: f64) -> usize {
    let config = MonitorConfig {
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(100),
        margin,
        ..MonitorConfig::default()
    };
    let n = script.len();
    let steps = Arc::new(Mutex::new(script.into_iter().collect()));
    let source = Scripted {
        steps: steps.clone(),
        last: 0.0,
    };
    let (_monitor, rx) = Monitor::with_channel(vec![Box::new(source)], config).unwrap();
    let deadline = Instant::now() + Duration::from_millis(20 * n as u64 + 400);
    let mut falls = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if let Ok(MonitorEvent::LevelChanged {
            level: PressureLevel::Normal,
            previous: PressureLevel::Warning,
            ..
        }) = rx.recv_timeout(left)
        {
            falls += 1;
        }
    }
    falls
}

/// Usage wavering around the Warning threshold (81 % for 200 ms, then 78 % for 200 ms, longer
/// than the hold) kept the level flipping each time it dipped; within the margin it now stays
/// Warning, and it falls once when usage truly drops.
#[test]
fn a_level_wavering_within_the_margin_does_not_flap() {
    let mut wave = Vec::new();
    for _ in 0..6 {
        wave.extend([0.81; 10]);
        wave.extend([0.78; 10]);
    }
    let flapping = falls_along(wave.clone(), 0.0);
    assert!(flapping >= 3, "the control flaps: {flapping} falls");
    assert_eq!(falls_along(wave.clone(), 0.05), 0, "within the margin");
    wave.extend([0.50; 15]);
    assert_eq!(falls_along(wave, 0.05), 1, "one fall once usage drops");
}
