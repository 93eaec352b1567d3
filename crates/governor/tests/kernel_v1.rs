//! The cgroup v1 source against the real kernel: a child cgroup with a 64 MiB
//! limit, a child process allocating into it, pressure_level events and the OOM
//! counter. Runs only as root with a writable v1 memory hierarchy; otherwise it
//! prints a skip note.

use std::path::Path;
use std::time::{Duration, Instant};

use statelm_governor::{CgroupV1Source, MemorySource, PressureLevel, ProcSource};

mod kernel_common;
use kernel_common::{create_under, cue, go, is_root, Guard, MIB};

const V1_ROOT: &str = "/sys/fs/cgroup/memory";

/// Creates the test cgroup, or explains why the test is skipped.
fn create_cgroup(tag: &str) -> Result<Guard, String> {
    if !cfg!(target_os = "linux") || !is_root() {
        return Err("not running as root on Linux".into());
    }
    if !Path::new(V1_ROOT).join("memory.limit_in_bytes").exists() {
        return Err(format!("no cgroup v1 memory hierarchy at {V1_ROOT}"));
    }
    create_under(Path::new(V1_ROOT), tag)
}

/// The child side of every test here (see [`kernel_common::alloc_child`]).
#[test]
fn alloc_child_helper() {
    kernel_common::alloc_child();
}

#[test]
fn v1_limit_pressure_events_and_oom_on_the_real_kernel() {
    let mut guard = match create_cgroup("oom") {
        Ok(g) => g,
        Err(why) => {
            println!("SKIP kernel v1 test: {why}");
            return;
        }
    };
    let dir = guard.dir.clone();
    std::fs::write(dir.join("memory.limit_in_bytes"), (64 * MIB).to_string()).unwrap();
    let child = guard.start("anon", 40, 120, Path::new("/nonexistent"));

    let mut source = CgroupV1Source::at(&dir)
        .unwrap()
        .with_event_hold(Duration::from_secs(30));
    source.enable_pressure_events().unwrap();
    println!("{}", source.describe());
    let before = source.read().unwrap();
    assert_eq!(before.limit, Some(64 * MIB));
    assert_eq!(before.level, PressureLevel::Normal);
    let oom_before = source.oom_kills().unwrap();

    // Phase 1: 40 MiB resident, 62% of the limit.
    go(child);
    kernel_common::assert_anon_held(&source.read().unwrap());

    // Phase 2: push 120 MiB more into a 64 MiB cgroup without swap: reclaim
    // fails, pressure events fire and the OOM killer takes the child.
    cue(child, "more");
    let start = Instant::now();
    let mut events = Vec::new();
    let mut max_level = PressureLevel::Normal;
    while start.elapsed() < Duration::from_secs(6) {
        if let Some(level) = source.wait(Duration::from_millis(200)).unwrap() {
            events.push((start.elapsed(), level));
        }
        let r = source.read().unwrap();
        max_level = max_level.max(r.level);
        if source.oom_kills().unwrap() > oom_before && !events.is_empty() {
            break;
        }
    }
    let oom_after = source.oom_kills().unwrap();
    println!("pressure events: {events:?}");
    println!("max level {max_level}, oom_kill {oom_before} -> {oom_after}");
    assert_eq!(max_level, PressureLevel::Critical);
    assert!(
        oom_after > oom_before,
        "the child should have been OOM-killed"
    );
    assert!(
        events.iter().any(|(_, l)| *l >= PressureLevel::Warning),
        "no pressure_level event fired: {events:?}"
    );
    let status = guard.child.as_mut().unwrap().wait().unwrap();
    println!("child exit: {status:?}");
}

#[test]
fn v1_working_set_excludes_page_cache_on_the_real_kernel() {
    let mut guard = match create_cgroup("cache") {
        Ok(g) => g,
        Err(why) => {
            println!("SKIP kernel v1 test: {why}");
            return;
        }
    };
    let dir = guard.dir.clone();
    std::fs::write(dir.join("memory.limit_in_bytes"), (64 * MIB).to_string()).unwrap();
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = tmp.path().join("weights.bin");
    let child = guard.start("file", 48, 0, &file);
    let mut source = CgroupV1Source::at(&dir).unwrap();
    go(child);
    // memory.current (v2) / usage_in_bytes (v1) count the page cache; the working set
    // (less inactive_file) does not.
    kernel_common::assert_page_cache_left_out(&source.read().unwrap());
}

#[test]
fn psi_trigger_fires_when_a_cgroup_thrashes() {
    let mut guard = match create_cgroup("psi") {
        Ok(g) => g,
        Err(why) => {
            println!("SKIP PSI event test: {why}");
            return;
        }
    };
    // A sensitive trigger on the system-wide file.
    let spec = kernel_common::sensitive_psi();
    let mut source = ProcSource::new();
    if let Err(e) = source.enable_psi(&[spec]) {
        println!("SKIP PSI event test: no PSI triggers here ({e})");
        return;
    }
    let dir = guard.dir.clone();
    std::fs::write(dir.join("memory.limit_in_bytes"), (32 * MIB).to_string()).unwrap();
    let mut v1 = CgroupV1Source::at(&dir).unwrap();
    v1.enable_pressure_events().unwrap();
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let child = guard.start("thrash", 128, 0, &tmp.path().join("big.bin"));
    go(child);
    // Drain any event caused by writing the file, then thrash.
    let _ = source.wait(Duration::from_millis(10));
    // Writing 128 MiB into 32 MiB makes vmpressure fire (dirty pages resist
    // reclaim) though the working set is tiny: the source caps it at Warning.
    let during_write = v1.wait(Duration::ZERO).unwrap();
    let r = v1.read().unwrap();
    println!("cgroup v1 pressure_level while writing: {during_write:?}, reading {r:?}");
    assert!(r.level <= PressureLevel::Warning, "{r:?}");
    cue(child, "thrash");
    let fired = kernel_common::first_event(&mut source, Duration::from_secs(8));
    println!(
        "PSI event: {fired:?}; {}",
        std::fs::read_to_string("/proc/pressure/memory").unwrap()
    );
    // Informational: did the cgroup's own vmpressure notice the thrashing too?
    println!(
        "cgroup v1 pressure_level while thrashing: {:?}",
        v1.wait(Duration::ZERO)
    );
    let (_, level) = fired.expect("no PSI event while thrashing for 8 s");
    assert_eq!(level, PressureLevel::Warning);
    assert_eq!(
        source.read().unwrap().level,
        PressureLevel::Warning,
        "the event is held"
    );
}
