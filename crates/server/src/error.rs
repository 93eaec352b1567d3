//! Errors: OpenAI-style JSON error replies, and the error of [`crate::serve`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use statelm_engine::EngineError;

/// Why [`crate::serve`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Accepting or serving connections failed.
    #[error("server i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// An error reply: `{"error": {"message", "type", "param", "code"}}` with an HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
        }
    }

    /// A 400 about one field.
    pub fn bad_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            code: Some("invalid_value"),
            ..ApiError::invalid(message)
        }
    }

    /// A 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// A 404 for a model this server does not serve.
    pub fn model_not_found(requested: &str, served: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model {requested:?} does not exist on this server (it serves {served:?})"
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// A 503: the server cannot take the request now.
    pub fn overloaded(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("overloaded"),
        }
    }

    /// A 500: a fault of the server, not of the request.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = status;
        self
    }

    /// Sets the code.
    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// What a 503's `Retry-After` says, in seconds.
pub(crate) const RETRY_AFTER_SECS: &str = "1";

impl ApiError {
    /// The reply, with the memory events its request carried before it failed — as a
    /// successful reply carries them: `"statelm": {"events": [...]}` beside `"error"` and the
    /// `x-statelm-events` header (none: the plain reply).
    pub fn into_response_with_events(self, events: &[serde_json::Value]) -> Response {
        let mut body = self.body();
        if !events.is_empty() {
            body["statelm"] = serde_json::json!({ "events": events });
        }
        let mut resp = self.reply(body);
        crate::format::add_event_header(&mut resp, events);
        resp
    }

    /// `body` with this error's status (and `Retry-After` on a 503).
    fn reply(self, body: serde_json::Value) -> Response {
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // Overload and shutdown are temporary: say when to come back.
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        self.reply(body)
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let msg = e.to_string();
        match e {
            EngineError::PromptTooLong { .. } => {
                ApiError::invalid(msg).with_code("context_length_exceeded")
            }
            e if e.is_invalid_input() => ApiError::invalid(msg),
            EngineError::SessionBusy(_)
            | EngineError::ShuttingDown
            | EngineError::TooManySessions { .. } => ApiError::overloaded(msg),
            EngineError::OverMemory { .. } => {
                ApiError::overloaded(msg).with_code("insufficient_memory")
            }
            _ => ApiError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_statuses() {
        let e: ApiError = EngineError::EmptyPrompt.into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e: ApiError = EngineError::PromptTooLong {
            prompt_tokens: 10,
            budget: 8,
            pinned: 4,
        }
        .into();
        assert_eq!(e.code, Some("context_length_exceeded"));
        let e: ApiError = EngineError::ShuttingDown.into();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        let e: ApiError = EngineError::Internal("x".into()).into();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.body()["error"]["type"], "server_error");
    }

    #[test]
    fn an_error_reply_carries_its_events() {
        // A turn refused for memory after its session's spill was announced: the engine does
        // not repeat the notice, so the error reply must carry it, in body and header.
        let e: ApiError = EngineError::OverMemory {
            what: "a prefill".into(),
            needed: 1 << 20,
            used: 1 << 30,
            ceiling: 1 << 30,
        }
        .into();
        let spilled = serde_json::json!({"event": "spilled", "reason": "idle session 1 saved"});
        let resp = e.into_response_with_events(std::slice::from_ref(&spilled));
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let h = resp.headers();
        assert!(h["x-statelm-events"].to_str().unwrap().contains("spilled"));
        assert!(h.contains_key("retry-after"));
        let body = body_bytes(resp);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "insufficient_memory", "{v}");
        assert_eq!(v["statelm"]["events"][0], spilled, "{v}");
    }

    /// The bytes of a reply's body.
    fn body_bytes(resp: Response) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let body = rt.block_on(axum::body::to_bytes(resp.into_body(), usize::MAX));
        body.unwrap().to_vec()
    }
}
