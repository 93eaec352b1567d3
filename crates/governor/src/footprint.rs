//! The process's real memory footprint, read back from the kernel's own accounting, and the
//! limit it lives under: what admission control compares, not an estimate of it.
//!
//! - In a memory cgroup: the cgroup's working set (`memory.current` / `memory.usage_in_bytes`
//!   minus inactive file pages, as the kernel and the kubelet count it — resident weights, KV
//!   caches, scratch, tokenizer, runtime heap, everything charged) against its limit (the
//!   smallest of its own and its ancestors'). The limit is read at every reading: it may change
//!   while the process runs.
//! - Elsewhere, or in a cgroup without a limit (whose usage may be other processes'): the
//!   process's resident set (`VmRSS` of `/proc/self/status`), with no limit of its own (the
//!   caller brings one, e.g. a configured ceiling).

use std::path::{Path, PathBuf};

use crate::detect::own_cgroup_dirs;
use crate::util::{format_bytes, kb_field, read_text};
use crate::{CgroupV1Source, CgroupV2Source, GovernorError, MemorySource};

/// One reading of the process's footprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes in use as the kernel counts them (cgroup working set, or resident set).
    pub used: u64,
    /// The limit the kernel enforces on them (a cgroup's), if any.
    pub limit: Option<u64>,
}

/// Where the footprint is read from.
#[derive(Debug)]
enum Kind {
    CgroupV1(CgroupV1Source),
    CgroupV2(CgroupV2Source),
    Proc(PathBuf),
}

/// Reads this process's footprint on demand (a few small kernel files per reading; no
/// background thread, no events).
#[derive(Debug)]
pub struct FootprintReader {
    kind: Kind,
    /// The proc tree the resident set is read from.
    proc_root: PathBuf,
}

impl FootprintReader {
    /// This process's memory cgroup (v2 first, then v1) when it has one, else its resident set
    /// from `/proc`. A cgroup without a limit is kept: a limit may be set later.
    pub fn detect() -> FootprintReader {
        FootprintReader::detect_at("/proc")
    }

    /// [`FootprintReader::detect`] on a proc tree at `proc_root`.
    pub fn detect_at(proc_root: impl AsRef<Path>) -> FootprintReader {
        let root = proc_root.as_ref();
        let dirs = own_cgroup_dirs(root);
        if let Some((dir, mount)) = &dirs.v2 {
            if let Ok(source) = CgroupV2Source::at(dir) {
                if dir.join("memory.current").is_file() {
                    return FootprintReader {
                        kind: Kind::CgroupV2(source.with_ancestors(mount)),
                        proc_root: root.to_path_buf(),
                    };
                }
            }
        }
        if let Some(source) = dirs.v1_memory.and_then(|d| CgroupV1Source::at(d).ok()) {
            return FootprintReader {
                kind: Kind::CgroupV1(source),
                proc_root: root.to_path_buf(),
            };
        }
        FootprintReader::proc(root)
    }

    /// The resident set of this process from the proc tree at `proc_root`, without a limit.
    pub fn proc(proc_root: impl Into<PathBuf>) -> FootprintReader {
        let root = proc_root.into();
        FootprintReader {
            kind: Kind::Proc(root.clone()),
            proc_root: root,
        }
    }

    /// A cgroup v1 memory directory (the resident set from `/proc` while it has no limit).
    pub fn cgroup_v1(dir: impl Into<PathBuf>) -> Result<FootprintReader, GovernorError> {
        Ok(FootprintReader {
            kind: Kind::CgroupV1(CgroupV1Source::at(dir)?),
            proc_root: PathBuf::from("/proc"),
        })
    }

    /// Short name of the accounting read: `"cgroup-v1"`, `"cgroup-v2"` or `"rss"`.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::CgroupV1(_) => "cgroup-v1",
            Kind::CgroupV2(_) => "cgroup-v2",
            Kind::Proc(_) => "rss",
        }
    }

    /// A human description (which files, which limit).
    pub fn describe(&mut self) -> String {
        let what = match &self.kind {
            Kind::CgroupV1(s) => format!("cgroup v1 working set of {}", s.dir().display()),
            Kind::CgroupV2(s) => format!("cgroup v2 working set of {}", s.dir().display()),
            Kind::Proc(root) => format!("VmRSS of {}/self/status", root.display()),
        };
        match self.read() {
            Ok(f) => format!(
                "{what}: {} in use, limit {}",
                format_bytes(f.used),
                f.limit.map_or("none".into(), format_bytes)
            ),
            Err(e) => format!("{what}: unreadable ({e})"),
        }
    }

    /// Reads the footprint now: a limited cgroup's working set and limit, else the resident
    /// set without a limit.
    pub fn read(&mut self) -> Result<Footprint, GovernorError> {
        let cgroup = match &mut self.kind {
            Kind::CgroupV1(s) => Some(s.read()?),
            Kind::CgroupV2(s) => Some(s.read()?),
            Kind::Proc(_) => None,
        };
        match cgroup {
            Some(r) if r.limit.is_some() => Ok(Footprint {
                used: r.working_set.or(r.usage).unwrap_or(0),
                limit: r.limit,
            }),
            _ => Ok(Footprint {
                used: resident_set(&self.proc_root)?,
                limit: None,
            }),
        }
    }
}

/// `VmRSS` of `<proc_root>/self/status`.
fn resident_set(proc_root: &Path) -> Result<u64, GovernorError> {
    let path = proc_root.join("self/status");
    let status = read_text(&path)?;
    kb_field(&status, "VmRSS").ok_or_else(|| GovernorError::parse(&path, "no VmRSS"))
}

/// Hands the allocator's free memory back to the kernel, so that what was freed (a spilled
/// or trimmed State, shrunk scratch) leaves the footprint the kernel counts, not only the
/// allocator's books. glibc keeps freed heap memory for reuse; elsewhere this does nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    crate::malloc_sys::trim();
}

/// Turns transparent huge pages off for this process (Linux, Android; elsewhere `Ok(false)`),
/// so that the working set the governor reads is memory in use. With huge pages on, a 2 MiB
/// page the process has partly freed — a trimmed or spilled State given back by
/// [`release_free_memory`], an allocator arena shrinking — stays charged to the cgroup whole
/// until the kernel gets round to splitting it: measured on Linux 6.1 (THP `always`, a 66 MiB
/// cgroup), 7–18 MB of the working set was such memory, the governor took it for live data and
/// refused turns a trim would have fitted. Costs a little TLB reach on large KV caches. Must
/// run before the big allocations (pages already huge stay so). `Ok(true)`: off from now on.
pub fn keep_huge_pages_out() -> Result<bool, std::io::Error> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::thp_sys::disable()?;
        crate::thp_sys::disabled()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own view (`THP_enabled` of /proc/self/status, Linux 5.0+) agrees.
    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_go_off_for_the_process() {
        assert!(keep_huge_pages_out().unwrap());
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
            assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
        }
    }

    #[test]
    fn reads_rss_from_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("self")).unwrap();
        std::fs::write(
            dir.path().join("self/status"),
            "Name:\tx\nVmRSS:\t  2048 kB\nRssAnon:\t 1024 kB\n",
        )
        .unwrap();
        let mut r = FootprintReader::proc(dir.path());
        assert_eq!(r.name(), "rss");
        assert_eq!(
            r.read().unwrap(),
            Footprint {
                used: 2 << 20,
                limit: None
            }
        );
        std::fs::write(dir.path().join("self/status"), "Name:\tx\n").unwrap();
        assert!(r.read().is_err());
    }

    #[test]
    fn reads_a_v1_cgroup_working_set_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let w = |f: &str, t: &str| std::fs::write(dir.path().join(f), t).unwrap();
        w("memory.usage_in_bytes", "104857600\n");
        w("memory.limit_in_bytes", "134217728\n");
        w("memory.stat", "total_inactive_file 4194304\n");
        w("memory.oom_control", "oom_kill 0\n");
        let mut r = FootprintReader::cgroup_v1(dir.path()).unwrap();
        let f = r.read().unwrap();
        assert_eq!(f.used, (100 - 4) << 20);
        assert_eq!(f.limit, Some(128 << 20));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_a_footprint() {
        let mut r = FootprintReader::detect();
        let f = r.read().unwrap();
        assert!(f.used > 0, "{}", r.describe());
        release_free_memory();
    }
}
