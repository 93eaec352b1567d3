//! statelm-server: an OpenAI-compatible HTTP API over the statelm engine.
//!
//! Routes:
//! - `POST /v1/chat/completions`, `POST /v1/completions`: streaming (SSE, OpenAI's chunk
//!   format, `data: [DONE]` at the end) and non-streaming, with `usage` (including
//!   `prompt_tokens_details.cached_tokens`). Memory events (context trimmed, cache evicted,
//!   State spilled or restored) are never silent: streams carry them as chunks with an empty
//!   delta and a `statelm` field; whole replies in a `statelm` object and an
//!   `x-statelm-events` header (`context_trimmed;kept=..;dropped=..`).
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text).
//!
//! Conversation reuse: every request runs in a session of the engine's pool
//! ([`statelm_engine::PoolRequest`]): the engine sends it to its tenant's idle session sharing
//! the longest start with its prompt, so a chat that resends its conversation computes only
//! the new message. The server keeps no token history of its own.
//!
//! Bad input always gets an OpenAI-style JSON error with a 4xx status; a client that goes away
//! cancels its generation; shutdown lets in-flight generations finish for a grace period.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use statelm_engine::{Engine, EngineConfig};
//! use statelm_server::{serve, ServerConfig};
//! let model = statelm_engine::Model::load("gemma-3-270m-q4_k_m.gguf", &Default::default())?;
//! let engine = Engine::start(model.clone(), EngineConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, engine, ServerConfig::new(model, "gemma3-270m")).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod admin;
mod config;
mod error;
mod format;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod generate;
mod guard;
mod handlers;
mod listen;
mod metrics;
mod request;
mod state;
mod stream;
mod structured;
mod tenant;
mod tools;

pub use config::ServerConfig;
pub use error::ServerError;

use statelm_engine::EngineHandle;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long to wait for connections to close after in-flight generations were cancelled.
const AFTER_ABORT: Duration = Duration::from_secs(5);

/// The server's routes, for embedding in another axum app or serving with `axum::serve`.
/// (Without [`serve`]'s shutdown handling: generations in flight are cancelled only when their
/// clients go away.)
pub fn router(engine: EngineHandle, cfg: ServerConfig) -> axum::Router {
    handlers::build(state::AppState::new(engine, cfg))
}

/// Serves on `listener` until SIGINT or SIGTERM, then shuts down gracefully (see
/// [`serve_with_shutdown`]).
pub async fn serve(
    listener: TcpListener,
    engine: EngineHandle,
    cfg: ServerConfig,
) -> Result<(), ServerError> {
    serve_with_shutdown(listener, engine, cfg, shutdown_signal()).await
}

/// Serves on `listener` until `signal` completes; then stops accepting connections, lets
/// in-flight requests finish for up to `cfg.shutdown_grace`, cancels the generations still
/// running (their streams end normally, with `finish_reason` `"stop"`), and returns.
pub async fn serve_with_shutdown(
    listener: TcpListener,
    engine: EngineHandle,
    cfg: ServerConfig,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = state::AppState::new(engine, cfg);
    let grace = app.cfg.shutdown_grace;
    let router = handlers::build(app.clone());
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let server = listen::serve(listener, router, app.clone(), async move {
        signal.await;
        let _ = stop_tx.send(true);
    });
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => return r.map_err(ServerError::from),
        _ = stop_rx.wait_for(|s| *s) => {}
    }
    tracing::info!(?grace, "shutting down: waiting for in-flight requests");
    if let Ok(r) = tokio::time::timeout(grace, &mut server).await {
        return r.map_err(ServerError::from);
    }
    tracing::warn!("shutdown grace period over: cancelling the generations still running");
    app.abort.send_replace(true);
    match tokio::time::timeout(AFTER_ABORT, &mut server).await {
        Ok(r) => r.map_err(ServerError::from),
        Err(_) => Ok(()),
    }
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
