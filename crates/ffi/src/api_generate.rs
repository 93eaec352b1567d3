//! Exported functions: generations, waiting and cancelling.

use crate::cstr::{read_opt_str, read_str};
use crate::event::StatelmEventCallback;
use crate::handles::{self, StatelmEngine};
use crate::options;
use crate::status::guard;
use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

/// Starts a generation on `session`; the events arrive through `callback`, in order, on a
/// thread statelm owns (never the calling thread).
///
/// `input_json` is exactly one of `{"prompt": "..."}` (the session's full prompt: what the
/// session already holds is reused as far as it matches), `{"messages": [{"role": "user",
/// "content": "..."}, ...]}` (the full conversation, rendered with the model's chat template;
/// `"chat_template_kwargs": {...}` beside it adds template variables for this request),
/// `{"user_turn": "..."}` (the next user message of the session's conversation: the first one
/// is rendered with the chat template after the session's system prompt, later ones add only
/// their own turn — a chat app sends each message once, and a trimmed conversation goes on),
/// `{"append": "..."}` (text appended to what the session holds) or `{"tokens": [ids]}`.
/// `params_json` may be NULL or an object with `max_tokens`, `stop` (a string or an array of
/// strings), and the sampling fields `temperature` (0: greedy), `top_k`, `top_p`, `min_p`,
/// `repeat_penalty`, `frequency_penalty`, `presence_penalty`, `penalty_last_n`, `logit_bias`
/// (`{"token id": bias}`), `seed`, `dry_multiplier`, `dry_base`, `dry_allowed_length`,
/// `dry_last_n`, `dry_sequence_breakers`, `loop_guard`, and `lookup` (prompt-lookup
/// decoding: up to N drafted tokens checked per forward pass, at most 15; the text is
/// unchanged, DONE reports `drafted_tokens` and `accepted_tokens`) with `ngram_max`. What it
/// leaves out takes the model's chat defaults: the file's `general.sampling.*` settings where
/// it has them, else temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, DRY 0.8 with the loop
/// guard, and `max_tokens` 512.
///
/// `*out_request` (if not NULL) receives the request id, for `statelm_wait` and
/// `statelm_cancel` (0 on failure; ids are never 0). The last event is always DONE or ERROR;
/// after it the callback is not called again for this request. `callback` may be NULL (the
/// events are dropped; use `statelm_wait`).
///
/// This returns once the engine took the request (within one step of its work: a decoded
/// token or a prefill chunk). One generation per session at a time: if `session` is
/// generating, this fails with `STATELM_ERR_BUSY`; an unknown session fails with
/// `STATELM_ERR_UNKNOWN_SESSION`, out-of-range sampling values with
/// `STATELM_ERR_INVALID_ARGUMENT` (no event is delivered). A session whose generation was
/// cancelled is free again at once. Failures found later (prompt too long, over memory)
/// arrive as the ERROR event, and `statelm_wait` returns their code.
///
/// # Safety
/// `input_json` and `params_json` must each be NULL or a NUL-terminated string;
/// `out_request` must be NULL or valid for writing one `uint64_t`. `callback`, if not NULL,
/// must be safe to call with `user_data` from another thread, concurrently with the host's
/// own threads, until the request's last event (DONE or ERROR) was delivered; it must not
/// unwind (throw) into statelm.
#[no_mangle]
pub unsafe extern "C" fn statelm_generate(
    engine: *const StatelmEngine,
    session: u64,
    input_json: *const c_char,
    params_json: *const c_char,
    callback: StatelmEventCallback,
    user_data: *mut c_void,
    out_request: *mut u64,
) -> c_int {
    guard(|| {
        if !out_request.is_null() {
            // SAFETY: by this function's contract a non-NULL `out_request` is writable.
            unsafe { out_request.write(0) };
        }
        let engine = handles::engine(engine)?;
        // SAFETY: by this function's contract the strings are NULL or NUL-terminated.
        let input = options::input(unsafe { read_str(input_json, "input_json") }?)?;
        // SAFETY: as above.
        let params = unsafe { read_opt_str(params_json, "params_json") }?;
        let req = options::request(session, input, params, &engine.defaults)?;
        let id = engine.generate(req, callback, user_data)?;
        if !out_request.is_null() {
            // SAFETY: as above.
            unsafe { out_request.write(id) };
        }
        Ok(())
    })
}

/// Waits until `request` has ended and its last callback has returned. `timeout_ms` < 0
/// waits without limit; 0 only checks.
///
/// Returns how the request ended: `STATELM_OK` (DONE: end of generation, stop string,
/// `max_tokens` or eviction), `STATELM_ERR_CANCELLED` (DONE with stop reason CANCELLED), or
/// the code of its ERROR event; `STATELM_ERR_TIMEOUT` if it is still running;
/// `STATELM_ERR_UNKNOWN_REQUEST` for an id this engine never issued (or one that finished
/// more than 1024 requests ago). May be called any number of times, from any thread, but not
/// from the request's own callback (`STATELM_ERR_MISUSE`).
#[no_mangle]
pub extern "C" fn statelm_wait(
    engine: *const StatelmEngine,
    request: u64,
    timeout_ms: i64,
) -> c_int {
    guard(|| {
        let engine = handles::engine(engine)?;
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        engine.wait(request, timeout)
    })
}

/// Cancels a generation: it stops within one token and ends with DONE (stop reason
/// CANCELLED); what was generated so far stays in the session. Never blocks (use
/// `statelm_wait` to wait for the end). A request that already ended is left alone (OK);
/// an id this engine never issued fails with `STATELM_ERR_UNKNOWN_REQUEST`.
#[no_mangle]
pub extern "C" fn statelm_cancel(engine: *const StatelmEngine, request: u64) -> c_int {
    guard(|| handles::engine(engine)?.cancel(request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{STATELM_ERR_INVALID_HANDLE, STATELM_ERR_NULL_POINTER};

    #[test]
    fn bad_handles_are_refused() {
        assert_eq!(
            statelm_cancel(std::ptr::null(), 1),
            STATELM_ERR_NULL_POINTER
        );
        let forged = std::ptr::without_provenance::<StatelmEngine>(0x1234_5670);
        assert_eq!(statelm_wait(forged, 1, 0), STATELM_ERR_INVALID_HANDLE);
    }
}
