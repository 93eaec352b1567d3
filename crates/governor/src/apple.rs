//! Apple platforms' (iOS, macOS) own memory signals, as data.
//!
//! The figures come from the system (`apple_sys`, Apple targets only): physical memory
//! (`sysctlbyname("hw.memsize")`), this process's footprint (`proc_pid_rusage`,
//! `ri_phys_footprint`, the figure jetsam counts), the room left to this process before
//! jetsam kills it (`os_proc_available_memory()`, iOS 13+ only), the system's free-memory
//! percentage (`kern.memorystatus_level`) and libdispatch's memory-pressure events. Everything
//! decided from them is a plain function here, compiled and tested on every platform.

#[cfg(target_vendor = "apple")]
use crate::{apple_sys, util::format_bytes, GovernorError, HostSignal, HostSource, MemorySource};
use crate::{MemoryReading, PressureLevel, Thresholds};

/// `DISPATCH_MEMORYPRESSURE_NORMAL`: the system's memory pressure returned to normal.
pub const DISPATCH_MEMORYPRESSURE_NORMAL: u64 = 0x01;
/// `DISPATCH_MEMORYPRESSURE_WARN`: the system is under memory pressure.
pub const DISPATCH_MEMORYPRESSURE_WARN: u64 = 0x02;
/// `DISPATCH_MEMORYPRESSURE_CRITICAL`: the system is under critical memory pressure.
pub const DISPATCH_MEMORYPRESSURE_CRITICAL: u64 = 0x04;

/// The level a libdispatch memory-pressure event stands for: `dispatch_source_get_data` of a
/// `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE` source. The strongest flag wins; `None` when no
/// known flag is set (nothing to report).
pub fn dispatch_pressure_level(data: u64) -> Option<PressureLevel> {
    if data & DISPATCH_MEMORYPRESSURE_CRITICAL != 0 {
        Some(PressureLevel::Critical)
    } else if data & DISPATCH_MEMORYPRESSURE_WARN != 0 {
        Some(PressureLevel::Warning)
    } else if data & DISPATCH_MEMORYPRESSURE_NORMAL != 0 {
        Some(PressureLevel::Normal)
    } else {
        None
    }
}

/// One sample of an Apple system's memory figures; `None` where the system did not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppleMemory {
    /// Physical RAM (`hw.memsize`).
    pub physical: Option<u64>,
    /// This process's physical footprint (`ri_phys_footprint`): what jetsam counts.
    pub footprint: Option<u64>,
    /// Bytes this process may still allocate before jetsam kills it
    /// (`os_proc_available_memory()`; iOS only, `None` on macOS and when it returns 0,
    /// which it does for processes that are not apps).
    pub process_available: Option<u64>,
    /// Percentage of memory the system considers free (`kern.memorystatus_level`, 0–100).
    pub free_percent: Option<u32>,
}

/// The memory part of a [`crate::DeviceProfile`] on an Apple system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppleProfileMemory {
    /// Physical RAM (0 when unknown).
    pub physical_memory: u64,
    /// The per-process ceiling: footprint + room left (iOS); `None` without one (macOS).
    pub process_limit: Option<u64>,
    /// Bytes available now: the room left (iOS), else the free share of RAM.
    pub available_memory: u64,
}

impl AppleMemory {
    /// The per-process ceiling jetsam enforces: footprint + room left (iOS apps only).
    pub fn process_limit(&self) -> Option<u64> {
        let available = self.process_available?;
        Some(self.footprint.unwrap_or(0).saturating_add(available))
    }

    /// Bytes of RAM the system considers free (`physical × free_percent / 100`).
    pub fn system_available(&self) -> Option<u64> {
        let percent = u128::from(self.free_percent?.min(100));
        let bytes = u128::from(self.physical?) * percent / 100;
        u64::try_from(bytes).ok()
    }

    /// The reading of a memory source: on iOS the process against its own jetsam ceiling
    /// (limit = footprint + room left, usage = footprint); without that ceiling (macOS) the
    /// whole machine (limit = RAM, usage = RAM not free). The level is the thresholds' level
    /// raised to `event_level` (the last libdispatch event).
    pub fn reading(&self, thresholds: &Thresholds, event_level: PressureLevel) -> MemoryReading {
        let (limit, used, available) = match self.process_limit() {
            Some(limit) => (Some(limit), self.footprint, self.process_available),
            None => {
                let available = self.system_available();
                let used = self
                    .physical
                    .zip(available)
                    .map(|(p, a)| p.saturating_sub(a));
                (self.physical, used, available)
            }
        };
        MemoryReading {
            limit,
            usage: used,
            working_set: used,
            available,
            rss: self.footprint,
            level: thresholds.level(used, limit).max(event_level),
        }
    }

    /// The device profile's memory figures.
    pub fn profile(&self) -> AppleProfileMemory {
        let physical_memory = self.physical.unwrap_or(0);
        let available_memory = self
            .process_available
            .or_else(|| self.system_available())
            .unwrap_or(physical_memory);
        AppleProfileMemory {
            physical_memory,
            process_limit: self.process_limit(),
            available_memory: if physical_memory > 0 {
                available_memory.min(physical_memory)
            } else {
                available_memory
            },
        }
    }
}

/// Samples this system's figures now.
#[cfg(target_vendor = "apple")]
pub fn sample() -> AppleMemory {
    AppleMemory {
        physical: apple_sys::physical_memory(),
        footprint: apple_sys::footprint(),
        process_available: apple_sys::process_available(),
        free_percent: apple_sys::free_percent(),
    }
}

/// Physical CPU cores (`hw.physicalcpu`).
#[cfg(target_vendor = "apple")]
pub(crate) fn physical_cores() -> Option<usize> {
    apple_sys::physical_cpus()
}

/// The memory source of iOS and macOS: the figures of [`AppleMemory`], polled, and the
/// system's memory-pressure events from a libdispatch `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE`
/// source that statelm registers itself (no host code needed). An event's level holds until
/// the system reports pressure back to normal.
#[cfg(target_vendor = "apple")]
#[derive(Debug)]
pub struct AppleSource {
    thresholds: Thresholds,
    events: HostSource,
    watch: Option<apple_sys::PressureWatch>,
}

#[cfg(target_vendor = "apple")]
impl AppleSource {
    /// A source with the default thresholds, registering the memory-pressure source.
    pub fn new() -> AppleSource {
        let signal = HostSignal::new();
        let events = signal.source().with_hold(std::time::Duration::MAX);
        let watch = apple_sys::PressureWatch::start(signal);
        if watch.is_none() {
            tracing::warn!("libdispatch refused a memory-pressure source; polling only");
        }
        AppleSource {
            thresholds: Thresholds::default(),
            events,
            watch,
        }
    }

    /// Uses `thresholds` instead of the default 80 % / 92 %.
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> AppleSource {
        self.thresholds = thresholds;
        self
    }
}

#[cfg(target_vendor = "apple")]
impl Default for AppleSource {
    fn default() -> Self {
        AppleSource::new()
    }
}

#[cfg(target_vendor = "apple")]
impl MemorySource for AppleSource {
    fn name(&self) -> &'static str {
        "apple"
    }

    fn describe(&self) -> String {
        let m = sample();
        let show = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), format_bytes);
        let events = if self.watch.is_some() {
            "dispatch memory-pressure events"
        } else {
            "no dispatch events, polled"
        };
        format!(
            "apple RAM {}, footprint {}, room left {} (os_proc_available_memory), {events}",
            show(m.physical),
            show(m.footprint),
            show(m.process_available),
        )
    }

    fn read(&mut self) -> Result<MemoryReading, GovernorError> {
        let event_level = self.events.read()?.level;
        Ok(sample().reading(&self.thresholds, event_level))
    }

    fn wait(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Option<PressureLevel>, GovernorError> {
        self.events.wait(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn iphone(footprint: u64, left: u64) -> AppleMemory {
        AppleMemory {
            physical: Some(6 * GIB),
            footprint: Some(footprint),
            process_available: Some(left),
            free_percent: Some(40),
        }
    }

    #[test]
    fn dispatch_flags_map_to_levels() {
        assert_eq!(dispatch_pressure_level(0x01), Some(PressureLevel::Normal));
        assert_eq!(dispatch_pressure_level(0x02), Some(PressureLevel::Warning));
        assert_eq!(dispatch_pressure_level(0x04), Some(PressureLevel::Critical));
        assert_eq!(dispatch_pressure_level(0x06), Some(PressureLevel::Critical));
        assert_eq!(dispatch_pressure_level(0x03), Some(PressureLevel::Warning));
        assert_eq!(dispatch_pressure_level(0), None);
        assert_eq!(dispatch_pressure_level(0x10), None);
    }

    #[test]
    fn ios_reading_is_the_process_against_its_jetsam_ceiling() {
        let t = Thresholds::default();
        let r = iphone(1024 * MIB, 2048 * MIB).reading(&t, PressureLevel::Normal);
        assert_eq!(r.limit, Some(3072 * MIB));
        assert_eq!(r.usage, Some(1024 * MIB));
        assert_eq!(r.available, Some(2048 * MIB));
        assert_eq!(r.rss, Some(1024 * MIB));
        assert_eq!(r.level, PressureLevel::Normal);
        // 2.5 GiB of a 3 GiB ceiling: 83 % → Warning; 2.9 of 3: 97 % → Critical.
        let r = iphone(2560 * MIB, 512 * MIB).reading(&t, PressureLevel::Normal);
        assert_eq!(r.level, PressureLevel::Warning);
        let r = iphone(2970 * MIB, 102 * MIB).reading(&t, PressureLevel::Normal);
        assert_eq!(r.level, PressureLevel::Critical);
        // A libdispatch event raises the level, never lowers it.
        let r = iphone(100 * MIB, 2900 * MIB).reading(&t, PressureLevel::Critical);
        assert_eq!(r.level, PressureLevel::Critical);
        let r = iphone(2970 * MIB, 102 * MIB).reading(&t, PressureLevel::Warning);
        assert_eq!(r.level, PressureLevel::Critical);
    }

    #[test]
    fn macos_reading_is_the_machine() {
        let mac = AppleMemory {
            physical: Some(16 * GIB),
            footprint: Some(300 * MIB),
            process_available: None,
            free_percent: Some(50),
        };
        let t = Thresholds::default();
        let r = mac.reading(&t, PressureLevel::Normal);
        assert_eq!(r.limit, Some(16 * GIB));
        assert_eq!(r.available, Some(8 * GIB));
        assert_eq!(r.usage, Some(8 * GIB));
        assert_eq!(r.rss, Some(300 * MIB));
        assert_eq!(r.level, PressureLevel::Normal);
        let low = AppleMemory {
            free_percent: Some(5),
            ..mac
        };
        assert_eq!(
            low.reading(&t, PressureLevel::Normal).level,
            PressureLevel::Critical
        );
        // Nothing known but an event: the event decides.
        let blind = AppleMemory::default();
        let r = blind.reading(&t, PressureLevel::Warning);
        assert_eq!((r.limit, r.usage, r.available), (None, None, None));
        assert_eq!(r.level, PressureLevel::Warning);
        assert_eq!(
            blind.reading(&t, PressureLevel::Normal).level,
            PressureLevel::Normal
        );
    }

    #[test]
    fn profiles() {
        let p = iphone(1024 * MIB, 2048 * MIB).profile();
        assert_eq!(p.physical_memory, 6 * GIB);
        assert_eq!(p.process_limit, Some(3072 * MIB));
        assert_eq!(p.available_memory, 2048 * MIB);
        let mac = AppleMemory {
            physical: Some(16 * GIB),
            footprint: Some(MIB),
            process_available: None,
            free_percent: Some(25),
        };
        let p = mac.profile();
        assert_eq!((p.physical_memory, p.process_limit), (16 * GIB, None));
        assert_eq!(p.available_memory, 4 * GIB);
        let bare = AppleMemory {
            physical: Some(8 * GIB),
            ..AppleMemory::default()
        };
        assert_eq!(bare.profile().available_memory, 8 * GIB);
        assert_eq!(AppleMemory::default().profile().physical_memory, 0);
        // A bogus percentage is clamped; the room left never exceeds RAM.
        let odd = AppleMemory {
            physical: Some(GIB),
            footprint: None,
            process_available: Some(4 * GIB),
            free_percent: Some(400),
        };
        assert_eq!(odd.system_available(), Some(GIB));
        assert_eq!(odd.profile().available_memory, GIB);
        assert_eq!(odd.process_limit(), Some(4 * GIB));
    }
}
