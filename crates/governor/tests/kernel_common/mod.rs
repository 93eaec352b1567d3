//! What the real-kernel tests of both cgroup versions share (`kernel_v1.rs`, `kernel_v2.rs`):
//! a guard that removes the test cgroup, and a child process (the test binary itself, run
//! as `alloc_child_helper`) that allocates memory on cue.

#![allow(dead_code)] // each test binary uses its part

use statelm_governor::{MemorySource, PressureLevel, PsiKind, PsiTriggerSpec};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One MiB.
pub const MIB: u64 = 1 << 20;
const CHILD_ENV: &str = "STATELM_TEST_ALLOC_CHILD";

/// Removes the cgroup and kills the child even when the test fails.
pub struct Guard {
    /// The test cgroup's directory.
    pub dir: PathBuf,
    /// The child process in it, if started.
    pub child: Option<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}

impl Guard {
    /// Starts the allocating child (see [`alloc_child`]) and moves it into the cgroup
    /// (`cgroup.procs`, in both versions); returns it.
    pub fn start(
        &mut self,
        mode: &str,
        first_mib: usize,
        more_mib: usize,
        file: &Path,
    ) -> &mut Child {
        let child = spawn_child(mode, first_mib, more_mib, file);
        std::fs::write(self.dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        self.child.insert(child)
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Creates `root/statelm-test-PID-tag`, or says why not.
pub fn create_under(root: &Path, tag: &str) -> Result<Guard, String> {
    let dir = root.join(format!("statelm-test-{}-{tag}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(Guard { dir, child: None })
}

/// Child side, driven by `STATELM_TEST_ALLOC_CHILD=mode,first,more`: waits for a
/// line on stdin, then holds `first` MiB — anonymous memory touching every page
/// (`anon`) or a file written and synced into the page cache (`file`, at
/// `STATELM_TEST_FILE`) — says "ready", waits for another line, then allocates
/// `more` MiB of anonymous memory slowly. `thrash` writes a `first` MiB file,
/// says "ready" and, after the second line, re-reads it for up to 8 s. `detect`
/// prints what the governor finds for this process (its footprint reader and
/// sources) and exits. Returns at once in a test run that is not a child.
pub fn alloc_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let (mode, first, more): (&str, usize, usize) = (
        parts[0],
        parts[1].parse().unwrap(),
        parts[2].parse().unwrap(),
    );
    let stdin = std::io::stdin();
    let mut line = String::new();
    stdin.lock().read_line(&mut line).unwrap();
    let mut held: Vec<Vec<u8>> = Vec::new();
    match mode {
        "detect" => {
            let mut reader = statelm_governor::FootprintReader::detect();
            println!("footprint {} | {}", reader.name(), reader.describe());
            for source in statelm_governor::detect() {
                println!("source {} | {}", source.name(), source.describe());
            }
            println!("ready");
            return;
        }
        "file" => write_file(first, |_| 7),
        "thrash" => {
            write_file(first, |i| i as u8);
            println!("ready");
            std::io::stdout().flush().unwrap();
            stdin.lock().read_line(&mut line).unwrap();
            thrash();
            return;
        }
        _ => held.extend((0..first / 2).map(|_| vec![1u8; 2 << 20])),
    }
    println!("ready");
    std::io::stdout().flush().unwrap();
    stdin.lock().read_line(&mut line).unwrap();
    for _ in 0..more / 2 {
        held.push(vec![1u8; 2 << 20]);
        std::thread::sleep(Duration::from_millis(15));
    }
    std::thread::sleep(Duration::from_secs(5));
    drop(held);
}

/// Writes `mib` MiB (MiB `i` filled with `byte(i)`) to `STATELM_TEST_FILE` and syncs it.
fn write_file(mib: usize, byte: impl Fn(usize) -> u8) {
    let path = std::env::var("STATELM_TEST_FILE").unwrap();
    let mut f = std::fs::File::create(path).unwrap();
    for i in 0..mib {
        f.write_all(&[byte(i); 1 << 20]).unwrap();
    }
    f.sync_all().unwrap();
}

/// Re-reads a file larger than the cgroup for 8 s: every pass refaults the pages evicted
/// by the previous one, which PSI counts as memory stall.
fn thrash() {
    let path = std::env::var("STATELM_TEST_FILE").unwrap();
    let start = std::time::Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    while start.elapsed() < Duration::from_secs(8) {
        let mut f = std::fs::File::open(&path).unwrap();
        while std::io::Read::read(&mut f, &mut buf).unwrap() > 0 {}
    }
}

/// Starts the test binary as an allocating child (see [`alloc_child`]).
fn spawn_child(mode: &str, first_mib: usize, more_mib: usize, file: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "alloc_child_helper",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_ENV, format!("{mode},{first_mib},{more_mib}"))
        .env("STATELM_TEST_FILE", file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Sends the child its next cue (one line).
pub fn cue(child: &mut Child, word: &str) {
    writeln!(child.stdin.as_mut().unwrap(), "{word}").unwrap();
}

/// Cues the child to start and waits for its "ready"; returns the lines it printed before.
pub fn go(child: &mut Child) -> Vec<String> {
    cue(child, "go");
    wait_for_ready(child)
}

/// A sensitive PSI trigger: 20 ms of stall in a 2 s window raises Warning.
pub fn sensitive_psi() -> PsiTriggerSpec {
    PsiTriggerSpec {
        kind: PsiKind::Some,
        stall: Duration::from_millis(20),
        window: Duration::from_secs(2),
        level: PressureLevel::Warning,
    }
}

/// The first event `source` reports within `limit` (polled every 500 ms): when it came, and
/// its level.
pub fn first_event(
    source: &mut dyn MemorySource,
    limit: Duration,
) -> Option<(Duration, PressureLevel)> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(level) = source.wait(Duration::from_millis(500)).unwrap() {
            return Some((start.elapsed(), level));
        }
    }
    None
}

/// After a child took 40 MiB of anonymous memory in a 64 MiB cgroup: the working set holds
/// them, and at most 26 MiB are left.
pub fn assert_anon_held(r: &statelm_governor::MemoryReading) {
    println!("after 40 MiB: {r:?}");
    assert!(r.working_set.unwrap() >= 38 * MIB, "{r:?}");
    assert!(r.available.unwrap() <= 26 * MIB, "{r:?}");
}

/// After a child wrote 48 MiB of file pages into a 64 MiB cgroup: the page cache is charged
/// (usage 75% of the limit) but reclaimable, so the working set, and so the level, leave it out.
pub fn assert_page_cache_left_out(r: &statelm_governor::MemoryReading) {
    println!("after writing 48 MiB of file pages: {r:?}");
    let (usage, ws) = (r.usage.unwrap(), r.working_set.unwrap());
    assert!(usage >= 44 * MIB, "{r:?}");
    assert!(ws + 40 * MIB <= usage, "{r:?}");
    assert_eq!(r.level, statelm_governor::PressureLevel::Normal);
}

/// Waits for the child's "ready" line; returns the lines it printed before it.
fn wait_for_ready(child: &mut Child) -> Vec<String> {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut before = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.trim() == "ready" => return before,
            Some(Ok(l)) => before.push(l),
            other => panic!("child did not get ready: {other:?} (after {before:?})"),
        }
    }
}
