//! The C API driven from Rust on a tiny synthetic model: concurrency between sessions,
//! handle misuse, out-pointer checks and waiting (the C program in `tests/c/smoke.c` covers
//! the full host flow on the real model).

use statelm_ffi::*;
use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::Arch;
use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

/// What a callback collected: (kind, text) per event.
#[derive(Default)]
struct Seen {
    events: Mutex<Vec<(StatelmEventKind, String, i32)>>,
}

unsafe extern "C" fn collect(user_data: *mut c_void, ev: *const StatelmEvent) {
    // SAFETY: `user_data` is the `Seen` the test passed, alive until the request is waited
    // for; `ev` and its text are valid during the call.
    let (seen, ev) = unsafe { (&*(user_data as *const Seen), &*ev) };
    // SAFETY: `text` has `text_len` valid bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ev.text.cast::<u8>(), ev.text_len) };
    let text = String::from_utf8_lossy(bytes).into_owned();
    seen.events
        .lock()
        .unwrap()
        .push((ev.kind, text, ev.error_code));
}

fn user(seen: &Seen) -> *mut c_void {
    std::ptr::from_ref(seen).cast_mut().cast()
}

fn last_error() -> String {
    // SAFETY: statelm returns a valid NUL-terminated string, valid until the next call.
    unsafe { CStr::from_ptr(statelm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

struct Fixture {
    _dir: tempfile::TempDir,
    model: *mut StatelmModel,
    engine: *mut StatelmEngine,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_synthetic_model(&path, &SyntheticSpec::tiny(Arch::Llama)).unwrap();
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut model = null_mut();
    // SAFETY: valid C strings and out-pointer.
    let rc = unsafe { statelm_model_load(path.as_ptr(), c"{\"threads\":1}".as_ptr(), &mut model) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    let config = CString::new(format!(
        "{{\"session_capacity\":256,\"spill_dir\":{:?}}}",
        dir.path().join("spill").to_str().unwrap()
    ))
    .unwrap();
    let mut engine = null_mut();
    // SAFETY: as above.
    let rc = unsafe { statelm_engine_start(model, config.as_ptr(), &mut engine) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    Fixture {
        _dir: dir,
        model,
        engine,
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        statelm_engine_free(self.engine);
        statelm_model_free(self.model);
    }
}

fn session(engine: *mut StatelmEngine) -> u64 {
    let mut id = 0;
    // SAFETY: NULL options and a valid out-pointer.
    let rc = unsafe { statelm_session_new(engine, null(), &mut id) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    id
}

fn generate(engine: *mut StatelmEngine, session: u64, params: &CStr, seen: &Seen) -> u64 {
    let mut req = 0;
    // SAFETY: valid C strings, callback, `seen` outlives the request (the tests wait).
    let rc = unsafe {
        statelm_generate(
            engine,
            session,
            c"{\"prompt\":\"hello there\"}".as_ptr(),
            params.as_ptr(),
            Some(collect),
            user(seen),
            &mut req,
        )
    };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    req
}

#[test]
fn sessions_generate_concurrently_and_in_order() {
    let f = fixture();
    let (a, b) = (session(f.engine), session(f.engine));
    let (sa, sb) = (Seen::default(), Seen::default());
    let params = c"{\"max_tokens\":6,\"temperature\":0,\"logit_bias\":{\"2\":-1e9}}";
    let ra = generate(f.engine, a, params, &sa);
    let rb = generate(f.engine, b, params, &sb);
    assert_ne!(ra, rb);
    assert_eq!(
        statelm_wait(f.engine, ra, 60_000),
        STATELM_OK,
        "{}",
        last_error()
    );
    assert_eq!(
        statelm_wait(f.engine, rb, 60_000),
        STATELM_OK,
        "{}",
        last_error()
    );
    for seen in [&sa, &sb] {
        let ev = seen.events.lock().unwrap();
        let tokens = ev.iter().filter(|e| e.0 == StatelmEventKind::Token).count();
        assert_eq!(tokens, 6);
        assert_eq!(ev.last().unwrap().0, StatelmEventKind::Done);
    }
    // Same greedy prompt on two fresh sessions: same text.
    let text = |s: &Seen| -> String {
        let ev = s.events.lock().unwrap();
        ev.iter().map(|e| e.1.as_str()).collect::<Vec<_>>().concat()
    };
    assert_eq!(text(&sa), text(&sb));
}

#[test]
fn handles_are_checked() {
    let f = fixture();
    let as_engine = f.model.cast::<StatelmEngine>();
    let mut id = 7;
    // SAFETY: valid out-pointer; the handle is wrong on purpose.
    let rc = unsafe { statelm_session_new(as_engine, null(), &mut id) };
    assert_eq!(rc, STATELM_ERR_INVALID_HANDLE);
    assert_eq!(id, 0);
    assert!(last_error().contains("is a model"), "{}", last_error());
    assert_eq!(
        statelm_model_free(f.engine.cast()),
        STATELM_ERR_INVALID_HANDLE
    );
    assert_eq!(statelm_engine_free(null_mut()), STATELM_ERR_NULL_POINTER);
    // SAFETY: NULL out-pointer on purpose.
    let rc = unsafe { statelm_session_new(f.engine, null(), null_mut()) };
    assert_eq!(rc, STATELM_ERR_NULL_POINTER);
    // A second engine on the same model, freed twice.
    let mut other = null_mut();
    // SAFETY: NULL config, valid out-pointer.
    let rc = unsafe { statelm_engine_start(f.model, null(), &mut other) };
    assert_eq!(rc, STATELM_OK);
    assert_eq!(statelm_engine_free(other), STATELM_OK);
    assert_eq!(statelm_engine_free(other), STATELM_ERR_INVALID_HANDLE);
    assert!(last_error().contains("not live"), "{}", last_error());
    let mut s = null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { statelm_device_profile_json(&mut s) };
    assert_eq!(rc, STATELM_OK);
    assert_eq!(statelm_string_free(s), STATELM_OK);
    assert_eq!(statelm_string_free(s), STATELM_ERR_INVALID_ARGUMENT);
}

#[test]
fn waiting_times_out_and_cancel_ends_with_cancelled() {
    let f = fixture();
    let a = session(f.engine);
    let seen = Seen::default();
    let req = generate(
        f.engine,
        a,
        c"{\"max_tokens\":100000,\"logit_bias\":{\"2\":-1e9}}",
        &seen,
    );
    assert_eq!(statelm_wait(f.engine, req, 0), STATELM_ERR_TIMEOUT);
    assert_eq!(statelm_wait(f.engine, req, 20), STATELM_ERR_TIMEOUT);
    // A second generation on the busy session is refused at once, with no event.
    let other = Seen::default();
    let mut busy = 9;
    // SAFETY: valid strings and out-pointer.
    let rc = unsafe {
        statelm_generate(
            f.engine,
            a,
            c"{\"append\":\"x\"}".as_ptr(),
            null(),
            Some(collect),
            user(&other),
            &mut busy,
        )
    };
    assert_eq!((rc, busy), (STATELM_ERR_BUSY, 0));
    assert_eq!(statelm_session_reset(f.engine, a), STATELM_ERR_BUSY);
    assert_eq!(statelm_cancel(f.engine, req), STATELM_OK);
    assert_eq!(statelm_wait(f.engine, req, 60_000), STATELM_ERR_CANCELLED);
    assert_eq!(statelm_wait(f.engine, req, -1), STATELM_ERR_CANCELLED);
    assert_eq!(
        statelm_cancel(f.engine, req + 100),
        STATELM_ERR_UNKNOWN_REQUEST
    );
    assert!(other.events.lock().unwrap().is_empty());
    let ev = seen.events.lock().unwrap();
    assert_eq!(ev.last().unwrap().0, StatelmEventKind::Done);
    assert_eq!(statelm_session_close(f.engine, a), STATELM_OK);
    assert_eq!(
        statelm_session_close(f.engine, a),
        STATELM_ERR_UNKNOWN_SESSION
    );
}

#[test]
fn a_generation_without_callback_can_still_be_waited_for() {
    let f = fixture();
    let a = session(f.engine);
    let mut req = 0;
    // SAFETY: valid strings and out-pointer; no callback.
    let rc = unsafe {
        statelm_generate(
            f.engine,
            a,
            c"{\"tokens\":[1,5,6,7]}".as_ptr(),
            c"{\"max_tokens\":3}".as_ptr(),
            None,
            null_mut(),
            &mut req,
        )
    };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    assert_eq!(
        statelm_wait(f.engine, req, 60_000),
        STATELM_OK,
        "{}",
        last_error()
    );
    let mut info = null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { statelm_session_info_json(f.engine, a, &mut info) };
    assert_eq!(rc, STATELM_OK);
    // SAFETY: a live string from statelm.
    let json = unsafe { CStr::from_ptr(info) }.to_str().unwrap().to_owned();
    assert_eq!(statelm_string_free(info), STATELM_OK);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["history_tokens"].as_u64().unwrap() >= 4, "{json}");
    assert_eq!(v["busy"], false);
}

#[test]
fn an_engine_can_watch_the_os_memory_itself() {
    let f = fixture();
    for config in [
        c"{\"os_memory_watch\":true}",
        c"{\"os_memory_watch\":false}",
    ] {
        let mut engine = null_mut();
        // SAFETY: valid config string and out-pointer.
        let rc = unsafe { statelm_engine_start(f.model, config.as_ptr(), &mut engine) };
        assert_eq!(rc, STATELM_OK, "{}", last_error());
        let a = session(engine);
        let mut req = 0;
        // SAFETY: valid strings and out-pointer; no callback.
        let rc = unsafe {
            statelm_generate(
                engine,
                a,
                c"{\"tokens\":[1,5,6]}".as_ptr(),
                c"{\"max_tokens\":2}".as_ptr(),
                None,
                null_mut(),
                &mut req,
            )
        };
        assert_eq!(rc, STATELM_OK, "{}", last_error());
        assert_eq!(statelm_wait(engine, req, 60_000), STATELM_OK);
        // Stops and joins the monitor's threads.
        assert_eq!(statelm_engine_free(engine), STATELM_OK);
    }
    let mut engine = null_mut();
    // SAFETY: as above; the value has the wrong type on purpose.
    let rc =
        unsafe { statelm_engine_start(f.model, c"{\"os_memory_watch\":1}".as_ptr(), &mut engine) };
    assert_eq!(rc, STATELM_ERR_INVALID_ARGUMENT);
    assert!(engine.is_null());
}

#[test]
fn the_device_profile_reports_this_machine() {
    let mut s = null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { statelm_device_profile_json(&mut s) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    // SAFETY: a live string from statelm.
    let json = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_owned();
    assert_eq!(statelm_string_free(s), STATELM_OK);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    if std::env::var_os("STATELM_DEVICE").is_none()
        && std::env::var_os("STATELM_DEVICE_MEMORY").is_none()
    {
        let physical = v["physical_memory"].as_u64().unwrap();
        let available = v["available_memory"].as_u64().unwrap();
        assert!(physical >= 256 << 20, "{json}");
        assert!(available > 0 && available <= physical, "{json}");
    }
    assert!(v["cpu_count"].as_u64().unwrap() >= 1, "{json}");
}

/// The stop reason and JSON of a DONE event, and the number of tokens before it.
#[derive(Default)]
struct Done {
    reason: Mutex<Option<(StatelmStopReason, String)>>,
    tokens: Mutex<usize>,
}

unsafe extern "C" fn on_done(user_data: *mut c_void, ev: *const StatelmEvent) {
    // SAFETY: `user_data` is the test's `Done`, alive until the request is waited for; `ev`
    // and its JSON are valid during the call.
    let (done, ev) = unsafe { (&*(user_data as *const Done), &*ev) };
    match ev.kind {
        StatelmEventKind::Token => *done.tokens.lock().unwrap() += 1,
        StatelmEventKind::Done => {
            // SAFETY: DONE events carry a NUL-terminated JSON string.
            let json = unsafe { CStr::from_ptr(ev.json) }
                .to_string_lossy()
                .into_owned();
            *done.reason.lock().unwrap() = Some((ev.stop_reason, json));
        }
        _ => {}
    }
}

/// An event callback.
type Callback = Option<unsafe extern "C" fn(*mut c_void, *const StatelmEvent)>;

/// Starts a generation of "hello" in session `s` with `params`, its events going to `cb` with
/// `user` (which must outlive the request); returns the status and the request id.
fn start_hello(f: &Fixture, s: u64, params: &CStr, cb: Callback, user: *mut c_void) -> (i32, u64) {
    let mut req = 0;
    // SAFETY: valid C strings and out-pointer; the caller keeps `user` alive until it waited.
    let rc = unsafe {
        statelm_generate(
            f.engine,
            s,
            c"{\"prompt\":\"hello\"}".as_ptr(),
            params.as_ptr(),
            cb,
            user,
            &mut req,
        )
    };
    (rc, req)
}

#[test]
fn the_loop_guard_and_dry_are_params() {
    let f = fixture();
    let s = session(f.engine);
    // One token forced at every step: an answer that repeats itself.
    let run = |params: &CStr| {
        let done = Done::default();
        let user = std::ptr::from_ref(&done).cast_mut().cast();
        let (rc, req) = start_hello(&f, s, params, Some(on_done), user);
        assert_eq!(rc, STATELM_OK, "{}", last_error());
        assert_eq!(statelm_wait(f.engine, req, 60_000), STATELM_OK);
        let reason = done.reason.lock().unwrap().clone().expect("a DONE event");
        let tokens = *done.tokens.lock().unwrap();
        (reason, tokens)
    };
    let forced = r#""max_tokens":100,"temperature":0,"logit_bias":{"5":100}"#;
    // The loop guard is on by default (the chat defaults), and can be asked for (DRY off:
    // it would break the forced loop by itself).
    for guard in [
        ",\"dry_multiplier\":0",
        ",\"dry_multiplier\":0,\"loop_guard\":true",
    ] {
        let params = CString::new(format!("{{{forced}{guard}}}")).unwrap();
        let ((code, json), tokens) = run(&params);
        assert_eq!(code, StatelmStopReason::Repetition, "{json}");
        assert!(json.contains("\"stop_reason\":\"repetition\""), "{json}");
        assert!(tokens < 100, "{tokens}");
    }
    let params = CString::new(format!(
        "{{{forced},\"dry_multiplier\":0.8,\"loop_guard\":false}}"
    ))
    .unwrap();
    let ((code, json), tokens) = run(&params);
    assert_eq!(
        (code, tokens),
        (StatelmStopReason::MaxTokens, 100),
        "{json}"
    );
    // A typo in a field name is refused, as for every other field.
    let mut req = 0;
    // SAFETY: as above; the call fails before anything runs.
    let rc = unsafe {
        statelm_generate(
            f.engine,
            s,
            c"{\"prompt\":\"hello\"}".as_ptr(),
            c"{\"loop_gaurd\":true}".as_ptr(),
            None,
            null_mut(),
            &mut req,
        )
    };
    assert_ne!(rc, STATELM_OK);
}

/// Collects the text and the DONE event's reason of one request.
#[derive(Default)]
struct Answer {
    text: Mutex<String>,
    reason: Mutex<Option<StatelmStopReason>>,
}

unsafe extern "C" fn on_answer(user_data: *mut c_void, ev: *const StatelmEvent) {
    // SAFETY: `user_data` is the test's `Answer`, alive until the request is waited for; `ev`
    // and its text are valid during the call.
    let (a, ev) = unsafe { (&*(user_data as *const Answer), &*ev) };
    // SAFETY: `text` has `text_len` valid bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ev.text.cast::<u8>(), ev.text_len) };
    match ev.kind {
        StatelmEventKind::Token | StatelmEventKind::Text => {
            a.text
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(bytes));
        }
        StatelmEventKind::Done => *a.reason.lock().unwrap() = Some(ev.stop_reason),
        _ => {}
    }
}

#[test]
fn a_grammar_in_the_params_constrains_the_answer() {
    let f = fixture();
    let s = session(f.engine);
    let params = c"{\"max_tokens\":60,\"temperature\":0,\"grammar\":{\"regex\":\"[a-z]{2,6}( [a-z]{2,6}){2}\\\\.\"}}";
    let answer = Answer::default();
    let user = std::ptr::from_ref(&answer).cast_mut().cast();
    let (rc, req) = start_hello(&f, s, params, Some(on_answer), user);
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    assert_eq!(statelm_wait(f.engine, req, 60_000), STATELM_OK);
    let text = answer.text.lock().unwrap().clone();
    let words: Vec<&str> = text.trim_end_matches('.').split(' ').collect();
    let word_ok =
        |w: &&str| (2..=6).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase());
    assert!(
        text.ends_with('.') && words.len() == 3 && words.iter().all(word_ok),
        "{text:?}"
    );
    assert_eq!(
        *answer.reason.lock().unwrap(),
        Some(StatelmStopReason::Complete)
    );
    // A grammar that does not compile is refused by statelm_generate, naming its kind.
    let bad = c"{\"grammar\":{\"regex\":\"(open\"}}";
    let (rc, _) = start_hello(&f, s, bad, None, null_mut());
    assert_ne!(rc, STATELM_OK);
    assert!(
        last_error().contains("regex constraint"),
        "{}",
        last_error()
    );
}

/// Collects tool-call events: (kind, text).
#[derive(Default)]
struct ToolEvents {
    seen: Mutex<Vec<(StatelmEventKind, String)>>,
}

unsafe extern "C" fn on_tool(user_data: *mut c_void, ev: *const StatelmEvent) {
    // SAFETY: `user_data` is the test's `ToolEvents`, alive until the request is waited for;
    // `ev` and its text are valid during the call.
    let (t, ev) = unsafe { (&*(user_data as *const ToolEvents), &*ev) };
    // SAFETY: `text` has `text_len` valid bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ev.text.cast::<u8>(), ev.text_len) };
    let text = String::from_utf8_lossy(bytes).into_owned();
    t.seen.lock().unwrap().push((ev.kind, text));
}

#[test]
fn tools_in_the_input_give_tool_call_events() {
    let f = fixture();
    let s = session(f.engine);
    let input = cr#"{"messages":[{"role":"user","content":"hi"}],"tools":{"tools":[{"name":"pick","parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"],"additionalProperties":false}}],"choice":"required","parallel":false}}"#;
    let events = ToolEvents::default();
    let mut req = 0;
    // SAFETY: valid C strings, callback, `events` outlives the request (waited for below).
    let rc = unsafe {
        statelm_generate(
            f.engine,
            s,
            input.as_ptr(),
            c"{\"max_tokens\":80,\"temperature\":0}".as_ptr(),
            Some(on_tool),
            std::ptr::from_ref(&events).cast_mut().cast(),
            &mut req,
        )
    };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    assert_eq!(statelm_wait(f.engine, req, 60_000), STATELM_OK);
    let seen = events.seen.lock().unwrap();
    let of = |k: StatelmEventKind| -> Vec<String> {
        seen.iter()
            .filter(|e| e.0 == k)
            .map(|e| e.1.clone())
            .collect()
    };
    assert_eq!(
        of(StatelmEventKind::ToolCallStart),
        vec!["pick".to_string()],
        "{:?}",
        *seen
    );
    let args = of(StatelmEventKind::ToolCallArguments).concat();
    assert_eq!(of(StatelmEventKind::ToolCallEnd), vec![args.clone()]);
    let v: serde_json::Value = serde_json::from_str(&args).expect(&args);
    assert!(v["n"].as_u64().is_some_and(|n| n <= 9), "{v}");
}

/// The engine's statistics as JSON.
fn stats(engine: *mut StatelmEngine) -> serde_json::Value {
    let mut s = null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { statelm_engine_stats_json(engine, &mut s) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    // SAFETY: a live string from statelm.
    let json = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_owned();
    assert_eq!(statelm_string_free(s), STATELM_OK);
    serde_json::from_str(&json).unwrap()
}

/// Polls the statistics until `f` holds (a few seconds at most).
fn stats_until(engine: *mut StatelmEngine, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    for _ in 0..500 {
        if f(&stats(engine)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}: {}", stats(engine));
}

#[test]
fn lifecycle_and_thermal_states_reach_the_engine() {
    let f = fixture();
    let a = session(f.engine);
    let seen = Seen::default();
    let req = generate(
        f.engine,
        a,
        c"{\"max_tokens\":400,\"temperature\":0,\"logit_bias\":{\"2\":-1e9}}",
        &seen,
    );
    while !(seen.events.lock().unwrap().iter()).any(|e| e.0 == StatelmEventKind::Token) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        statelm_lifecycle(f.engine, STATELM_LIFECYCLE_BACKGROUND),
        STATELM_OK
    );
    stats_until(f.engine, "the background", |s| {
        s["lifecycle"] == "background" && s["spilled"] == 1
    });
    // Nothing is computed in the background.
    assert_eq!(statelm_wait(f.engine, req, 200), STATELM_ERR_TIMEOUT);
    assert_eq!(
        statelm_thermal(f.engine, STATELM_THERMAL_CRITICAL),
        STATELM_OK
    );
    stats_until(f.engine, "critical", |s| {
        s["thermal"] == "critical" && s["threads"] == 1
    });
    assert_eq!(
        statelm_lifecycle(f.engine, STATELM_LIFECYCLE_FOREGROUND),
        STATELM_OK
    );
    assert_eq!(
        statelm_thermal(f.engine, STATELM_THERMAL_NOMINAL),
        STATELM_OK
    );
    assert_eq!(statelm_wait(f.engine, req, 60_000), STATELM_OK);
    let kinds: Vec<_> = seen.events.lock().unwrap().iter().map(|e| e.0).collect();
    let spilled = kinds.iter().position(|k| *k == StatelmEventKind::Spilled);
    let restored = kinds.iter().position(|k| *k == StatelmEventKind::Restored);
    assert!(spilled.is_some() && restored > spilled, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&StatelmEventKind::Done));
    assert_eq!(stats(f.engine)["lifecycle"], "foreground");
    // Bad states are refused by name.
    assert_eq!(statelm_lifecycle(f.engine, 2), STATELM_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("lifecycle state"), "{}", last_error());
    assert_eq!(statelm_thermal(f.engine, 4), STATELM_ERR_INVALID_ARGUMENT);
    assert_eq!(statelm_lifecycle(null(), 0), STATELM_ERR_NULL_POINTER);
}
