//! The public face of the engine: [`Engine::start`], the cloneable [`EngineHandle`] and the
//! [`GenerationStream`].

use crate::actor::{Actor, Command, Shared};
use crate::config::EngineConfig;
use crate::core::Core;
use crate::error::EngineError;
use crate::events::{Event, RequestId, SessionId};
use crate::info::{EngineStats, SessionInfo};
use crate::request::{GenerateRequest, SessionOptions};
use futures::Stream;
use statelm_governor::{
    GovernorError, MemorySource, Monitor, MonitorConfig, MonitorEvent, PressureLevel,
    SignalForwarder,
};
use statelm_model::Model;
use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// The streaming inference engine.
///
/// One dedicated OS thread (`statelm-engine`) owns every session and runs all model compute,
/// so nothing blocks the caller's async runtime. The engine does **not** need a tokio runtime:
/// [`Engine::start`] may be called anywhere, and the handle's futures run on any executor.
#[derive(Debug)]
pub struct Engine;

impl Engine {
    /// Starts an engine for `model` and returns its handle. The engine stops (its thread is
    /// joined, spill files are deleted) when the last handle and the last stream are dropped.
    pub fn start(model: Arc<Model>, config: EngineConfig) -> EngineHandle {
        let config = config.sanitized();
        let (tx, rx) = mpsc::channel(config.queue_depth);
        let shared = Arc::new(Shared::new(config.pressure_hold));
        let (stream_buffer, max_sessions) = (config.stream_buffer, config.max_sessions);
        let grammars = Arc::new(crate::sampling::constraint::Grammars::new(model.clone()));
        let core = Core::new(model, config, grammars.clone());
        let actor = Actor::new(core, rx, shared.clone());
        let thread = std::thread::Builder::new()
            .name("statelm-engine".into())
            .spawn(move || actor.run())
            .map_err(|e| tracing::error!(error = %e, "could not start the engine thread"))
            .ok();
        EngineHandle {
            inner: Arc::new(Inner {
                tx: Some(tx),
                thread: Mutex::new(thread),
                shared,
                cancels: Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
                stream_buffer,
                max_sessions,
                grammars,
            }),
        }
    }
}

struct Inner {
    tx: Option<mpsc::Sender<Command>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
    cancels: Mutex<HashMap<RequestId, Arc<AtomicBool>>>,
    next_request: AtomicU64,
    stream_buffer: usize,
    max_sessions: usize,
    /// Compiles request grammars against the model's vocabulary (with its cache).
    grammars: Arc<crate::sampling::constraint::Grammars>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the command channel ends the engine loop; wait for it (within one step).
        self.tx.take();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Inner {
    fn sender(&self) -> Result<mpsc::Sender<Command>, EngineError> {
        self.tx.clone().ok_or(EngineError::ShuttingDown)
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, EngineError>>) -> Command,
    ) -> Result<T, EngineError> {
        let (reply, rx) = oneshot::channel();
        let tx = self.sender()?;
        tx.send(make(reply))
            .await
            .map_err(|_| EngineError::ShuttingDown)?;
        Self::answer(&tx, rx.await)
    }

    /// What a reply says; a reply dropped unanswered means the engine stopped or failed.
    fn answer<T>(
        tx: &mpsc::Sender<Command>,
        reply: Result<Result<T, EngineError>, oneshot::error::RecvError>,
    ) -> Result<T, EngineError> {
        reply.map_err(|_| match tx.is_closed() {
            true => EngineError::ShuttingDown,
            false => EngineError::Internal("the engine failed while handling this call".into()),
        })?
    }

    fn cancels(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Arc<AtomicBool>>> {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle to a running engine: cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct EngineHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle").finish_non_exhaustive()
    }
}

/// A handle that does not keep the engine alive (for callbacks such as a memory monitor's).
#[derive(Clone, Debug)]
pub struct WeakEngineHandle {
    inner: Weak<Inner>,
}

impl WeakEngineHandle {
    /// The handle, if the engine still runs.
    pub fn upgrade(&self) -> Option<EngineHandle> {
        self.inner.upgrade().map(|inner| EngineHandle { inner })
    }
}

impl EngineHandle {
    /// Creates a session.
    pub async fn create_session(&self, opts: SessionOptions) -> Result<SessionId, EngineError> {
        self.inner.call(|r| Command::Create(opts, r)).await
    }

    /// Opens the durable session `name` (needs [`EngineConfig::session_dir`]): the session of
    /// that name if it is open already; else, if the directory holds its files, the
    /// conversation resumed from them (after a restart or a kill: the history from its log,
    /// the KV from its snapshot as far as it matches, the rest re-prefilled with the next
    /// request, which starts with an [`crate::Event::Resumed`] saying which); else a new
    /// session created with `opts`. Its history is then appended to its log and fsynced
    /// after every turn, and its KV snapshot written when a memory warning spills or trims
    /// it, when it closes and when the engine stops. `opts` fill in what the files do not
    /// record. `name` must be a plain identifier
    /// ([`crate::validate_session_name`]; else [`EngineError::InvalidSessionName`]); damaged
    /// files give [`EngineError::BadSessionFile`] (a bad log header) or are ignored and named
    /// in the `Resumed` event (a torn or corrupt log tail, a bad snapshot).
    pub async fn open_session(
        &self,
        name: &str,
        opts: SessionOptions,
    ) -> Result<SessionId, EngineError> {
        let name = name.to_string();
        self.inner.call(|r| Command::Open(name, opts, r)).await
    }

    /// Starts a generation and returns its stream once the engine accepted it (within one
    /// step of the engine's work). A request that cannot start fails here: an unknown session
    /// ([`EngineError::UnknownSession`]), a session busy with another request
    /// ([`EngineError::SessionBusy`] — "busy" is decided by the engine alone; a session whose
    /// previous request was cancelled or whose stream was dropped is free again), invalid
    /// sampling parameters ([`EngineError::InvalidRequest`]), a stopped engine. What happens
    /// later (a prompt over budget, memory, the events) arrives through the stream; dropping
    /// it cancels the generation within one token. A request for a pooled session
    /// ([`crate::Target::Pool`]) gets its session here (see [`GenerationStream::session`]), or
    /// [`EngineError::TooManySessions`] when every session is busy.
    ///
    /// Cancellation keeps the session consistent: the prompt tokens computed so far and every
    /// token generated so far stay in its history and State (the last sampled token is
    /// computed with the next request), so the next turn continues from there.
    pub async fn generate(&self, req: GenerateRequest) -> Result<GenerationStream, EngineError> {
        let (req, prepared) = if needs_preparing(&req) {
            // Compiling takes milliseconds (the first grammar also builds the vocabulary's
            // trie): off the async runtime's workers and off the engine thread.
            // Any executor: a tokio runtime's blocking pool when there is one, else a thread
            // of its own (the mobile bindings poll from Kotlin's and Swift's executors).
            let grammars = self.inner.grammars.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let work = move || {
                let mut req = req;
                let _ = tx.send(prepare(&grammars, &mut req).map(|p| (req, p)));
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(work)),
                Err(_) => {
                    std::thread::Builder::new()
                        .name("statelm-prepare".into())
                        .spawn(work)
                        .map_err(|e| EngineError::Internal(format!("grammar compilation: {e}")))?;
                }
            }
            rx.await.map_err(|_| {
                EngineError::Internal("grammar compilation: the compiling thread died".into())
            })??
        } else {
            (req, Prepared::default())
        };
        let (mut stream, cmd, accepted) = self.submission(req, prepared);
        let tx = self.inner.sender()?;
        tx.send(cmd).await.map_err(|_| EngineError::ShuttingDown)?;
        stream.session = Inner::answer(&tx, accepted.await)?;
        Ok(stream)
    }

    /// [`EngineHandle::generate`] for callers without an async runtime (the C ABI): blocks
    /// the calling thread until the engine accepted or refused the request. Must not be called
    /// from within a tokio runtime.
    pub fn generate_blocking(
        &self,
        mut req: GenerateRequest,
    ) -> Result<GenerationStream, EngineError> {
        let prepared = prepare(&self.inner.grammars, &mut req)?;
        let (mut stream, cmd, accepted) = self.submission(req, prepared);
        let tx = self.inner.sender()?;
        tx.blocking_send(cmd)
            .map_err(|_| EngineError::ShuttingDown)?;
        stream.session = Inner::answer(&tx, accepted.blocking_recv())?;
        Ok(stream)
    }

    /// A new request's stream, its command, and where the engine's verdict arrives. The
    /// stream exists before the command is sent, so that a caller which goes away while
    /// waiting (a dropped future) cancels the request like a dropped stream does.
    fn submission(
        &self,
        req: GenerateRequest,
        prepared: Prepared,
    ) -> (
        GenerationStream,
        Command,
        oneshot::Receiver<Result<SessionId, EngineError>>,
    ) {
        let id = RequestId(self.inner.next_request.fetch_add(1, Ordering::Relaxed));
        let cancel = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(self.inner.stream_buffer);
        self.inner.cancels().insert(id, cancel.clone());
        let stream = GenerationStream {
            id,
            session: SessionId(0),
            rx,
            cancel: cancel.clone(),
            done: false,
            engine: self.inner.clone(),
        };
        let (accepted, verdict) = oneshot::channel();
        let cmd = Command::Generate {
            id,
            req: Box::new(req),
            tx,
            cancel,
            constraint: prepared.constraint.map(Box::new),
            tool_format: prepared.tool_format,
            accepted,
        };
        (stream, cmd, verdict)
    }

    /// Empties a session (State and history). Fails with `SessionBusy` while it generates.
    pub async fn reset_session(&self, id: SessionId) -> Result<(), EngineError> {
        self.inner.call(|r| Command::Reset(id, r)).await
    }

    /// Closes a session, cancelling its generation if one runs. A durable session
    /// ([`EngineHandle::open_session`]) has its history logged and its KV snapshot written
    /// first; its files stay, so opening its name again resumes it.
    pub async fn close_session(&self, id: SessionId) -> Result<(), EngineError> {
        self.inner.call(|r| Command::Close(id, r)).await
    }

    /// Saves a session (State snapshot, history, budget) to `path`, atomically and
    /// checksummed. Fails with `SessionBusy` while it generates.
    pub async fn save_session(&self, id: SessionId, path: &Path) -> Result<(), EngineError> {
        let path = path.to_path_buf();
        self.inner.call(|r| Command::Save(id, path, r)).await
    }

    /// Loads a session saved by [`EngineHandle::save_session`] (with the same model) as a new
    /// session.
    pub async fn load_session(&self, path: &Path) -> Result<SessionId, EngineError> {
        let path = path.to_path_buf();
        self.inner.call(|r| Command::Load(path, r)).await
    }

    /// The token history of a session: every token of its conversation (including any
    /// trimmed out of its State), e.g. to show a resumed conversation.
    pub async fn session_history(&self, id: SessionId) -> Result<Vec<u32>, EngineError> {
        self.inner.call(|r| Command::History(id, r)).await
    }

    /// The ids of every session the engine holds (resident or spilled), in order.
    pub async fn session_ids(&self) -> Result<Vec<SessionId>, EngineError> {
        self.inner.call(Command::List).await
    }

    /// Figures about one session.
    pub async fn session_info(&self, id: SessionId) -> Result<SessionInfo, EngineError> {
        self.inner.call(|r| Command::Info(id, r)).await
    }

    /// The most sessions the engine holds (its configured `max_sessions`): the size of its
    /// session pool.
    pub fn max_sessions(&self) -> usize {
        self.inner.max_sessions
    }

    /// Whether the engine thread is alive and taking commands (false once it stopped, for
    /// whatever reason): what a health check should report.
    pub fn is_running(&self) -> bool {
        let thread = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let alive = thread.as_ref().is_some_and(|t| !t.is_finished());
        alive && self.inner.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Figures about the engine (published by the engine thread after every change; does not
    /// wait for the current step).
    pub async fn stats(&self) -> EngineStats {
        let mut s = self
            .inner
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(tx) = &self.inner.tx {
            s.queue_depth = tx.max_capacity() - tx.capacity();
        }
        let errors = self.inner.shared.source_errors.lock();
        let errors = errors.unwrap_or_else(PoisonError::into_inner);
        (s.memory_source_errors, s.memory_source_error) = errors.clone();
        s
    }

    /// Records that a memory source of an attached monitor failed: its level may be stale, so
    /// this is logged and shown in [`EngineStats`] (`/health`, `/metrics`), never silent.
    pub fn memory_source_failed(&self, source: &str, error: &str) {
        tracing::warn!(
            source,
            error,
            "a memory source failed; its pressure level may be stale"
        );
        let mut e = self.inner.shared.source_errors.lock();
        let e = e.as_deref_mut().unwrap_or_else(|p| p.get_mut());
        e.0 += 1;
        e.1 = Some(format!("{source}: {error}"));
    }

    /// Reports a memory warning from the host (iOS `didReceiveMemoryWarning`, Android
    /// `onTrimMemory`, a C caller, SIGUSR1/2). Never blocks; the engine acts between two steps
    /// and tells every affected session's stream:
    /// * Warning: every session gives back at least half of its cache now — the one that is
    ///   generating first (it keeps its pinned prefix and its most recent tokens: a
    ///   `ContextTrimmed` event) — idle sessions are spilled, budgets lowered;
    /// * Critical: every session's cache is evicted (`CacheEvicted`; the history is kept, so
    ///   the next turn recomputes it within the budget) and a running generation is paused
    ///   until the pressure eases, then recomputes what it had and goes on;
    /// * Normal: the warning is over; budgets recover.
    ///
    /// A warning holds for [`crate::EngineConfig::pressure_hold`] and then lapses to Normal
    /// (iOS never says that the pressure is over); a second Warning while one holds counts as
    /// Critical, as a phone's second warning means.
    pub fn memory_warning(&self, level: PressureLevel) {
        let hold = {
            let mut inbox = self.inner.shared.pressure();
            inbox.host(level, Instant::now());
            inbox.hold()
        };
        self.wake();
        if level == PressureLevel::Normal {
            return;
        }
        // Wake the engine when the hold lapses, so budgets recover even if nothing else
        // happens; the timer holds no strong reference to the engine.
        let Some(weak) = self.inner.tx.as_ref().map(mpsc::Sender::downgrade) else {
            return;
        };
        let timer = std::thread::Builder::new()
            .name("statelm-pressure-hold".into())
            .spawn(move || {
                std::thread::sleep(hold + Duration::from_millis(1));
                if let Some(tx) = weak.upgrade() {
                    let _ = tx.try_send(Command::Wake);
                }
            });
        if let Err(e) = timer {
            tracing::warn!(error = %e, "no timer thread: a host level lapses at the next request");
        }
    }

    /// Reports a level of the OS's own signals (an attached monitor): it stands until the
    /// next one, and the engine runs its ladder on it (see [`statelm_governor::Policy::decide`]).
    pub fn pressure_level(&self, level: PressureLevel) {
        self.inner.shared.pressure().os(level);
        self.wake();
    }

    /// Asks the engine thread to look at the pressure inbox now.
    fn wake(&self) {
        if let Some(tx) = &self.inner.tx {
            let _ = tx.try_send(Command::Wake);
        }
    }

    /// Cancels a generation (see [`GenerationStream::request_id`]); its stream ends with
    /// `Done` (stop reason `Cancelled`). Unknown or finished requests are ignored.
    pub fn cancel(&self, request_id: RequestId) {
        if let Some(flag) = self.inner.cancels().get(&request_id) {
            flag.store(true, Ordering::Relaxed);
        }
        // A backgrounded engine waits for commands: it must see the cancellation.
        self.wake();
    }

    /// Tells the engine whether the app is in the foreground (see [`crate::Lifecycle`]):
    /// in the background every session in memory is written to disk and freed, running
    /// generations pause, scratch and caches shrink, and nothing is computed until the
    /// foreground, where everything goes on (sessions are restored when next used).
    pub fn lifecycle(&self, state: crate::Lifecycle) {
        self.inner.shared.host().lifecycle = state;
        self.wake();
    }

    /// Tells the engine how hot the device is (see [`crate::Thermal`]): `serious` halves the
    /// forward pass's threads, `critical` leaves one and rests after each step.
    pub fn thermal(&self, state: crate::Thermal) {
        self.inner.shared.host().thermal = state;
        self.wake();
    }

    /// A handle that does not keep the engine alive.
    pub fn downgrade(&self) -> WeakEngineHandle {
        WeakEngineHandle {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Forwards SIGUSR1 (Warning) and SIGUSR2 (Critical) to [`EngineHandle::memory_warning`]
    /// until the forwarder is dropped, so a process under test or a supervisor can send the
    /// host levels the C ABI receives, with the same hold, lapse and escalation. The forwarder
    /// holds no strong reference to the engine.
    pub fn forward_signals(&self) -> Result<SignalForwarder, GovernorError> {
        let weak = self.downgrade();
        statelm_governor::forward_signals(move |level| {
            if let Some(engine) = weak.upgrade() {
                engine.memory_warning(level);
            }
        })
    }

    /// Runs a governor [`Monitor`] over `sources` that reports every level change to this
    /// engine (as [`EngineHandle::pressure_level`] does). Keep the monitor alive as long as it
    /// should watch; it does not keep the engine alive.
    pub fn attach_monitor(
        &self,
        sources: Vec<Box<dyn MemorySource>>,
        config: MonitorConfig,
    ) -> Result<Monitor, GovernorError> {
        let weak = self.downgrade();
        Monitor::spawn(sources, config, move |event| {
            let Some(engine) = weak.upgrade() else {
                return;
            };
            match event {
                MonitorEvent::LevelChanged { level, .. } => engine.pressure_level(level),
                MonitorEvent::SourceError { source, error } => {
                    engine.memory_source_failed(source, &error);
                }
                MonitorEvent::Reading { .. } => {}
            }
        })
    }
}

/// The events of one generation: `Stream<Item = Result<Event, EngineError>>`.
///
/// A successful stream ends with [`Event::Done`]; a failed one with its error. Dropping it
/// cancels the generation.
pub struct GenerationStream {
    id: RequestId,
    session: SessionId,
    rx: mpsc::Receiver<Result<Event, EngineError>>,
    cancel: Arc<AtomicBool>,
    done: bool,
    engine: Arc<Inner>,
}

impl std::fmt::Debug for GenerationStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerationStream")
            .field("request_id", &self.id)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl GenerationStream {
    /// The request's id (for [`EngineHandle::cancel`]).
    pub fn request_id(&self) -> RequestId {
        self.id
    }

    /// The session it runs in (the one the engine picked, for a pooled request).
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Cancels the generation (same as dropping the stream, but the stream still delivers
    /// what remains, ending with `Done`).
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Stream for GenerationStream {
    type Item = Result<Event, EngineError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(item)) => {
                if matches!(item, Ok(Event::Done(_)) | Err(_)) {
                    this.done = true;
                }
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(Some(Err(EngineError::ShuttingDown)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for GenerationStream {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.engine.cancels().remove(&self.id);
    }
}

/// What a request needs compiled before the engine takes it.
#[derive(Debug, Default)]
struct Prepared {
    /// Its constraint (its grammar, or its tools').
    constraint: Option<crate::sampling::Constraint>,
    /// The format its tool calls are parsed in.
    tool_format: Option<crate::tools::ToolFormat>,
}

fn needs_preparing(req: &GenerateRequest) -> bool {
    req.sampling.grammar.is_some() || req.input.tools().is_some()
}

/// Sets up the request's tools (their grammar becomes the request's) and compiles its
/// grammar.
fn prepare(
    grammars: &crate::sampling::constraint::Grammars,
    req: &mut GenerateRequest,
) -> Result<Prepared, EngineError> {
    let mut prepared = Prepared::default();
    if let Some(tools) = req.input.tools() {
        let setup = tools.setup(grammars.model().tokenizer())?;
        if setup.grammar.is_some() && req.sampling.grammar.is_some() {
            return Err(EngineError::InvalidRequest(
                "tools and a grammar both constrain the answer: give one".into(),
            ));
        }
        if let Some(g) = setup.grammar {
            req.sampling.grammar = Some(g);
            prepared.tool_format = Some(setup.format);
        }
    }
    if let Some(g) = &req.sampling.grammar {
        prepared.constraint = Some(grammars.constraint(g)?);
    }
    Ok(prepared)
}
