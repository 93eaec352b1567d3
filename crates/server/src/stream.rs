//! Streaming replies: Server-Sent Events in OpenAI's chunk format, ending with `data: [DONE]`.
//!
//! A task drives the engine's stream and sends chunks to the response body over a channel.
//! When the client goes away the body (the channel's receiver) is dropped; the task sees it and
//! drops the engine stream, which cancels the generation within one token.

use crate::format::{finish_reason_after, Shape};
use crate::generate::{classify, Item, Started};
use crate::state::AppState;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Chunks buffered between the generation task and the connection.
const CHANNEL: usize = 32;

/// Starts streaming `started` as an SSE response.
pub(crate) fn sse_response(
    app: Arc<AppState>,
    shape: Shape,
    started: Started,
    include_usage: bool,
) -> Response {
    let (tx, rx) = mpsc::channel::<String>(CHANNEL);
    tokio::spawn(drive(app, shape, started, include_usage, tx));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        let data = rx.recv().await?;
        Some((Ok::<_, Infallible>(SseEvent::default().data(data)), rx))
    });
    Sse::new(body)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Counts a stream as active while alive.
struct ActiveGuard<'a>(&'a AppState);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0
            .metrics
            .streams_active
            .fetch_sub(1, Ordering::Relaxed);
    }
}

async fn send(tx: &mpsc::Sender<String>, v: &Value) -> bool {
    tx.send(v.to_string()).await.is_ok()
}

/// What the loop of [`drive`] does next.
enum Flow {
    Go,
    /// The client is gone.
    Gone,
    /// The generation ended (normally or with an error chunk sent).
    Ended,
}

/// Sends what one engine event means to the client.
async fn forward(
    shape: &Shape,
    tx: &mpsc::Sender<String>,
    events: &mut Vec<Value>,
    calls: &mut usize,
    include_usage: bool,
    ev: statelm_engine::Event,
) -> Flow {
    let ok = match classify(ev) {
        Some(Item::Text(t)) if !t.is_empty() => send(tx, &shape.text_chunk(&t)).await,
        Some(Item::Reasoning(t)) if !t.is_empty() => send(tx, &shape.reasoning_chunk(&t)).await,
        Some(Item::Memory(v)) => {
            let ok = send(tx, &shape.event_chunk(v.clone())).await;
            events.push(v);
            ok
        }
        Some(Item::Tool(e)) => {
            if matches!(e, statelm_engine::Event::ToolCallEnd { .. }) {
                *calls += 1;
            }
            match (crate::tools::delta(&e), &e) {
                (Some(delta), _) => send(tx, &shape.tool_chunk(delta)).await,
                (None, statelm_engine::Event::ToolCallUnfinished { .. }) => {
                    let v = e.to_json();
                    let ok = send(tx, &shape.event_chunk(v.clone())).await;
                    events.push(v);
                    ok
                }
                (None, _) => true,
            }
        }
        Some(Item::Done(d)) => {
            let finish = finish_reason_after(&d.stop_reason, *calls);
            let mut ok = send(tx, &shape.finish_chunk(finish)).await;
            if ok && include_usage {
                ok = send(tx, &shape.usage_chunk(&d, events)).await;
            }
            return if ok { Flow::Ended } else { Flow::Gone };
        }
        _ => true,
    };
    if ok {
        Flow::Go
    } else {
        Flow::Gone
    }
}

/// Drives one generation to the client.
async fn drive(
    app: Arc<AppState>,
    shape: Shape,
    mut s: Started,
    include_usage: bool,
    tx: mpsc::Sender<String>,
) {
    app.metrics.streams_active.fetch_add(1, Ordering::Relaxed);
    let _active = ActiveGuard(&app);
    let mut abort = app.abort.subscribe();
    let mut aborting = false;
    let mut timed_out = false;
    let mut noted = false;
    let mut events = Vec::new();
    let mut calls = 0;
    if let Some(role) = shape.role_chunk() {
        if !send(&tx, &role).await {
            app.metrics.disconnects.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let mut next = Some(Ok(s.first.clone()));
    let flow = loop {
        if timed_out && !noted {
            noted = true;
            let v = crate::generate::time_limit_event(app.cfg.max_generation_time);
            if !send(&tx, &shape.event_chunk(v.clone())).await {
                break Flow::Gone;
            }
            events.push(v);
        }
        let item = match next.take() {
            Some(item) => Some(item),
            None => tokio::select! {
                biased;
                _ = tx.closed() => break Flow::Gone,
                _ = abort.wait_for(|a| *a), if !aborting => {
                    aborting = true;
                    s.stream.cancel();
                    continue;
                }
                _ = tokio::time::sleep_until(s.deadline), if !timed_out => {
                    timed_out = true;
                    s.stream.cancel();
                    continue;
                }
                item = s.stream.next() => item,
            },
        };
        let flow = match item {
            Some(Ok(ev)) => forward(&shape, &tx, &mut events, &mut calls, include_usage, ev).await,
            Some(Err(e)) => {
                let err = crate::error::ApiError::from(e);
                tracing::warn!(error = %err.message, "generation failed mid-stream");
                send(&tx, &err.body()).await;
                Flow::Ended
            }
            None => Flow::Ended,
        };
        if !matches!(flow, Flow::Go) {
            break flow;
        }
    };
    match flow {
        Flow::Gone => {
            // Dropping the engine stream (with `s`) cancels the generation.
            app.metrics.disconnects.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(id = %shape.id, "client went away; generation cancelled");
        }
        _ => {
            let _ = tx.send("[DONE]".to_string()).await;
        }
    }
}
