//! Conversation reuse: a small pool of engine sessions, each remembered by its token history.
//!
//! A request takes the idle session that its prompt continues (a chat resending its
//! conversation plus a new message, or a regenerated answer: the prompt shares at least half of
//! the session's history), so only the new part is computed. Otherwise it gets a new session
//! while the pool has room — a new conversation does not overwrite another one's cache just
//! because both start with the same template — and else the idle session it shares the most
//! with (least recently used first; the engine reuses whatever prefix matches). Busy sessions
//! are never shared: concurrent requests get different sessions. The engine decides spilling
//! and trimming; the pool only chooses.
//!
//! Sessions belong to a [`Tenant`] (the API key a request presented and its `user` field):
//! a request only ever reuses its own tenant's sessions, so neither the KV cache nor
//! `cached_tokens` nor a pending memory event can tell one tenant about another's text. When
//! the pool is full of other tenants' idle sessions, the least recently used one is closed and
//! a fresh session made in its place.
//!
//! Requests without a `user` are stricter still, because clients sharing a key (or no key)
//! cannot be told apart: such a request reuses a session only when its prompt holds that
//! session's whole previous prompt (a conversation continuing, an answer regenerated), never
//! a partial match — so `cached_tokens` tells a probe nothing short of another client's entire
//! prompt. Requests with a `user` also reuse partial matches (an edited message).
//!
//! With durable sessions, a request naming its conversation (`user`) gets the engine's
//! durable session of that name ([`statelm_engine::EngineHandle::open_session`]: resumed
//! from disk after a restart or a kill); named sessions are never lent to other requests,
//! and when the pool is full the least recently used idle session is closed (a named one
//! keeps its files and resumes on its next request).

use crate::error::ApiError;
use statelm_engine::common_prefix;
use statelm_engine::{EngineError, EngineHandle, SessionId, SessionOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Shortest match that counts as a continuation (more than a BOS token).
const MIN_REUSE: usize = 2;

/// Who a request belongs to: the index of the API key it presented (`None` without keys)
/// and its `user` field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tenant {
    /// Which of the server's API keys.
    pub key: Option<usize>,
    /// The request's `user` (OpenAI's end-user id).
    pub user: Option<String>,
}

impl Tenant {
    /// The durable session name of this tenant's conversation: the `user` itself with at most
    /// one API key (so existing session directories keep working), else prefixed by the key's
    /// position (`k1-alice`) so that two keys' users never share a conversation.
    pub fn durable_name(&self, keys: usize) -> Option<String> {
        let user = self.user.as_deref()?;
        Some(match self.key {
            Some(k) if keys > 1 => format!("k{k}-{user}"),
            _ => user.to_string(),
        })
    }
}

#[derive(Debug)]
struct Slot {
    id: SessionId,
    tenant: Tenant,
    /// The durable session's name (never lent to anonymous requests).
    name: Option<String>,
    history: Vec<u32>,
    /// Tokens of the last prompt (the history up to the answer).
    prompt_len: usize,
    busy: bool,
    last_used: u64,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Slot>,
    /// Sessions being created (counted against the limit).
    creating: usize,
}

/// The pool of sessions.
#[derive(Debug)]
pub(crate) struct Sessions {
    engine: EngineHandle,
    opts: SessionOptions,
    max: usize,
    table: Mutex<Table>,
    clock: AtomicU64,
}

/// A session taken by one request; released (with its new history) when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    pool: Arc<Sessions>,
    /// The session.
    pub id: SessionId,
    /// Prompt tokens the pool expects the engine to reuse (the engine reports the real count).
    pub expected_reuse: usize,
    history: Vec<u32>,
    prompt_len: usize,
}

/// How much of `prompt` continues a session with `history`. The engine decides what of the
/// State that reuses: all of it up to where the prompt departs, or — for a trimmed State —
/// up to there when that lies in the part the State still holds, else a recomputation
/// within the budget.
fn reuse_score(history: &[u32], prompt: &[u32]) -> usize {
    common_prefix(history, prompt)
}

enum Pick {
    /// An idle session of the tenant, and how many prompt tokens it shares.
    Take(usize, usize),
    /// A new session (the pool has room).
    Create,
    /// Close another tenant's idle session (least recently used) and create one.
    Replace(usize),
    Full,
}

/// Whether a prompt sharing `score` tokens with a session of `history_len` tokens continues it.
fn continues(score: usize, history_len: usize) -> bool {
    score >= MIN_REUSE && score * 2 >= history_len
}

impl Table {
    fn pick(&self, prompt: &[u32], tenant: &Tenant, max: usize) -> Pick {
        // Without a user, clients cannot be told apart: only whole-prompt continuations.
        let strict = tenant.user.is_none();
        let scored: Vec<(usize, usize, u64)> = (self.slots.iter().enumerate())
            .filter(|(_, s)| !s.busy && s.name.is_none() && s.tenant == *tenant)
            .map(|(i, s)| (i, reuse_score(&s.history, prompt), s.last_used))
            .collect();
        let continued = (scored.iter())
            .filter(|&&(i, score, _)| {
                let s = &self.slots[i];
                match strict {
                    true => score >= MIN_REUSE && score >= s.prompt_len,
                    false => continues(score, s.history.len()),
                }
            })
            .max_by_key(|&&(_, score, used)| (score, used));
        if let Some(&(i, score, _)) = continued {
            return Pick::Take(i, score);
        }
        if self.slots.len() + self.creating < max {
            return Pick::Create;
        }
        if strict {
            return self.lru_idle().map_or(Pick::Full, Pick::Replace);
        }
        match scored
            .iter()
            .max_by_key(|&&(_, score, used)| (score, std::cmp::Reverse(used)))
        {
            Some(&(i, score, _)) => Pick::Take(i, score),
            None => self.lru_idle().map_or(Pick::Full, Pick::Replace),
        }
    }

    /// The least recently used idle session.
    fn lru_idle(&self) -> Option<usize> {
        (self.slots.iter().enumerate())
            .filter(|(_, s)| !s.busy)
            .min_by_key(|(_, s)| s.last_used)
            .map(|(i, _)| i)
    }
}

impl Sessions {
    /// A pool of at most `max` sessions created with `opts`.
    pub fn new(engine: EngineHandle, opts: SessionOptions, max: usize) -> Sessions {
        Sessions {
            engine,
            opts,
            max: max.max(1),
            table: Mutex::new(Table::default()),
            clock: AtomicU64::new(0),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Sessions in the pool, and how many of them are busy.
    pub fn counts(&self) -> (usize, usize) {
        let t = self.table();
        (t.slots.len(), t.slots.iter().filter(|s| s.busy).count())
    }

    /// Takes a session of `tenant` for a request whose full prompt is `prompt`.
    pub async fn acquire(
        self: &Arc<Self>,
        prompt: &[u32],
        tenant: &Tenant,
    ) -> Result<Lease, ApiError> {
        let pick = {
            let mut t = self.table();
            match t.pick(prompt, tenant, self.max) {
                Pick::Take(i, score) => {
                    t.slots[i].busy = true;
                    Ok((t.slots[i].id, score))
                }
                Pick::Create => {
                    t.creating += 1;
                    Err(None)
                }
                Pick::Replace(i) => {
                    t.creating += 1;
                    Err(Some(t.slots.remove(i).id))
                }
                Pick::Full => {
                    return Err(ApiError::overloaded(format!(
                        "all {} sessions are busy; retry later",
                        self.max
                    )))
                }
            }
        };
        let (id, expected_reuse) = match pick {
            Ok(taken) => taken,
            Err(victim) => (self.create(victim, tenant).await?, 0),
        };
        Ok(Lease {
            pool: self.clone(),
            id,
            expected_reuse,
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
        })
    }

    async fn create(
        self: &Arc<Self>,
        victim: Option<SessionId>,
        tenant: &Tenant,
    ) -> Result<SessionId, ApiError> {
        match self.settle(victim, None, tenant.clone()).await? {
            Err(e @ EngineError::TooManySessions { .. }) => Err(ApiError::overloaded(format!(
                "{e}; all sessions of this server are busy"
            ))),
            other => other.map_err(Into::into),
        }
    }

    /// Ends a pending creation: on success the new session joins the pool, busy, for
    /// `tenant` under `name` (durable) or none.
    fn register(
        &self,
        created: Result<SessionId, EngineError>,
        name: Option<&str>,
        tenant: Tenant,
    ) -> Result<SessionId, EngineError> {
        let mut t = self.table();
        t.creating -= 1;
        let id = created?;
        let last_used = self.tick();
        t.slots.push(Slot {
            id,
            tenant,
            name: name.map(str::to_string),
            history: Vec::new(),
            prompt_len: 0,
            busy: true,
            last_used,
        });
        Ok(id)
    }

    /// Takes the durable session `name` of `tenant` for a request whose full prompt is
    /// `prompt` (opening or resuming it; the least recently used idle session is closed to
    /// make room).
    pub async fn acquire_named(
        self: &Arc<Self>,
        name: &str,
        tenant: &Tenant,
        prompt: &[u32],
    ) -> Result<Lease, ApiError> {
        let (found, victim) = {
            let mut t = self.table();
            if let Some(s) = t.slots.iter_mut().find(|s| s.name.as_deref() == Some(name)) {
                if s.busy {
                    return Err(ApiError::overloaded(format!(
                        "a request of conversation '{name}' is running; retry when it ends"
                    )));
                }
                s.busy = true;
                (Some((s.id, reuse_score(&s.history, prompt))), None)
            } else {
                let full = t.slots.len() + t.creating >= self.max;
                let victim = full
                    .then(|| t.lru_idle())
                    .flatten()
                    .map(|i| t.slots.remove(i).id);
                t.creating += 1;
                (None, victim)
            }
        };
        let (id, expected_reuse) = match found {
            Some(taken) => taken,
            None => {
                let made = self.settle(victim, Some(name.to_string()), tenant.clone());
                (made.await??, 0)
            }
        };
        Ok(Lease {
            pool: self.clone(),
            id,
            expected_reuse,
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
        })
    }

    /// Ends a pending creation counted in `creating`: closes `victim` (if any), then opens the
    /// durable session `name` or creates an anonymous one, and registers it — in a task of its
    /// own, so that a caller which goes away meanwhile (a client disconnecting) can neither
    /// leave `creating` up nor the engine's new session outside the pool: what nobody waits
    /// for any more joins the pool idle. The outer error: the task itself failed.
    async fn settle(
        self: &Arc<Self>,
        victim: Option<SessionId>,
        name: Option<String>,
        tenant: Tenant,
    ) -> Result<Result<SessionId, EngineError>, ApiError> {
        let pool = self.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let Some(v) = victim {
                let _ = pool.engine.close_session(v).await;
            }
            let opts = pool.opts.clone();
            let made = match &name {
                Some(n) => pool.engine.open_session(n, opts).await,
                None => pool.engine.create_session(opts).await,
            };
            let registered = pool.register(made, name.as_deref(), tenant);
            if let Err(Ok(id)) = tx.send(registered) {
                pool.release(id, Vec::new(), 0);
            }
        });
        rx.await
            .map_err(|_| ApiError::internal("creating a session failed unexpectedly"))
    }

    fn release(&self, id: SessionId, history: Vec<u32>, prompt_len: usize) {
        let now = self.tick();
        let mut t = self.table();
        if let Some(s) = t.slots.iter_mut().find(|s| s.id == id) {
            s.history = history;
            s.prompt_len = prompt_len;
            s.busy = false;
            s.last_used = now;
        }
    }

    /// Brings the pool in line with the engine's sessions: idle slots the engine no longer
    /// knows are forgotten, and engine sessions outside the pool — orphans, which nothing
    /// would ever use or close — are closed once seen orphaned in two passes in a row
    /// (`suspects` carries the first sightings; nothing counts while a creation is pending).
    /// Returns `(forgotten, closed)`.
    pub async fn reconcile(&self, suspects: &mut Vec<SessionId>) -> (usize, usize) {
        let Ok(ids) = self.engine.session_ids().await else {
            return (0, 0);
        };
        let (forgotten, orphans) = {
            let mut t = self.table();
            let before = t.slots.len();
            t.slots
                .retain(|s| s.busy || ids.binary_search(&s.id).is_ok());
            let forgotten = before - t.slots.len();
            if t.creating > 0 {
                suspects.clear();
                return (forgotten, 0);
            }
            let pooled = |id: &SessionId| t.slots.iter().any(|s| s.id == *id);
            let orphans: Vec<SessionId> = ids.iter().filter(|id| !pooled(id)).copied().collect();
            (forgotten, orphans)
        };
        let (confirmed, first): (Vec<SessionId>, Vec<SessionId>) =
            orphans.into_iter().partition(|id| suspects.contains(id));
        *suspects = first;
        for id in &confirmed {
            tracing::warn!(session = %id, "closing an engine session outside the server's pool");
            let _ = self.engine.close_session(*id).await;
        }
        (forgotten, confirmed.len())
    }

    /// Forgets a session the engine no longer knows.
    fn forget(&self, id: SessionId) {
        self.table().slots.retain(|s| s.id != id);
    }
}

impl Lease {
    /// Records a generated token (the session's history grows by it).
    pub fn push_token(&mut self, id: u32) {
        self.history.push(id);
    }

    /// Drops the session from the pool (after an `UnknownSession` error).
    pub fn forget(&self) {
        self.pool.forget(self.id);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let history = std::mem::take(&mut self.history);
        self.pool.release(self.id, history, self.prompt_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Table {
        /// Picks for the tenant of the user "u" (partial matches allowed).
        fn pick_any(&self, prompt: &[u32], max: usize) -> Pick {
            self.pick(prompt, &user("u"), max)
        }
    }

    fn user(name: &str) -> Tenant {
        Tenant {
            key: None,
            user: Some(name.into()),
        }
    }

    fn slot(id: u64, history: &[u32], busy: bool, last_used: u64) -> Slot {
        Slot {
            id: SessionId(id),
            tenant: user("u"),
            name: None,
            history: history.to_vec(),
            prompt_len: history.len(),
            busy,
            last_used,
        }
    }

    #[test]
    fn picks_the_conversation_the_prompt_continues() {
        let t = Table {
            slots: vec![
                slot(1, &[1, 2, 3, 3, 3], false, 0),
                slot(2, &[1, 2, 3, 4, 5], false, 1),
                slot(3, &[1, 2, 3, 4, 5, 6], true, 2),
            ],
            creating: 0,
        };
        assert!(matches!(
            t.pick_any(&[1, 2, 3, 4, 5, 6, 7], 8),
            Pick::Take(1, 5)
        ));
        // A regenerated answer (the prompt is a prefix of the history) reuses it too.
        assert!(matches!(t.pick_any(&[1, 2, 3, 4], 8), Pick::Take(1, 4)));
        // Only a shared start: a new session while there is room...
        assert!(matches!(
            t.pick_any(&[1, 2, 9, 9, 9, 9, 9], 8),
            Pick::Create
        ));
        assert!(matches!(t.pick_any(&[1, 9], 8), Pick::Create));
        // ...else the idle one sharing the most, least recently used first.
        assert!(matches!(
            t.pick_any(&[1, 2, 9, 9, 9, 9, 9], 3),
            Pick::Take(0, 2)
        ));
        assert!(matches!(t.pick_any(&[7], 3), Pick::Take(0, 0)));
    }

    #[test]
    fn busy_sessions_are_never_shared() {
        let t = Table {
            slots: vec![slot(1, &[1, 2, 3], true, 0)],
            creating: 1,
        };
        assert!(matches!(t.pick_any(&[1, 2, 3], 2), Pick::Full));
        assert!(matches!(t.pick_any(&[1, 2, 3], 3), Pick::Create));
    }

    #[test]
    fn the_score_is_the_shared_start() {
        // Trimmed or not: the engine decides what of the State a departing prompt keeps.
        assert_eq!(reuse_score(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(reuse_score(&[1, 2, 3], &[1, 2, 3, 4]), 3);
    }

    #[test]
    fn tenants_never_share_sessions() {
        let alice = Tenant {
            key: None,
            user: Some("alice".into()),
        };
        let mut t = Table {
            slots: vec![slot(1, &[1, 2, 3, 4], false, 5), slot(2, &[7, 7], false, 1)],
            creating: 0,
        };
        t.slots[0].tenant = alice.clone();
        // Bob continues Alice's prompt: never her session; a new one while there is room...
        let bob = Tenant {
            key: None,
            user: Some("bob".into()),
        };
        assert!(matches!(t.pick(&[1, 2, 3, 4, 5], &bob, 8), Pick::Create));
        // ...else another tenant's least recently used idle session is replaced, not reused.
        assert!(matches!(
            t.pick(&[1, 2, 3, 4, 5], &bob, 2),
            Pick::Replace(1)
        ));
        assert!(matches!(
            t.pick(&[1, 2, 3, 4, 5], &alice, 2),
            Pick::Take(0, 4)
        ));
        t.slots[1].busy = true;
        assert!(matches!(
            t.pick(&[1, 2, 3, 4, 5], &bob, 2),
            Pick::Replace(0)
        ));
        t.slots[0].busy = true;
        assert!(matches!(t.pick(&[1, 2, 3, 4, 5], &bob, 2), Pick::Full));
    }

    #[test]
    fn durable_names_are_per_key_with_several_keys() {
        let t = |key, user: &str| Tenant {
            key,
            user: Some(user.into()),
        };
        assert_eq!(t(Some(0), "bob").durable_name(1).as_deref(), Some("bob"));
        assert_eq!(t(None, "bob").durable_name(0).as_deref(), Some("bob"));
        assert_eq!(t(Some(1), "bob").durable_name(2).as_deref(), Some("k1-bob"));
        assert_eq!(t(Some(0), "bob").durable_name(2).as_deref(), Some("k0-bob"));
        assert_eq!(Tenant::default().durable_name(2), None);
    }

    /// Without a user, only a prompt holding a session's whole previous prompt reuses it: a
    /// probe sharing part of another client's prompt learns nothing (not even when the pool
    /// is full).
    #[test]
    fn anonymous_requests_reuse_only_whole_prompt_continuations() {
        let anon = Tenant::default();
        let mut s = slot(1, &[1, 2, 3, 4, 9, 9], false, 0);
        s.tenant = anon.clone();
        s.prompt_len = 4;
        let t = Table {
            slots: vec![s],
            creating: 0,
        };
        // The conversation continues (its answer re-spelled) or is regenerated: reused.
        assert!(matches!(
            t.pick(&[1, 2, 3, 4, 5, 6], &anon, 8),
            Pick::Take(0, 4)
        ));
        assert!(matches!(
            t.pick(&[1, 2, 3, 4, 9, 9, 7], &anon, 8),
            Pick::Take(0, 6)
        ));
        // A probe sharing only part of the prompt: a fresh session, never this one.
        assert!(matches!(t.pick(&[1, 2, 3, 7], &anon, 8), Pick::Create));
        assert!(matches!(t.pick(&[1, 2, 3, 7], &anon, 1), Pick::Replace(0)));
    }
}
