//! Builds `tests/c/smoke.c` with the system C compiler against the cdylib that `cargo test`
//! just built, runs it on the default model, and runs it under valgrind on a tiny synthetic
//! model (valgrind makes inference ~50x slower).
//!
//! Valgrind's verdict: no invalid reads or writes, and "definitely lost: 0 bytes". "Possibly
//! lost" and "still reachable" blocks are accepted: they are the process-wide statics of the
//! Rust runtime and of statelm (the handle registry, thread-locals of threads that are still
//! running at exit, the matmul thread pool), not leaks.

use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::Arch;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The two runs share the 2 cores badly: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The directory holding the `libstatelm_ffi.so` that `cargo test` built for these tests. The
/// package's library is compiled with every crate type it declares (rlib, staticlib, cdylib)
/// before its tests, into `target/<profile>/deps/` (a `cargo build` of it writes one directory
/// up; the newer is taken). No second build here: `cargo build -p statelm-ffi` resolves other
/// features than the workspace's test build, recompiled ~50 crates (2 min 39 s on 2 cores) and
/// overwrote the test build's library, which the next `cargo test` then compiled again.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let profile = deps.parent().expect("profile dir").to_path_buf();
    let so = format!(
        "{}statelm_ffi{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    [deps, profile]
        .into_iter()
        .filter_map(|d| Some((std::fs::metadata(d.join(&so)).ok()?.modified().ok()?, d)))
        .max()
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("{so} was not built beside {}", exe.display()))
}

/// Compiles smoke.c into `out`; `None` (with a note) when there is no C compiler.
fn build_smoke(out: &Path) -> Option<PathBuf> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let exe = out.join("smoke");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let result = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-g",
            "-O1",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c/smoke.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lstatelm_ffi", "-lpthread"])
        .output();
    match result {
        Err(e) => {
            // Under CI (`CI` set) a missing tool fails: .ci/run installs it.
            assert!(
                std::env::var_os("CI").is_none(),
                "no C compiler ({cc}: {e})"
            );
            eprintln!("skipping: no C compiler ({cc}: {e})");
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "compiling smoke.c failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(exe)
        }
    }
}

/// Runs `cmd`, killing it after `limit`.
fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!(
                "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn show(o: &Output) -> String {
    format!(
        "status: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn c_smoke_program_on_the_default_model() {
    let Some(model) = statelm_model::testing::gemma_path() else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(exe) = build_smoke(dir.path()) else {
        return;
    };
    let mut cmd = Command::new(exe);
    cmd.arg(model).arg(dir.path());
    let o = run_with_limit(cmd, Duration::from_secs(180));
    println!("{}", show(&o));
    assert!(o.status.success(), "smoke failed\n{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("smoke: OK"));
}

/// The figure valgrind reports for `kind` ("definitely lost"), in bytes; 0 when it says no
/// leaks are possible.
fn leaked(log: &str, kind: &str) -> Option<u64> {
    if log.contains("All heap blocks were freed -- no leaks are possible") {
        return Some(0);
    }
    let line = log.lines().find(|l| l.contains(&format!("{kind}:")))?;
    let after = line.split(&format!("{kind}:")).nth(1)?;
    after
        .split_whitespace()
        .next()?
        .replace(',', "")
        .parse()
        .ok()
}

#[test]
fn c_smoke_program_under_valgrind() {
    let available = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        let why = "valgrind is not installed (apt-get install valgrind; .ci/run does)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipping: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(exe) = build_smoke(dir.path()) else {
        return;
    };
    let model = dir.path().join("tiny-gemma3.gguf");
    write_synthetic_model(&model, &SyntheticSpec::tiny(Arch::Gemma3)).expect("synthetic model");
    let log = dir.path().join("valgrind.log");
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--leak-check=full",
        "--error-exitcode=99",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
        "--fair-sched=yes",
    ])
    .arg(format!("--log-file={}", log.display()))
    .arg(exe)
    .arg(&model)
    .arg(dir.path());
    let o = run_with_limit(cmd, Duration::from_secs(300));
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let summary: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "definitely lost",
                "indirectly lost",
                "possibly lost",
                "still reachable",
            ]
            .iter()
            .chain(&["ERROR SUMMARY", "no leaks are possible"])
            .any(|k| l.contains(k))
        })
        .collect();
    println!("valgrind summary:\n{}", summary.join("\n"));
    assert!(
        o.status.success(),
        "smoke under valgrind failed\n{}\nvalgrind log:\n{log}",
        show(&o)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("smoke: OK"));
    assert_eq!(leaked(&log, "definitely lost"), Some(0), "{log}");
    assert!(log.contains("ERROR SUMMARY: 0 errors"), "{log}");
}
