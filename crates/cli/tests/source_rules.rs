//! Rules the whole workspace's source keeps (the README's style rules), checked on every test
//! run: no Rust file over 800 lines, `unsafe` only in the crates allowed to hold it. (No
//! function over 80 lines: clippy's `too_many_lines`, set in the workspace lints.)

use std::path::{Path, PathBuf};

/// The most lines a Rust source file may have.
const MAX_FILE_LINES: usize = 800;

/// Every `.rs` file under `dir`, build output aside.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_source_file_exceeds_800_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    rust_files(&crates, &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under {crates:?}",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).ok()?.lines().count();
            (n > MAX_FILE_LINES).then(|| format!("{} ({n} lines)", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_FILE_LINES} lines: {long:?}");
}

/// The crates that may hold `unsafe` code (each block with a `// SAFETY:` line): the file
/// format, the kernels, the C ABI and the governor's platform calls.
const UNSAFE_CRATES: [&str; 4] = ["gguf", "quant", "ffi", "governor"];

#[test]
fn crates_without_unsafe_code_forbid_it() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&crates).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if UNSAFE_CRATES.contains(&name.as_str()) {
            continue;
        }
        let root = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|f| e.path().join(f))
            .find(|p| p.exists());
        let Some(root) = root else { continue };
        let text = std::fs::read_to_string(&root).unwrap();
        if !text.contains("#![forbid(unsafe_code)]") {
            missing.push(root.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "no #![forbid(unsafe_code)]: {missing:?}"
    );
}
