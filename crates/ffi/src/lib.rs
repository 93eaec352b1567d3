//! statelm-ffi: the C ABI for embedding statelm in an app (Swift, Kotlin/JNI, C, C++).
//!
//! The header `include/statelm.h` is generated from this crate by cbindgen (configured by
//! `cbindgen.toml`; `tests/header.rs` fails when the checked-in copy is stale) and states the
//! rules a host follows: threads, callbacks, ownership, errors. In short:
//!
//! - **Handles** ([`StatelmModel`], [`StatelmEngine`]) are opaque keys into a registry, not
//!   pointers to Rust memory: a freed, forged or wrong-kind handle is detected and answered
//!   with [`STATELM_ERR_INVALID_HANDLE`], never dereferenced.
//! - **Every call returns a status code** (`STATELM_OK` = 0) and records a message for
//!   [`statelm_last_error_message`] (thread-local). No panic crosses the boundary: each body
//!   runs under `catch_unwind` ([`STATELM_ERR_PANIC`]).
//! - **Generations are asynchronous**: [`statelm_generate`] returns a request id at once and
//!   delivers [`StatelmEvent`]s to a C callback on a thread statelm owns, one thread per
//!   generation, in order, ending with DONE or ERROR; [`statelm_wait`] blocks until the end,
//!   [`statelm_cancel`] stops it within one token.
//! - **Memory warnings** from the host ([`statelm_memory_warning`]) drive the engine's
//!   governor: spills, trims and evictions are reported as events.
//!
//! Every function is safe to call from any thread; the `unsafe` ones only because they read
//! C strings or write through out-pointers (each documents its `# Safety` contract).

mod api;
mod api_engine;
mod api_generate;
mod api_host;
mod cstr;
mod engine;
mod event;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod handles;
pub mod mobile;
mod options;
mod status;

pub use api::{
    statelm_device_profile_json, statelm_last_error_message, statelm_model_free,
    statelm_model_load, statelm_status_name, statelm_string_free, statelm_tier_json,
    statelm_version,
};
pub use api_engine::{
    statelm_engine_free, statelm_engine_start, statelm_engine_stats_json, statelm_memory_warning,
    statelm_session_close, statelm_session_info_json, statelm_session_load, statelm_session_new,
    statelm_session_open, statelm_session_reset, statelm_session_save, STATELM_PRESSURE_CRITICAL,
    STATELM_PRESSURE_NORMAL, STATELM_PRESSURE_WARNING,
};
pub use api_generate::{statelm_cancel, statelm_generate, statelm_wait};
pub use api_host::{
    statelm_lifecycle, statelm_thermal, STATELM_LIFECYCLE_BACKGROUND, STATELM_LIFECYCLE_FOREGROUND,
    STATELM_THERMAL_CRITICAL, STATELM_THERMAL_FAIR, STATELM_THERMAL_NOMINAL,
    STATELM_THERMAL_SERIOUS,
};
pub use event::{StatelmEvent, StatelmEventCallback, StatelmEventKind, StatelmStopReason};
pub use handles::{StatelmEngine, StatelmModel};
pub use status::*;

uniffi::setup_scaffolding!("statelm");
