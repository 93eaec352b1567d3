//! The device profile: physical memory, cgroup ceiling, CPU and SIMD features,
//! overridable from the environment to simulate smaller devices.

use crate::devices::DeviceSpec;
use crate::{GovernorError, ParseBytesError};
#[cfg(not(target_vendor = "apple"))]
use crate::{MemorySource, ProcSource};

/// Environment variable overriding the device memory (`"6GiB"`, `"512MiB"`, bytes).
pub const DEVICE_MEMORY_ENV: &str = "STATELM_DEVICE_MEMORY";
/// Environment variable simulating a device from [`crate::devices`] by id (e.g. `"iphone-15-pro"`).
pub const DEVICE_ENV: &str = "STATELM_DEVICE";

/// What the runtime knows about the device it runs on (or simulates).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceProfile {
    /// Physical RAM in bytes (MemTotal or `hw.memsize`, or the simulated device's RAM).
    pub physical_memory: u64,
    /// The per-process ceiling: this process's cgroup limit, on iOS the jetsam limit
    /// (footprint + `os_proc_available_memory()`), or a simulated device's assumed
    /// per-app ceiling. `None` when unlimited.
    pub cgroup_limit: Option<u64>,
    /// Bytes available now (MemAvailable, bounded by the cgroup's headroom; on iOS the
    /// room left before jetsam, on macOS the free share of RAM).
    pub available_memory: u64,
    /// Logical CPUs this process may use.
    pub cpu_count: usize,
    /// Physical cores (from `/proc/cpuinfo` or `hw.physicalcpu`; `cpu_count` when unknown).
    pub physical_cores: usize,
    /// SIMD features detected at run time, e.g. `avx2`, `fma`, `f16c`, `neon`.
    pub simd: Vec<String>,
    /// Set when the profile is simulated (device id or the override used).
    pub name: Option<String>,
}

impl DeviceProfile {
    /// Detects this machine: its memory (`/proc/meminfo` and the cgroup,
    /// or on Apple systems `hw.memsize` and the jetsam figures), CPUs and SIMD features.
    pub fn detect() -> DeviceProfile {
        let (physical_memory, cgroup_limit, available_memory) = detect_memory();
        let cpu_count = std::thread::available_parallelism().map_or(1, |n| n.get());
        DeviceProfile {
            physical_memory,
            cgroup_limit,
            available_memory,
            cpu_count,
            physical_cores: physical_cores().unwrap_or(cpu_count).min(cpu_count),
            simd: simd_features(),
            name: None,
        }
    }

    /// [`DeviceProfile::detect`], then applies `STATELM_DEVICE` (a device id from
    /// [`crate::devices`]) and `STATELM_DEVICE_MEMORY` (which wins).
    pub fn from_env() -> Result<DeviceProfile, GovernorError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`DeviceProfile::from_env`] with a custom variable lookup (for tests).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<DeviceProfile, GovernorError> {
        let mut profile = DeviceProfile::detect();
        if let Some(id) = lookup(DEVICE_ENV).filter(|v| !v.trim().is_empty()) {
            let spec =
                crate::devices::device(id.trim()).ok_or_else(|| GovernorError::InvalidEnv {
                    var: DEVICE_ENV,
                    value: id.clone(),
                    reason: "unknown device id (see `statelm devices`)".into(),
                })?;
            profile = DeviceProfile::for_device(&spec);
        }
        if let Some(value) = lookup(DEVICE_MEMORY_ENV).filter(|v| !v.trim().is_empty()) {
            let bytes = parse_bytes(&value).map_err(|e| GovernorError::InvalidEnv {
                var: DEVICE_MEMORY_ENV,
                value: value.clone(),
                reason: e.to_string(),
            })?;
            let name = format!("{DEVICE_MEMORY_ENV}={}", value.trim());
            profile = DeviceProfile::simulated(&name, bytes);
        }
        Ok(profile)
    }

    /// A simulated device with `memory` bytes of RAM and no other ceiling; CPU
    /// and SIMD are this machine's (the code still runs here).
    pub fn simulated(name: &str, memory: u64) -> DeviceProfile {
        let cpu_count = std::thread::available_parallelism().map_or(1, |n| n.get());
        DeviceProfile {
            physical_memory: memory,
            cgroup_limit: None,
            available_memory: memory,
            cpu_count,
            physical_cores: physical_cores().unwrap_or(cpu_count).min(cpu_count),
            simd: simd_features(),
            name: Some(name.to_string()),
        }
    }

    /// A simulated device from the device list: its RAM, and its assumed per-app
    /// ceiling as the process ceiling.
    pub fn for_device(spec: &DeviceSpec) -> DeviceProfile {
        let mut profile = DeviceProfile::simulated(&spec.id, spec.ram);
        profile.cgroup_limit = Some(spec.app_ceiling);
        profile.available_memory = spec.app_ceiling.min(spec.ram);
        profile
    }

    /// A device of `physical` bytes of RAM under an optional per-process `ceiling` (what a
    /// tier decision looks at); CPU and SIMD are this machine's.
    pub fn with_memory(physical: u64, ceiling: Option<u64>) -> DeviceProfile {
        let mut p = DeviceProfile::simulated("", physical);
        p.name = None;
        p.cgroup_limit = ceiling;
        p.available_memory = ceiling.map_or(physical, |c| c.min(physical));
        p
    }

    /// Its memory in one line, e.g. `"4.0 GiB (ceiling; RAM 64.0 GiB)"`, after the device's
    /// name when simulated.
    pub fn describe_memory(&self) -> String {
        let name = (self.name.as_deref()).map_or(String::new(), |n| format!("{n}: "));
        match self.cgroup_limit {
            Some(c) if c < self.physical_memory => format!(
                "{name}{} (ceiling; RAM {})",
                crate::format_bytes(self.effective_memory()),
                crate::format_bytes(self.physical_memory)
            ),
            _ => format!("{name}{} (RAM)", crate::format_bytes(self.physical_memory)),
        }
    }

    /// The memory the process can count on: min of physical RAM and the ceiling.
    pub fn effective_memory(&self) -> u64 {
        self.cgroup_limit
            .map_or(self.physical_memory, |l| l.min(self.physical_memory))
    }
}

/// (physical memory, per-process ceiling, available now) on Linux and Android: MemTotal,
/// the cgroup limit, and MemAvailable bounded by the cgroup's headroom.
#[cfg(not(target_vendor = "apple"))]
fn detect_memory() -> (u64, Option<u64>, u64) {
    let proc_reading = ProcSource::new().read().ok();
    let physical_memory = proc_reading.as_ref().and_then(|r| r.limit).unwrap_or(0);
    let mut available_memory = proc_reading.and_then(|r| r.available).unwrap_or(0);
    let cgroup = crate::detect::own_cgroup_reading();
    let cgroup_limit = cgroup.as_ref().and_then(|r| r.limit);
    if let Some(headroom) = cgroup.and_then(|r| r.available) {
        available_memory = available_memory.min(headroom);
    }
    (physical_memory, cgroup_limit, available_memory)
}

/// (physical memory, per-process ceiling, available now) on iOS and macOS: `hw.memsize`,
/// the jetsam ceiling (footprint + `os_proc_available_memory`, iOS), and the room left.
#[cfg(target_vendor = "apple")]
fn detect_memory() -> (u64, Option<u64>, u64) {
    let m = crate::apple::sample().profile();
    (m.physical_memory, m.process_limit, m.available_memory)
}

/// Physical CPU cores (`hw.physicalcpu`).
#[cfg(target_vendor = "apple")]
fn physical_cores() -> Option<usize> {
    crate::apple::physical_cores()
}

/// Distinct (physical id, core id) pairs in `/proc/cpuinfo`.
#[cfg(not(target_vendor = "apple"))]
fn physical_cores() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut pairs = std::collections::BTreeSet::new();
    let mut package = "";
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "physical id" => package = value.trim(),
            "core id" => {
                pairs.insert((package.to_string(), value.trim().to_string()));
            }
            _ => {}
        }
    }
    (!pairs.is_empty()).then_some(pairs.len())
}

/// SIMD features of this CPU that the kernels care about, detected at run time.
pub(crate) fn simd_features() -> Vec<String> {
    #[allow(unused_mut)]
    let mut out: Vec<&str> = Vec::new();
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        macro_rules! x86 {
            ($($f:tt),*) => { $( if std::is_x86_feature_detected!($f) { out.push($f); } )* };
        }
        x86!(
            "sse4.1",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vnni"
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        macro_rules! arm {
            ($($f:tt),*) => {
                $( if std::arch::is_aarch64_feature_detected!($f) { out.push($f); } )*
            };
        }
        arm!("neon", "dotprod", "fp16", "i8mm");
    }
    out.into_iter().map(str::to_string).collect()
}

/// Parses a byte size: a plain number of bytes, or a number (fractions allowed)
/// with a unit. `K`, `M`, `G`, `T` and `KiB`…`TiB` are binary (1024-based);
/// `KB`, `MB`, `GB`, `TB` are decimal. Case-insensitive; spaces allowed.
///
/// ```
/// use statelm_governor::parse_bytes;
/// assert_eq!(parse_bytes("1.5GiB"), Ok(1610612736));
/// assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
/// assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
/// ```
pub fn parse_bytes(input: &str) -> Result<u64, ParseBytesError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(ParseBytesError::Empty);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let bad_number = || ParseBytesError::InvalidNumber(input.to_string());
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(bad_number());
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(ParseBytesError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| ParseBytesError::Overflow(input.to_string()));
    }
    let value: f64 = number.parse().map_err(|_| bad_number())?;
    let bytes = (value * multiplier as f64).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(ParseBytesError::Overflow(input.to_string()));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_bytes_cases() {
        assert_eq!(parse_bytes("123"), Ok(123));
        assert_eq!(parse_bytes(" 6GiB "), Ok(6 << 30));
        assert_eq!(parse_bytes("6g"), Ok(6 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("0.5 k"), Ok(512));
        assert_eq!(parse_bytes("4KB"), Ok(4000));
        assert_eq!(parse_bytes("1b"), Ok(1));
        assert_eq!(parse_bytes(""), Err(ParseBytesError::Empty));
        assert_eq!(parse_bytes("  "), Err(ParseBytesError::Empty));
        assert!(matches!(
            parse_bytes("GiB"),
            Err(ParseBytesError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_bytes("1.2.3G"),
            Err(ParseBytesError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_bytes(".5G"),
            Err(ParseBytesError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_bytes("-1G"),
            Err(ParseBytesError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_bytes("5 parsecs"),
            Err(ParseBytesError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("99999999999T"),
            Err(ParseBytesError::Overflow(_))
        ));
        assert!(matches!(
            parse_bytes("18446744073709551616"),
            Err(ParseBytesError::InvalidNumber(_)) | Err(ParseBytesError::Overflow(_))
        ));
    }

    #[test]
    fn detect_is_sane() {
        let p = DeviceProfile::detect();
        println!("{}", serde_json::to_string_pretty(&p).unwrap());
        assert!(p.cpu_count >= 1);
        assert!(p.physical_cores >= 1 && p.physical_cores <= p.cpu_count);
        if cfg!(any(target_os = "linux", target_vendor = "apple")) {
            assert!(p.physical_memory >= 256 << 20, "{p:?}");
            assert!(p.available_memory > 0 && p.available_memory <= p.physical_memory);
            assert!(p.effective_memory() <= p.physical_memory);
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            assert!(p.simd.iter().any(|f| f == "avx2"));
        }
    }

    #[test]
    fn env_overrides() {
        let p = DeviceProfile::from_lookup(|k| (k == DEVICE_MEMORY_ENV).then(|| "6GiB".into()))
            .unwrap();
        assert_eq!(p.physical_memory, 6 << 30);
        assert_eq!(p.effective_memory(), 6 << 30);
        assert_eq!(p.name.as_deref(), Some("STATELM_DEVICE_MEMORY=6GiB"));
        let err =
            DeviceProfile::from_lookup(|k| (k == DEVICE_MEMORY_ENV).then(|| "6 potatoes".into()))
                .unwrap_err();
        assert!(
            matches!(
                err,
                GovernorError::InvalidEnv {
                    var: DEVICE_MEMORY_ENV,
                    ..
                }
            ),
            "{err}"
        );
        let p = DeviceProfile::from_lookup(|k| (k == DEVICE_ENV).then(|| "iphone-15-pro".into()))
            .unwrap();
        assert_eq!(p.physical_memory, 8 << 30);
        assert!(p.effective_memory() < p.physical_memory);
        assert!(
            DeviceProfile::from_lookup(|k| (k == DEVICE_ENV).then(|| "nokia-3310".into())).is_err()
        );
        let none = DeviceProfile::from_lookup(|_| None).unwrap();
        assert_eq!(none.name, None);
    }

    #[test]
    fn simulated_profile_serializes() {
        let p = DeviceProfile::simulated("tiny", 512 << 20);
        assert_eq!(p.effective_memory(), 512 << 20);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["physical_memory"], 512u64 << 20);
        assert_eq!(json["name"], "tiny");
    }
}
