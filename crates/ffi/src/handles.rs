//! Opaque handles.
//!
//! A handle given to C is not a pointer to Rust memory: it is a key into a process-wide
//! registry of live objects, spelled as a (never dereferenced) pointer so C and Swift keep
//! the model and engine types apart. Keys are never reused, so every use of a freed handle,
//! a double free, a forged pointer or a model passed where an engine is expected is detected
//! and answered with `STATELM_ERR_INVALID_HANDLE` — no use-after-free is possible through a
//! handle. A call takes its own reference (`Arc`) to the object, so freeing a handle while
//! another thread is inside a call on it is memory-safe too: that call finishes, later calls
//! fail.

use crate::engine::FfiEngine;
use crate::status::{FfiError, STATELM_ERR_INVALID_HANDLE};
use statelm_model::Model;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A loaded model (immutable weights and tokenizer), shared by the engines started on it.
/// Opaque: only ever used through a pointer returned by `statelm_model_load`.
pub struct StatelmModel {
    _opaque: [u8; 0],
}

/// A running engine: its sessions, its generations and the threads that deliver their
/// events. Opaque: only ever used through a pointer returned by `statelm_engine_start`.
pub struct StatelmEngine {
    _opaque: [u8; 0],
}

/// What a live handle refers to.
enum Entry {
    Model(Arc<Model>),
    Engine(Arc<FfiEngine>),
}

impl Entry {
    fn kind(&self) -> &'static str {
        match self {
            Entry::Model(_) => "a model",
            Entry::Engine(_) => "an engine",
        }
    }
}

/// The live handles, by key.
struct Registry {
    next: usize,
    live: BTreeMap<usize, Entry>,
}

/// Handle values are multiples of this (they look like aligned pointers, never NULL).
const STRIDE: usize = 16;

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 1,
    live: BTreeMap::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Registers `entry` under a fresh key.
fn insert(entry: Entry) -> Result<usize, FfiError> {
    let mut r = registry();
    let key = r
        .next
        .checked_mul(STRIDE)
        .ok_or_else(|| FfiError::new(STATELM_ERR_INVALID_HANDLE, "out of handle values"))?;
    r.next += 1;
    r.live.insert(key, entry);
    Ok(key)
}

fn invalid(key: usize, expected: &str, found: Option<&Entry>) -> FfiError {
    let what = match found {
        Some(e) => format!("is {}", e.kind()),
        None => "is not live (already freed, or never returned by statelm)".into(),
    };
    FfiError::new(
        STATELM_ERR_INVALID_HANDLE,
        format!("handle {key:#x} {what}; expected {expected}"),
    )
}

/// Registers a model and returns its handle.
pub(crate) fn new_model(model: Arc<Model>) -> Result<*mut StatelmModel, FfiError> {
    insert(Entry::Model(model)).map(std::ptr::without_provenance_mut)
}

/// Registers an engine and returns its handle.
pub(crate) fn new_engine(engine: Arc<FfiEngine>) -> Result<*mut StatelmEngine, FfiError> {
    insert(Entry::Engine(engine)).map(std::ptr::without_provenance_mut)
}

/// The model behind a live model handle.
pub(crate) fn model(handle: *const StatelmModel) -> Result<Arc<Model>, FfiError> {
    if handle.is_null() {
        return Err(FfiError::null("model"));
    }
    let key = handle.addr();
    match registry().live.get(&key) {
        Some(Entry::Model(m)) => Ok(m.clone()),
        other => Err(invalid(key, "a model", other)),
    }
}

/// The engine behind a live engine handle.
pub(crate) fn engine(handle: *const StatelmEngine) -> Result<Arc<FfiEngine>, FfiError> {
    if handle.is_null() {
        return Err(FfiError::null("engine"));
    }
    let key = handle.addr();
    match registry().live.get(&key) {
        Some(Entry::Engine(e)) => Ok(e.clone()),
        other => Err(invalid(key, "an engine", other)),
    }
}

/// Unregisters a model handle and returns its model.
pub(crate) fn take_model(handle: *const StatelmModel) -> Result<Arc<Model>, FfiError> {
    if handle.is_null() {
        return Err(FfiError::null("model"));
    }
    let key = handle.addr();
    let mut r = registry();
    match r.live.remove(&key) {
        Some(Entry::Model(m)) => Ok(m),
        Some(other) => {
            let err = invalid(key, "a model", Some(&other));
            r.live.insert(key, other);
            Err(err)
        }
        None => Err(invalid(key, "a model", None)),
    }
}

/// Unregisters an engine handle and returns its engine.
pub(crate) fn take_engine(handle: *const StatelmEngine) -> Result<Arc<FfiEngine>, FfiError> {
    if handle.is_null() {
        return Err(FfiError::null("engine"));
    }
    let key = handle.addr();
    let mut r = registry();
    match r.live.remove(&key) {
        Some(Entry::Engine(e)) => Ok(e),
        Some(other) => {
            let err = invalid(key, "an engine", Some(&other));
            r.live.insert(key, other);
            Err(err)
        }
        None => Err(invalid(key, "an engine", None)),
    }
}
