//! Bad requests get OpenAI-style JSON errors with 4xx statuses (never a 500).

use crate::common::{start, KEY};
use crate::http::request;
use serde_json::json;
use std::net::SocketAddr;

const CHAT: &str = "/v1/chat/completions";

/// A valid chat request body with `extra` fields set.
fn chat(extra: serde_json::Value) -> Vec<u8> {
    let mut body = json!({"model": "statelm", "messages": [{"role": "user", "content": "Hi"}],
                          "max_tokens": 2, "temperature": 0});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    body.to_string().into_bytes()
}

/// What, path, key, body, expected status, expected error code.
type Case = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
    u16,
    Option<&'static str>,
);

const HI: &str = r#""messages": [{"role": "user", "content": "Hi"}]"#;

const CASES: &[Case] = &[
    (
        "malformed JSON",
        CHAT,
        Some(KEY),
        r#"{"messages": ["#,
        400,
        None,
    ),
    ("not an object", CHAT, Some(KEY), "[1, 2]", 400, None),
    ("empty body", CHAT, Some(KEY), "", 400, None),
    (
        "missing messages",
        CHAT,
        Some(KEY),
        r#"{"model": "statelm"}"#,
        400,
        None,
    ),
    (
        "empty messages",
        CHAT,
        Some(KEY),
        r#"{"messages": []}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "wrong type",
        CHAT,
        Some(KEY),
        r#"{"messages": "hi"}"#,
        400,
        None,
    ),
    (
        "bad role",
        CHAT,
        Some(KEY),
        r#"{"messages": [{"role": "robot", "content": "x"}]}"#,
        400,
        Some("invalid_value"),
    ),
    ("no key", CHAT, None, "{HI}", 401, Some("invalid_api_key")),
    (
        "wrong key",
        CHAT,
        Some("nope"),
        "{HI}",
        401,
        Some("invalid_api_key"),
    ),
    (
        "unknown model",
        CHAT,
        Some(KEY),
        r#"{"model": "gpt-4o", HI}"#,
        404,
        Some("model_not_found"),
    ),
    (
        "n = 2",
        CHAT,
        Some(KEY),
        r#"{"n": 2, HI}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "negative temperature",
        CHAT,
        Some(KEY),
        r#"{"temperature": -1, HI}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "max_tokens 0",
        CHAT,
        Some(KEY),
        r#"{"max_tokens": 0, HI}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "huge max_tokens",
        CHAT,
        Some(KEY),
        r#"{"max_tokens": 10000000, HI}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "bad logit_bias",
        CHAT,
        Some(KEY),
        r#"{"logit_bias": {"x": 1}, HI}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "token out of vocabulary",
        "/v1/completions",
        Some(KEY),
        r#"{"prompt": [2, 999999999]}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "two prompts",
        "/v1/completions",
        Some(KEY),
        r#"{"prompt": ["a", "b"]}"#,
        400,
        Some("invalid_value"),
    ),
    (
        "unknown route",
        "/v1/embeddings",
        Some(KEY),
        "{}",
        404,
        Some("not_found"),
    ),
];

/// Sends `body` and checks the status and the OpenAI error shape.
async fn expect_error(a: SocketAddr, c: &Case, body: &str) {
    let (what, path, key, _, status, code) = *c;
    let r = request(a, "POST", path, key, body.as_bytes()).await;
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let e = r.json();
    let err = &e["error"];
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {e}"
    );
    assert!(err["type"].is_string(), "{what}: {e}");
    assert!(
        err.get("param").is_some() && err.get("code").is_some(),
        "{what}: {e}"
    );
    if let Some(code) = code {
        assert_eq!(err["code"], code, "{what}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors() {
    let Some(server) = start(|_, cfg| cfg.max_prompt_tokens = 64).await else {
        return;
    };
    let a = server.addr;
    for c in CASES {
        expect_error(a, c, &c.3.replace("HI", HI)).await;
    }
    let long = chat(json!({"messages": [{"role": "user", "content": "word ".repeat(200)}]}));
    let c: Case = (
        "prompt over the limit",
        CHAT,
        Some(KEY),
        "",
        400,
        Some("context_length_exceeded"),
    );
    expect_error(a, &c, &String::from_utf8(long).unwrap()).await;
    // Wrong method on a known route.
    let r = request(a, "GET", CHAT, Some(KEY), b"").await;
    assert_eq!(r.status, 405, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string());
    // A body over the 1 MiB limit.
    let huge = chat(json!({"messages": [{"role": "user", "content": "x".repeat(2 << 20)}]}));
    let r = request(a, "POST", CHAT, Some(KEY), &huge).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "request_too_large");
    // Nothing above was a server fault.
    let m = request(a, "GET", "/metrics", None, b"").await.text();
    assert!(
        !m.contains("statelm_http_responses_total{status=\"500\"}"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_routes_and_lenient_model_names() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    let a = server.addr;
    let r = request(a, "GET", "/health", None, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");
    let r = request(a, "GET", "/v1/models", None, b"").await;
    assert_eq!(r.status, 401, "the API routes need the key");
    let r = request(a, "GET", "/v1/models", Some(KEY), b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["id"], "gemma3-270m");
    assert_eq!(r.json()["object"], "list");
    for name in ["gemma3-270m", "statelm", "Gemma-3-270M"] {
        let r = request(a, "POST", CHAT, Some(KEY), &chat(json!({"model": name}))).await;
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert_eq!(r.json()["object"], "chat.completion");
    }
    let r = request(a, "GET", "/metrics", None, b"").await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/plain"));
    let page = r.text();
    for name in [
        "statelm_generated_tokens_total",
        "statelm_decode_tokens_per_second",
        "statelm_time_to_first_token_seconds{quantile=\"0.5\"}",
        "statelm_queue_depth",
        "statelm_sessions",
        "statelm_spilled_sessions",
        "statelm_kv_bytes",
        "statelm_context_trims_total",
        "statelm_spills_total",
        "statelm_evictions_total",
        "statelm_restores_total",
    ] {
        assert!(page.contains(name), "{name} missing from\n{page}");
    }
    assert!(crate::common::metric(&page, "statelm_generated_tokens_total") > 0.0);
}
