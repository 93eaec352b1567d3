//! Status codes, the thread-local last-error message, and [`guard`], which runs the body of
//! every exported function so that no panic crosses the C boundary.

use statelm_engine::EngineError;
use statelm_model::ModelError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const STATELM_OK: c_int = 0;
/// An argument is invalid: malformed JSON, an unknown JSON field, a string that is not UTF-8,
/// a value out of range, or a request the engine refused as invalid (an empty prompt).
pub const STATELM_ERR_INVALID_ARGUMENT: c_int = 1;
/// A required pointer argument is NULL.
pub const STATELM_ERR_NULL_POINTER: c_int = 2;
/// A model or engine handle is not live: already freed, never returned by statelm, or of the
/// other kind (a model where an engine is expected).
pub const STATELM_ERR_INVALID_HANDLE: c_int = 3;
/// Reading or writing a file failed (a missing model file, a full disk).
pub const STATELM_ERR_IO: c_int = 4;
/// The model file is not a usable model, or the model failed while computing.
pub const STATELM_ERR_MODEL: c_int = 5;
/// The session is busy with another generation (one generation per session at a time), or
/// a save/reset was asked while it generates.
pub const STATELM_ERR_BUSY: c_int = 6;
/// No session with this id in this engine (never created, or closed).
pub const STATELM_ERR_UNKNOWN_SESSION: c_int = 7;
/// No request with this id was started on this engine.
pub const STATELM_ERR_UNKNOWN_REQUEST: c_int = 8;
/// The request was cancelled (`statelm_wait` of a request that ended by `statelm_cancel`).
pub const STATELM_ERR_CANCELLED: c_int = 9;
/// `statelm_wait` timed out: the request is still running.
pub const STATELM_ERR_TIMEOUT: c_int = 10;
/// The engine already holds its maximum number of sessions (`max_sessions`).
pub const STATELM_ERR_TOO_MANY_SESSIONS: c_int = 11;
/// The prompt cannot fit the session's token budget, even by trimming.
pub const STATELM_ERR_PROMPT_TOO_LONG: c_int = 12;
/// Admission control: the memory ceiling cannot hold the new session or prompt.
pub const STATELM_ERR_OVER_MEMORY: c_int = 13;
/// A session file is not valid (corrupt, truncated, or saved with another model).
pub const STATELM_ERR_BAD_SESSION_FILE: c_int = 14;
/// Tokenizing the input or rendering the chat template failed.
pub const STATELM_ERR_TOKENIZER: c_int = 15;
/// The engine has stopped.
pub const STATELM_ERR_SHUTTING_DOWN: c_int = 16;
/// The call is not allowed where it was made: `statelm_engine_free` from one of that
/// engine's callbacks, or `statelm_wait` on the request whose callback is running.
pub const STATELM_ERR_MISUSE: c_int = 17;
/// A broken invariant inside statelm (a bug).
pub const STATELM_ERR_INTERNAL: c_int = 18;
/// statelm panicked (a bug); the panic was caught at the boundary and the handle is still
/// usable.
pub const STATELM_ERR_PANIC: c_int = 19;

/// The name of each status code, by value.
const NAMES: [&CStr; 20] = [
    c"STATELM_OK",
    c"STATELM_ERR_INVALID_ARGUMENT",
    c"STATELM_ERR_NULL_POINTER",
    c"STATELM_ERR_INVALID_HANDLE",
    c"STATELM_ERR_IO",
    c"STATELM_ERR_MODEL",
    c"STATELM_ERR_BUSY",
    c"STATELM_ERR_UNKNOWN_SESSION",
    c"STATELM_ERR_UNKNOWN_REQUEST",
    c"STATELM_ERR_CANCELLED",
    c"STATELM_ERR_TIMEOUT",
    c"STATELM_ERR_TOO_MANY_SESSIONS",
    c"STATELM_ERR_PROMPT_TOO_LONG",
    c"STATELM_ERR_OVER_MEMORY",
    c"STATELM_ERR_BAD_SESSION_FILE",
    c"STATELM_ERR_TOKENIZER",
    c"STATELM_ERR_SHUTTING_DOWN",
    c"STATELM_ERR_MISUSE",
    c"STATELM_ERR_INTERNAL",
    c"STATELM_ERR_PANIC",
];

/// The name of a status code (`"STATELM_ERR_BUSY"`), or `"STATELM_ERR_UNKNOWN_CODE"`.
pub(crate) fn status_name(code: c_int) -> &'static CStr {
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
        .unwrap_or(c"STATELM_ERR_UNKNOWN_CODE")
}

/// An error on its way to the C caller: a status code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FfiError {
    /// One of the `STATELM_ERR_*` codes.
    pub code: c_int,
    /// What went wrong, for `statelm_last_error_message`.
    pub message: String,
}

impl FfiError {
    /// An error with `code` and `message`.
    pub fn new(code: c_int, message: impl Into<String>) -> FfiError {
        FfiError {
            code,
            message: message.into(),
        }
    }

    /// `STATELM_ERR_INVALID_ARGUMENT` with `message`.
    pub fn invalid(message: impl Into<String>) -> FfiError {
        FfiError::new(STATELM_ERR_INVALID_ARGUMENT, message)
    }

    /// `STATELM_ERR_NULL_POINTER` for the argument `what`.
    pub fn null(what: &str) -> FfiError {
        FfiError::new(STATELM_ERR_NULL_POINTER, format!("`{what}` is NULL"))
    }
}

impl From<EngineError> for FfiError {
    fn from(e: EngineError) -> FfiError {
        let code = match &e {
            EngineError::UnknownSession(_) => STATELM_ERR_UNKNOWN_SESSION,
            EngineError::SessionBusy(_) => STATELM_ERR_BUSY,
            EngineError::ShuttingDown => STATELM_ERR_SHUTTING_DOWN,
            EngineError::TooManySessions { .. } => STATELM_ERR_TOO_MANY_SESSIONS,
            EngineError::Model(m) => model_code(m),
            EngineError::Tokenizer(_) => STATELM_ERR_TOKENIZER,
            EngineError::PromptTooLong { .. } => STATELM_ERR_PROMPT_TOO_LONG,
            EngineError::EmptyPrompt
            | EngineError::InvalidRequest(_)
            | EngineError::InvalidSessionName { .. } => STATELM_ERR_INVALID_ARGUMENT,
            EngineError::OverMemory { .. } => STATELM_ERR_OVER_MEMORY,
            EngineError::BadSessionFile(_) => STATELM_ERR_BAD_SESSION_FILE,
            EngineError::Io(_) => STATELM_ERR_IO,
            _ => STATELM_ERR_INTERNAL,
        };
        FfiError::new(code, e.to_string())
    }
}

impl From<ModelError> for FfiError {
    fn from(e: ModelError) -> FfiError {
        FfiError::new(model_code(&e), e.to_string())
    }
}

/// The status code of a model error: I/O failures are `STATELM_ERR_IO`, the rest
/// `STATELM_ERR_MODEL`.
fn model_code(e: &ModelError) -> c_int {
    match e {
        ModelError::Io(_) | ModelError::Gguf(statelm_gguf::GgufError::Io { .. }) => STATELM_ERR_IO,
        _ => STATELM_ERR_MODEL,
    }
}

thread_local! {
    /// The message of the most recent failed call on this thread.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error (interior NULs are escaped).
pub(crate) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(c));
}

/// Forgets this thread's last error.
fn clear_last_error() {
    LAST_ERROR.with(|e| *e.borrow_mut() = None);
}

/// A pointer to this thread's last error message (`""` when the last call succeeded). The
/// pointer stays valid until the next statelm call on this thread that records or clears it.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| match &*e.borrow() {
        Some(c) => c.as_ptr(),
        None => c"".as_ptr(),
    })
}

/// Runs the body of an exported function: catches panics, records the error message of a
/// failure (or clears it on success) and returns the status code.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), FfiError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            clear_last_error();
            STATELM_OK
        }
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.code
        }
        Err(payload) => {
            set_last_error(&format!(
                "statelm panicked (a bug): {}",
                panic_message(payload.as_ref())
            ));
            STATELM_ERR_PANIC
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_name() {
        assert_eq!(status_name(STATELM_OK), c"STATELM_OK");
        assert_eq!(status_name(STATELM_ERR_BUSY), c"STATELM_ERR_BUSY");
        assert_eq!(status_name(STATELM_ERR_PANIC), c"STATELM_ERR_PANIC");
        assert_eq!(status_name(-1), c"STATELM_ERR_UNKNOWN_CODE");
        assert_eq!(status_name(999), c"STATELM_ERR_UNKNOWN_CODE");
    }

    #[test]
    fn guard_catches_panics_and_records_messages() {
        let code = guard(|| panic!("boom"));
        assert_eq!(code, STATELM_ERR_PANIC);
        // SAFETY: the pointer comes from this thread's last error and no call ran since.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) };
        assert!(msg.to_string_lossy().contains("boom"), "{msg:?}");
        assert_eq!(
            guard(|| Err(FfiError::null("out"))),
            STATELM_ERR_NULL_POINTER
        );
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(last_error_ptr()) };
        assert_eq!(msg, c"`out` is NULL");
        assert_eq!(guard(|| Ok(())), STATELM_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(last_error_ptr()) }, c"");
    }
}
