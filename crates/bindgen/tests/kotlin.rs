//! The Kotlin binding on a real JVM: generates the bindings from the built library with this
//! crate's `uniffi-bindgen`, compiles them with the idiomatic layer and the test program
//! (`crates/ffi/bindings/kotlin`) with kotlinc, and runs it on Gemma 3 270M: streaming,
//! cancellation, a memory warning mid-generation, background and foreground, thermal states,
//! typed errors, structured output; then a durable session written by one JVM that is killed
//! with SIGKILL, and resumed by a second one.
//!
//! Needs Java 17, kotlinc and JNA. `scripts/test` installs kotlinc (npm's `kotlin-compiler`,
//! into the statelm cache) and JNA (Debian's `libjna-java`); elsewhere point `STATELM_KOTLINC`
//! at kotlinc and `STATELM_JNA_JAR` at jna.jar. Missing tools fail the test, naming them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The built `libstatelm_ffi.so` of this profile (a dev-dependency builds it).
fn library() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_uniffi-bindgen"));
    let dir = exe.parent().unwrap().to_path_buf();
    // The newest: a dev-dependency's build goes to deps/, a `cargo build` of it beside.
    [
        dir.join("libstatelm_ffi.so"),
        dir.join("deps/libstatelm_ffi.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .unwrap_or_else(|| panic!("libstatelm_ffi.so not built under {}", dir.display()))
}

fn kotlinc() -> PathBuf {
    if let Some(p) = std::env::var_os("STATELM_KOTLINC") {
        return p.into();
    }
    let cached =
        statelm_model::testing::cache_dir().join("tools/node_modules/kotlin-compiler/bin/kotlinc");
    if cached.exists() {
        return cached;
    }
    panic!(
        "kotlinc is missing: `bash scripts/test` installs it (npm install --prefix {} \
         kotlin-compiler), or set STATELM_KOTLINC",
        cached.parent().unwrap().display()
    );
}

fn jna() -> PathBuf {
    let p: PathBuf = std::env::var_os("STATELM_JNA_JAR")
        .map(Into::into)
        .unwrap_or_else(|| "/usr/share/java/jna.jar".into());
    assert!(
        p.exists(),
        "{} is missing: install Debian's libjna-java (scripts/test does), or set STATELM_JNA_JAR",
        p.display()
    );
    p
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Generates, compiles; returns the classpath and the library's directory.
fn build(dir: &Path) -> (String, PathBuf) {
    let lib = library();
    let generated = dir.join("generated");
    run(
        Command::new(env!("CARGO_BIN_EXE_uniffi-bindgen"))
            .args([
                "generate",
                "--no-format",
                "--language",
                "kotlin",
                "--library",
            ])
            .arg(&lib)
            .arg("--out-dir")
            .arg(&generated)
            .current_dir(workspace()),
        "uniffi-bindgen generate",
    );
    let kotlinc = kotlinc();
    let kotlin_lib = kotlinc.parent().unwrap().join("../lib");
    let coroutines = kotlin_lib.join("kotlinx-coroutines-core-jvm.jar");
    let stdlib = kotlin_lib.join("kotlin-stdlib.jar");
    let jna = jna();
    let sources = workspace().join("crates/ffi/bindings/kotlin");
    let jar = dir.join("statelm-test.jar");
    let cp = |extra: &[&Path]| {
        let mut parts: Vec<String> = extra.iter().map(|p| p.display().to_string()).collect();
        parts.extend([&jna, &coroutines].iter().map(|p| p.display().to_string()));
        parts.join(":")
    };
    run(
        Command::new(&kotlinc)
            .arg(&generated)
            .arg(sources.join("src"))
            .arg(sources.join("test"))
            .args(["-nowarn", "-cp", &cp(&[])])
            .arg("-d")
            .arg(&jar),
        "kotlinc",
    );
    (cp(&[&jar, &stdlib]), lib.parent().unwrap().to_path_buf())
}

fn java(cp: &str, lib_dir: &Path, mode: &str, model: &Path, dir: &Path) -> Command {
    let mut c = Command::new("java");
    c.arg(format!("-Djna.library.path={}", lib_dir.display()))
        .args(["-cp", cp, "statelm.test.MainKt", mode])
        .arg(model)
        .arg(dir);
    c
}

#[test]
fn the_kotlin_binding_works_on_the_jvm() {
    let Some(model) = statelm_model::testing::gemma_path() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (cp, lib_dir) = build(tmp.path());
    let suite_dir = tmp.path().join("suite");
    let out = run(
        &mut java(&cp, &lib_dir, "suite", &model, &suite_dir),
        "the JVM suite",
    );
    eprintln!("{out}");
    for check in [
        "PASS tier",
        "PASS stream",
        "PASS cancel",
        "PASS memory warning",
        "PASS background and foreground",
        "PASS thermal",
        "PASS typed errors",
        "PASS structured output",
        "DONE suite",
    ] {
        assert!(out.contains(check), "{check} missing:\n{out}");
    }

    // A durable session survives a real kill of its process.
    let durable = tmp.path().join("durable");
    let mut writer = java(&cp, &lib_dir, "durable-write", &model, &durable)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let ready = lines.find_map(|l| l.ok().filter(|l| l.starts_with("READY")));
    assert!(ready.is_some(), "the writer never answered its turn");
    let pid = writer.id().to_string();
    run(Command::new("kill").args(["-KILL", &pid]), "kill -KILL");
    let status = writer.wait().unwrap();
    assert!(!status.success(), "the writer was not killed: {status}");
    let out = run(
        &mut java(&cp, &lib_dir, "durable-resume", &model, &durable),
        "the resuming JVM",
    );
    eprintln!("{out}");
    assert!(out.contains("PASS durable resume"), "{out}");
}
