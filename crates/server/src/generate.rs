//! Running one generation for a request: start the engine's stream in a session of its pool,
//! and read it to the end for non-streaming replies.

use crate::error::ApiError;
use crate::format::event_json;
use crate::gate::Slot;
use crate::request::Params;
use crate::state::AppState;
use crate::tenant::{durable_name, Tenant};
use futures::StreamExt;
use serde_json::Value;
use statelm_engine::{
    DoneStats, EngineError, Event, GenerateRequest, GenerationStream, Input, PoolRequest,
};
use std::time::Duration;

/// A generation that has produced its first event.
#[derive(Debug)]
pub(crate) struct Started {
    /// Dropping it cancels the generation (the engine frees its session).
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
    /// Reasoning text (a thinking block; `reasoning_content`).
    Reasoning(String),
    /// A memory event, as JSON.
    Memory(Value),
    /// A tool-call event.
    Tool(Event),
    /// The end.
    Done(DoneStats),
}

/// Interprets an event.
pub(crate) fn classify(ev: Event) -> Option<Item> {
    if let Some(v) = event_json(&ev) {
        return Some(Item::Memory(v));
    }
    match ev {
        Event::Token { text, .. } | Event::Text { text } => Some(Item::Text(text)),
        Event::Reasoning { text } => Some(Item::Reasoning(text)),
        Event::Done(d) => Some(Item::Done(d)),
        e @ (Event::ToolCallStart { .. }
        | Event::ToolCallArguments { .. }
        | Event::ToolCallEnd { .. }
        | Event::ToolCallUnfinished { .. }) => Some(Item::Tool(e)),
        _ => None,
    }
}

/// Starts the generation in a session of the engine's pool for `tenant` (its durable
/// conversation, with durable sessions); errors the engine reports before the first event
/// (every session busy, prompt too long, over memory...) become error replies.
pub(crate) async fn start(
    app: &AppState,
    input: Input,
    params: &Params,
    tenant: Tenant,
    slot: Slot,
) -> Result<Started, ApiError> {
    let keys = app.cfg.api_keys.len();
    let durable = durable_name(&tenant, keys).filter(|_| app.cfg.durable_sessions);
    let pool = PoolRequest {
        tenant,
        durable: durable.clone(),
        options: app.session_options.clone(),
    };
    let started = app.engine.generate(GenerateRequest {
        session: pool.into(),
        input,
        sampling: params.sampling.clone(),
        stop: params.stop.clone(),
        max_tokens: params.max_tokens,
    });
    let mut stream = match (started.await, durable) {
        (Err(EngineError::SessionBusy(_)), Some(name)) => {
            return Err(ApiError::overloaded(format!(
                "a request of conversation '{name}' is running; retry when it ends"
            )))
        }
        (started, _) => started?,
    };
    tracing::debug!(session = %stream.session(), "session taken");
    let first = match stream.next().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(EngineError::ShuttingDown.into()),
    };
    let deadline = tokio::time::Instant::now() + app.cfg.max_generation_time;
    Ok(Started {
        stream,
        first,
        deadline,
        slot,
    })
}

/// A whole generation, read to the end.
#[derive(Debug)]
pub(crate) struct Collected {
    pub text: String,
    /// The thinking blocks' text (`reasoning_content`).
    pub reasoning: String,
    /// The answer's tool calls.
    pub calls: crate::tools::Calls,
    pub events: Vec<Value>,
    pub done: DoneStats,
}

/// A generation that failed after it started, with the memory events it had carried (a
/// notice such as a spill announced on a turn that then fails belongs in the error reply).
#[derive(Debug)]
pub(crate) struct Failed {
    /// What went wrong.
    pub error: ApiError,
    /// The memory events that came before it.
    pub events: Vec<Value>,
}

/// Reads a started generation to the end (cancelling it if the server shuts down).
pub(crate) async fn collect(app: &AppState, s: Started) -> Result<Collected, Failed> {
    let Started {
        mut stream,
        first,
        deadline,
        slot: _slot,
    } = s;
    let mut abort = app.abort.subscribe();
    let mut aborting = false;
    let mut timed_out = false;
    let (mut text, mut reasoning) = (String::new(), String::new());
    let mut calls = crate::tools::Calls::default();
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
        let error: ApiError = match item {
            None => EngineError::ShuttingDown.into(),
            Some(Err(e)) => e.into(),
            Some(Ok(ev)) => {
                match classify(ev) {
                    Some(Item::Text(t)) => text.push_str(&t),
                    Some(Item::Reasoning(t)) => reasoning.push_str(&t),
                    Some(Item::Memory(v)) => events.push(v),
                    Some(Item::Tool(e)) => calls.note(&e),
                    Some(Item::Done(done)) => {
                        return Ok(Collected {
                            text,
                            reasoning,
                            calls,
                            events,
                            done,
                        })
                    }
                    None => {}
                }
                continue;
            }
        };
        return Err(Failed { error, events });
    }
}
