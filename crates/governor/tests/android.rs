//! The Android path: since API 34 a foreground app no longer hears
//! `onTrimMemory(RUNNING_LOW/CRITICAL)`, and apps can usually read neither PSI nor their memory
//! cgroup. statelm must then watch `/proc/meminfo` (MemAvailable) and `/proc/self/status`
//! (VmRSS) on its own, polled, with no host code. Checked on fake proc trees.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use statelm_governor::{detect_at, Monitor, MonitorConfig, MonitorEvent, PressureLevel};

const MIB: u64 = 1 << 20;

/// Writes a file the way the kernel presents one: whole, never half-written (a temporary
/// sibling renamed into place), so a monitor polling it never reads a truncated file.
fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(tmp, path).unwrap();
}

/// A phone with 8 GiB of RAM, `available_mib` of it available, and statelm's own RSS.
fn meminfo(dir: &Path, available_mib: u64) {
    let text = format!(
        "MemTotal:        8388608 kB\nMemFree:          102400 kB\n\
         MemAvailable:   {} kB\nCached:          1048576 kB\n",
        available_mib * 1024
    );
    write(dir, "meminfo", &text);
}

/// What an Android app sees: meminfo and its own status readable; its cgroup named in
/// `self/cgroup` but the cgroup files out of reach; `pressure/memory` absent or not pollable.
fn android_proc(with_psi_file: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    meminfo(d, 4096);
    write(
        d,
        "self/status",
        "Name:\tcom.example.chat\nVmRSS:\t  409600 kB\n",
    );
    write(d, "self/cgroup", "0::/uid_10123/pid_4242\n");
    let mountinfo = format!(
        "30 20 0:26 / {}/no-such-cgroup-mount rw - cgroup2 none rw\n",
        d.display()
    );
    write(d, "self/mountinfo", &mountinfo);
    if with_psi_file {
        // Present but refused, as SELinux refuses apps (a directory: even root cannot open it
        // for writing, so registering a trigger fails).
        fs::create_dir_all(d.join("pressure/memory")).unwrap();
    }
    dir
}

#[test]
fn detect_picks_a_polled_proc_source_without_psi_or_cgroup() {
    for with_psi_file in [false, true] {
        let dir = android_proc(with_psi_file);
        let mut sources = detect_at(dir.path());
        assert_eq!(sources.len(), 1, "with_psi_file {with_psi_file}");
        let source = &mut sources[0];
        assert_eq!(source.name(), "proc");
        let describe = source.describe();
        assert!(describe.contains("polled"), "{describe}");
        let r = source.read().unwrap();
        assert_eq!(r.limit, Some(8192 * MIB));
        assert_eq!(r.available, Some(4096 * MIB));
        assert_eq!(r.rss, Some(400 * MIB));
        assert_eq!(r.level, PressureLevel::Normal);
        // MemAvailable falls: 87.5 % used is Warning, 95 % Critical.
        meminfo(dir.path(), 1024);
        assert_eq!(source.read().unwrap().level, PressureLevel::Warning);
        meminfo(dir.path(), 410);
        assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
        // A polled source's wait just sleeps: no busy loop, no event.
        let start = Instant::now();
        assert_eq!(source.wait(Duration::from_millis(30)).unwrap(), None);
        assert!(start.elapsed() >= Duration::from_millis(25));
    }
}

#[test]
fn nothing_readable_means_no_source() {
    let dir = tempfile::tempdir().unwrap();
    assert!(detect_at(dir.path()).is_empty());
}

#[test]
fn monitor_on_the_detected_sources_follows_memavailable() {
    let dir = android_proc(false);
    let config = MonitorConfig {
        interval: Duration::from_millis(20),
        settle: Duration::from_millis(40),
        ..MonitorConfig::default()
    };
    let (monitor, events) = Monitor::with_channel(detect_at(dir.path()), config).unwrap();
    let next_level = |want: PressureLevel| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(MonitorEvent::LevelChanged { level, source, .. }) if level == want => {
                    assert_eq!(source, "proc");
                    return;
                }
                Ok(MonitorEvent::SourceError { error, .. }) => panic!("source error: {error}"),
                _ => {}
            }
        }
        panic!("no change to {want} within 10 s");
    };
    meminfo(dir.path(), 1024);
    next_level(PressureLevel::Warning);
    meminfo(dir.path(), 300);
    next_level(PressureLevel::Critical);
    meminfo(dir.path(), 6000);
    next_level(PressureLevel::Normal);
    assert_eq!(monitor.level(), PressureLevel::Normal);
    let readings = monitor.readings();
    assert_eq!(readings.len(), 1);
    assert_eq!(readings[0].1.rss, Some(400 * MIB));
}
