//! The system calls behind [`crate::apple`] (Apple targets only): `sysctlbyname`,
//! `proc_pid_rusage`, `os_proc_available_memory` (looked up at run time) and a libdispatch
//! memory-pressure source. The only `unsafe` code of the governor; every decision made from
//! these figures lives in [`crate::apple`], where it is tested on every platform.

use std::ffi::{c_int, c_long, c_ulong, c_void, CStr};

use crate::apple::{
    dispatch_pressure_level, DISPATCH_MEMORYPRESSURE_CRITICAL, DISPATCH_MEMORYPRESSURE_NORMAL,
    DISPATCH_MEMORYPRESSURE_WARN,
};
use crate::HostSignal;

/// Integer types a sysctl may write any bytes into.
trait Plain: Copy + Default {}
impl Plain for u64 {}
impl Plain for c_int {}

/// A sysctl value of exactly `T`'s size, by name.
fn sysctl<T: Plain>(name: &CStr) -> Option<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    // SAFETY: `name` is NUL-terminated; `value` is valid for writes of `len` bytes and every
    // bit pattern is a valid `T` (an integer, `Plain`); no new value is set (NULL, 0).
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            (&raw mut value).cast::<c_void>(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0 && len == std::mem::size_of::<T>()).then_some(value)
}

/// Physical RAM in bytes (`hw.memsize`).
pub(crate) fn physical_memory() -> Option<u64> {
    sysctl::<u64>(c"hw.memsize").filter(|&v| v > 0)
}

/// The percentage of memory the system considers free (`kern.memorystatus_level`).
pub(crate) fn free_percent() -> Option<u32> {
    sysctl::<c_int>(c"kern.memorystatus_level").and_then(|v| u32::try_from(v).ok())
}

/// Physical CPU cores (`hw.physicalcpu`).
pub(crate) fn physical_cpus() -> Option<usize> {
    sysctl::<c_int>(c"hw.physicalcpu")
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v > 0)
}

extern "C" {
    /// `int proc_pid_rusage(int pid, int flavor, rusage_info_t *buffer)` (<libproc.h>).
    fn proc_pid_rusage(pid: c_int, flavor: c_int, buffer: *mut c_void) -> c_int;
}

/// This process's physical footprint (`ri_phys_footprint`), the figure jetsam counts.
pub(crate) fn footprint() -> Option<u64> {
    let pid = c_int::try_from(std::process::id()).ok()?;
    // SAFETY: `rusage_info_v2` is a C struct of integers, for which all zeroes are valid.
    let mut info: libc::rusage_info_v2 = unsafe { std::mem::zeroed() };
    // SAFETY: with RUSAGE_INFO_V2 the kernel writes one `rusage_info_v2` into `buffer`, and
    // `info` is one, valid for writes.
    let rc =
        unsafe { proc_pid_rusage(pid, libc::RUSAGE_INFO_V2, (&raw mut info).cast::<c_void>()) };
    (rc == 0).then_some(info.ri_phys_footprint)
}

/// `size_t os_proc_available_memory(void)` (<os/proc.h>, iOS 13+).
#[cfg(not(target_os = "macos"))]
type AvailableFn = unsafe extern "C" fn() -> usize;

/// The room this process has left before jetsam kills it: `os_proc_available_memory()` on
/// iOS 13+, `None` elsewhere and when it returns 0 (processes that are not apps). The function
/// is looked up with `dlsym`, not linked, so a binary runs on iOS versions without it.
#[cfg(not(target_os = "macos"))]
pub(crate) fn process_available() -> Option<u64> {
    static FUNCTION: std::sync::OnceLock<Option<AvailableFn>> = std::sync::OnceLock::new();
    let function = (*FUNCTION.get_or_init(|| {
        // SAFETY: `dlsym` only looks a NUL-terminated name up in the loaded images.
        let symbol =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"os_proc_available_memory".as_ptr()) };
        // SAFETY: the symbol, when present, is the C function `size_t (void)` of <os/proc.h>.
        (!symbol.is_null())
            .then(|| unsafe { std::mem::transmute::<*mut c_void, AvailableFn>(symbol) })
    }))?;
    // SAFETY: the function takes nothing and only reads the kernel's accounting.
    let left = unsafe { function() };
    u64::try_from(left).ok().filter(|&v| v > 0)
}

/// macOS has no per-process jetsam ceiling (`os_proc_available_memory` is iOS only).
#[cfg(target_os = "macos")]
pub(crate) fn process_available() -> Option<u64> {
    None
}

/// libdispatch's `struct dispatch_source_type_s`, only ever used by address.
#[repr(C)]
struct DispatchSourceType {
    _opaque: [u8; 0],
}

/// A `dispatch_source_t` / `dispatch_queue_t` / `dispatch_object_t`.
type DispatchObject = *mut c_void;

/// `QOS_CLASS_UTILITY` (<sys/qos.h>): the global queue the events are handled on.
const QOS_CLASS_UTILITY: c_long = 0x11;

extern "C" {
    /// `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE` is `&_dispatch_source_type_memorypressure`.
    static _dispatch_source_type_memorypressure: DispatchSourceType;
    fn dispatch_get_global_queue(identifier: c_long, flags: c_ulong) -> DispatchObject;
    fn dispatch_source_create(
        kind: *const DispatchSourceType,
        handle: usize,
        mask: c_ulong,
        queue: DispatchObject,
    ) -> DispatchObject;
    fn dispatch_set_context(object: DispatchObject, context: *mut c_void);
    fn dispatch_source_set_event_handler_f(
        source: DispatchObject,
        handler: extern "C" fn(*mut c_void),
    );
    fn dispatch_source_set_cancel_handler_f(
        source: DispatchObject,
        handler: extern "C" fn(*mut c_void),
    );
    fn dispatch_source_get_data(source: DispatchObject) -> c_ulong;
    fn dispatch_resume(object: DispatchObject);
    fn dispatch_source_cancel(source: DispatchObject);
    fn dispatch_release(object: DispatchObject);
}

/// What the event handler needs: where to report, and the source to read the event from.
struct WatchContext {
    signal: HostSignal,
    source: DispatchObject,
}

/// The event handler: reads which pressure flags fired and raises the signal.
extern "C" fn on_pressure(context: *mut c_void) {
    // SAFETY: the context is the `WatchContext` leaked in `PressureWatch::start`; it is freed
    // only by `on_cancel`, which libdispatch runs after the last event handler returned.
    let context = unsafe { &*context.cast::<WatchContext>() };
    // SAFETY: `context.source` is the live source this handler belongs to.
    let data = unsafe { dispatch_source_get_data(context.source) };
    // `unsigned long` is 32 bits on arm64_32 (watchOS), 64 bits elsewhere.
    #[allow(clippy::useless_conversion)]
    let data = u64::from(data);
    if let Some(level) = dispatch_pressure_level(data) {
        tracing::info!(%level, data, "dispatch memory-pressure event");
        context.signal.raise(level);
    }
}

/// The cancel handler: frees the context (no event handler runs after it).
extern "C" fn on_cancel(context: *mut c_void) {
    // SAFETY: the context was made by `Box::into_raw` in `PressureWatch::start` and is freed
    // here exactly once (libdispatch calls the cancel handler once).
    drop(unsafe { Box::from_raw(context.cast::<WatchContext>()) });
}

/// A registered `DISPATCH_SOURCE_TYPE_MEMORYPRESSURE` source that raises a [`HostSignal`]
/// (Warning, Critical, back to Normal) on each event, until dropped.
#[derive(Debug)]
pub(crate) struct PressureWatch {
    source: DispatchObject,
}

// SAFETY: dispatch objects may be used from any thread; the watch only cancels and releases
// its source, once, on drop.
unsafe impl Send for PressureWatch {}

impl PressureWatch {
    /// Registers the source on the utility global queue; `None` if libdispatch refuses.
    pub(crate) fn start(signal: HostSignal) -> Option<PressureWatch> {
        let mask = DISPATCH_MEMORYPRESSURE_NORMAL
            | DISPATCH_MEMORYPRESSURE_WARN
            | DISPATCH_MEMORYPRESSURE_CRITICAL;
        // SAFETY: plain libdispatch calls; the type is the memory-pressure source type
        // (taken by address only), the mask holds only that type's flags, the queue is a
        // global queue (never NULL for a valid QoS class) and NULL is checked.
        let source = unsafe {
            let queue = dispatch_get_global_queue(QOS_CLASS_UTILITY, 0);
            dispatch_source_create(
                &raw const _dispatch_source_type_memorypressure,
                0,
                mask as c_ulong,
                queue,
            )
        };
        if source.is_null() {
            return None;
        }
        let context = Box::into_raw(Box::new(WatchContext { signal, source }));
        // SAFETY: `source` is a new, suspended source; the handlers match the context's type
        // and the context lives until `on_cancel` frees it. Resuming starts delivery.
        unsafe {
            dispatch_set_context(source, context.cast::<c_void>());
            dispatch_source_set_event_handler_f(source, on_pressure);
            dispatch_source_set_cancel_handler_f(source, on_cancel);
            dispatch_resume(source);
        }
        Some(PressureWatch { source })
    }
}

impl Drop for PressureWatch {
    fn drop(&mut self) {
        // SAFETY: the source is live and ours; cancelling stops events (then `on_cancel` frees
        // the context) and releasing drops our reference, once.
        unsafe {
            dispatch_source_cancel(self.source);
            dispatch_release(self.source);
        }
    }
}
