//! The background monitor: combining sources, publishing changes, stopping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use statelm_governor::{
    GovernorError, HostSignal, MemoryReading, MemorySource, Monitor, MonitorConfig, MonitorEvent,
    PressureLevel,
};

fn fast() -> MonitorConfig {
    MonitorConfig {
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(100),
        publish_readings: false,
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
