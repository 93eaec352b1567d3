//! Browser safety. A page the user visits can make the browser send requests to a server on
//! the user's machine; three rules keep it out:
//!
//! * **Host allow-list** (DNS rebinding: a page whose own name resolves to 127.0.0.1): the
//!   `Host` header must name an IP address, `localhost` (or a `*.localhost` name), or one of
//!   [`crate::ServerConfig::allowed_hosts`]. A request without `Host` (HTTP/1.0) passes.
//! * **Origin**: a request carrying `Origin` (browsers add it to cross-site requests) passes
//!   only when the origin is the server itself (same host and port) or one of
//!   [`crate::ServerConfig::cors_origins`] (`*`: any); those get CORS headers, and their
//!   preflight `OPTIONS` requests an answer.
//! * **JSON bodies only**: a `POST` must say `Content-Type: application/json`, so no
//!   `text/plain` or form "simple request" — which browsers send cross-site without a
//!   preflight — reaches a handler.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// The host part of a `Host` header value (`name`, `name:port`, `[v6]:port`), lowercased.
fn host_name(host: &str) -> String {
    let h = host.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else if h.matches(':').count() == 1 {
        h.split(':').next().unwrap_or("")
    } else {
        h
    };
    name.to_ascii_lowercase()
}

/// Whether `host` (a `Host` header value) may address this server.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
    name.parse::<IpAddr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(&name))
}

/// Whether a request from `origin` may use this server reached as `host`.
pub(crate) fn origin_allowed(origin: &str, host: Option<&str>, cors: &[String]) -> bool {
    let same = host.is_some_and(|h| {
        let h = h.trim();
        origin.eq_ignore_ascii_case(&format!("http://{h}"))
            || origin.eq_ignore_ascii_case(&format!("https://{h}"))
    });
    same || cors
        .iter()
        .any(|c| c == "*" || c.eq_ignore_ascii_case(origin))
}

/// Whether a `Content-Type` value is JSON (`application/json`, parameters allowed).
fn is_json(ct: &str) -> bool {
    ct.split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The middleware applying the rules of the module docs.
pub(crate) async fn browser_guard(
    State(app): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let h = req.headers();
    let host = header_str(h, header::HOST);
    if let Some(host) = host {
        if !host_allowed(host, &app.cfg.allowed_hosts) {
            let msg = format!(
                "the Host {host:?} is not allowed (use an IP address or localhost, or start the \
                 server with --allowed-host)"
            );
            return refuse(msg, StatusCode::FORBIDDEN, "host_not_allowed");
        }
    }
    let origin = header_str(h, header::ORIGIN).map(str::to_string);
    if let Some(o) = &origin {
        if !origin_allowed(o, host, &app.cfg.cors_origins) {
            let msg = format!(
                "cross-origin requests from {o:?} are not allowed (start the server with \
                 --cors-origin to allow one)"
            );
            return refuse(msg, StatusCode::FORBIDDEN, "origin_not_allowed");
        }
        if req.method() == Method::OPTIONS {
            return with_cors(StatusCode::NO_CONTENT.into_response(), o, true);
        }
    }
    if req.method() == Method::POST && !header_str(h, header::CONTENT_TYPE).is_some_and(is_json) {
        return refuse(
            "request bodies must be JSON: send `Content-Type: application/json`".into(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
    }
    let resp = next.run(req).await;
    match origin {
        Some(o) => with_cors(resp, &o, false),
        None => resp,
    }
}

fn refuse(message: String, status: StatusCode, code: &'static str) -> Response {
    ApiError::invalid(message)
        .with_status(status)
        .with_code(code)
        .into_response()
}

/// Adds the CORS headers for an allowed `origin` (and, for a preflight, what it may send).
fn with_cors(mut resp: Response, origin: &str, preflight: bool) -> Response {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    if preflight {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let allowed = vec!["box.lan".to_string()];
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "app.localhost:9",
            "127.0.0.1:8080",
            "10.0.0.7",
            "[::1]:8080",
            "::1",
            "box.lan:8080",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "x",
            "",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn origins() {
        let host = Some("127.0.0.1:8080");
        assert!(origin_allowed("http://127.0.0.1:8080", host, &[]));
        assert!(!origin_allowed("http://127.0.0.1:9999", host, &[]));
        assert!(!origin_allowed("http://evil.example", host, &[]));
        assert!(!origin_allowed("null", host, &[]));
        let cors = vec!["http://app.example".to_string()];
        assert!(origin_allowed("http://app.example", host, &cors));
        assert!(origin_allowed(
            "http://any.example",
            None,
            &["*".to_string()]
        ));
    }

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("application/jsonx"));
    }
}
