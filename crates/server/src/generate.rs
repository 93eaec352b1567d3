//! Running one generation for a request: take a session, start the engine's stream, and read
//! it to the end for non-streaming replies.

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

/// A generation that has produced its first event.
#[derive(Debug)]
pub(crate) struct Started {
    /// Declared before the lease: dropped first, it cancels the generation before the session
    /// returns to the pool, so the pool never lends a session whose request still runs.
    pub stream: GenerationStream,
    pub lease: Lease,
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
    let request = |session| GenerateRequest {
        session,
        input: input.clone(),
        sampling: params.sampling.clone(),
        stop: params.stop.clone(),
        max_tokens: params.max_tokens,
    };
    let mut stream = match app.engine.generate(request(lease.id)).await {
        // The engine dropped the session (a contained failure): take another one, once.
        Err(EngineError::UnknownSession(_)) => {
            lease.forget();
            lease = acquire().await?;
            app.engine.generate(request(lease.id)).await?
        }
        started => started?,
    };
    let first = match stream.next().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(EngineError::ShuttingDown.into()),
    };
    let deadline = tokio::time::Instant::now() + app.cfg.max_generation_time;
    Ok(Started {
        stream,
        lease,
        first,
        deadline,
        slot,
    })
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
    // Bindings drop in reverse order: the stream (cancelling) before the lease.
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
