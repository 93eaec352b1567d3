//! The engine thread: owns the session table and the running generations, takes commands
//! between steps, and rotates over the active generations one step at a time (round-robin),
//! so no session starves.
//!
//! Compute never runs on the async runtime: this is a dedicated OS thread. Commands arrive over
//! a bounded tokio channel (handles `send().await` on it); replies go back over oneshots and
//! events over each stream's bounded channel. A stream that does not keep up is skipped until
//! it has room (backpressure), without slowing the others.

use crate::compute;
use crate::core::Core;
use crate::error::EngineError;
use crate::events::{RequestId, SessionId};
use crate::info::{EngineStats, SessionInfo};
use crate::job::{EventTx, Job};
use crate::pool::Target;
use crate::pressure::PressureInbox;
use crate::request::{GenerateRequest, SessionOptions};
use crate::session::Session;
use crate::snapshot;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// A reply channel.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, EngineError>>;

/// What handles ask of the engine thread.
pub(crate) enum Command {
    Create(SessionOptions, Reply<SessionId>),
    Open(String, SessionOptions, Reply<SessionId>),
    Generate {
        id: RequestId,
        req: Box<GenerateRequest>,
        tx: EventTx,
        cancel: Arc<AtomicBool>,
        /// Its compiled grammar (compiled by the handle, off the engine thread).
        constraint: Option<Box<crate::sampling::Constraint>>,
        /// The format its answer's tool calls are parsed in (it offers tools).
        tool_format: Option<crate::tools::ToolFormat>,
        /// Answered with its session once the request is accepted, or with why not (unknown
        /// or busy session, bad sampling parameters, no session free in the pool).
        accepted: Reply<SessionId>,
    },
    Reset(SessionId, Reply<()>),
    Close(SessionId, Reply<()>),
    Save(SessionId, PathBuf, Reply<()>),
    Load(PathBuf, Reply<SessionId>),
    Info(SessionId, Reply<SessionInfo>),
    History(SessionId, Reply<Vec<u32>>),
    List(Reply<Vec<SessionId>>),
    /// Look at the shared pressure level now.
    Wake,
}

/// State shared between the handles and the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The latest figures, published by the engine thread.
    pub stats: Mutex<EngineStats>,
    /// Pressure reported from outside the engine thread (host warnings, an attached monitor).
    pub pressure: Mutex<PressureInbox>,
    /// Failures of an attached monitor's memory sources: how many, and the last one.
    pub source_errors: Mutex<(u64, Option<String>)>,
    /// The lifecycle and thermal states the host reported last.
    pub host: Mutex<crate::host::HostInbox>,
}

impl Shared {
    /// Shared state whose host warnings hold for `hold`.
    pub fn new(hold: Duration) -> Shared {
        Shared {
            // Until the engine thread publishes, the figures of an engine with nothing in it
            // (budgets whole, not the zero a derived default would show).
            stats: Mutex::new(EngineStats {
                budget_factor: 1.0,
                ..EngineStats::default()
            }),
            pressure: Mutex::new(PressureInbox::new(hold)),
            source_errors: Mutex::default(),
            host: Mutex::default(),
        }
    }

    /// The host's lifecycle and thermal states, locked.
    pub fn host(&self) -> std::sync::MutexGuard<'_, crate::host::HostInbox> {
        self.host.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pressure inbox, locked.
    pub fn pressure(&self) -> std::sync::MutexGuard<'_, PressureInbox> {
        self.pressure.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The engine thread's state.
pub(crate) struct Actor {
    pub core: Core,
    pub jobs: Vec<Job>,
    rr: usize,
    rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    dirty: bool,
}

/// How long the thread sleeps when every active stream is full.
const BACKPRESSURE_POLL: Duration = Duration::from_millis(1);

impl Actor {
    /// An actor over `core`, reading commands from `rx`.
    pub fn new(core: Core, rx: mpsc::Receiver<Command>, shared: Arc<Shared>) -> Actor {
        Actor {
            core,
            jobs: Vec::new(),
            rr: 0,
            rx,
            shared,
            dirty: true,
        }
    }

    /// Runs until every handle is gone, then cleans up.
    pub fn run(mut self) {
        self.publish();
        while self.receive() {
            crate::faults::thread(&self.jobs);
            self.check_pressure();
            self.check_host();
            self.flush_jobs();
            if let Some(i) = self.next_runnable() {
                self.step(i);
            }
            self.reap();
            if self.dirty {
                self.publish();
            }
        }
        self.shutdown();
    }

    /// Takes the commands that are waiting; blocks when there is nothing to compute. False
    /// when every handle is gone.
    fn receive(&mut self) -> bool {
        let idle = self.jobs.is_empty()
            || (self.core.lifecycle == crate::Lifecycle::Background
                && !self.jobs.iter().any(Job::is_cancelled));
        if idle && self.core.restoring.is_some() {
            // Budgets are coming back in steps: look again soon rather than wait for a command.
            std::thread::sleep(Duration::from_millis(20));
        } else if idle {
            match self.rx.blocking_recv() {
                Some(cmd) => self.handle_contained(cmd),
                None => return false,
            }
        } else if !(0..self.jobs.len()).any(|i| self.may_step(i, Instant::now())) {
            std::thread::sleep(BACKPRESSURE_POLL);
        }
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => self.handle_contained(cmd),
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return !self.jobs.is_empty(),
            }
        }
    }

    fn flush_jobs(&mut self) {
        for job in &mut self.jobs {
            job.flush();
        }
    }

    /// The next job to step, round-robin. While memory is tight, jobs whose session is in
    /// memory go first, so that a spilled session waits instead of being restored at the
    /// price of spilling another (thrash).
    fn next_runnable(&mut self) -> Option<usize> {
        let n = self.jobs.len();
        let order = (0..n).map(|k| (self.rr + k) % n);
        let resident = |i: &usize| {
            let job = &self.jobs[*i];
            (self.core.sessions.get(&job.session)).is_some_and(|s| !s.is_spilled())
        };
        let now = Instant::now();
        let may_step = |i: &usize| self.may_step(*i, now);
        let i = match self.core.tight {
            true => (order.clone()).filter(resident).find(may_step),
            false => None,
        };
        let i = i.or_else(|| order.clone().find(may_step))?;
        self.rr = i + 1;
        // A paused job that runs again is paused no longer.
        self.jobs[i].paused_until = None;
        Some(i)
    }

    /// Whether job `i` may take a step at `now`: it is runnable, and not paused by an eviction
    /// while the pressure is critical and other jobs can go on (they finish and free memory
    /// first; a job left alone goes on). A cancelled job always steps, to end.
    fn may_step(&self, i: usize, now: Instant) -> bool {
        let job = &self.jobs[i];
        if !runnable(job) {
            return false;
        }
        if job.is_cancelled() {
            return true;
        }
        if self.core.lifecycle == crate::Lifecycle::Background {
            return false;
        }
        if !job.is_waiting(self.core.level, now) {
            return true;
        }
        (self.jobs.iter().enumerate())
            .all(|(k, other)| k == i || !runnable(other) || other.paused_until.is_some())
    }

    /// One step of job `i`.
    fn step(&mut self, i: usize) {
        let job = &mut self.jobs[i];
        let Some(mut s) = self.core.sessions.remove(&job.session) else {
            let id = job.session;
            job.phase = crate::job::Phase::Finished;
            job.emit_err(EngineError::UnknownSession(id));
            return;
        };
        let core = &mut self.core;
        let started = Instant::now();
        let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| {
            crate::faults::step(job);
            compute::step(job, &mut s, core);
        }));
        self.thermal_rest(started.elapsed());
        if let Err(payload) = stepped {
            return self.contain_panic(i, s, payload.as_ref());
        }
        let job = &mut self.jobs[i];
        let finished = job.is_finished();
        if finished {
            // The turn is complete: its tokens reach the disk before its `Done` goes out.
            crate::durable::log_turn(&mut s);
        }
        self.core.sessions.insert(s.id, s);
        if finished {
            // Publish before the last event goes out, so a caller that saw `Done` sees its
            // request in `stats()`.
            self.publish();
        }
        self.jobs[i].flush();
    }

    /// After a step of job `i` panicked: only that job fails. Its session is dropped — its
    /// State may be half-written (a durable session resumes from its files on next open) —
    /// the scratch is rebuilt, and every other session and job carries on.
    fn contain_panic(&mut self, i: usize, mut s: Session, payload: &(dyn std::any::Any + Send)) {
        let what = payload
            .downcast_ref::<&str>()
            .map(|m| m.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        tracing::error!(session = s.id.0, panic = %what, "a generation step panicked; its session is dropped");
        self.core.counters.panics += 1;
        s.discard_spill_file();
        drop(s);
        self.core.scratch = statelm_model::Scratch::with_ubatch(self.core.chunk);
        self.core.scratch_high_water = 0;
        let job = &mut self.jobs[i];
        job.phase = crate::job::Phase::Finished;
        job.emit_err(EngineError::Internal(format!(
            "the engine failed on this request ({what}); its session was dropped, other \
             sessions are unaffected"
        )));
        job.flush();
        self.publish();
    }

    /// Drops finished jobs whose events were delivered.
    fn reap(&mut self) {
        let before = self.jobs.len();
        self.jobs.retain(|j| !j.is_drained());
        if self.jobs.len() != before {
            self.dirty = true;
        }
    }

    /// Asks for the statistics to be published after this turn of the loop.
    pub(crate) fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The state shared with the handles.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Publishes the figures for `stats()`.
    pub fn publish(&mut self) {
        let active = self.jobs.iter().filter(|j| !j.is_finished()).count();
        let stats = self.core.stats(active);
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = stats;
        self.dirty = false;
    }

    /// Cancels what runs, writes durable sessions' snapshots and deletes spill files.
    fn shutdown(&mut self) {
        for i in 0..self.jobs.len() {
            self.finish_job(i, crate::events::StopReason::Cancelled);
            self.jobs[i].flush();
        }
        for s in self.core.sessions.values_mut() {
            crate::durable::write_snapshot(s);
            s.discard_spill_file();
        }
    }

    /// Ends job `i` now with `reason` (if it is still running).
    pub fn finish_job(&mut self, i: usize, reason: crate::events::StopReason) {
        let job = &mut self.jobs[i];
        if job.is_finished() {
            return;
        }
        if let Some(mut s) = self.core.sessions.remove(&job.session) {
            compute::finish(job, &mut s, &mut self.core, reason);
            crate::durable::log_turn(&mut s);
            self.core.sessions.insert(s.id, s);
        } else {
            job.phase = crate::job::Phase::Finished;
        }
        self.dirty = true;
    }

    /// Index of the running job of session `id`.
    pub fn job_of(&self, id: SessionId) -> Option<usize> {
        self.jobs
            .iter()
            .position(|j| j.session == id && !j.is_finished())
    }

    /// Handles a command; one that panics is dropped (its caller gets an error: the reply
    /// channel closes) and the engine carries on.
    fn handle_contained(&mut self, cmd: Command) {
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| self.handle(cmd))) {
            let what = p.downcast_ref::<&str>().copied().unwrap_or("no message");
            tracing::error!(panic = %what, "an engine command panicked; it was dropped");
            self.core.counters.panics += 1;
            self.publish();
        }
    }

    fn handle(&mut self, cmd: Command) {
        self.dirty = true;
        match cmd {
            Command::Create(opts, reply) => {
                let r = self.create(opts);
                self.respond(reply, r);
            }
            Command::Open(name, opts, reply) => {
                let r = self.open_named(&name, opts);
                self.respond(reply, r);
            }
            Command::Generate {
                id,
                req,
                tx,
                cancel,
                constraint,
                tool_format,
                accepted,
            } => {
                let prepared = (constraint.map(|c| *c), tool_format);
                let r = self.generate(id, *req, tx, cancel, prepared);
                let _ = accepted.send(r);
            }
            Command::Reset(id, reply) => {
                let r = self.reset(id);
                self.respond(reply, r);
            }
            Command::Close(id, reply) => {
                let r = self.close(id);
                self.respond(reply, r);
            }
            Command::Save(id, path, reply) => {
                let r = self.save(id, &path);
                self.respond(reply, r);
            }
            Command::Load(path, reply) => {
                let r = self.load(&path);
                self.respond(reply, r);
            }
            Command::Info(id, reply) => {
                let info = self
                    .core
                    .sessions
                    .get(&id)
                    .map(|s| s.info(self.core.factor));
                let _ = reply.send(info.ok_or(EngineError::UnknownSession(id)));
            }
            Command::History(id, reply) => {
                let history = self.core.sessions.get(&id).map(|s| s.history.clone());
                let _ = reply.send(history.ok_or(EngineError::UnknownSession(id)));
            }
            Command::List(reply) => {
                let mut ids: Vec<SessionId> = self.core.sessions.keys().copied().collect();
                ids.sort_unstable();
                let _ = reply.send(Ok(ids));
            }
            Command::Wake => {}
        }
    }

    /// Publishes the figures, then replies (so the caller sees its change in `stats()`).
    fn respond<T>(&mut self, reply: Reply<T>, result: Result<T, EngineError>) {
        self.publish();
        let _ = reply.send(result);
    }

    pub(crate) fn create(&mut self, opts: SessionOptions) -> Result<SessionId, EngineError> {
        let s = self.new_session(opts)?;
        let id = s.id;
        self.core.sessions.insert(id, s);
        Ok(id)
    }

    /// A new, empty session with `opts` (admitted under the ceiling, not yet in the table).
    pub(crate) fn new_session(&mut self, opts: SessionOptions) -> Result<Session, EngineError> {
        let max = self.core.config.max_sessions;
        if self.core.sessions.len() >= max {
            return Err(EngineError::TooManySessions { max });
        }
        let cap = self.core.config.session_capacity;
        let budget = opts
            .token_budget
            .unwrap_or(self.core.config.token_budget)
            .min(cap);
        if budget < crate::config::MIN_TOKEN_BUDGET {
            return Err(EngineError::InvalidRequest(format!(
                "token budget {budget} is below the minimum of {}",
                crate::config::MIN_TOKEN_BUDGET
            )));
        }
        let state = self.core.model.new_state_with(self.core.state_options())?;
        self.core
            .make_room(state.bytes() as u64, 0, "a new session")
            .inspect_err(|e| self.core.count_refusal(e))?;
        let id = SessionId(self.core.next_session);
        self.core.next_session += 1;
        Ok(Session::new(id, opts, state, budget))
    }

    /// Starts job `id` in its session (or the one the pool picks) if that exists and is free
    /// and its sampling parameters are valid; else says why. A session whose request was
    /// cancelled (its stream dropped) is free: that request is ended here, not one step later.
    fn generate(
        &mut self,
        id: RequestId,
        mut req: GenerateRequest,
        tx: EventTx,
        cancel: Arc<AtomicBool>,
        (constraint, tool_format): (
            Option<crate::sampling::Constraint>,
            Option<crate::tools::ToolFormat>,
        ),
    ) -> Result<SessionId, EngineError> {
        (req.sampling.check(self.core.model.config().n_vocab))
            .map_err(|e| EngineError::InvalidRequest(e.message))?;
        if req.sampling.grammar.is_some() != constraint.is_some() {
            return Err(EngineError::Internal(
                "a grammar reached the engine uncompiled".into(),
            ));
        }
        let sid = match &req.session {
            Target::Session(sid) => *sid,
            Target::Pool(pool) => self.take_from_pool(pool, &mut req.input)?,
        };
        let running = self.job_of(sid);
        if let Some(i) = running.filter(|&i| self.jobs[i].is_cancelled()) {
            self.finish_job(i, crate::events::StopReason::Cancelled);
            self.jobs[i].flush();
        }
        let s = (self.core.sessions.get_mut(&sid)).ok_or(EngineError::UnknownSession(sid))?;
        if s.busy.is_some() {
            return Err(EngineError::SessionBusy(sid));
        }
        s.busy = Some(id);
        let breakers = self.core.breakers_for(&req.sampling);
        let mut job = Job::new(id, sid, req, tx, cancel, breakers, constraint);
        job.tools = tool_format.map(crate::tools::ToolCallParser::new);
        self.jobs.push(job);
        Ok(sid)
    }

    fn idle_session(&mut self, id: SessionId) -> Result<&mut Session, EngineError> {
        let s = self
            .core
            .sessions
            .get_mut(&id)
            .ok_or(EngineError::UnknownSession(id))?;
        if s.busy.is_some() {
            return Err(EngineError::SessionBusy(id));
        }
        Ok(s)
    }

    fn reset(&mut self, id: SessionId) -> Result<(), EngineError> {
        let opts = self.core.state_options();
        let model = self.core.model.clone();
        let s = self.idle_session(id)?;
        s.evict(&model, opts)?;
        s.truncate_history(0);
        s.pending.clear();
        s.hard_trimmed = false;
        Actor::forget_durable(s);
        Ok(())
    }

    pub(crate) fn close(&mut self, id: SessionId) -> Result<(), EngineError> {
        if !self.core.sessions.contains_key(&id) {
            return Err(EngineError::UnknownSession(id));
        }
        if let Some(i) = self.job_of(id) {
            self.finish_job(i, crate::events::StopReason::Cancelled);
        }
        if let Some(mut s) = self.core.sessions.remove(&id) {
            crate::durable::log_turn(&mut s);
            crate::durable::write_snapshot(&s);
            s.discard_spill_file();
        }
        Ok(())
    }

    fn save(&mut self, id: SessionId, path: &std::path::Path) -> Result<(), EngineError> {
        let s = self.idle_session(id)?;
        snapshot::save(s, path)
    }

    fn load(&mut self, path: &std::path::Path) -> Result<SessionId, EngineError> {
        let max = self.core.config.max_sessions;
        if self.core.sessions.len() >= max {
            return Err(EngineError::TooManySessions { max });
        }
        let size = std::fs::metadata(path)?.len();
        self.core
            .make_room(size, 0, "a loaded session")
            .inspect_err(|e| self.core.count_refusal(e))?;
        let id = SessionId(self.core.next_session);
        let session = snapshot::load(path, &self.core.model, id)?;
        let cap = self.core.config.session_capacity;
        if let Some(c) = session
            .state
            .as_ref()
            .map(|s| s.capacity())
            .filter(|&c| c > cap)
        {
            return Err(EngineError::BadSessionFile(format!(
                "the session holds {c} tokens of capacity; this engine's sessions hold {cap}"
            )));
        }
        self.core.next_session += 1;
        self.core.sessions.insert(id, session);
        Ok(id)
    }
}

/// Whether a job can take a step now (or must, to notice its cancellation).
fn runnable(job: &Job) -> bool {
    job.is_runnable() || (!job.is_finished() && job.is_cancelled())
}
