//! The engine behind a `StatelmEngine` handle: the [`EngineHandle`], and the table of the
//! generations started through the C API.
//!
//! Each generation gets its own delivery thread (`statelm-cb-<request>`), which drives the
//! generation's stream and calls the C callback for each event, in order. The engine itself
//! computes on its own thread and never waits for a callback (a slow callback only holds up
//! its own generation, by backpressure). Freeing the engine cancels every generation and joins
//! every delivery thread, so no callback runs after `statelm_engine_free` returns.

use crate::event::{OwnedEvent, StatelmEventCallback};
use crate::status::{
    FfiError, STATELM_ERR_INTERNAL, STATELM_ERR_INVALID_HANDLE, STATELM_ERR_MISUSE,
    STATELM_ERR_PANIC, STATELM_ERR_SHUTTING_DOWN, STATELM_ERR_TIMEOUT, STATELM_ERR_UNKNOWN_REQUEST,
    STATELM_OK,
};
use futures::StreamExt;
use statelm_engine::{EngineHandle, GenerateRequest, GenerationStream, RequestId};
use statelm_governor::{Monitor, MonitorConfig};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// Outcomes of finished requests kept for `statelm_wait` (the most recent ones).
const FINISHED_KEPT: usize = 1024;

thread_local! {
    /// The engine whose callback this thread is running (0: none).
    static IN_CALLBACK: Cell<usize> = const { Cell::new(0) };
}

/// The host's `user_data` pointer, carried to the delivery thread.
struct UserData(*mut c_void);

// SAFETY: `statelm_generate`'s contract makes the host promise that `user_data` may be used
// from the engine's delivery thread; statelm itself never dereferences it.
unsafe impl Send for UserData {}

/// A generation started through the C API and not yet reaped.
struct Active {
    thread: Option<JoinHandle<()>>,
    thread_id: Option<ThreadId>,
    /// Set when the last event was delivered and the stream dropped.
    outcome: Option<FfiError>,
}

/// What the engine knows about its generations.
#[derive(Default)]
struct Table {
    /// Set by `statelm_engine_free`: no new generation may start.
    closed: bool,
    active: HashMap<u64, Active>,
    /// Request → how it ended (`STATELM_OK` or an error), the most recent ones.
    finished: BTreeMap<u64, FfiError>,
    /// The largest request id issued.
    max_issued: u64,
}

impl Table {
    /// Moves the generations whose delivery ended to `finished`; returns their threads to
    /// join (outside the lock).
    fn reap(&mut self) -> Vec<JoinHandle<()>> {
        let done: Vec<u64> = self
            .active
            .iter()
            .filter(|(_, a)| a.outcome.is_some())
            .map(|(&id, _)| id)
            .collect();
        let mut joins = Vec::new();
        for id in done {
            if let Some(mut a) = self.active.remove(&id) {
                joins.extend(a.thread.take());
                let outcome = a.outcome.take().unwrap_or_else(|| ok_outcome(id));
                self.finished.insert(id, outcome);
            }
        }
        while self.finished.len() > FINISHED_KEPT {
            self.finished.pop_first();
        }
        joins
    }
}

fn ok_outcome(request: u64) -> FfiError {
    FfiError::new(STATELM_OK, format!("request {request} finished"))
}

fn join_all(joins: Vec<JoinHandle<()>>) {
    for j in joins {
        // A delivery thread catches its own panics; a join error would only repeat one.
        let _ = j.join();
    }
}

/// An engine started through the C API.
pub(crate) struct FfiEngine {
    /// The engine.
    pub handle: EngineHandle,
    /// What a request's params leave out: the model's chat defaults.
    pub defaults: statelm_engine::ChatDefaults,
    table: Mutex<Table>,
    changed: Condvar,
    /// The governor monitor over the OS's memory sources (`os_memory_watch`), if running.
    monitor: Mutex<Option<Monitor>>,
}

impl FfiEngine {
    /// Wraps a started engine.
    pub fn new(handle: EngineHandle, defaults: statelm_engine::ChatDefaults) -> Arc<FfiEngine> {
        Arc::new(FfiEngine {
            handle,
            defaults,
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
            monitor: Mutex::new(None),
        })
    }

    /// Starts a governor monitor over the OS's own memory sources ([`statelm_governor::detect`])
    /// that forwards every level change to the engine. A monitor that cannot start is logged,
    /// not fatal: the host's `statelm_memory_warning` still works.
    pub fn watch_os_memory(&self) {
        let sources = statelm_governor::detect();
        match self
            .handle
            .attach_monitor(sources, MonitorConfig::default())
        {
            Ok(monitor) => {
                *self.monitor.lock().unwrap_or_else(PoisonError::into_inner) = Some(monitor);
            }
            Err(e) => tracing::warn!(error = %e, "cannot watch the OS's memory signals"),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Identifies this engine while it lives.
    fn id(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// Whether the current thread is running one of this engine's callbacks.
    pub fn in_own_callback(&self) -> bool {
        IN_CALLBACK.with(Cell::get) == self.id()
    }

    /// Starts `req` and its delivery thread; returns the request id. Blocks until the engine
    /// accepted the request (within one step of its work), so that a busy or unknown session
    /// or bad sampling parameters fail here, with the engine's own verdict.
    pub fn generate(
        self: &Arc<Self>,
        req: GenerateRequest,
        callback: StatelmEventCallback,
        user_data: *mut c_void,
    ) -> Result<u64, FfiError> {
        let user = UserData(user_data);
        let mut t = self.table();
        if t.closed {
            return Err(FfiError::new(
                STATELM_ERR_INVALID_HANDLE,
                "the engine is being freed",
            ));
        }
        let joins = t.reap();
        drop(t);
        join_all(joins);
        let stream = self.handle.generate_blocking(req)?;
        let (id, session) = (stream.request_id().0, stream.session().0);
        let mut t = self.table();
        if t.closed {
            return Err(FfiError::new(
                STATELM_ERR_INVALID_HANDLE,
                "the engine is being freed",
            ));
        }
        t.max_issued = t.max_issued.max(id);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("statelm-cb-{id}"))
            .spawn(move || me.pump(stream, session, callback, user));
        let thread = spawned.map_err(|e| {
            FfiError::new(
                STATELM_ERR_INTERNAL,
                format!("could not start a delivery thread: {e}"),
            )
        })?;
        let active = Active {
            thread_id: Some(thread.thread().id()),
            thread: Some(thread),
            outcome: None,
        };
        t.active.insert(id, active);
        drop(t);
        Ok(id)
    }

    /// The delivery thread: every event of `stream` to `callback`, then the bookkeeping.
    fn pump(
        &self,
        mut stream: GenerationStream,
        session: u64,
        callback: StatelmEventCallback,
        user: UserData,
    ) {
        let request = stream.request_id().0;
        let mut terminal_sent = false;
        let delivered = catch_unwind(AssertUnwindSafe(|| {
            futures::executor::block_on(self.deliver_all(
                &mut stream,
                session,
                callback,
                &user,
                &mut terminal_sent,
            ))
        }));
        let outcome = delivered.unwrap_or_else(|p| {
            let msg = format!(
                "statelm panicked while delivering events (a bug): {}",
                crate::status::panic_message(p.as_ref())
            );
            let e = FfiError::new(STATELM_ERR_PANIC, msg);
            if !terminal_sent {
                let ev = OwnedEvent::error(request, session, e.clone());
                // A second panic here would only repeat the first; the outcome is recorded.
                let _ = catch_unwind(AssertUnwindSafe(|| self.call(callback, &user, &ev)));
            }
            e
        });
        drop(stream);
        let mut t = self.table();
        if let Some(a) = t.active.get_mut(&request) {
            a.outcome = Some(outcome);
        }
        drop(t);
        self.changed.notify_all();
    }

    async fn deliver_all(
        &self,
        stream: &mut GenerationStream,
        session: u64,
        callback: StatelmEventCallback,
        user: &UserData,
        terminal_sent: &mut bool,
    ) -> FfiError {
        let request = stream.request_id().0;
        while let Some(item) = stream.next().await {
            let ev = OwnedEvent::from_item(request, session, item);
            if ev.is_terminal() {
                // The engine freed the session before this event: the callback may start
                // the session's next generation.
                *terminal_sent = true;
                self.call(callback, user, &ev);
                return ev.outcome_error();
            }
            self.call(callback, user, &ev);
        }
        // A stream always ends with DONE or an error; this covers a broken promise.
        let e = FfiError::new(STATELM_ERR_SHUTTING_DOWN, "the engine stopped");
        let ev = OwnedEvent::error(request, session, e.clone());
        *terminal_sent = true;
        self.call(callback, user, &ev);
        e
    }

    /// Calls the host's callback with `ev`.
    fn call(&self, callback: StatelmEventCallback, user: &UserData, ev: &OwnedEvent) {
        let Some(cb) = callback else { return };
        let c = ev.as_c();
        let previous = IN_CALLBACK.with(|c| c.replace(self.id()));
        // SAFETY: `cb` and `user.0` come from `statelm_generate`, whose contract makes the
        // host promise the callback may be called with this `user_data` on this thread; `c`
        // and the strings it points to live until after the call returns.
        unsafe { cb(user.0, &c) };
        IN_CALLBACK.with(|c| c.set(previous));
    }

    /// Waits until `request` ended and returns how (`Ok` or its error); `timeout` `None`
    /// waits without limit.
    pub fn wait(&self, request: u64, timeout: Option<Duration>) -> Result<(), FfiError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut t = self.table();
        if request == 0 || request > t.max_issued {
            return Err(unknown_request(request));
        }
        let mut joins = Vec::new();
        let result = loop {
            if let Some(o) = t.finished.get(&request) {
                break o.clone();
            }
            let Some(a) = t.active.get(&request) else {
                break FfiError::new(
                    STATELM_ERR_UNKNOWN_REQUEST,
                    format!("request {request} finished long ago; its outcome is not kept"),
                );
            };
            if a.outcome.is_some() {
                joins = t.reap();
                continue;
            }
            if a.thread_id == Some(std::thread::current().id()) {
                break FfiError::new(
                    STATELM_ERR_MISUSE,
                    format!("statelm_wait on request {request} from its own callback"),
                );
            }
            t = match deadline {
                None => self.changed.wait(t).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break FfiError::new(
                            STATELM_ERR_TIMEOUT,
                            format!("request {request} is still running"),
                        );
                    }
                    let (g, _) = self
                        .changed
                        .wait_timeout(t, left)
                        .unwrap_or_else(PoisonError::into_inner);
                    g
                }
            };
        };
        drop(t);
        join_all(joins);
        if result.code == STATELM_OK {
            Ok(())
        } else {
            Err(result)
        }
    }

    /// Cancels `request` (a no-op once it has ended).
    pub fn cancel(&self, request: u64) -> Result<(), FfiError> {
        if request == 0 || request > self.table().max_issued {
            return Err(unknown_request(request));
        }
        self.handle.cancel(RequestId(request));
        Ok(())
    }

    /// Refuses new generations, cancels the running ones and joins every delivery thread.
    pub fn shutdown(&self) {
        // Stops and joins the monitor's threads first: no level change arrives after this.
        drop(
            self.monitor
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let mut t = self.table();
        t.closed = true;
        let running: Vec<u64> = t.active.keys().copied().collect();
        let joins: Vec<JoinHandle<()>> = t
            .active
            .values_mut()
            .filter_map(|a| a.thread.take())
            .collect();
        drop(t);
        for id in running {
            self.handle.cancel(RequestId(id));
        }
        join_all(joins);
    }
}

fn unknown_request(request: u64) -> FfiError {
    FfiError::new(
        STATELM_ERR_UNKNOWN_REQUEST,
        format!("no request {request} was started on this engine"),
    )
}
