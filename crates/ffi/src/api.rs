//! Exported functions: library information, errors, strings, the device profile and models.

use crate::cstr::{export_string, free_string, read_opt_str, read_str, reset_out, write_out};
use crate::handles::{self, StatelmModel};
use crate::options;
use crate::status::{guard, last_error_ptr, status_name, FfiError};
use statelm_governor::DeviceProfile;
use statelm_model::Model;
use std::ffi::{c_char, c_int, CStr};

/// The version of statelm, e.g. `"0.1.0"` (a static string: do not free it).
#[no_mangle]
pub extern "C" fn statelm_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

/// The name of a status code, e.g. `"STATELM_ERR_BUSY"` (`"STATELM_ERR_UNKNOWN_CODE"` for a
/// value that is not one). A static string: do not free it.
#[no_mangle]
pub extern "C" fn statelm_status_name(code: c_int) -> *const c_char {
    status_name(code).as_ptr()
}

/// The message of the most recent statelm call made on this thread: why it failed, or `""`
/// when it succeeded. Never NULL. Owned by statelm and valid until the next statelm call on
/// this thread (copy it to keep it). This function itself does not change it.
#[no_mangle]
pub extern "C" fn statelm_last_error_message() -> *const c_char {
    last_error_ptr()
}

/// Frees a string that statelm returned through a `char**` out-parameter. NULL is a no-op.
///
/// Freeing a string twice, or a pointer statelm did not return, is detected and fails with
/// `STATELM_ERR_INVALID_ARGUMENT` (nothing is freed).
#[no_mangle]
pub extern "C" fn statelm_string_free(s: *mut c_char) -> c_int {
    guard(|| free_string(s))
}

/// Describes the device statelm runs on, as JSON: `physical_memory`, `cgroup_limit` (the
/// per-process ceiling, or null), `available_memory` (bytes), `cpu_count`, `physical_cores`,
/// `simd` (features detected at run time) and `name` (set when simulated through the
/// `STATELM_DEVICE` / `STATELM_DEVICE_MEMORY` environment variables). On iOS the figures are
/// the system's own: `physical_memory` from `hw.memsize`, `available_memory` from
/// `os_proc_available_memory()` (what this process may still allocate before jetsam kills
/// it) and `cgroup_limit` the jetsam ceiling (footprint + that room); on macOS
/// `available_memory` is the free share of RAM and `cgroup_limit` null. On Linux and
/// Android: MemTotal, MemAvailable and the memory cgroup's limit.
/// `*out` receives a string to free with `statelm_string_free` (NULL on failure).
///
/// # Safety
/// `out` must be NULL (the call then fails with `STATELM_ERR_NULL_POINTER`) or valid for
/// writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_device_profile_json(out: *mut *mut c_char) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out` is NULL or valid for writes.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        let profile = DeviceProfile::from_env().map_err(|e| FfiError::invalid(e.to_string()))?;
        let json = serde_json::to_string(&profile).map_err(|e| FfiError::invalid(e.to_string()))?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, export_string(json)) };
        Ok(())
    })
}

/// The tier statelm applies on this device — what `"tier": "auto"` in
/// `statelm_engine_start`'s config takes — as JSON: `quant` (`"q8_0"` on devices sold with
/// 8 GB or more, else `"q4"`: which weights file to fetch and load), `token_budget` (2048 or
/// 1024), `kv_type` (`"f16"` or `"q8_0"`), `physical_memory`, `ceiling` (the per-process
/// limit, or null) and `reason` (one line). The device is read as
/// `statelm_device_profile_json` reads it. `*out` receives a string to free with
/// `statelm_string_free` (NULL on failure).
///
/// # Safety
/// `out` must be NULL (the call then fails with `STATELM_ERR_NULL_POINTER`) or valid for
/// writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_tier_json(out: *mut *mut c_char) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out` is NULL or valid for writes.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        let json = tier_json()?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, export_string(json)) };
        Ok(())
    })
}

/// The JSON of [`statelm_tier_json`] for this device.
pub(crate) fn tier_json() -> Result<String, FfiError> {
    let profile = DeviceProfile::from_env().map_err(|e| FfiError::invalid(e.to_string()))?;
    Ok(tier_value(&profile).to_string())
}

/// The JSON of [`statelm_tier_json`] for `profile`.
fn tier_value(profile: &DeviceProfile) -> serde_json::Value {
    let tier = statelm_engine::device_tier(profile);
    serde_json::json!({
        "quant": tier.quant.name(),
        "token_budget": tier.token_budget,
        "kv_type": statelm_engine::kv_type_of(&tier).name(),
        "physical_memory": profile.physical_memory,
        "ceiling": profile.cgroup_limit,
        "reason": tier.reason,
    })
}

/// Loads a GGUF model from `path`. `options_json` may be NULL or
/// `{"threads": N, "ubatch": N}` (`threads` 0 or absent: one per available core).
/// `*out` receives the model handle (NULL on failure); free it with `statelm_model_free`.
///
/// The weights are memory-mapped and immutable: one model may serve several engines, from
/// any threads. Errors: `STATELM_ERR_IO` (missing or unreadable file), `STATELM_ERR_MODEL`
/// (not a model statelm runs), `STATELM_ERR_INVALID_ARGUMENT` (options).
///
/// # Safety
/// `path` and `options_json` must each be NULL or a NUL-terminated string; `out` must be
/// NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_model_load(
    path: *const c_char,
    options_json: *const c_char,
    out: *mut *mut StatelmModel,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract, `out` is NULL or valid for writes, and the
        // strings are NULL or NUL-terminated.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        // SAFETY: as above.
        let path = unsafe { read_str(path, "path") }?;
        // SAFETY: as above.
        let opts = options::load_options(unsafe { read_opt_str(options_json, "options_json") }?)?;
        let model = Model::load(path, &opts)?;
        let handle = handles::new_model(model)?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, handle) };
        Ok(())
    })
}

/// Frees a model handle. Engines started on the model keep their own reference, so this may
/// be called while they run (the weights are unmapped when the last engine is freed). NULL,
/// an already freed handle or an engine handle fail with `STATELM_ERR_NULL_POINTER` /
/// `STATELM_ERR_INVALID_HANDLE` and free nothing.
#[no_mangle]
pub extern "C" fn statelm_model_free(model: *mut StatelmModel) -> c_int {
    guard(|| handles::take_model(model).map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of a phone with `ram` GiB and half of it as the per-app ceiling.
    fn phone(ram: u64) -> DeviceProfile {
        let mut p = DeviceProfile::detect();
        p.physical_memory = ram << 30;
        p.cgroup_limit = Some(ram << 29);
        p
    }

    #[test]
    fn tier_json_follows_the_physical_memory() {
        let big = tier_value(&phone(8));
        assert_eq!(big["quant"], "q8_0");
        assert_eq!(big["token_budget"], 2048);
        assert_eq!(big["kv_type"], "f16");
        assert_eq!(big["ceiling"], 4u64 << 30);
        let small = tier_value(&phone(6));
        assert_eq!(small["quant"], "q4");
        assert_eq!(small["token_budget"], 1024);
        assert_eq!(small["kv_type"], "q8_0");
        assert!(small["reason"].as_str().unwrap().contains("1024"));
    }
}
