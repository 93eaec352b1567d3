//! The cgroup v2 source against the real kernel, the twins of `kernel_v1.rs`: a child cgroup
//! with `memory.max`, a child process allocating into it, the OOM counter in `memory.events`,
//! the working set from `memory.current` and `memory.stat`, a PSI trigger on the cgroup's own
//! `memory.pressure`, and the governor's detection from inside the cgroup.
//!
//! Needs root and a cgroup v2 hierarchy with the memory controller (the root's
//! `cgroup.subtree_control` gets `+memory`): `scripts/kernel-v2` boots a kernel that has one
//! and runs these with `STATELM_REQUIRE_CGROUP_V2=1`, which turns every skip into a failure.
//! Elsewhere (a cgroup v1 host, not root) they print a skip note. File pages must be on a disk
//! filesystem (tmpfs pages are not reclaimable): `STATELM_TEST_DISK_DIR` names one, else the
//! target's tmp dir.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use statelm_governor::{CgroupV2Source, MemorySource, PressureLevel};

mod kernel_common;
use kernel_common::{create_under, cue, go, is_root, Guard, MIB};

/// The cgroup v2 mount: `STATELM_CGROUP_V2_ROOT`, else the first `cgroup2` in mountinfo.
fn v2_root() -> Option<PathBuf> {
    if let Ok(root) = std::env::var("STATELM_CGROUP_V2_ROOT") {
        return Some(PathBuf::from(root));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    statelm_governor::parse_mountinfo(&mounts)
        .into_iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.mount_point)
}

/// Creates the test cgroup with the memory controller, or explains why it cannot.
fn create_cgroup(tag: &str) -> Result<Guard, String> {
    if !cfg!(target_os = "linux") || !is_root() {
        return Err("not running as root on Linux".into());
    }
    let root = v2_root().ok_or("no cgroup v2 hierarchy mounted")?;
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return Err(format!("no memory controller in {}", root.display()));
    }
    let control = root.join("cgroup.subtree_control");
    std::fs::write(&control, "+memory")
        .map_err(|e| format!("cannot enable +memory in {}: {e}", control.display()))?;
    create_under(&root, tag)
}

/// The guard, or the skip (a failure under `STATELM_REQUIRE_CGROUP_V2`).
fn cgroup_or_skip(tag: &str) -> Option<Guard> {
    match create_cgroup(tag) {
        Ok(guard) => Some(guard),
        Err(why) if std::env::var_os("STATELM_REQUIRE_CGROUP_V2").is_some() => {
            panic!("STATELM_REQUIRE_CGROUP_V2 is set but the v2 test cannot run: {why}")
        }
        Err(why) => {
            println!("SKIP kernel v2 test: {why}");
            None
        }
    }
}

/// Sets `memory.max` (and no swap, where the kernel has swap accounting).
fn set_max(dir: &Path, bytes: u64) {
    std::fs::write(dir.join("memory.max"), bytes.to_string()).unwrap();
    if dir.join("memory.swap.max").exists() {
        std::fs::write(dir.join("memory.swap.max"), "0").unwrap();
    }
}

/// A directory on a disk filesystem for file pages.
fn disk_dir() -> tempfile::TempDir {
    let base = std::env::var("STATELM_TEST_DISK_DIR")
        .unwrap_or_else(|_| env!("CARGO_TARGET_TMPDIR").to_string());
    tempfile::tempdir_in(base).unwrap()
}

/// The child side of every test here (see [`kernel_common::alloc_child`]).
#[test]
fn alloc_child_helper() {
    kernel_common::alloc_child();
}

#[test]
fn v2_limit_working_set_and_oom_on_the_real_kernel() {
    let Some(mut guard) = cgroup_or_skip("oom") else {
        return;
    };
    let dir = guard.dir.clone();
    set_max(&dir, 64 * MIB);
    let child = guard.start("anon", 40, 120, Path::new("/nonexistent"));
    let mut source = CgroupV2Source::at(&dir)
        .unwrap()
        .with_event_hold(Duration::from_secs(30));
    println!("{}", source.describe());
    let before = source.read().unwrap();
    assert_eq!(before.limit, Some(64 * MIB));
    assert_eq!(before.level, PressureLevel::Normal);
    let oom_before = source.events().unwrap().oom_kill;

    // Phase 1: 40 MiB resident, 62% of the limit.
    go(child);
    kernel_common::assert_anon_held(&source.read().unwrap());

    // Phase 2: 120 MiB more into 64 MiB without swap: the OOM killer takes the child, and
    // the source raises Critical from memory.events.
    cue(child, "more");
    let start = Instant::now();
    let mut max_level = PressureLevel::Normal;
    while start.elapsed() < Duration::from_secs(20) {
        if let Some(level) = source.wait(Duration::from_millis(200)).unwrap() {
            max_level = max_level.max(level);
        }
        max_level = max_level.max(source.read().unwrap().level);
        if source.events().unwrap().oom_kill > oom_before && max_level == PressureLevel::Critical {
            break;
        }
    }
    let events = source.events().unwrap();
    println!("max level {max_level}, memory.events {events:?}");
    assert!(
        events.oom_kill > oom_before,
        "the child should have been OOM-killed"
    );
    assert_eq!(max_level, PressureLevel::Critical);
    let status = guard.child.as_mut().unwrap().wait().unwrap();
    println!("child exit: {status:?}");
}

#[test]
fn v2_working_set_excludes_page_cache_on_the_real_kernel() {
    let Some(mut guard) = cgroup_or_skip("cache") else {
        return;
    };
    let dir = guard.dir.clone();
    set_max(&dir, 64 * MIB);
    let tmp = disk_dir();
    let child = guard.start("file", 48, 0, &tmp.path().join("weights.bin"));
    let mut source = CgroupV2Source::at(&dir).unwrap();
    go(child);
    // memory.current (v2) / usage_in_bytes (v1) count the page cache; the working set
    // (less inactive_file) does not.
    kernel_common::assert_page_cache_left_out(&source.read().unwrap());
}

#[test]
fn v2_psi_trigger_on_the_cgroup_fires_when_it_thrashes() {
    let Some(mut guard) = cgroup_or_skip("psi") else {
        return;
    };
    let dir = guard.dir.clone();
    set_max(&dir, 32 * MIB);
    let mut source = CgroupV2Source::at(&dir).unwrap();
    // A sensitive trigger on the cgroup's own memory.pressure.
    let spec = kernel_common::sensitive_psi();
    source.enable_psi(&[spec]).unwrap();
    assert!(source.psi_enabled());
    let tmp = disk_dir();
    let child = guard.start("thrash", 128, 0, &tmp.path().join("big.bin"));
    go(child);
    let _ = source.wait(Duration::from_millis(10)); // what writing the file caused
    cue(child, "thrash");
    let fired = kernel_common::first_event(&mut source, Duration::from_secs(8));
    let pressure = std::fs::read_to_string(dir.join("memory.pressure")).unwrap();
    println!("PSI event: {fired:?}; memory.pressure: {pressure}");
    let (_, level) = fired.expect("no PSI event on the cgroup while thrashing for 8 s");
    assert!(level >= PressureLevel::Warning);
}

#[test]
fn v2_a_process_in_the_cgroup_finds_it() {
    let Some(mut guard) = cgroup_or_skip("detect") else {
        return;
    };
    let dir = guard.dir.clone();
    set_max(&dir, 256 * MIB);
    let lines = go(guard.start("detect", 0, 0, Path::new("/nonexistent")));
    println!("{lines:#?}");
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let footprint = lines.iter().find(|l| l.starts_with("footprint ")).unwrap();
    assert!(
        footprint.starts_with("footprint cgroup-v2 |"),
        "{footprint}"
    );
    assert!(footprint.contains(&name), "{footprint}");
    let source = lines.iter().find(|l| l.starts_with("source cgroup-v2 |"));
    let source = source.unwrap_or_else(|| panic!("no cgroup-v2 source in {lines:?}"));
    assert!(source.contains(&name), "{source}");
    assert!(source.contains("256"), "the limit is reported: {source}");
}
