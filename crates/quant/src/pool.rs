//! A small persistent fork-join thread pool for the matrix kernels.
//!
//! `run(n_tasks, f)` executes `f(0..n_tasks)` on the calling thread plus the
//! workers and returns when every task is done. Threads take task indices from
//! a shared atomic counter (dynamic load balancing), and the caller works too,
//! so a worker that the OS has descheduled only means fewer helpers: the
//! caller never waits for a worker that has not started on the job. Between
//! jobs, workers spin on the job state for a short while (back-to-back
//! matvecs during decode start within a microsecond or two), then park.
//!
//! A panic in a task is caught, the remaining unclaimed tasks are skipped, the
//! running ones finish, and the first panic is re-raised on the caller.

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

type Task = dyn Fn(usize) + Sync;

/// The current job: a lifetime-erased pointer to the caller's closure.
#[derive(Clone, Copy)]
struct Job {
    f: *const Task,
    n_tasks: usize,
}

struct Shared {
    /// `(generation << 1) | open`. SeqCst stores publish and close jobs.
    state: AtomicU64,
    shutdown: AtomicBool,
    /// Written by the caller only while the job is closed and `active == 0`.
    job: UnsafeCell<Job>,
    /// Next unclaimed task index.
    next: AtomicUsize,
    /// Tasks finished (or skipped after a panic).
    done: AtomicUsize,
    /// Workers that entered the open job and may still read `job`.
    active: AtomicUsize,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    spin: Duration,
}

// SAFETY: all fields are Sync except `job`. A worker reads `job` only after
// incrementing `active` and then seeing the state open (both SeqCst); the
// caller writes `job` only after closing the state and then seeing
// `active == 0` (both SeqCst) and before publishing the next open state. By
// the SeqCst total order a worker either sees the job closed (and does not
// read it) or is counted in `active` (and the caller waits for it).
unsafe impl Sync for Shared {}
// SAFETY: the raw pointer in `job` is only dereferenced under the protocol
// above, during the `run` call that owns the pointee.
unsafe impl Send for Shared {}

/// A persistent fork-join thread pool (see the module docs).
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    busy: AtomicBool,
    generation: AtomicU64,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads())
            .finish()
    }
}

impl ThreadPool {
    /// A pool of `n_threads` threads in total: the caller plus `n_threads - 1`
    /// workers. `new(0)` and `new(1)` run everything inline.
    pub fn new(n_threads: usize) -> ThreadPool {
        Self::with_spin(n_threads, DEFAULT_SPIN)
    }

    /// Like [`ThreadPool::new`], with the idle spin time before workers park.
    pub fn with_spin(n_threads: usize, spin: Duration) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            job: UnsafeCell::new(Job {
                f: std::ptr::null::<fn(usize)>() as *const Task,
                n_tasks: 0,
            }),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            panic: Mutex::new(None),
            spin,
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("statelm-quant-{i}"))
                    .spawn(move || worker_loop(&s))
                    .expect("spawn thread-pool worker")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            busy: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }

    /// Threads that execute tasks (workers plus the caller).
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(i)` for every `i` in `0..n_tasks` across the pool and returns
    /// when all are done. Re-raises the first panic of a task. A nested or
    /// concurrent call (the pool is already running a job) runs inline.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 || self.busy.swap(true, Acquire) {
            (0..n_tasks).for_each(f);
            return;
        }
        let payload = self.run_parallel(n_tasks, f);
        self.busy.store(false, Release);
        if let Some(p) = payload {
            resume_unwind(p);
        }
    }

    fn run_parallel(
        &self,
        n_tasks: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> Option<Box<dyn Any + Send>> {
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. Workers dereference the pointer
        // only while counted in `active`, and we close the job and wait for
        // `active == 0` below before returning (even if a task panics).
        let f: *const Task =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(f) };
        // SAFETY: we hold `busy`; the previous job was closed with
        // `active == 0`, so no worker reads `job` now (see `Shared`).
        unsafe { *s.job.get() = Job { f, n_tasks } };
        s.next.store(0, Relaxed);
        s.done.store(0, Relaxed);
        let generation = self.generation.fetch_add(1, Relaxed) + 1;
        s.state.store((generation << 1) | 1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        execute(s, Job { f, n_tasks });
        spin_until(|| s.done.load(Acquire) >= n_tasks);
        s.state.store(generation << 1, SeqCst);
        spin_until(|| s.active.load(SeqCst) == 0);
        s.panic.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Spins (then yields) until `cond` holds.
fn spin_until(cond: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !cond() {
        spins = spins.saturating_add(1);
        if spins < 1 << 14 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Runs tasks of `job` until none are left; records the first panic and then
/// skips the unclaimed tasks.
fn execute(s: &Shared, job: Job) {
    // SAFETY: `job.f` points to the closure of the `run` call in progress,
    // which does not return before this thread stops touching it (the caller
    // runs this itself; workers are counted in `active`).
    let f = unsafe { &*job.f };
    loop {
        let i = s.next.fetch_add(1, Relaxed);
        if i >= job.n_tasks {
            break;
        }
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            s.panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(p);
            let unclaimed = s.next.swap(job.n_tasks, Relaxed);
            if unclaimed < job.n_tasks {
                s.done.fetch_add(job.n_tasks - unclaimed, Release);
            }
        }
        s.done.fetch_add(1, Release);
    }
}

fn worker_loop(s: &Shared) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_change(s, seen);
        if s.shutdown.load(Acquire) {
            return;
        }
        if seen & 1 == 0 {
            continue;
        }
        s.active.fetch_add(1, SeqCst);
        let now = s.state.load(SeqCst);
        if now & 1 == 1 {
            // SAFETY: we are counted in `active` and saw the job open, so the
            // caller neither rewrites `job` nor returns until we decrement.
            let job = unsafe { *s.job.get() };
            execute(s, job);
        }
        s.active.fetch_sub(1, SeqCst);
        seen = now;
    }
}

/// Spins, then parks, until the state differs from `seen`; returns it.
fn wait_for_change(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut i = 0u32;
    loop {
        let st = s.state.load(SeqCst);
        if st != seen || s.shutdown.load(Relaxed) {
            return st;
        }
        i = i.wrapping_add(1);
        if !i.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        if start.elapsed() < s.spin {
            continue;
        }
        let mut guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.sleepers.fetch_add(1, SeqCst);
        loop {
            let st = s.state.load(SeqCst);
            if st != seen || s.shutdown.load(SeqCst) {
                s.sleepers.fetch_sub(1, SeqCst);
                return st;
            }
            guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_task_once() {
        for n in [1, 2, 3, 4] {
            let pool = ThreadPool::new(n);
            for tasks in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Relaxed) == 1));
            }
        }
    }

    #[test]
    fn panics_propagate_and_pool_survives() {
        let pool = ThreadPool::new(3);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(16, &|i| {
                if i == 5 {
                    panic!("task five");
                }
            })
        }));
        let msg = r.expect_err("panic propagates");
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"task five"));
        let count = AtomicUsize::new(0);
        pool.run(10, &|_| {
            count.fetch_add(1, Relaxed);
        });
        assert_eq!(count.load(Relaxed), 10);
    }

    #[test]
    fn stress_many_small_jobs() {
        let pool = ThreadPool::new(3);
        let total = AtomicUsize::new(0);
        let mut want = 0;
        for k in 0..5000 {
            let n = 2 + k % 5;
            want += n;
            pool.run(n, &|_| {
                total.fetch_add(1, Relaxed);
            });
            assert_eq!(total.load(Relaxed), want);
        }
    }

    #[test]
    fn nested_run_is_inline() {
        let pool = ThreadPool::new(2);
        let count = AtomicUsize::new(0);
        pool.run(4, &|_| {
            pool.run(3, &|_| {
                count.fetch_add(1, Relaxed);
            });
        });
        assert_eq!(count.load(Relaxed), 12);
    }

    #[test]
    fn parked_workers_wake_up() {
        let pool = ThreadPool::with_spin(3, Duration::from_micros(1));
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(2));
            let count = AtomicUsize::new(0);
            pool.run(9, &|_| {
                count.fetch_add(1, Relaxed);
            });
            assert_eq!(count.load(Relaxed), 9);
        }
    }
}
