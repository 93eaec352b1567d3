//! statelm-governor: the memory governor.
//!
//! This crate turns the operating system's real memory signals into one
//! [`PressureLevel`], describes the device
//! it runs on ([`DeviceProfile`]) and decides, as a pure function
//! ([`Policy::decide`]), what the engine must do about pressure: trim, spill,
//! lower budgets or evict — each [`Action`] carrying a human reason, so nothing
//! is ever dropped silently.
//!
//! Sources of memory information, each a [`MemorySource`]:
//! - [`CgroupV2Source`] — `memory.max/high/current/stat/events` plus PSI triggers
//!   on `memory.pressure` (event-driven, `POLLPRI`).
//! - [`CgroupV1Source`] — `memory.limit_in_bytes/usage_in_bytes/stat/oom_control`
//!   plus `memory.pressure_level` notifications through eventfds.
//! - [`ProcSource`] — `/proc/meminfo` and `/proc/self/status`, optionally with a
//!   system-wide PSI trigger on `/proc/pressure/memory`.
//! - `AppleSource` (iOS, macOS) — physical memory, this process's footprint and the room
//!   jetsam leaves it (`os_proc_available_memory`), plus libdispatch memory-pressure events
//!   that statelm registers itself; the figures are decided on by [`AppleMemory`].
//! - [`HostSource`] — levels injected by the app host through a [`HostSignal`]
//!   (iOS `didReceiveMemoryWarning`, Android `onTrimMemory`, SIGUSR1/SIGUSR2).
//!
//! [`detect`] picks what this machine has and [`Monitor`] runs them in the
//! background, publishing level changes.
//!
//! [`FootprintReader`] reads the process's real footprint (cgroup working set, else resident
//! set) on demand, for admission control against the real limit.
//!
//! `unsafe` is denied everywhere but in the platform calls: Apple's (`apple_sys`), glibc's
//! `malloc_trim` (`malloc_sys`) and Linux's `prctl(PR_SET_THP_DISABLE)` (`thp_sys`).
#![deny(unsafe_code)]

mod apple;
#[cfg(target_vendor = "apple")]
#[allow(unsafe_code)]
mod apple_sys;
mod cgroup_v1;
mod cgroup_v2;
mod detect;
mod device;
mod devices;
mod error;
mod footprint;
mod host;
mod level;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod malloc_sys;
mod monitor;
mod policy;
mod proc_source;
mod psi;
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
mod thp_sys;
mod util;

#[cfg(target_vendor = "apple")]
pub use apple::AppleSource;
pub use apple::{
    dispatch_pressure_level, AppleMemory, AppleProfileMemory, DISPATCH_MEMORYPRESSURE_CRITICAL,
    DISPATCH_MEMORYPRESSURE_NORMAL, DISPATCH_MEMORYPRESSURE_WARN,
};
pub use cgroup_v1::CgroupV1Source;
pub use cgroup_v2::{CgroupV2Events, CgroupV2Source};
pub use detect::{
    cgroup_dirs, describe_sources, detect, detect_at, parse_mountinfo, parse_proc_cgroup,
    CgroupDirs, CgroupMembership, MountInfo,
};
pub use device::{parse_bytes, DeviceProfile, DEVICE_ENV, DEVICE_MEMORY_ENV};
pub use devices::{device, devices, DeviceSpec, Platform};
pub use error::{GovernorError, ParseBytesError};
pub use footprint::{keep_huge_pages_out, release_free_memory, Footprint, FootprintReader};
pub use host::{
    forward_signals, install_sigusr1, HostSignal, HostSource, SignalForwarder,
    DEFAULT_PRESSURE_HOLD,
};
pub use level::{MemoryReading, MemorySource, PressureLevel, Thresholds};
pub use monitor::{Monitor, MonitorConfig, MonitorEvent};
pub use policy::{decide, Action, Policy, PolicyInput, SessionInfo};
pub use proc_source::ProcSource;
pub use psi::{PsiKind, PsiTrigger, PsiTriggerSpec};
pub use util::format_bytes;
