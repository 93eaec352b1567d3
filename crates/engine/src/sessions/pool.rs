//! The session pool: a request that names no session ([`Target::Pool`]) runs in the session
//! the engine picks for it, on the engine thread, from the histories it holds — so front ends
//! keep no token history of their own and "busy" is decided in one place.
//!
//! A request takes the idle session of its tenant that its prompt continues (a chat resending
//! its conversation plus a new message, or a regenerated answer: the prompt shares at least
//! half of the session's history), so only the new part is computed. Otherwise it gets a new
//! session while the engine has room — a new conversation does not overwrite another one's
//! cache just because both start with the same template — and else the idle session of its
//! tenant it shares the most with (least recently used first; the engine reuses whatever
//! prefix matches). Busy sessions are never shared.
//!
//! Sessions belong to a [`Tenant`] (the credential a request presented and its end user): a
//! request only ever reuses its own tenant's sessions, so neither the KV cache nor
//! `cached_tokens` nor a pending memory event can tell one tenant about another's text. When
//! the engine is full of other tenants' idle sessions, the least recently used one is closed
//! and a fresh session made in its place.
//!
//! Requests without a user are stricter still, because clients sharing a credential cannot be
//! told apart: such a request reuses a session only when its prompt holds that session's whole
//! previous prompt (a conversation continuing, an answer regenerated), never a partial match —
//! so `cached_tokens` tells a probe nothing short of another client's entire prompt.
//!
//! A request naming a durable session ([`PoolRequest::durable`]) gets that session (opened, or
//! resumed from disk); durable sessions are never lent to other requests, and when the engine
//! is full the least recently used idle pooled session is closed (a durable one keeps its
//! files and resumes on its next request).

use crate::actor::Actor;
use crate::error::EngineError;
use crate::events::SessionId;
use crate::plan::common_prefix;
use crate::request::{Encoded, Input, SessionOptions};
use std::time::Instant;

/// Shortest match that counts as a continuation (more than a BOS token).
const MIN_REUSE: usize = 2;

/// Who a pooled session belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tenant {
    /// Which credential the request presented, in the front end's numbering (`None` without
    /// credentials).
    pub key: Option<usize>,
    /// The end user (OpenAI's `user` field). Without one, reuse is strict (see the module).
    pub user: Option<String>,
}

/// A request for a session from the engine's pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolRequest {
    /// Whose sessions the request may reuse.
    pub tenant: Tenant,
    /// The durable session of this name ([`crate::EngineHandle::open_session`]): opened or
    /// resumed, and never lent to another request.
    pub durable: Option<String>,
    /// Options of a session created for the request.
    pub options: SessionOptions,
}

/// The session a generation runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This session.
    Session(SessionId),
    /// The one the engine picks from its pool. The request's input must be the whole prompt
    /// (`Text`, `Chat`, `Tokens` or `Encoded`): the pick compares it with the sessions'
    /// histories.
    Pool(Box<PoolRequest>),
}

impl From<SessionId> for Target {
    fn from(id: SessionId) -> Target {
        Target::Session(id)
    }
}

impl From<PoolRequest> for Target {
    fn from(p: PoolRequest) -> Target {
        Target::Pool(Box::new(p))
    }
}

/// A session's membership of the pool.
#[derive(Debug, Clone)]
pub(crate) struct Pooled {
    /// Its tenant.
    pub tenant: Tenant,
    /// Tokens of its last prompt (its history up to the answer).
    pub prompt_len: usize,
}

/// What the pick sees of a session.
#[derive(Debug, Clone)]
struct Candidate<'a> {
    id: SessionId,
    tenant: &'a Tenant,
    /// A durable session (never lent).
    durable: bool,
    history: &'a [u32],
    prompt_len: usize,
    busy: bool,
    last_used: Instant,
}

/// What a pooled request gets.
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    /// An idle session of the tenant.
    Take(SessionId),
    /// A new session (the engine has room).
    Create,
    /// Close this idle session (least recently used) and create one.
    Replace(SessionId),
    /// Every session is busy.
    Full,
}

/// Whether a prompt sharing `score` tokens with a session of `history_len` tokens continues it.
fn continues(score: usize, history_len: usize) -> bool {
    score >= MIN_REUSE && score * 2 >= history_len
}

/// The pick for `prompt` of `tenant` among the pooled `sessions`; `room`: another session can
/// be created.
fn pick(sessions: &[Candidate<'_>], prompt: &[u32], tenant: &Tenant, room: bool) -> Pick {
    // Without a user, clients cannot be told apart: only whole-prompt continuations.
    let strict = tenant.user.is_none();
    let scored: Vec<(&Candidate<'_>, usize)> = (sessions.iter())
        .filter(|s| !s.busy && !s.durable && s.tenant == tenant)
        .map(|s| (s, common_prefix(s.history, prompt)))
        .collect();
    let continued = (scored.iter())
        .filter(|&&(s, score)| match strict {
            true => score >= MIN_REUSE && score >= s.prompt_len,
            false => continues(score, s.history.len()),
        })
        .max_by_key(|&&(s, score)| (score, s.last_used));
    if let Some(&(s, _)) = continued {
        return Pick::Take(s.id);
    }
    if room {
        return Pick::Create;
    }
    let best = (scored.iter()).max_by_key(|&&(s, score)| (score, std::cmp::Reverse(s.last_used)));
    match best {
        Some(&(s, _)) if !strict => Pick::Take(s.id),
        _ => lru_idle(sessions).map_or(Pick::Full, Pick::Replace),
    }
}

/// The least recently used idle pooled session.
fn lru_idle(sessions: &[Candidate<'_>]) -> Option<SessionId> {
    (sessions.iter())
        .filter(|s| !s.busy)
        .min_by_key(|s| s.last_used)
        .map(|s| s.id)
}

/// The tokens of a pooled request's whole prompt; a `Text` or `Chat` input is encoded here,
/// once, and becomes [`Input::Encoded`].
fn whole_prompt<'a>(
    tok: &statelm_tokenizer::Tokenizer,
    input: &'a mut Input,
    opts: &SessionOptions,
) -> Result<&'a [u32], EngineError> {
    if matches!(input, Input::Text(_) | Input::Chat(_)) {
        let taken = std::mem::replace(input, Input::Tokens(Vec::new()));
        let encoded = Encoded::for_session(tok, taken, opts)?;
        *input = Input::Encoded(Box::new(encoded));
    }
    match input {
        Input::Encoded(e) => Ok(e.tokens()),
        Input::Tokens(t) => Ok(t),
        _ => Err(EngineError::InvalidRequest(
            "a request without a session must carry its whole prompt (text, chat or tokens)".into(),
        )),
    }
}

impl Actor {
    /// Resolves a pooled request: the session it runs in (created, opened or taken idle), with
    /// its input encoded once (a `Text` or `Chat` input becomes [`Input::Encoded`]). Requests
    /// whose streams were dropped are ended first, so their sessions count as idle.
    pub(crate) fn take_from_pool(
        &mut self,
        req: &PoolRequest,
        input: &mut Input,
    ) -> Result<SessionId, EngineError> {
        let prompt = whole_prompt(self.core.model.tokenizer(), input, &req.options)?;
        self.end_cancelled();
        let id = match &req.durable {
            Some(name) => self.take_durable(name, &req.options)?,
            None => self.take_pooled(&req.tenant, prompt, &req.options)?,
        };
        if let Some(s) = self.core.sessions.get_mut(&id) {
            s.pool = Some(Pooled {
                tenant: req.tenant.clone(),
                prompt_len: prompt.len(),
            });
        }
        Ok(id)
    }

    /// Ends every request whose stream was dropped.
    fn end_cancelled(&mut self) {
        for i in 0..self.jobs.len() {
            if !self.jobs[i].is_finished() && self.jobs[i].is_cancelled() {
                self.finish_job(i, crate::events::StopReason::Cancelled);
                self.jobs[i].flush();
            }
        }
    }

    /// What the pick sees of the pooled sessions.
    fn candidates(&self) -> Vec<Candidate<'_>> {
        (self.core.sessions.values())
            .filter_map(|s| {
                let p = s.pool.as_ref()?;
                Some(Candidate {
                    id: s.id,
                    tenant: &p.tenant,
                    durable: s.durable.is_some(),
                    history: &s.history,
                    prompt_len: p.prompt_len,
                    busy: s.busy.is_some(),
                    last_used: s.last_used,
                })
            })
            .collect()
    }

    fn has_room(&self) -> bool {
        self.core.sessions.len() < self.core.config.max_sessions
    }

    /// An idle session of `tenant` for `prompt`, or a new one.
    fn take_pooled(
        &mut self,
        tenant: &Tenant,
        prompt: &[u32],
        opts: &SessionOptions,
    ) -> Result<SessionId, EngineError> {
        let picked = pick(&self.candidates(), prompt, tenant, self.has_room());
        match picked {
            Pick::Take(id) => Ok(id),
            Pick::Create => self.create(opts.clone()),
            Pick::Replace(victim) => {
                self.close(victim)?;
                self.create(opts.clone())
            }
            Pick::Full => Err(EngineError::TooManySessions {
                max: self.core.config.max_sessions,
            }),
        }
    }

    /// The durable session `name`, idle; opened (closing the least recently used idle pooled
    /// session when the engine is full) if it is not open.
    fn take_durable(
        &mut self,
        name: &str,
        opts: &SessionOptions,
    ) -> Result<SessionId, EngineError> {
        let open = (self.core.sessions.values())
            .find(|s| s.durable.as_ref().is_some_and(|d| d.name == name));
        if let Some(s) = open {
            return match s.busy {
                Some(_) => Err(EngineError::SessionBusy(s.id)),
                None => Ok(s.id),
            };
        }
        if !self.has_room() {
            if let Some(victim) = lru_idle(&self.candidates()) {
                self.close(victim)?;
            }
        }
        self.open_named(name, opts.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn user(name: &str) -> Tenant {
        Tenant {
            key: None,
            user: Some(name.into()),
        }
    }

    /// Candidates over `(history, busy, age)` rows: ids from 1, `last_used` grows with `age`.
    fn candidates<'a>(tenant: &'a Tenant, rows: &[(&'a [u32], bool, u64)]) -> Vec<Candidate<'a>> {
        let t0 = Instant::now();
        (rows.iter().enumerate())
            .map(|(i, &(history, busy, age))| Candidate {
                id: SessionId(i as u64 + 1),
                tenant,
                durable: false,
                history,
                prompt_len: history.len(),
                busy,
                last_used: t0 + Duration::from_secs(age),
            })
            .collect()
    }

    #[test]
    fn picks_the_conversation_the_prompt_continues() {
        let u = user("u");
        let rows: [(&[u32], bool, u64); 3] = [
            (&[1, 2, 3, 3, 3], false, 0),
            (&[1, 2, 3, 4, 5], false, 1),
            (&[1, 2, 3, 4, 5, 6], true, 2),
        ];
        let c = candidates(&u, &rows);
        let take = |n| Pick::Take(SessionId(n));
        assert_eq!(pick(&c, &[1, 2, 3, 4, 5, 6, 7], &u, true), take(2));
        // A regenerated answer (the prompt is a prefix of the history) reuses it too.
        assert_eq!(pick(&c, &[1, 2, 3, 4], &u, true), take(2));
        // Only a shared start: a new session while there is room...
        assert_eq!(pick(&c, &[1, 2, 9, 9, 9, 9, 9], &u, true), Pick::Create);
        assert_eq!(pick(&c, &[1, 9], &u, true), Pick::Create);
        // ...else the idle one sharing the most, least recently used first.
        assert_eq!(pick(&c, &[1, 2, 9, 9, 9, 9, 9], &u, false), take(1));
        assert_eq!(pick(&c, &[7], &u, false), take(1));
    }

    #[test]
    fn busy_sessions_are_never_shared() {
        let u = user("u");
        let rows: [(&[u32], bool, u64); 1] = [(&[1, 2, 3], true, 0)];
        let c = candidates(&u, &rows);
        assert_eq!(pick(&c, &[1, 2, 3], &u, false), Pick::Full);
        assert_eq!(pick(&c, &[1, 2, 3], &u, true), Pick::Create);
    }

    #[test]
    fn tenants_never_share_sessions() {
        let (alice, bob) = (user("alice"), user("bob"));
        let rows: [(&[u32], bool, u64); 2] = [(&[1, 2, 3, 4], false, 5), (&[7, 7], false, 1)];
        let mut c = candidates(&alice, &rows);
        c[1].tenant = &bob;
        let prompt = [1, 2, 3, 4, 5];
        // Bob continues Alice's prompt: never her session; a new one while there is room...
        assert_eq!(pick(&c, &prompt, &bob, true), Pick::Create);
        // ...else his own idle session, sharing nothing, is reused before anyone's is closed.
        assert_eq!(pick(&c, &prompt, &bob, false), Pick::Take(SessionId(2)));
        c[1].busy = true;
        // With his own busy: another tenant's least recently used idle session is replaced.
        assert_eq!(pick(&c, &prompt, &bob, false), Pick::Replace(SessionId(1)));
        assert_eq!(pick(&c, &prompt, &alice, false), Pick::Take(SessionId(1)));
        c[0].busy = true;
        assert_eq!(pick(&c, &prompt, &bob, false), Pick::Full);
    }

    #[test]
    fn durable_sessions_are_never_lent() {
        let u = user("u");
        let rows: [(&[u32], bool, u64); 1] = [(&[1, 2, 3], false, 0)];
        let mut c = candidates(&u, &rows);
        c[0].durable = true;
        assert_eq!(pick(&c, &[1, 2, 3, 4], &u, true), Pick::Create);
        // When the engine is full it may be closed (its files stay), never lent.
        assert_eq!(
            pick(&c, &[1, 2, 3, 4], &u, false),
            Pick::Replace(SessionId(1))
        );
    }

    proptest::proptest! {
        /// Whatever the pool holds, a pick never lends a busy or durable session nor another
        /// tenant's, holds anonymous requests to whole-prompt continuations, creates only with
        /// room, closes only idle sessions and only when full, and is full only when nothing
        /// is idle.
        #[test]
        fn picks_keep_tenants_apart(
            rows in proptest::collection::vec(
                (0usize..3, proptest::collection::vec(0u32..3, 0..8), 0usize..8,
                 proptest::bool::ANY, proptest::bool::ANY, 0u64..100),
                0..6,
            ),
            prompt in proptest::collection::vec(0u32..3, 0..10),
            who in 0usize..3,
            room in proptest::bool::ANY,
        ) {
            let tenants = [user("a"), user("b"), Tenant::default()];
            let t0 = Instant::now();
            let c: Vec<Candidate<'_>> = (rows.iter().enumerate())
                .map(|(i, (t, history, plen, busy, durable, age))| Candidate {
                    id: SessionId(i as u64 + 1),
                    tenant: &tenants[*t],
                    durable: *durable,
                    history,
                    prompt_len: (*plen).min(history.len()),
                    busy: *busy,
                    last_used: t0 + Duration::from_secs(*age),
                })
                .collect();
            let tenant = &tenants[who];
            let find = |id: SessionId| c.iter().find(|s| s.id == id).cloned();
            match pick(&c, &prompt, tenant, room) {
                Pick::Take(id) => {
                    let s = find(id).expect("a candidate");
                    proptest::prop_assert!(!s.busy && !s.durable && s.tenant == tenant);
                    if tenant.user.is_none() {
                        let score = common_prefix(s.history, &prompt);
                        proptest::prop_assert!(score >= MIN_REUSE && score >= s.prompt_len);
                    }
                }
                Pick::Create => proptest::prop_assert!(room),
                Pick::Replace(id) => {
                    proptest::prop_assert!(!room && !find(id).expect("a candidate").busy);
                }
                Pick::Full => proptest::prop_assert!(!room && c.iter().all(|s| s.busy)),
            }
        }
    }

    /// Without a user, only a prompt holding a session's whole previous prompt reuses it: a
    /// probe sharing part of another client's prompt learns nothing (not even when the engine
    /// is full).
    #[test]
    fn anonymous_requests_reuse_only_whole_prompt_continuations() {
        let anon = Tenant::default();
        let rows: [(&[u32], bool, u64); 1] = [(&[1, 2, 3, 4, 9, 9], false, 0)];
        let mut c = candidates(&anon, &rows);
        c[0].prompt_len = 4;
        let take = Pick::Take(SessionId(1));
        // The conversation continues (its answer re-spelled) or is regenerated: reused.
        assert_eq!(pick(&c, &[1, 2, 3, 4, 5, 6], &anon, true), take);
        assert_eq!(pick(&c, &[1, 2, 3, 4, 9, 9, 7], &anon, true), take);
        // A probe sharing only part of the prompt: a fresh session, never this one.
        assert_eq!(pick(&c, &[1, 2, 3, 7], &anon, true), Pick::Create);
        assert_eq!(
            pick(&c, &[1, 2, 3, 7], &anon, false),
            Pick::Replace(SessionId(1))
        );
    }
}
