//! Running one generation for a request: take a session, start the engine's stream (waiting
//! out a session the engine is still releasing), and read it to the end for non-streaming
//! replies.

use crate::error::ApiError;
use crate::format::event_json;
use crate::gate::Slot;
use crate::request::Params;
use crate::sessions::{Lease, Tenant};
use crate::state::AppState;
use futures::StreamExt;
use serde_json::Value;
use statelm_engine::{DoneStats, EngineError, Event, GenerateRequest, GenerationStream, Input};
use std::time::Duration;

/// How often, and how long apart, a start is retried while the engine still finishes the
/// session's previous (cancelled) request.
const BUSY_RETRIES: usize = 200;
const BUSY_WAIT: Duration = Duration::from_millis(10);

/// A generation that has produced its first event.
#[derive(Debug)]
pub(crate) struct Started {
    pub lease: Lease,
    pub stream: GenerationStream,
    pub first: Event,
    /// When the generation must stop (the server's `max_generation_time`).
    pub deadline: tokio::time::Instant,
    /// Its generation slot, held to the end.
    pub slot: Slot,
}

/// The event that says a generation was stopped at the time limit, as reply JSON.
pub(crate) fn time_limit_event(limit: Duration) -> Value {
    serde_json::json!({
        "event": "time_limit",
        "reason": format!(
            "the generation ran for the server's limit of {} s and was stopped",
            limit.as_secs()
        ),
    })
}

/// What an engine event means for a reply.
#[derive(Debug)]
pub(crate) enum Item {
    /// Generated text (may be empty).
    Text(String),
    /// A memory event, as JSON.
    Memory(Value),
    /// The end.
    Done(DoneStats),
}

/// Interprets an event, recording generated tokens in the lease.
pub(crate) fn classify(lease: &mut Lease, ev: Event) -> Option<Item> {
    if let Some(v) = event_json(&ev) {
        return Some(Item::Memory(v));
    }
    match ev {
        Event::Token { id, text } => {
            lease.push_token(id);
            Some(Item::Text(text))
        }
        Event::Text { text } => Some(Item::Text(text)),
        Event::Done(d) => Some(Item::Done(d)),
        _ => None,
    }
}

/// Takes a session for `prompt` and starts the generation; errors the engine reports before
/// the first event (prompt too long, over memory...) become error replies.
pub(crate) async fn start(
    app: &AppState,
    input: Input,
    prompt: &[u32],
    params: &Params,
    tenant: &Tenant,
    slot: Slot,
) -> Result<Started, ApiError> {
    let named = (tenant.durable_name(app.cfg.api_keys.len())).filter(|_| app.cfg.durable_sessions);
    let acquire = || async {
        match &named {
            Some(name) => app.sessions.acquire_named(name, tenant, prompt).await,
            None => app.sessions.acquire(prompt, tenant).await,
        }
    };
    let mut lease = acquire().await?;
    tracing::debug!(session = %lease.id, expected_reuse = lease.expected_reuse, "session taken");
    let mut attempts = 0;
    loop {
        let mut stream = app.engine.generate(GenerateRequest {
            session: lease.id,
            input: input.clone(),
            sampling: params.sampling.clone(),
            stop: params.stop.clone(),
            max_tokens: params.max_tokens,
        });
        match stream.next().await {
            Some(Ok(first)) => {
                let deadline = tokio::time::Instant::now() + app.cfg.max_generation_time;
                return Ok(Started {
                    lease,
                    stream,
                    first,
                    deadline,
                    slot,
                });
            }
            Some(Err(EngineError::SessionBusy(_))) if attempts < BUSY_RETRIES => {
                attempts += 1;
                tokio::time::sleep(BUSY_WAIT).await;
            }
            Some(Err(EngineError::UnknownSession(_))) if attempts < BUSY_RETRIES => {
                attempts += 1;
                lease.forget();
                lease = acquire().await?;
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Err(EngineError::ShuttingDown.into()),
        }
    }
}

/// A whole generation, read to the end.
#[derive(Debug)]
pub(crate) struct Collected {
    pub text: String,
    pub events: Vec<Value>,
    pub done: DoneStats,
}

/// Reads a started generation to the end (cancelling it if the server shuts down).
pub(crate) async fn collect(app: &AppState, s: Started) -> Result<Collected, ApiError> {
    let Started {
        mut lease,
        mut stream,
        first,
        deadline,
        slot: _slot,
    } = s;
    let mut abort = app.abort.subscribe();
    let mut aborting = false;
    let mut timed_out = false;
    let mut text = String::new();
    let mut events = Vec::new();
    let mut next = Some(Ok(first));
    loop {
        let item = match next.take() {
            Some(item) => Some(item),
            None => tokio::select! {
                item = stream.next() => item,
                _ = abort.wait_for(|a| *a), if !aborting => {
                    aborting = true;
                    stream.cancel();
                    continue;
                }
                _ = tokio::time::sleep_until(deadline), if !timed_out => {
                    timed_out = true;
                    stream.cancel();
                    events.push(time_limit_event(app.cfg.max_generation_time));
                    continue;
                }
            },
        };
        match item {
            None => return Err(EngineError::ShuttingDown.into()),
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(ev)) => match classify(&mut lease, ev) {
                Some(Item::Text(t)) => text.push_str(&t),
                Some(Item::Memory(v)) => events.push(v),
                Some(Item::Done(done)) => return Ok(Collected { text, events, done }),
                None => {}
            },
        }
    }
}
