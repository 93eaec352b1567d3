//! Durable sessions through the C API on a tiny synthetic model: `statelm_session_open`
//! with `session_dir`, the conversation resumed by a second engine (RESUMED first), names
//! checked.

use statelm_ffi::*;
use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::Arch;
use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::Mutex;

/// (kind, text, json) per event.
#[derive(Default)]
struct Seen {
    events: Mutex<Vec<(StatelmEventKind, String, String)>>,
}

unsafe extern "C" fn collect(user_data: *mut c_void, ev: *const StatelmEvent) {
    // SAFETY: `user_data` is the `Seen` the test passed, alive until the request is waited
    // for; `ev`, its text and its JSON are valid during the call.
    let (seen, ev) = unsafe { (&*(user_data as *const Seen), &*ev) };
    // SAFETY: `text` has `text_len` valid bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ev.text.cast::<u8>(), ev.text_len) };
    let text = String::from_utf8_lossy(bytes).into_owned();
    // SAFETY: `json` is a NUL-terminated string.
    let json = unsafe { CStr::from_ptr(ev.json) }
        .to_string_lossy()
        .into_owned();
    seen.events.lock().unwrap().push((ev.kind, text, json));
}

fn last_error() -> String {
    // SAFETY: statelm returns a valid NUL-terminated string, valid until the next call.
    unsafe { CStr::from_ptr(statelm_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn start(model: *mut StatelmModel, config: &str) -> *mut StatelmEngine {
    let config = CString::new(config).unwrap();
    let mut engine = null_mut();
    // SAFETY: a valid C string and out-pointer.
    let rc = unsafe { statelm_engine_start(model, config.as_ptr(), &mut engine) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    engine
}

fn open(engine: *mut StatelmEngine, name: &CStr) -> (i32, u64) {
    let mut id = 0;
    // SAFETY: valid C strings and out-pointer.
    let rc = unsafe { statelm_session_open(engine, name.as_ptr(), null(), &mut id) };
    (rc, id)
}

fn turn(engine: *mut StatelmEngine, session: u64, prompt: &CStr) -> Seen {
    let seen = Seen::default();
    let mut req = 0;
    // SAFETY: valid C strings, callback, `seen` outlives the request (waited for below).
    let rc = unsafe {
        statelm_generate(
            engine,
            session,
            prompt.as_ptr(),
            c"{\"max_tokens\":4,\"temperature\":0}".as_ptr(),
            Some(collect),
            std::ptr::from_ref(&seen).cast_mut().cast(),
            &mut req,
        )
    };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    assert_eq!(statelm_wait(engine, req, 60_000), STATELM_OK);
    seen
}

#[test]
fn a_durable_session_resumes_in_a_new_engine() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_synthetic_model(&path, &SyntheticSpec::tiny(Arch::Llama)).unwrap();
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut model = null_mut();
    // SAFETY: valid C strings and out-pointer.
    let rc = unsafe { statelm_model_load(path.as_ptr(), c"{\"threads\":1}".as_ptr(), &mut model) };
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    let sessions = dir.path().join("sessions");
    let config = format!(
        "{{\"session_capacity\":256,\"spill_dir\":{:?},\"session_dir\":{:?}}}",
        dir.path().join("spill").to_str().unwrap(),
        sessions.to_str().unwrap()
    );

    // Without a session directory, names cannot be opened.
    let plain = start(model, "{\"session_capacity\":256}");
    assert_eq!(open(plain, c"chat").0, STATELM_ERR_INVALID_ARGUMENT);
    statelm_engine_free(plain);

    let engine = start(model, &config);
    for bad in [c"../chat", c"a/b", c"", c".x"] {
        let (rc, id) = open(engine, bad);
        assert_eq!((rc, id), (STATELM_ERR_INVALID_ARGUMENT, 0), "{bad:?}");
        assert!(
            last_error().contains("invalid session name"),
            "{}",
            last_error()
        );
    }
    let (rc, a) = open(engine, c"chat");
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    assert_eq!(open(engine, c"chat"), (STATELM_OK, a), "the open session");
    turn(engine, a, c"{\"prompt\":\"hello there\"}");
    // Freeing the engine writes the snapshot; the log has the turn already.
    statelm_engine_free(engine);
    assert!(sessions.join("chat.stlmlog").exists());
    assert!(sessions.join("chat.stlmsess").exists());

    let engine = start(model, &config);
    let (rc, b) = open(engine, c"chat");
    assert_eq!(rc, STATELM_OK, "{}", last_error());
    let seen = turn(engine, b, c"{\"append\":\" and more\"}");
    let events = seen.events.lock().unwrap();
    let (kind, text, json) = &events[0];
    assert_eq!(*kind, StatelmEventKind::Resumed, "{events:?}");
    assert!(text.contains("resumed"), "{text}");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["event"], "resumed");
    assert_eq!(v["name"], "chat");
    assert!(v["history_tokens"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["restored_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(events.last().unwrap().0, StatelmEventKind::Done);
    drop(events);
    statelm_engine_free(engine);
    statelm_model_free(model);
}
