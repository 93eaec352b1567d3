//! Small helpers: reading kernel files, parsing key/value stats, polling descriptors.

use std::path::Path;
use std::time::Duration;

use crate::GovernorError;

/// Values at or above this are "no limit" (cgroup v1 writes `PAGE_COUNTER_MAX * PAGE_SIZE`,
/// 9223372036854771712 on 4 KiB pages).
pub(crate) const UNLIMITED_FLOOR: u64 = 1 << 62;

/// Reads a whole (small) kernel file.
pub(crate) fn read_text(path: &Path) -> Result<String, GovernorError> {
    std::fs::read_to_string(path).map_err(|e| GovernorError::io(path, e))
}

/// Parses one number, `"max"` or a huge value meaning unlimited (`None`).
pub(crate) fn parse_limit(path: &Path, text: &str) -> Result<Option<u64>, GovernorError> {
    let t = text.trim();
    if t == "max" {
        return Ok(None);
    }
    let v: u64 = t.parse().map_err(|_| {
        GovernorError::parse(path, format!("expected a number or \"max\", got {t:?}"))
    })?;
    Ok((v < UNLIMITED_FLOOR).then_some(v))
}

/// Reads a file holding one limit value (see [`parse_limit`]).
pub(crate) fn read_limit(path: &Path) -> Result<Option<u64>, GovernorError> {
    parse_limit(path, &read_text(path)?)
}

/// Reads a file holding one plain number.
pub(crate) fn read_u64(path: &Path) -> Result<u64, GovernorError> {
    let text = read_text(path)?;
    let t = text.trim();
    t.parse()
        .map_err(|_| GovernorError::parse(path, format!("expected a number, got {t:?}")))
}

/// Finds `key value` in a `memory.stat`/`memory.events`/`oom_control`-style file.
pub(crate) fn kv_get(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next() == Some(key))
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

/// Finds `Key:   value kB` in `/proc/meminfo` or `/proc/self/status`, in bytes.
pub(crate) fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let value: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") | Some("KB") | Some("kb") => value.checked_mul(1024),
            None => Some(value),
            Some(_) => None,
        }
    })
}

/// Builds a cgroup reading: working set = usage − inactive file pages, available =
/// limit − working set, level = max(threshold level, `event_level`).
pub(crate) fn cgroup_reading(
    limit: Option<u64>,
    usage: u64,
    inactive_file: Option<u64>,
    thresholds: &crate::Thresholds,
    event_level: crate::PressureLevel,
) -> crate::MemoryReading {
    let working_set = usage.saturating_sub(inactive_file.unwrap_or(0));
    crate::MemoryReading {
        limit,
        usage: Some(usage),
        working_set: Some(working_set),
        available: limit.map(|l| l.saturating_sub(working_set)),
        rss: None,
        level: thresholds.level(Some(working_set), limit).max(event_level),
    }
}

/// Formats bytes with a binary unit, e.g. `1.2 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Waits in `poll(2)` until one of `fds` has one of its `events`, or `timeout`.
/// Returns, per descriptor, whether it became ready. Retries on EINTR; a descriptor
/// in error (POLLERR/POLLHUP/POLLNVAL) is an error, so callers never spin on it.
#[cfg(unix)]
pub(crate) fn poll_ready(
    fds: &[(std::os::fd::BorrowedFd<'_>, rustix::event::PollFlags)],
    timeout: Duration,
) -> Result<Vec<bool>, GovernorError> {
    use rustix::event::{PollFd, PollFlags};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut pfds: Vec<PollFd<'_>> = fds.iter().map(|(fd, ev)| PollFd::new(fd, *ev)).collect();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = rustix::event::Timespec::try_from(left)
            .map_err(|_| GovernorError::Unsupported("poll timeout too large".into()))?;
        match rustix::event::poll(&mut pfds, Some(&ts)) {
            Ok(_) => {
                let broken = PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL;
                if pfds.iter().any(|p| p.revents().intersects(broken)) {
                    return Err(GovernorError::Event {
                        what: "poll".into(),
                        source: std::io::Error::other("event descriptor reported an error"),
                    });
                }
                return Ok(pfds
                    .iter()
                    .zip(fds)
                    .map(|(p, (_, ev))| p.revents().intersects(*ev))
                    .collect());
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(GovernorError::event("poll", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        let p = Path::new("x");
        assert_eq!(parse_limit(p, "max\n").unwrap(), None);
        assert_eq!(parse_limit(p, "9223372036854771712\n").unwrap(), None);
        assert_eq!(parse_limit(p, "67108864\n").unwrap(), Some(64 << 20));
        assert!(matches!(
            parse_limit(p, "lots"),
            Err(GovernorError::Parse { .. })
        ));
    }

    #[test]
    fn kv_and_kb() {
        let stat = "cache 10\ninactive_file 4096\ntotal_inactive_file 8192\n";
        assert_eq!(kv_get(stat, "inactive_file"), Some(4096));
        assert_eq!(kv_get(stat, "total_inactive_file"), Some(8192));
        assert_eq!(kv_get(stat, "active_file"), None);
        let meminfo =
            "MemTotal:       24684092 kB\nMemAvailable:   2 kB\nHugePages_Total:       0\n";
        assert_eq!(kb_field(meminfo, "MemTotal"), Some(24684092 * 1024));
        assert_eq!(kb_field(meminfo, "MemAvailable"), Some(2048));
        assert_eq!(kb_field(meminfo, "HugePages_Total"), Some(0));
        assert_eq!(kb_field(meminfo, "MemFree"), None);
    }

    #[test]
    fn formats() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(64 << 20), "64.0 MiB");
        assert_eq!(format_bytes(1288490188), "1.2 GiB");
    }
}
