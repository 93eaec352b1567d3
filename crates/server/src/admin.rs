//! `POST /admin/host`: what a phone's OS would tell an embedded engine, for a server host
//! (a supervisor that forwards the OS's signals, or a test): the app's lifecycle state, the
//! device's thermal state and a memory warning. Authenticated like `/v1` (any API key).
//!
//! ```text
//! POST /admin/host {"lifecycle": "background"}          -> sessions to disk, generations paused
//! POST /admin/host {"lifecycle": "foreground", "thermal": "serious"}
//! POST /admin/host {"memory_warning": "warning"}        -> as SIGUSR1
//! ```
//! The reply is the engine's state after the change: `lifecycle`, `thermal`, `threads`,
//! `pressure`.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use statelm_engine::{Lifecycle, PressureLevel, Thermal};
use std::sync::Arc;
use std::time::Duration;

/// The body of `POST /admin/host`: any of the three, at least one.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostReport {
    lifecycle: Option<Lifecycle>,
    thermal: Option<Thermal>,
    memory_warning: Option<PressureLevel>,
}

/// Hands the report to the engine and answers with its state once it has acted.
pub(crate) async fn host(
    State(app): State<Arc<AppState>>,
    body: Result<Json<HostReport>, JsonRejection>,
) -> Response {
    let Json(report) = match body {
        Ok(b) => b,
        Err(e) => {
            return ApiError::invalid(format!("admin/host: {}", e.body_text())).into_response()
        }
    };
    if report.lifecycle.is_none() && report.thermal.is_none() && report.memory_warning.is_none() {
        return ApiError::invalid(
            "admin/host: give `lifecycle` (foreground|background), `thermal` \
             (nominal|fair|serious|critical) or `memory_warning` (normal|warning|critical)",
        )
        .into_response();
    }
    let engine = &app.engine;
    if let Some(level) = report.memory_warning {
        engine.memory_warning(level);
    }
    if let Some(state) = report.thermal {
        engine.thermal(state);
    }
    if let Some(state) = report.lifecycle {
        engine.lifecycle(state);
    }
    // The engine acts between two steps: wait (briefly) until its figures show the change.
    let mut stats = engine.stats().await;
    for _ in 0..200 {
        let done = report.lifecycle.is_none_or(|l| stats.lifecycle == l)
            && report.thermal.is_none_or(|t| stats.thermal == t);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        stats = engine.stats().await;
    }
    Json(json!({
        "lifecycle": stats.lifecycle,
        "thermal": stats.thermal,
        "threads": stats.threads,
        "pressure": stats.pressure,
    }))
    .into_response()
}
