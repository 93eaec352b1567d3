//! Bounded work. At most `max_concurrent` generations run at once; up to `max_queued` more wait
//! for a slot in arrival order (tokio's semaphore is fair) for at most `queue_timeout`; beyond
//! that a request gets 503 with `Retry-After`. The slot is taken before the prompt is
//! tokenized, so a flood is refused before it costs tokenizer time, and held until the
//! generation ends (the whole stream for SSE replies).

use crate::error::ApiError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The gate in front of the generation routes.
#[derive(Debug)]
pub(crate) struct Gate {
    slots: Arc<Semaphore>,
    max_concurrent: usize,
    waiting: AtomicUsize,
    max_queued: usize,
    timeout: Duration,
}

/// A running generation's slot: released when dropped.
#[derive(Debug)]
pub(crate) struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

/// Undoes a waiter's count however the wait ends (a client going away included).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    /// A gate letting `max_concurrent` generations run and `max_queued` wait `timeout`.
    pub fn new(max_concurrent: usize, max_queued: usize, timeout: Duration) -> Gate {
        let max_concurrent = max_concurrent.max(1);
        Gate {
            slots: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            waiting: AtomicUsize::new(0),
            max_queued,
            timeout,
        }
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Generations running.
    pub fn running(&self) -> usize {
        self.max_concurrent - self.slots.available_permits()
    }

    /// Takes a slot: at once when one is free, else after the requests queued before this
    /// one; 503 when the queue is full or the wait runs out.
    pub async fn enter(&self) -> Result<Slot, ApiError> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(Slot(p));
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_queued {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::overloaded(format!(
                "the server is at capacity and {} requests are already waiting; retry later",
                self.max_queued
            )));
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(Slot(p)),
            Ok(Err(_)) => Err(ApiError::overloaded("the server is shutting down")),
            Err(_) => Err(ApiError::overloaded(format!(
                "no generation slot became free within {} s; retry later",
                self.timeout.as_secs()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_queues_then_refuses() {
        let gate = Arc::new(Gate::new(1, 1, Duration::from_secs(5)));
        let first = gate.enter().await.unwrap();
        let g = gate.clone();
        let second = tokio::spawn(async move { g.enter().await.map(|_| ()) });
        while gate.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        // The queue (one place) is full: refused at once.
        let third = gate.enter().await.unwrap_err();
        assert_eq!(third.status.as_u16(), 503);
        drop(first);
        second.await.unwrap().unwrap();
        assert_eq!(gate.waiting(), 0);
    }

    #[tokio::test]
    async fn a_wait_runs_out() {
        let gate = Gate::new(1, 4, Duration::from_millis(20));
        let _held = gate.enter().await.unwrap();
        let e = gate.enter().await.unwrap_err();
        assert!(e.message.contains("within"), "{}", e.message);
        assert_eq!(gate.waiting(), 0);
    }
}
