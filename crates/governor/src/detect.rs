//! Finding this process's cgroup (v1 `memory` controller or v2 unified) from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`, and picking the sources.

use std::path::{Path, PathBuf};

use crate::psi::PsiTriggerSpec;
use crate::{CgroupV1Source, CgroupV2Source, MemorySource, ProcSource};

/// Which cgroups a process is in, from `/proc/<pid>/cgroup`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupMembership {
    /// Path in the v1 hierarchy that has the `memory` controller.
    pub v1_memory: Option<String>,
    /// Path in the v2 unified hierarchy (the `0::/path` line).
    pub v2: Option<String>,
}

/// Parses `/proc/<pid>/cgroup` (`hierarchy-id:controllers:path` lines).
pub fn parse_proc_cgroup(text: &str) -> CgroupMembership {
    let mut out = CgroupMembership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            out.v1_memory = Some(path.to_string());
        }
    }
    out
}

/// One line of `/proc/<pid>/mountinfo`, reduced to what cgroup discovery needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    /// The directory of the filesystem that is mounted (field 4).
    pub root: String,
    /// Where it is mounted (field 5).
    pub mount_point: PathBuf,
    /// Filesystem type (after the `-` separator), e.g. `cgroup` or `cgroup2`.
    pub fstype: String,
    /// Per-superblock options, e.g. `rw,memory` for a v1 memory hierarchy.
    pub super_options: String,
}

/// Decodes the octal escapes (`\040` for a space) of mountinfo paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/<pid>/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split_whitespace().collect();
            let mut rest = right.split_whitespace();
            let fstype = rest.next()?.to_string();
            let _source = rest.next();
            Some(MountInfo {
                root: unescape(fields.get(3)?),
                mount_point: PathBuf::from(unescape(fields.get(4)?)),
                fstype,
                super_options: rest.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The cgroup directories of a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupDirs {
    /// The v1 memory cgroup directory.
    pub v1_memory: Option<PathBuf>,
    /// The v2 cgroup directory and the cgroup2 mount point it lives under.
    pub v2: Option<(PathBuf, PathBuf)>,
}

/// Joins a cgroup path onto the mount whose root contains it.
fn resolve(mount: &MountInfo, cgroup_path: &str) -> PathBuf {
    let rel = Path::new(cgroup_path)
        .strip_prefix(&mount.root)
        .unwrap_or(Path::new(""));
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    mount.mount_point.join(rel)
}

/// Maps a membership onto mounts: the v1 `cgroup` mount with the `memory`
/// option and the `cgroup2` mount.
pub fn cgroup_dirs(membership: &CgroupMembership, mounts: &[MountInfo]) -> CgroupDirs {
    let v1_mount = mounts
        .iter()
        .find(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "memory"));
    let v2_mount = mounts.iter().find(|m| m.fstype == "cgroup2");
    CgroupDirs {
        v1_memory: v1_mount
            .zip(membership.v1_memory.as_deref())
            .map(|(m, p)| resolve(m, p)),
        v2: v2_mount
            .zip(membership.v2.as_deref())
            .map(|(m, p)| (resolve(m, p), m.mount_point.clone())),
    }
}

/// This process's cgroup directories from the proc tree at `proc_root` (empty when it is
/// not readable, as for most Android apps).
pub(crate) fn own_cgroup_dirs(proc_root: &Path) -> CgroupDirs {
    let read = |name: &str| std::fs::read_to_string(proc_root.join(name)).unwrap_or_default();
    let membership = read("self/cgroup");
    let mounts = read("self/mountinfo");
    cgroup_dirs(&parse_proc_cgroup(&membership), &parse_mountinfo(&mounts))
}

/// A cgroup source for this process: v2 with a memory controller first, else v1.
/// Events (PSI triggers, pressure_level eventfds) are registered when permitted.
fn own_cgroup_source(proc_root: &Path) -> Option<Box<dyn MemorySource>> {
    let dirs = own_cgroup_dirs(proc_root);
    if let Some((dir, mount)) = &dirs.v2 {
        if let Ok(source) = CgroupV2Source::at(dir) {
            let mut source = source.with_ancestors(mount);
            if let Err(e) = source.enable_psi(&PsiTriggerSpec::defaults()) {
                tracing::info!(error = %e, "cgroup v2 PSI triggers unavailable; polling");
            }
            return Some(Box::new(source));
        }
    }
    let dir = dirs.v1_memory?;
    let mut source = CgroupV1Source::at(dir).ok()?;
    if let Err(e) = source.enable_pressure_events() {
        tracing::info!(error = %e, "cgroup v1 pressure_level events unavailable; polling");
    }
    Some(Box::new(source))
}

/// One reading of this process's memory cgroup (no events registered), if any.
#[cfg(not(target_vendor = "apple"))]
pub(crate) fn own_cgroup_reading() -> Option<crate::MemoryReading> {
    let dirs = own_cgroup_dirs(Path::new("/proc"));
    if let Some((dir, mount)) = &dirs.v2 {
        if let Ok(source) = CgroupV2Source::at(dir) {
            return source.with_ancestors(mount).read().ok();
        }
    }
    CgroupV1Source::at(dirs.v1_memory?).ok()?.read().ok()
}

/// The memory sources this machine has. On Apple systems, the [`crate::AppleSource`]
/// (jetsam figures and libdispatch memory-pressure events). On Linux and Android,
/// [`detect_at`] on `/proc`.
/// Host-injected warnings are added by the caller ([`crate::HostSignal::source`]).
pub fn detect() -> Vec<Box<dyn MemorySource>> {
    #[cfg(target_vendor = "apple")]
    {
        vec![Box::new(crate::AppleSource::new())]
    }
    #[cfg(not(target_vendor = "apple"))]
    {
        detect_at("/proc")
    }
}

/// The sources a proc tree at `proc_root` offers: this process's cgroup (v2 if it has the
/// memory controller, else v1) when readable, and always `<root>/meminfo` with
/// `<root>/self/status` (a [`ProcSource`], with a system-wide PSI trigger when permitted,
/// else polled), since host-wide pressure kills processes too. On Android, where apps
/// usually can read neither PSI nor their cgroup, that polled `ProcSource` is the one
/// source statelm has without host code.
pub fn detect_at(proc_root: impl AsRef<Path>) -> Vec<Box<dyn MemorySource>> {
    let root = proc_root.as_ref();
    let mut sources: Vec<Box<dyn MemorySource>> = Vec::new();
    if let Some(source) = own_cgroup_source(root) {
        sources.push(source);
    }
    let mut proc = ProcSource::at(root);
    if root.join("pressure/memory").exists() {
        if let Err(e) = proc.enable_psi(&PsiTriggerSpec::defaults()) {
            tracing::info!(error = %e, "system PSI triggers unavailable; polling /proc");
        }
    }
    if root.join("meminfo").exists() {
        sources.push(Box::new(proc));
    }
    sources
}

/// Human descriptions of [`detect`]'s sources, for `statelm doctor`, e.g.
/// `"cgroup v1 /sys/fs/cgroup/memory/x (limit 1.2 GiB, pressure_level events)"`.
pub fn describe_sources() -> Vec<String> {
    detect().iter().map(|s| s.describe()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
garbage line
";

    #[test]
    fn parses_v1_and_v2_membership() {
        let m = parse_proc_cgroup("9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n");
        assert_eq!(m.v1_memory.as_deref(), Some("/process_api/abc"));
        assert_eq!(m.v2.as_deref(), Some("/"));
        let m = parse_proc_cgroup("0::/user.slice/app.scope\n");
        assert_eq!(m.v1_memory, None);
        let m2 = parse_proc_cgroup("5:cpu,memory,blkio:/x\nbad\n");
        assert_eq!(m2.v1_memory.as_deref(), Some("/x"));
        assert_eq!(m.v2.as_deref(), Some("/user.slice/app.scope"));
    }

    #[test]
    fn resolves_dirs() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 4);
        let m = parse_proc_cgroup("4:memory:/process_api/abc\n0::/\n");
        let dirs = cgroup_dirs(&m, &mounts);
        assert_eq!(
            dirs.v1_memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory/process_api/abc"))
        );
        let (v2, mount) = dirs.v2.unwrap();
        assert_eq!(v2, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(mount, Path::new("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn container_mount_roots_are_stripped() {
        let info = "1 0 0:1 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n\
                    2 0 0:2 /kube/pod\\0401 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let mounts = parse_mountinfo(info);
        assert_eq!(mounts[1].root, "/kube/pod 1");
        let m = parse_proc_cgroup("4:memory:/docker/abc\n0::/kube/pod 1/app\n");
        let dirs = cgroup_dirs(&m, &mounts);
        assert_eq!(dirs.v1_memory.unwrap(), Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(dirs.v2.unwrap().0, Path::new("/sys/fs/cgroup/app"));
    }

    #[cfg(not(target_vendor = "apple"))]
    #[test]
    fn detect_on_this_machine_has_proc() {
        let sources = detect();
        assert!(sources.iter().any(|s| s.name() == "proc"));
        for line in describe_sources() {
            println!("source: {line}");
        }
    }
}
