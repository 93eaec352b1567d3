//! Byte accounting under a ceiling: weights, per-session KV caches, scratch
//! buffers and snapshots. Thread-safe; clones share one account.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::BudgetError;

/// What a reservation is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Category {
    /// Model weights resident in memory (dequantized copies, non-mmap buffers).
    Weights,
    /// The KV cache of one session.
    Kv(u64),
    /// Temporary buffers of a forward pass.
    Scratch,
    /// Serialized session snapshots held in memory.
    Snapshots,
}

#[derive(Debug, Default)]
struct Inner {
    ceiling: u64,
    weights: u64,
    kv: BTreeMap<u64, u64>,
    scratch: u64,
    snapshots: u64,
}

impl Inner {
    fn used(&self) -> u64 {
        let kv = self.kv.values().fold(0u64, |a, b| a.saturating_add(*b));
        self.weights
            .saturating_add(kv)
            .saturating_add(self.scratch)
            .saturating_add(self.snapshots)
    }

    fn available(&self) -> u64 {
        self.ceiling.saturating_sub(self.used())
    }

    /// Adds `bytes` to `category` if it fits under the ceiling.
    fn add(&mut self, category: Category, bytes: u64) -> Result<(), BudgetError> {
        let available = self.available();
        if bytes > available {
            return Err(BudgetError::OverCeiling {
                requested: bytes,
                available,
            });
        }
        if bytes > 0 {
            *self.slot(category) += bytes;
        }
        Ok(())
    }

    /// Subtracts `bytes` from `category` (saturating; empty sessions disappear).
    fn sub(&mut self, category: Category, bytes: u64) {
        let slot = self.slot(category);
        *slot = slot.saturating_sub(bytes);
        if let Category::Kv(id) = category {
            if self.kv.get(&id) == Some(&0) {
                self.kv.remove(&id);
            }
        }
    }

    fn slot(&mut self, category: Category) -> &mut u64 {
        match category {
            Category::Weights => &mut self.weights,
            Category::Kv(id) => self.kv.entry(id).or_insert(0),
            Category::Scratch => &mut self.scratch,
            Category::Snapshots => &mut self.snapshots,
        }
    }
}

/// A thread-safe memory accountant with a ceiling. Cloning shares the account.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<Mutex<Inner>>,
}

/// A snapshot of the account, for logs, `doctor` and the policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BudgetBreakdown {
    /// The ceiling in bytes.
    pub ceiling: u64,
    /// Bytes for weights.
    pub weights: u64,
    /// Bytes per session KV cache.
    pub kv: BTreeMap<u64, u64>,
    /// Sum of `kv`.
    pub kv_total: u64,
    /// Bytes for scratch buffers.
    pub scratch: u64,
    /// Bytes for snapshots.
    pub snapshots: u64,
    /// Total bytes accounted.
    pub used: u64,
    /// `ceiling - used`, or 0 when over.
    pub available: u64,
}

impl MemoryBudget {
    /// An empty account with `ceiling` bytes.
    pub fn new(ceiling: u64) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(Mutex::new(Inner {
                ceiling,
                ..Inner::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ceiling in bytes.
    pub fn ceiling(&self) -> u64 {
        self.lock().ceiling
    }

    /// Changes the ceiling (e.g. after `LowerBudgets`). Existing accounts are kept
    /// even if they now exceed it; new reservations then fail until usage drops.
    pub fn set_ceiling(&self, ceiling: u64) {
        self.lock().ceiling = ceiling;
    }

    /// Reserves `bytes` for `category`, released when the [`Reservation`] drops.
    pub fn try_reserve(&self, category: Category, bytes: u64) -> Result<Reservation, BudgetError> {
        self.lock().add(category, bytes)?;
        Ok(Reservation {
            budget: self.clone(),
            category,
            bytes,
        })
    }

    /// Sets session `id`'s KV bytes to `bytes` (for caches that grow token by
    /// token). Growth must fit under the ceiling; shrinking always succeeds.
    /// Use this or KV [`Reservation`]s for a session, not both.
    pub fn set_session_bytes(&self, id: u64, bytes: u64) -> Result<(), BudgetError> {
        let mut inner = self.lock();
        let current = inner.kv.get(&id).copied().unwrap_or(0);
        if bytes >= current {
            inner.add(Category::Kv(id), bytes - current)
        } else {
            inner.sub(Category::Kv(id), current - bytes);
            Ok(())
        }
    }

    /// Forgets session `id`'s KV bytes (closed, evicted or spilled); returns them.
    pub fn release_session(&self, id: u64) -> u64 {
        self.lock().kv.remove(&id).unwrap_or(0)
    }

    /// Session `id`'s KV bytes.
    pub fn session_bytes(&self, id: u64) -> u64 {
        self.lock().kv.get(&id).copied().unwrap_or(0)
    }

    /// Total bytes accounted.
    pub fn used(&self) -> u64 {
        self.lock().used()
    }

    /// Bytes left under the ceiling (0 when over).
    pub fn available(&self) -> u64 {
        self.lock().available()
    }

    /// A consistent snapshot of every category.
    pub fn breakdown(&self) -> BudgetBreakdown {
        let inner = self.lock();
        BudgetBreakdown {
            ceiling: inner.ceiling,
            weights: inner.weights,
            kv_total: inner.kv.values().fold(0u64, |a, b| a.saturating_add(*b)),
            kv: inner.kv.clone(),
            scratch: inner.scratch,
            snapshots: inner.snapshots,
            used: inner.used(),
            available: inner.available(),
        }
    }
}

/// Bytes reserved in a [`MemoryBudget`]; released on drop.
#[derive(Debug)]
#[must_use = "a reservation is released as soon as it is dropped"]
pub struct Reservation {
    budget: MemoryBudget,
    category: Category,
    bytes: u64,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What the bytes are for.
    pub fn category(&self) -> Category {
        self.category
    }

    /// Grows or shrinks the reservation; growth must fit under the ceiling.
    pub fn resize(&mut self, bytes: u64) -> Result<(), BudgetError> {
        let mut inner = self.budget.lock();
        if bytes >= self.bytes {
            inner.add(self.category, bytes - self.bytes)?;
        } else {
            inner.sub(self.category, self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.lock().sub(self.category, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_release_and_refuse() {
        let budget = MemoryBudget::new(1000);
        let w = budget.try_reserve(Category::Weights, 600).unwrap();
        let err = budget.try_reserve(Category::Scratch, 500).unwrap_err();
        assert_eq!(
            err,
            BudgetError::OverCeiling {
                requested: 500,
                available: 400
            }
        );
        let mut s = budget.try_reserve(Category::Scratch, 400).unwrap();
        assert_eq!(budget.available(), 0);
        s.resize(100).unwrap();
        assert_eq!(budget.used(), 700);
        assert!(s.resize(500).is_err());
        assert_eq!(s.bytes(), 100);
        drop(w);
        assert_eq!(budget.used(), 100);
        drop(s);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn sessions_grow_and_shrink() {
        let budget = MemoryBudget::new(1000);
        budget.set_session_bytes(1, 300).unwrap();
        budget.set_session_bytes(2, 200).unwrap();
        budget.set_session_bytes(1, 700).unwrap();
        assert!(budget.set_session_bytes(2, 400).is_err());
        assert_eq!(budget.session_bytes(2), 200);
        budget.set_session_bytes(1, 100).unwrap();
        let kv = budget.try_reserve(Category::Kv(3), 50).unwrap();
        let b = budget.breakdown();
        assert_eq!(b.kv_total, 350);
        assert_eq!(b.kv.len(), 3);
        assert_eq!(b.available, 650);
        drop(kv);
        assert_eq!(budget.breakdown().kv.len(), 2);
        assert_eq!(budget.release_session(1), 100);
        assert_eq!(budget.used(), 200);
    }

    #[test]
    fn lowering_the_ceiling_blocks_new_reservations() {
        let budget = MemoryBudget::new(1000);
        let _w = budget.try_reserve(Category::Weights, 800).unwrap();
        budget.set_ceiling(500);
        assert_eq!(budget.available(), 0);
        assert!(budget.try_reserve(Category::Snapshots, 1).is_err());
        budget.set_session_bytes(9, 0).unwrap();
    }

    #[test]
    fn shared_across_threads() {
        let budget = MemoryBudget::new(1 << 20);
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let b = budget.clone();
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        let _r = b.try_reserve(Category::Kv(t), 1000 + i).unwrap();
                        b.set_session_bytes(100 + t, i * 10).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(budget.used(), 4 * 990);
    }
}
