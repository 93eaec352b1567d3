//! The events a generation delivers to its C callback.

use crate::status::{FfiError, STATELM_ERR_CANCELLED, STATELM_OK};
use serde_json::json;
use statelm_engine::{EngineError, Event, StopReason};
use std::ffi::{c_char, c_int, c_void, CString};

/// What a `StatelmEvent` reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatelmEventKind {
    /// A generated token: `token_id`, and in `text` the text it released (may be empty: an
    /// incomplete UTF-8 character, or text held back while it could still become a stop
    /// string).
    Token = 0,
    /// Text released without a token when the generation ended (held-back text). Rare, but
    /// part of the output: concatenate the `text` of every TOKEN and TEXT event.
    Text = 1,
    /// Tokens were dropped from the middle of the session's context (token budget or memory
    /// pressure); `text` says why. `json` has `dropped`, `kept` and `method`.
    ContextTrimmed = 2,
    /// The session's KV cache was evicted under memory pressure (its history is kept and
    /// recomputed when needed); `text` says why. A generation running on it is paused, and
    /// goes on (prompt and answer so far recomputed) when the pressure eases.
    Evicted = 3,
    /// The session's state was written to disk and freed while it was idle; `text` says why.
    /// Delivered to the session's next generation, before RESTORED.
    Spilled = 4,
    /// The session's state was read back from disk for this generation.
    Restored = 5,
    /// The generation finished (`stop_reason`); always the last event of a successful
    /// generation. `json` has the statistics.
    Done = 6,
    /// The generation failed (`error_code`, message in `text`); always the last event of a
    /// failed generation.
    Error = 7,
    /// An event this version of the C API does not model; see `json`.
    Other = 8,
    /// A durable session opened with `statelm_session_open` was resumed from its files after
    /// a restart or a kill; delivered at the start of its first generation. `text` says what
    /// was done; `json` has `name`, `history_tokens` (every completed turn, from the history
    /// log), `restored_tokens` (KV read from the snapshot) and `reprefilled_tokens` (the rest,
    /// recomputed by this generation).
    Resumed = 9,
    /// Reasoning text: what a thinking model (Qwen3, SmolLM3) released inside a
    /// `<think>…</think>` block, in `text`, apart from the answer. The TOKEN event of the same
    /// token follows with no text. Show it apart (dimmed, folded) or drop it; it is not part
    /// of the answer.
    Reasoning = 10,
    /// A tool call began (the request's input had `"tools"`): `text` is the function's name;
    /// `json` has `index` (of the call in this answer), `id` and `name`.
    ToolCallStart = 11,
    /// More of a tool call's arguments as they are generated: `text` is the next piece of
    /// JSON; `json` has `index`. The pieces of one call concatenate to its arguments.
    ToolCallArguments = 12,
    /// A tool call ended: `text` is its whole arguments (valid JSON); `json` has `index` and
    /// `arguments`. Run the function and answer with a `"tool"` message.
    ToolCallEnd = 13,
    /// The answer ended inside a tool call (max tokens, a stop): `text` is what was written of
    /// it. The call is incomplete: do not run it.
    ToolCallUnfinished = 14,
}

/// Why a generation ended (DONE events).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatelmStopReason {
    /// Not a DONE event.
    None = 0,
    /// The model produced an end-of-generation token.
    Eog = 1,
    /// A stop string appeared (it was not streamed; `json` has `stop_string`).
    StopString = 2,
    /// `max_tokens` tokens were generated.
    MaxTokens = 3,
    /// The generation was cancelled (`statelm_cancel`, `statelm_session_close`, or the engine
    /// being freed).
    Cancelled = 4,
    /// Memory pressure evicted the session's cache and the generation could not go on (an
    /// EVICTED event came first). Today's engine pauses a running generation instead and
    /// goes on; the value stays for hosts that handle it.
    Evicted = 5,
    /// A reason this version of the C API does not model; see `json`.
    Other = 6,
    /// The answer repeated itself back to back and the loop guard (`"loop_guard": true`)
    /// ended it.
    Repetition = 7,
    /// The answer completed its constraint (the `"grammar"` param): the grammar allows no
    /// further token.
    Complete = 8,
}

/// One event of a generation, passed to its `StatelmEventCallback`.
///
/// The pointers inside (and the event itself) are valid only during the callback: copy what
/// you keep.
#[repr(C)]
#[derive(Debug)]
pub struct StatelmEvent {
    /// What happened.
    pub kind: StatelmEventKind,
    /// The request (as returned by `statelm_generate`).
    pub request: u64,
    /// The session the request runs on.
    pub session: u64,
    /// TOKEN: the token id; 0 otherwise.
    pub token_id: u32,
    /// DONE: why the generation ended; NONE otherwise.
    pub stop_reason: StatelmStopReason,
    /// ERROR: the status code (`STATELM_ERR_*`); `STATELM_OK` otherwise.
    pub error_code: c_int,
    /// Never NULL, NUL-terminated UTF-8. TOKEN/TEXT: the released text; CONTEXT_TRIMMED,
    /// EVICTED, SPILLED: the reason, in words; ERROR: the error message; otherwise "".
    pub text: *const c_char,
    /// Length of `text` in bytes, without the terminating NUL (generated text may contain a
    /// NUL byte; `strlen(text)` would stop there).
    pub text_len: usize,
    /// Never NULL: the whole event as a JSON object with an `"event"` field (`"token"`,
    /// `"text"`, `"context_trimmed"`, `"cache_evicted"`, `"spilled"`, `"restored"`,
    /// `"resumed"`, `"done"`, `"error"`) and every detail of the event — the same JSON the
    /// HTTP server puts in its replies' `statelm` fields.
    pub json: *const c_char,
}

/// The callback of `statelm_generate`: `user_data` as passed there, and the event (valid
/// only during the call). Called on an engine-owned thread, never on the caller's.
pub type StatelmEventCallback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event: *const StatelmEvent)>;

/// An event with its own storage, from which the C view is made.
#[derive(Debug)]
pub(crate) struct OwnedEvent {
    kind: StatelmEventKind,
    request: u64,
    session: u64,
    token_id: u32,
    stop_reason: StatelmStopReason,
    error_code: c_int,
    /// The text with a terminating NUL.
    text: Vec<u8>,
    json: CString,
}

fn stop_reason(r: &StopReason) -> (StatelmStopReason, &'static str) {
    let code = match r {
        StopReason::Eog => StatelmStopReason::Eog,
        StopReason::StopString(_) => StatelmStopReason::StopString,
        StopReason::MaxTokens => StatelmStopReason::MaxTokens,
        StopReason::Cancelled => StatelmStopReason::Cancelled,
        StopReason::Evicted => StatelmStopReason::Evicted,
        StopReason::Repetition => StatelmStopReason::Repetition,
        StopReason::Complete => StatelmStopReason::Complete,
        _ => StatelmStopReason::Other,
    };
    (code, r.name())
}

impl OwnedEvent {
    fn new(kind: StatelmEventKind, request: u64, session: u64) -> OwnedEvent {
        OwnedEvent {
            kind,
            request,
            session,
            token_id: 0,
            stop_reason: StatelmStopReason::None,
            error_code: STATELM_OK,
            text: vec![0],
            json: CString::default(),
        }
    }

    fn with_text(mut self, text: &str) -> OwnedEvent {
        self.text = Vec::with_capacity(text.len() + 1);
        self.text.extend_from_slice(text.as_bytes());
        self.text.push(0);
        self
    }

    fn with_json(mut self, mut value: serde_json::Value) -> OwnedEvent {
        if let Some(obj) = value.as_object_mut() {
            obj.insert("request".into(), self.request.into());
            obj.insert("session".into(), self.session.into());
        }
        // serde_json escapes control characters, so the text has no interior NUL.
        self.json = CString::new(value.to_string()).unwrap_or_default();
        self
    }

    /// The event of one stream item of request `request` on `session`.
    pub fn from_item(request: u64, session: u64, item: Result<Event, EngineError>) -> OwnedEvent {
        match item {
            Ok(event) => OwnedEvent::from_event(request, session, event),
            Err(e) => OwnedEvent::error(request, session, FfiError::from(e)),
        }
    }

    fn from_event(request: u64, session: u64, event: Event) -> OwnedEvent {
        use StatelmEventKind as K;
        // The engine's one JSON form of the event (the server's `statelm` fields use it too).
        let json = event.to_json();
        let e = OwnedEvent::new(K::Other, request, session);
        let e = match event {
            Event::Token { id, text } => {
                let mut e = e.with_text(&text).of(K::Token);
                e.token_id = id;
                e
            }
            Event::Text { text } => e.with_text(&text).of(K::Text),
            Event::Reasoning { text } => e.with_text(&text).of(K::Reasoning),
            Event::ContextTrimmed { reason, .. } => e.with_text(&reason).of(K::ContextTrimmed),
            Event::CacheEvicted { reason } => e.with_text(&reason).of(K::Evicted),
            Event::Spilled { reason } => e.with_text(&reason).of(K::Spilled),
            Event::Restored => e.of(K::Restored),
            Event::Resumed { reason, .. } => e.with_text(&reason).of(K::Resumed),
            Event::Done(stats) => {
                let mut e = e.of(K::Done);
                e.stop_reason = stop_reason(&stats.stop_reason).0;
                e
            }
            Event::ToolCallStart { name, .. } => e.with_text(&name).of(K::ToolCallStart),
            Event::ToolCallArguments { text, .. } => e.with_text(&text).of(K::ToolCallArguments),
            Event::ToolCallEnd { arguments, .. } => e.with_text(&arguments).of(K::ToolCallEnd),
            Event::ToolCallUnfinished { text, .. } => e.with_text(&text).of(K::ToolCallUnfinished),
            _ => e,
        };
        e.with_json(json)
    }

    fn of(mut self, kind: StatelmEventKind) -> OwnedEvent {
        self.kind = kind;
        self
    }

    /// An ERROR event.
    pub fn error(request: u64, session: u64, e: FfiError) -> OwnedEvent {
        let mut ev = OwnedEvent::new(StatelmEventKind::Error, request, session)
            .with_text(&e.message)
            .with_json(json!({
                "event": "error",
                "code": e.code,
                "status": crate::status::status_name(e.code).to_string_lossy(),
                "message": e.message,
            }));
        ev.error_code = e.code;
        ev
    }

    /// Whether this is the last event of its generation (DONE or ERROR).
    pub fn is_terminal(&self) -> bool {
        matches!(self.kind, StatelmEventKind::Done | StatelmEventKind::Error)
    }

    /// The status `statelm_wait` reports for a generation that ended with this event.
    pub fn outcome(&self) -> c_int {
        match (self.kind, self.stop_reason) {
            (StatelmEventKind::Error, _) => self.error_code,
            (_, StatelmStopReason::Cancelled) => STATELM_ERR_CANCELLED,
            _ => STATELM_OK,
        }
    }

    /// How a generation that ended with this event finished, for `statelm_wait`: status
    /// `STATELM_OK`, `STATELM_ERR_CANCELLED` or the error, with a message.
    pub fn outcome_error(&self) -> FfiError {
        let code = self.outcome();
        let text = String::from_utf8_lossy(&self.text[..self.text.len() - 1]);
        let message = match code {
            STATELM_OK => format!("request {} finished", self.request),
            STATELM_ERR_CANCELLED => format!("request {} was cancelled", self.request),
            _ => text.into_owned(),
        };
        FfiError::new(code, message)
    }

    /// The C view; its pointers borrow from `self`.
    pub fn as_c(&self) -> StatelmEvent {
        StatelmEvent {
            kind: self.kind,
            request: self.request,
            session: self.session,
            token_id: self.token_id,
            stop_reason: self.stop_reason,
            error_code: self.error_code,
            text: self.text.as_ptr().cast(),
            text_len: self.text.len() - 1,
            json: self.json.as_ptr(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::STATELM_ERR_BUSY;
    use statelm_engine::{DoneStats, SessionId, TrimMethod};
    use std::ffi::CStr;

    fn json_of(e: &OwnedEvent) -> serde_json::Value {
        serde_json::from_str(e.json.to_str().unwrap()).unwrap()
    }

    /// The C ABI's event JSON is the engine's (`Event::to_json`), which the HTTP server's
    /// `statelm` fields use too: the same `"event"` key and names in both APIs.
    #[test]
    fn event_json_is_the_engines() {
        let events = [
            Event::Token {
                id: 1,
                text: "a".into(),
            },
            Event::Text { text: "b".into() },
            Event::ContextTrimmed {
                dropped: 2,
                kept: 3,
                reason: "r".into(),
                method: TrimMethod::Reprefill,
            },
            Event::CacheEvicted { reason: "e".into() },
            Event::Spilled { reason: "s".into() },
            Event::Restored,
        ];
        for ev in events {
            let mut j = json_of(&OwnedEvent::from_item(1, 2, Ok(ev.clone())));
            let obj = j.as_object_mut().unwrap();
            assert_eq!(
                (obj.remove("request"), obj.remove("session")),
                (Some(1.into()), Some(2.into()))
            );
            assert_eq!(j, ev.to_json(), "{ev:?}");
        }
    }

    #[test]
    fn tokens_keep_nul_bytes_and_their_length() {
        let item = Ok(Event::Token {
            id: 5,
            text: "a\0b".into(),
        });
        let e = OwnedEvent::from_item(3, 9, item);
        let c = e.as_c();
        assert_eq!(c.kind, StatelmEventKind::Token);
        assert_eq!((c.request, c.session, c.token_id, c.text_len), (3, 9, 5, 3));
        let j = json_of(&e);
        assert_eq!(j["text"], "a\u{0}b");
        assert_eq!(j["event"], "token");
        assert_eq!(j["request"], 3);
        assert!(!e.is_terminal());
    }

    #[test]
    fn errors_and_cancellations_map_to_outcomes() {
        let e = OwnedEvent::from_item(1, 2, Err(EngineError::SessionBusy(SessionId(2))));
        assert!(e.is_terminal());
        assert_eq!(e.outcome(), STATELM_ERR_BUSY);
        let c = e.as_c();
        assert_eq!(c.error_code, STATELM_ERR_BUSY);
        // SAFETY: `c.text` points into `e`, which is alive and NUL-terminated.
        let text = unsafe { CStr::from_ptr(c.text) };
        assert!(text.to_str().unwrap().contains("busy"));
        assert_eq!(json_of(&e)["status"], "STATELM_ERR_BUSY");
        let done = DoneStats {
            stop_reason: StopReason::Cancelled,
            prompt_tokens: 4,
            cached_tokens: 0,
            prefilled_tokens: 4,
            generated_tokens: 1,
            time_to_first_token: std::time::Duration::from_millis(2),
            decode_tokens_per_s: 0.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
        };
        let e = OwnedEvent::from_item(1, 2, Ok(Event::Done(done)));
        assert_eq!(e.as_c().stop_reason, StatelmStopReason::Cancelled);
        assert_eq!(e.outcome(), STATELM_ERR_CANCELLED);
        assert_eq!(json_of(&e)["stop_reason"], "cancelled");
        assert_eq!(json_of(&e)["generated_tokens"], 1);
    }

    #[test]
    fn memory_events_carry_their_reason() {
        let e = OwnedEvent::from_item(
            1,
            2,
            Ok(Event::ContextTrimmed {
                dropped: 10,
                kept: 4,
                reason: "critical".into(),
                method: TrimMethod::Shift,
            }),
        );
        assert_eq!(e.as_c().kind, StatelmEventKind::ContextTrimmed);
        assert_eq!(e.as_c().text_len, "critical".len());
        assert_eq!(json_of(&e)["dropped"], 10);
        assert_eq!(json_of(&e)["method"], "shift");
        let r = OwnedEvent::from_item(1, 2, Ok(Event::Restored));
        assert_eq!(r.as_c().text_len, 0);
        assert_eq!(r.outcome(), STATELM_OK);
    }
}
