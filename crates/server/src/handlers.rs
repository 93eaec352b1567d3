//! The routes: handlers, authentication, the body limit and the error fallbacks.

use crate::error::ApiError;
use crate::format::{add_event_header, Kind, Shape};
use crate::generate::{self, Started};
use crate::request::{
    chat_messages, parse_body, template_vars, ChatRequest, CompletionRequest, Params, Prompt,
};
use crate::state::AppState;
use crate::tenant::Tenant;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::json;
use statelm_engine::{Conversation, Input};
use std::sync::Arc;

type App = State<Arc<AppState>>;

/// The router of a server.
pub(crate) fn build(app: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/admin/host", post(crate::admin::host))
        .route_layer(middleware::from_fn_with_state(app.clone(), authenticate));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(app.cfg.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            crate::guard::browser_guard,
        ))
        .layer(middleware::from_fn_with_state(app.clone(), count_responses))
        .with_state(app)
}

/// Compares in time that depends only on the length of `expected`.
fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, &e) in expected.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ e;
    }
    std::hint::black_box(diff) == 0
}

/// The token of an `Authorization: Bearer TOKEN` value (the scheme is case-insensitive, as
/// HTTP says).
pub(crate) fn bearer_token(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Which of the server's API keys a request presented (`None` when the server has none).
#[derive(Debug, Clone, Copy)]
struct KeyIndex(Option<usize>);

/// The index of the key equal to `given`, comparing with every key in constant time.
fn key_index(given: &str, keys: &[String]) -> Option<usize> {
    let mut found = None;
    for (i, k) in keys.iter().enumerate() {
        if constant_time_eq(given.as_bytes(), k.as_bytes()) {
            found = found.or(Some(i));
        }
    }
    found
}

async fn authenticate(State(app): App, mut req: Request, next: Next) -> Response {
    let keys = &app.cfg.api_keys;
    let index = if keys.is_empty() {
        None
    } else {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let Some(given) = given else {
            return ApiError::unauthorized(
                "missing API key: send it as `Authorization: Bearer KEY`",
            )
            .into_response();
        };
        match key_index(given, keys) {
            Some(i) => Some(i),
            None => return ApiError::unauthorized("incorrect API key").into_response(),
        }
    };
    req.extensions_mut().insert(KeyIndex(index));
    next.run(req).await
}

/// The tenant of a request: its API key and `user`.
fn tenant(key: Option<Extension<KeyIndex>>, user: Option<&str>) -> Tenant {
    Tenant {
        key: key.and_then(|Extension(KeyIndex(k))| k),
        user: user.map(str::to_string),
    }
}

async fn count_responses(State(app): App, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    app.metrics.record(resp.status().as_u16());
    resp
}

async fn not_found(req: Request) -> ApiError {
    ApiError::invalid(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
    .with_status(StatusCode::NOT_FOUND)
    .with_code("not_found")
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::invalid(format!(
        "{} is not allowed on {}",
        req.method(),
        req.uri().path()
    ))
    .with_status(StatusCode::METHOD_NOT_ALLOWED)
    .with_code("method_not_allowed")
}

/// The body, or the error reply for one that is too large or unreadable.
fn body(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|r| match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::invalid(format!(
            "the request body is larger than the limit of {limit} bytes"
        ))
        .with_status(StatusCode::PAYLOAD_TOO_LARGE)
        .with_code("request_too_large"),
        status => ApiError::invalid(format!("cannot read the request body: {}", r.body_text()))
            .with_status(if status.is_client_error() {
                status
            } else {
                StatusCode::BAD_REQUEST
            }),
    })
}

async fn chat_completions(
    State(app): App,
    key: Option<Extension<KeyIndex>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let bytes = body(b, app.cfg.max_body_bytes)?;
        let req: ChatRequest = parse_body(&bytes)?;
        app.check_model(req.common.model.as_deref())?;
        let params = req
            .common
            .validate(&app.limits(), &app.cfg.defaults.sampling)?;
        let conversation = Conversation {
            messages: chat_messages(&req.messages)?,
            vars: template_vars(&req.chat_template_kwargs)?,
            tools: crate::tools::tools_of(
                req.tools.as_ref(),
                req.tool_choice.as_ref(),
                req.parallel_tool_calls,
            )?,
        };
        Abandoned::counted(&app, &params, async {
            let slot = app.gate.enter().await?;
            let encoded = app.encode(Input::Chat(conversation)).await?;
            let tenant = tenant(key, req.common.user.as_deref());
            let input = Input::Encoded(Box::new(encoded));
            let started = generate::start(&app, input, &params, tenant, slot).await?;
            respond(app.clone(), app.shape(Kind::Chat), started, &params).await
        })
        .await
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

async fn completions(
    State(app): App,
    key: Option<Extension<KeyIndex>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let bytes = body(b, app.cfg.max_body_bytes)?;
        let req: CompletionRequest = parse_body(&bytes)?;
        app.check_model(req.common.model.as_deref())?;
        let params = req
            .common
            .validate(&app.limits(), &app.cfg.defaults.sampling)?;
        Abandoned::counted(&app, &params, async {
            let slot = app.gate.enter().await?;
            let input = completion_input(&app, req.prompt).await?;
            let tenant = tenant(key, req.common.user.as_deref());
            let started = generate::start(&app, input, &params, tenant, slot).await?;
            respond(app.clone(), app.shape(Kind::Completion), started, &params).await
        })
        .await
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// The engine input of a completion request (tokenized, its size checked).
async fn completion_input(app: &AppState, prompt: Prompt) -> Result<Input, ApiError> {
    let text = match prompt {
        Prompt::Text(t) => t,
        Prompt::Texts(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Texts(v) => {
            return Err(ApiError::bad_param(
                "prompt",
                format!("exactly one prompt is supported (got {})", v.len()),
            ))
        }
        Prompt::Tokens(ids) => {
            let n_vocab = app.cfg.model.config().n_vocab;
            if ids.is_empty() {
                return Err(ApiError::bad_param("prompt", "the prompt is empty"));
            }
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!("token id {bad} is outside the vocabulary ({n_vocab} tokens)"),
                ));
            }
            app.check_prompt_len(ids.len())?;
            return Ok(Input::Tokens(ids));
        }
    };
    if text.is_empty() {
        return Err(ApiError::bad_param("prompt", "the prompt is empty"));
    }
    let encoded = app.encode(Input::Text(text)).await?;
    Ok(Input::Encoded(Box::new(encoded)))
}

/// Streams the generation, or reads it to the end and replies once.
async fn respond(
    app: Arc<AppState>,
    shape: Shape,
    started: Started,
    params: &Params,
) -> Result<Response, ApiError> {
    if params.stream {
        return Ok(crate::stream::sse_response(
            app,
            shape,
            started,
            params.include_usage,
        ));
    }
    // A client that leaves drops this future: `Abandoned::counted` counts it (the
    // generation is cancelled as the engine stream drops).
    let c = match generate::collect(&app, started).await {
        Ok(c) => c,
        // The memory notices it carried go out with the error: none is lost.
        Err(f) => return Ok(f.error.into_response_with_events(&f.events)),
    };
    let body = shape.response((&c.text, &c.reasoning), &c.calls, &c.done, &c.events);
    let mut resp = Json(body).into_response();
    add_event_header(&mut resp, &c.events);
    Ok(resp)
}

/// Counts a non-streaming request whose client went away before the reply: while it waited
/// for a slot, while its prompt was encoded or prefilled, or while it generated. The client
/// leaving drops the handler's future, and with it this guard, still armed. (A stream's
/// client leaving is counted by the stream.)
struct Abandoned<'a>(Option<&'a std::sync::atomic::AtomicU64>);

impl Abandoned<'_> {
    /// Runs `reply`, the rest of a handler for a request with `params`; counts the request
    /// when its client leaves before `reply` ends (a stream is not counted here).
    async fn counted(
        app: &AppState,
        params: &Params,
        reply: impl std::future::Future<Output = Result<Response, ApiError>>,
    ) -> Result<Response, ApiError> {
        let mut guard = Abandoned((!params.stream).then_some(&app.metrics.abandoned));
        let r = reply.await;
        guard.0 = None;
        r
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(counter) = self.0 {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

async fn models(State(app): App) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.cfg.model_id,
            "object": "model",
            "created": app.started,
            "owned_by": "statelm",
            "aliases": app.cfg.aliases,
        }],
    }))
}

/// 200 while the engine thread runs, else 503: the engine's real liveness, not the last
/// figures it published.
async fn health(State(app): App) -> Response {
    let running = app.engine.is_running();
    let stats = app.engine.stats().await;
    let body = Json(json!({
        "status": if running { "ok" } else { "engine_stopped" },
        "model": app.cfg.model_id,
        "sessions": stats.sessions,
        "active_generations": stats.active_generations,
        "pressure": stats.pressure,
        "lifecycle": stats.lifecycle,
        "thermal": stats.thermal,
        "threads": stats.threads,
        "panics": stats.panics,
        "memory_watch": {
            "ok": stats.memory_source_errors == 0,
            "errors": stats.memory_source_errors,
            "last_error": stats.memory_source_error,
        },
    }));
    match running {
        true => body.into_response(),
        false => (StatusCode::SERVICE_UNAVAILABLE, body).into_response(),
    }
}

async fn metrics(State(app): App) -> Response {
    let stats = app.engine.stats().await;
    let load = crate::metrics::Load {
        gate: (app.gate.running(), app.gate.waiting()),
    };
    let text = crate::metrics::render(&stats, &app.metrics, load);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::{bearer_token, constant_time_eq};

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer k3y", "bearer k3y", "BEARER  k3y ", " Bearer k3y"] {
            assert_eq!(bearer_token(v), Some("k3y"), "{v:?}");
        }
        for v in ["Basic k3y", "Bearerk3y", "k3y", ""] {
            assert_eq!(bearer_token(v), None, "{v:?}");
        }
    }

    #[test]
    fn key_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret2", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
        assert!(!constant_time_eq(b"secret", b""));
        assert!(constant_time_eq(b"", b""));
    }
}
