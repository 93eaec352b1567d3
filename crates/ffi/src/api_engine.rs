//! Exported functions: engines, sessions and memory warnings.

use crate::cstr::{export_string, read_opt_str, read_str, reset_out, write_out};
use crate::engine::FfiEngine;
use crate::handles::{self, StatelmEngine, StatelmModel};
use crate::options;
use crate::status::{guard, FfiError, STATELM_ERR_MISUSE};
use futures::executor::block_on;
use statelm_engine::{Engine, PressureLevel, SessionId};
use std::ffi::{c_char, c_int};
use std::path::Path;

/// Memory pressure is over: lowered token budgets are restored at once (a warning also lapses
/// by itself after `pressure_hold_ms`).
pub const STATELM_PRESSURE_NORMAL: c_int = 0;
/// Memory is getting tight (iOS `didReceiveMemoryWarning`, Android `onTrimMemory` at
/// `TRIM_MEMORY_RUNNING_LOW` or `TRIM_MEMORY_UI_HIDDEN`): every session gives back at least
/// half of its cache now — the generating one first, with a CONTEXT_TRIMMED event — idle
/// sessions are spilled to disk (SPILLED), token budgets lowered. A second WARNING while the
/// first holds counts as CRITICAL.
pub const STATELM_PRESSURE_WARNING: c_int = 1;
/// The process is about to be killed (Android `TRIM_MEMORY_RUNNING_CRITICAL`,
/// `TRIM_MEMORY_COMPLETE` or `TRIM_MEMORY_BACKGROUND`, a second iOS warning): every session's
/// cache is evicted (EVICTED; its history is kept and its next turn recomputes it), and a
/// running generation is paused: it recomputes its prompt and the answer so far and goes on
/// when the pressure eases.
pub const STATELM_PRESSURE_CRITICAL: c_int = 2;

/// Starts an engine on `model`. `config_json` may be NULL or an object with any of:
/// `max_sessions`, `session_capacity` (tokens per session state), `token_budget`,
/// `kv_type` (`"f32"`, `"f16"`, `"q8_0"`), `spill_dir`, `queue_depth`, `memory_ceiling`
/// (bytes, on the engine's own accounting: weights, States, scratch), `real_memory` (default
/// true: before memory grows the engine reads the process's real footprint — its memory
/// cgroup's working set, else its resident set — and keeps it under the real limit less a
/// margin, spilling sessions and shrinking its prefill scratch first), `memory_limit` (bytes:
/// the resident-set limit outside a limited cgroup, e.g. the app's budget on a phone),
/// `memory_margin` (bytes kept free under that limit; default 16 MiB), `idle_after_ms` (a session idle this long may be spilled), `stream_buffer`
/// (events buffered per generation before the engine waits for its callback),
/// `prefill_chunk`, and `policy` (`trim_keep_fraction`, `warning_factor`,
/// `critical_factor`, `hard_trim_suffix`), `os_memory_watch` (see below), `pressure_hold_ms`
/// (how long a `statelm_memory_warning` level holds before it lapses to NORMAL; default
/// 30000), and `tier` (`"auto"`: the device's tier sets `token_budget` — 2048 on devices
/// with 8 GB of memory or more, else 1024 — and `kv_type`, unless those fields are given
/// too), and `session_dir` (where durable sessions keep their files, created with mode 0700;
/// needed by `statelm_session_open`). Unknown fields are an error. `*out` receives the engine handle (NULL on failure); free it with
/// `statelm_engine_free`.
///
/// The engine computes on its own thread and keeps its own reference to the model.
///
/// With `os_memory_watch` (default true on iOS, macOS and Android, false elsewhere) the engine
/// watches the OS's own memory signals from the start, with no host code: on iOS and macOS a
/// libdispatch memory-pressure source and the jetsam figures (`os_proc_available_memory`),
/// on Android and Linux `/proc/meminfo` polled (with PSI triggers where permitted) and the
/// process's memory cgroup. `statelm_memory_warning` still works alongside it.
///
/// # Safety
/// `config_json` must be NULL or a NUL-terminated string; `out` must be NULL or valid for
/// writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_engine_start(
    model: *const StatelmModel,
    config_json: *const c_char,
    out: *mut *mut StatelmEngine,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out` is NULL or valid for writes.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        let model = handles::model(model)?;
        // SAFETY: by this function's contract `config_json` is NULL or NUL-terminated.
        let json = unsafe { read_opt_str(config_json, "config_json") }?;
        let start = options::engine_config(json)?;
        let defaults = statelm_engine::ChatDefaults::for_model(&model);
        let engine = FfiEngine::new(Engine::start(model, start.config), defaults);
        if start.os_memory_watch {
            engine.watch_os_memory();
        }
        let handle = handles::new_engine(engine)?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, handle) };
        Ok(())
    })
}

/// Frees an engine: refuses new calls on the handle, cancels every running generation,
/// waits until every callback has returned (each generation's last event, DONE with stop
/// reason CANCELLED, is still delivered), stops the engine thread and deletes its spill
/// files. No callback of this engine runs after this returns.
///
/// Must not be called from one of this engine's callbacks (`STATELM_ERR_MISUSE`). Freeing
/// twice, or a model handle, fails with `STATELM_ERR_INVALID_HANDLE`; a call racing with the
/// free on another thread either completes or fails with `STATELM_ERR_INVALID_HANDLE`.
#[no_mangle]
pub extern "C" fn statelm_engine_free(engine: *mut StatelmEngine) -> c_int {
    guard(|| {
        if handles::engine(engine)?.in_own_callback() {
            return Err(FfiError::new(
                STATELM_ERR_MISUSE,
                "statelm_engine_free called from one of that engine's callbacks",
            ));
        }
        let engine = handles::take_engine(engine)?;
        engine.shutdown();
        Ok(())
    })
}

/// Forwards a memory warning from the host: `level` is `STATELM_PRESSURE_NORMAL` (0),
/// `STATELM_PRESSURE_WARNING` (1) or `STATELM_PRESSURE_CRITICAL` (2). Never blocks; safe to
/// call from any thread, including a callback or the main/UI thread. The engine acts between
/// two steps — on every session, the generating one first — and reports every action to the
/// affected session: CONTEXT_TRIMMED or EVICTED on its running generation, SPILLED (then
/// RESTORED) on the next generation of an idle one. Send every warning the OS gives: the level
/// holds for `pressure_hold_ms` and then lapses (iOS never says that pressure is over), and a
/// WARNING that arrives while one holds is taken as CRITICAL.
#[no_mangle]
pub extern "C" fn statelm_memory_warning(engine: *const StatelmEngine, level: c_int) -> c_int {
    guard(|| {
        let level = match level {
            STATELM_PRESSURE_NORMAL => PressureLevel::Normal,
            STATELM_PRESSURE_WARNING => PressureLevel::Warning,
            STATELM_PRESSURE_CRITICAL => PressureLevel::Critical,
            other => {
                return Err(FfiError::invalid(format!(
                    "memory pressure level must be 0, 1 or 2, got {other}"
                )))
            }
        };
        handles::engine(engine)?.handle.memory_warning(level);
        Ok(())
    })
}

/// The engine's figures as JSON (sessions, spilled, active generations, token counters,
/// trims, spills, evictions, restores, memory in bytes, pressure level, budget factor,
/// latencies). `*out` receives a string to free with `statelm_string_free`.
///
/// # Safety
/// `out` must be NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_engine_stats_json(
    engine: *const StatelmEngine,
    out: *mut *mut c_char,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out` is NULL or valid for writes.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        let stats = block_on(handles::engine(engine)?.handle.stats());
        let json = serde_json::to_string(&stats).map_err(|e| FfiError::invalid(e.to_string()))?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, export_string(json)) };
        Ok(())
    })
}

/// Creates a session (a conversation with its own KV cache). `options_json` may be NULL or
/// `{"token_budget": N, "pinned_prefix": N, "system_prompt": "...", "chat_template_kwargs":
/// {...}}` (variables for the chat template in this session, such as `{"enable_thinking":
/// false}`). `*out_session` receives its id (0 on failure; ids are never 0). Blocks until the engine answers (between
/// two generation steps).
///
/// # Safety
/// `options_json` must be NULL or a NUL-terminated string; `out_session` must be NULL or
/// valid for writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn statelm_session_new(
    engine: *const StatelmEngine,
    options_json: *const c_char,
    out_session: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out_session` is NULL or valid for writes.
        unsafe { reset_out(out_session, 0, "out_session") }?;
        let engine = handles::engine(engine)?;
        // SAFETY: by this function's contract `options_json` is NULL or NUL-terminated.
        let json = unsafe { read_opt_str(options_json, "options_json") }?;
        let opts = options::session_options(json)?;
        let id = block_on(engine.handle.create_session(opts))?;
        // SAFETY: `out_session` was checked by `reset_out`.
        unsafe { write_out(out_session, id.0) };
        Ok(())
    })
}

/// Opens the durable session `name` (the engine's config needs `"session_dir"`), so the
/// conversation survives the process being killed (jetsam, the OOM killer). `name` is a plain
/// identifier: 1 to 64 ASCII letters, digits, `_` or `-` (anything else, such as a path, fails
/// with `STATELM_ERR_INVALID_ARGUMENT`). If a session of that name is open, `*out_session`
/// receives its id; else, if the session directory holds the name's files, the conversation
/// is resumed from them — the history (every completed turn) from its log, the KV cache from
/// its snapshot as far as it matches that history, the rest recomputed by the session's next
/// generation, whose first event is RESUMED saying which; else a new session is created with
/// `options_json` (as for `statelm_session_new`). From then on its history is appended to
/// `session_dir/NAME.stlmlog` and fsynced after every generation (a few bytes per token), and
/// its KV snapshot (`NAME.stlmsess`) is written when a memory warning spills or trims it, when
/// it is closed and when the engine is freed; the files stay (`statelm_session_reset`
/// empties them). A log with a bad header fails with `STATELM_ERR_BAD_SESSION_FILE`; a torn
/// or corrupt log tail is dropped and a bad snapshot ignored, both named in RESUMED.
///
/// # Safety
/// `name` and `options_json` must each be NULL or a NUL-terminated string; `out_session`
/// must be NULL or valid for writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn statelm_session_open(
    engine: *const StatelmEngine,
    name: *const c_char,
    options_json: *const c_char,
    out_session: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out_session` is NULL or valid for writes.
        unsafe { reset_out(out_session, 0, "out_session") }?;
        let engine = handles::engine(engine)?;
        // SAFETY: by this function's contract `name` is NULL or NUL-terminated.
        let name = unsafe { read_str(name, "name") }?;
        // SAFETY: by this function's contract `options_json` is NULL or NUL-terminated.
        let json = unsafe { read_opt_str(options_json, "options_json") }?;
        let opts = options::session_options(json)?;
        let id = block_on(engine.handle.open_session(name, opts))?;
        // SAFETY: `out_session` was checked by `reset_out`.
        unsafe { write_out(out_session, id.0) };
        Ok(())
    })
}

/// Closes a session, cancelling its running generation (which ends with DONE, stop reason
/// CANCELLED) and freeing its memory and spill file. A durable session
/// (`statelm_session_open`) has its history logged and its KV snapshot written first; its
/// files stay, so opening the name again resumes it.
#[no_mangle]
pub extern "C" fn statelm_session_close(engine: *const StatelmEngine, session: u64) -> c_int {
    guard(|| {
        let engine = handles::engine(engine)?;
        Ok(block_on(engine.handle.close_session(SessionId(session)))?)
    })
}

/// Empties a session (its KV cache and history). `STATELM_ERR_BUSY` while it generates.
#[no_mangle]
pub extern "C" fn statelm_session_reset(engine: *const StatelmEngine, session: u64) -> c_int {
    guard(|| {
        let engine = handles::engine(engine)?;
        Ok(block_on(engine.handle.reset_session(SessionId(session)))?)
    })
}

/// Saves a session (KV cache, history, budget) to `path`, atomically and checksummed.
/// `STATELM_ERR_BUSY` while it generates; `STATELM_ERR_IO` if the file cannot be written.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn statelm_session_save(
    engine: *const StatelmEngine,
    session: u64,
    path: *const c_char,
) -> c_int {
    guard(|| {
        let engine = handles::engine(engine)?;
        // SAFETY: by this function's contract `path` is NULL or NUL-terminated.
        let path = unsafe { read_str(path, "path") }?;
        Ok(block_on(
            engine
                .handle
                .save_session(SessionId(session), Path::new(path)),
        )?)
    })
}

/// Loads a session saved by `statelm_session_save` (with the same model) as a new session;
/// `*out_session` receives its id (0 on failure). `STATELM_ERR_BAD_SESSION_FILE` for a
/// corrupt file or one saved with another model.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `out_session` must be NULL or valid for
/// writing one `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn statelm_session_load(
    engine: *const StatelmEngine,
    path: *const c_char,
    out_session: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out_session` is NULL or valid for writes.
        unsafe { reset_out(out_session, 0, "out_session") }?;
        let engine = handles::engine(engine)?;
        // SAFETY: by this function's contract `path` is NULL or NUL-terminated.
        let path = unsafe { read_str(path, "path") }?;
        let id = block_on(engine.handle.load_session(Path::new(path)))?;
        // SAFETY: `out_session` was checked by `reset_out`.
        unsafe { write_out(out_session, id.0) };
        Ok(())
    })
}

/// A session's figures as JSON (`state_tokens`, `history_tokens`, `kv_bytes`,
/// `state_bytes`, `token_budget`, `effective_budget`, `pinned_prefix`, `spilled`, `busy`,
/// `trimmed`, `last_decode_tokens_per_s`). `*out` receives a string to free with
/// `statelm_string_free`.
///
/// # Safety
/// `out` must be NULL or valid for writing one pointer.
#[no_mangle]
pub unsafe extern "C" fn statelm_session_info_json(
    engine: *const StatelmEngine,
    session: u64,
    out: *mut *mut c_char,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `out` is NULL or valid for writes.
        unsafe { reset_out(out, std::ptr::null_mut(), "out") }?;
        let engine = handles::engine(engine)?;
        let info = block_on(engine.handle.session_info(SessionId(session)))?;
        let json = serde_json::to_string(&info).map_err(|e| FfiError::invalid(e.to_string()))?;
        // SAFETY: `out` was checked by `reset_out`.
        unsafe { write_out(out, export_string(json)) };
        Ok(())
    })
}
