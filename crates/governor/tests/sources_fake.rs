//! Each source against fake kernel files in a temporary directory.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use statelm_governor::{
    CgroupV1Source, CgroupV2Events, CgroupV2Source, GovernorError, MemorySource, PressureLevel,
    ProcSource, Thresholds,
};

const MIB: u64 = 1 << 20;
const V1_UNLIMITED: &str = "9223372036854771712\n";

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn v2_dir(max: &str, current: u64, inactive_file: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "memory.max", max);
    write(d, "memory.high", "max\n");
    write(d, "memory.current", &format!("{current}\n"));
    write(
        d,
        "memory.stat",
        &format!("anon 1000\nfile 5000\nactive_file 100\ninactive_file {inactive_file}\n"),
    );
    write(
        d,
        "memory.events",
        "low 0\nhigh 3\nmax 7\noom 0\noom_kill 0\noom_group_kill 0\n",
    );
    dir
}

#[test]
fn v2_working_set_subtracts_inactive_file() {
    let dir = v2_dir("104857600\n", 90 * MIB, 30 * MIB);
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    let r = source.read().unwrap();
    assert_eq!(r.limit, Some(100 * MIB));
    assert_eq!(r.usage, Some(90 * MIB));
    assert_eq!(r.working_set, Some(60 * MIB));
    assert_eq!(r.available, Some(40 * MIB));
    // 90% of usage but 60% working set: file pages are reclaimable, so Normal.
    assert_eq!(r.level, PressureLevel::Normal);
    assert!(
        source.describe().contains("limit 100.0 MiB"),
        "{}",
        source.describe()
    );
}

#[test]
fn v2_levels_follow_thresholds() {
    let dir = v2_dir("104857600\n", 85 * MIB, 0);
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    assert_eq!(source.read().unwrap().level, PressureLevel::Warning);
    write(dir.path(), "memory.current", &format!("{}\n", 95 * MIB));
    assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
    let mut lax = CgroupV2Source::at(dir.path())
        .unwrap()
        .with_thresholds(Thresholds {
            warning: 0.96,
            critical: 0.99,
        });
    assert_eq!(lax.read().unwrap().level, PressureLevel::Normal);
}

#[test]
fn v2_unlimited_and_high() {
    let dir = v2_dir("max\n", 90 * MIB, 0);
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    let r = source.read().unwrap();
    assert_eq!(r.limit, None);
    assert_eq!(r.available, None);
    assert_eq!(r.level, PressureLevel::Normal);
    write(dir.path(), "memory.high", &format!("{}\n", 95 * MIB));
    assert_eq!(source.read().unwrap().limit, Some(95 * MIB));
}

#[test]
fn v2_ancestor_limits_apply() {
    let root = tempfile::tempdir().unwrap();
    write(root.path(), "memory.pressure", "");
    write(root.path(), "parent/memory.max", &format!("{}\n", 50 * MIB));
    let child = root.path().join("parent/child");
    for (f, t) in [
        ("memory.max", "max\n".to_string()),
        ("memory.current", format!("{}\n", 48 * MIB)),
    ] {
        write(&child, f, &t);
    }
    let mut alone = CgroupV2Source::at(&child).unwrap();
    assert_eq!(alone.read().unwrap().limit, None);
    let mut source = CgroupV2Source::at(&child)
        .unwrap()
        .with_ancestors(root.path());
    let r = source.read().unwrap();
    assert_eq!(r.limit, Some(50 * MIB));
    assert_eq!(
        r.working_set,
        Some(48 * MIB),
        "no memory.stat: working set = usage"
    );
    assert_eq!(r.level, PressureLevel::Critical);
}

#[test]
fn v2_events_parse_and_oom_raises_critical() {
    let e = CgroupV2Events::parse("low 1\nhigh 2\nmax 3\noom 4\noom_kill 5\noom_group_kill 0\n");
    assert_eq!((e.low, e.high, e.max, e.oom, e.oom_kill), (1, 2, 3, 4, 5));
    assert_eq!(
        CgroupV2Events::parse("garbage\n"),
        CgroupV2Events::default()
    );
    let dir = v2_dir("104857600\n", 10 * MIB, 0);
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    assert_eq!(source.events().unwrap().max, 7);
    assert_eq!(source.read().unwrap().level, PressureLevel::Normal);
    write(
        dir.path(),
        "memory.events",
        "low 0\nhigh 3\nmax 9\noom 1\noom_kill 1\n",
    );
    assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
}

#[test]
fn v2_missing_and_corrupt_files_are_typed_errors() {
    let empty = tempfile::tempdir().unwrap();
    let err = CgroupV2Source::at(empty.path()).unwrap_err();
    assert!(matches!(err, GovernorError::Missing { .. }), "{err}");
    let dir = v2_dir("104857600\n", 10 * MIB, 0);
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    fs::remove_file(dir.path().join("memory.max")).unwrap();
    assert!(matches!(source.read(), Err(GovernorError::Missing { .. })));
    write(dir.path(), "memory.max", "lots\n");
    assert!(matches!(source.read(), Err(GovernorError::Parse { .. })));
    write(dir.path(), "memory.max", "max\n");
    write(dir.path(), "memory.current", "\n");
    assert!(matches!(source.read(), Err(GovernorError::Parse { .. })));
}

#[test]
fn v2_psi_on_a_regular_file_is_not_an_event_source() {
    // A regular file accepts the trigger text but poll() reports it always
    // readable, never POLLPRI: wait must time out, not spin or report events.
    let dir = v2_dir("104857600\n", 10 * MIB, 0);
    write(dir.path(), "memory.pressure", "");
    let mut source = CgroupV2Source::at(dir.path()).unwrap();
    source
        .enable_psi(&statelm_governor::PsiTriggerSpec::defaults())
        .unwrap();
    let start = Instant::now();
    let got = source.wait(Duration::from_millis(50)).unwrap();
    assert_eq!(got, None);
    assert!(start.elapsed() >= Duration::from_millis(45));
}

fn v1_dir(limit: &str, usage: u64, total_inactive: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "memory.limit_in_bytes", limit);
    write(d, "memory.usage_in_bytes", &format!("{usage}\n"));
    write(
        d,
        "memory.stat",
        &format!(
            "cache 100\ninactive_file 1\nhierarchical_memory_limit 9223372036854771712\n\
             total_inactive_file {total_inactive}\n"
        ),
    );
    write(
        d,
        "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    );
    write(d, "memory.pressure_level", "");
    write(d, "cgroup.event_control", "");
    dir
}

#[test]
fn v1_unlimited_is_none() {
    let dir = v1_dir(V1_UNLIMITED, 100 * MIB, 0);
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    let r = source.read().unwrap();
    assert_eq!(r.limit, None);
    assert_eq!(r.level, PressureLevel::Normal);
    assert!(source.describe().contains("no limit"));
}

#[test]
fn v1_working_set_uses_total_inactive_file() {
    let dir = v1_dir("67108864\n", 60 * MIB, 20 * MIB);
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    let r = source.read().unwrap();
    assert_eq!(r.limit, Some(64 * MIB));
    assert_eq!(r.working_set, Some(40 * MIB));
    assert_eq!(r.available, Some(24 * MIB));
    assert_eq!(r.level, PressureLevel::Normal);
    write(dir.path(), "memory.stat", "total_inactive_file 0\n");
    assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
}

#[test]
fn v1_hierarchical_limit_bounds_the_own_limit() {
    let dir = v1_dir(V1_UNLIMITED, 10 * MIB, 0);
    write(
        dir.path(),
        "memory.stat",
        &format!(
            "hierarchical_memory_limit {}\ntotal_inactive_file 0\n",
            32 * MIB
        ),
    );
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    assert_eq!(source.read().unwrap().limit, Some(32 * MIB));
}

#[test]
fn v1_oom_kill_raises_critical() {
    let dir = v1_dir("67108864\n", MIB, 0);
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    assert_eq!(source.read().unwrap().level, PressureLevel::Normal);
    assert_eq!(source.oom_kills().unwrap(), 0);
    write(
        dir.path(),
        "memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    );
    assert_eq!(source.read().unwrap().level, PressureLevel::Critical);
    assert_eq!(source.oom_kills().unwrap(), 2);
}

#[test]
fn v1_missing_files() {
    let empty = tempfile::tempdir().unwrap();
    assert!(CgroupV1Source::at(empty.path()).unwrap_err().is_missing());
    let dir = v1_dir("67108864\n", MIB, 0);
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    for f in ["memory.stat", "memory.oom_control"] {
        fs::remove_file(dir.path().join(f)).unwrap();
    }
    let r = source.read().unwrap();
    assert_eq!(r.working_set, Some(MIB), "optional files may be missing");
    fs::remove_file(dir.path().join("memory.limit_in_bytes")).unwrap();
    assert!(matches!(source.read(), Err(GovernorError::Missing { .. })));
}

#[cfg(target_os = "linux")]
#[test]
fn v1_fake_event_registration_waits_without_spinning() {
    let dir = v1_dir("67108864\n", MIB, 0);
    let mut source = CgroupV1Source::at(dir.path()).unwrap();
    source.enable_pressure_events().unwrap();
    let control = fs::read_to_string(dir.path().join("cgroup.event_control")).unwrap();
    assert!(control.ends_with(" critical"), "{control:?}");
    assert!(source.pressure_events_enabled());
    let start = Instant::now();
    assert_eq!(source.wait(Duration::from_millis(50)).unwrap(), None);
    assert!(start.elapsed() >= Duration::from_millis(45));
    // Without the control file, registration fails with a typed error.
    fs::remove_file(dir.path().join("cgroup.event_control")).unwrap();
    let mut other = CgroupV1Source::at(dir.path()).unwrap();
    assert!(other.enable_pressure_events().is_err());
    assert!(
        other.describe().contains("unavailable"),
        "{}",
        other.describe()
    );
}

#[test]
fn proc_source_reads_meminfo_and_rss() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "meminfo",
        "MemTotal:        1048576 kB\nMemFree:  10 kB\nMemAvailable:      52428 kB\n",
    );
    write(
        dir.path(),
        "self/status",
        "Name:\tstatelm\nVmRSS:\t    2048 kB\n",
    );
    let mut source = ProcSource::at(dir.path());
    let r = source.read().unwrap();
    assert_eq!(r.limit, Some(1 << 30));
    assert_eq!(r.available, Some(52428 * 1024));
    assert_eq!(r.working_set, Some((1 << 30) - 52428 * 1024));
    assert_eq!(r.rss, Some(2 * MIB));
    assert_eq!(r.level, PressureLevel::Critical);
    // Old kernels without MemAvailable: MemFree + Buffers + Cached.
    write(
        dir.path(),
        "meminfo",
        "MemTotal: 1000 kB\nMemFree: 300 kB\nBuffers: 100 kB\nCached: 200 kB\n",
    );
    let r = source.read().unwrap();
    assert_eq!(r.available, Some(600 * 1024));
    assert_eq!(r.level, PressureLevel::Normal);
    fs::remove_file(dir.path().join("self/status")).unwrap();
    assert_eq!(source.read().unwrap().rss, None);
    write(dir.path(), "meminfo", "Nonsense: 1 kB\n");
    assert!(matches!(source.read(), Err(GovernorError::Parse { .. })));
    fs::remove_file(dir.path().join("meminfo")).unwrap();
    assert!(matches!(source.read(), Err(GovernorError::Missing { .. })));
}

#[cfg(target_os = "linux")]
#[test]
fn proc_source_on_this_machine() {
    let mut source = ProcSource::new();
    let r = source.read().unwrap();
    assert!(r.limit.unwrap() > 0);
    assert!(r.available.unwrap() <= r.limit.unwrap());
    assert!(r.rss.unwrap() > 0);
}
