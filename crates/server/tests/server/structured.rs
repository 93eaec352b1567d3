//! Structured output on Qwen2.5-Coder through the stock `openai` client: 20 JSON schemas
//! (nested objects, arrays with item bounds, enums, number ranges, string patterns,
//! `$ref`/`$defs`, `anyOf`, optional fields), greedy and at temperature 0.8, each answer checked
//! by the independent `jsonschema` validator (`tests/data/structured.py`);
//! `chat.completions.parse()` with a pydantic model; a streamed JSON object; the `regex` and
//! `grammar` fields on `/v1/completions`. Then every kind of bad constraint is a 400 before
//! any token.

use crate::common::{have_openai, python_with, qwen, start_with, KEY};
use crate::http::request;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schemas_regexes_and_grammars_through_the_openai_client() {
    assert!(
        have_openai(),
        "the `openai` Python package is missing (scripts/test installs it)"
    );
    let Some(model) = qwen() else {
        return;
    };
    let server = start_with(model, "qwen2.5-coder-0.5b", |_, _| {}).await;
    let (stdout, stderr) = python_with(
        vec![format!("{DATA}/structured.py")],
        vec![
            ("BASE", server.url()),
            ("KEY", KEY.into()),
            ("MODEL", "qwen2.5-coder-0.5b".into()),
            ("SCHEMAS", format!("{DATA}/schemas.json")),
        ],
    )
    .await;
    let out: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    for a in out["answers"].as_array().unwrap() {
        eprintln!("{a}");
    }
    assert_eq!(out["failures"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["ok"], 40, "{out:#}");
    let city = &out["parsed"];
    assert!(
        city["name"].is_string() && city["population"].is_i64(),
        "{out:#}"
    );
    assert!(out["stream_object"].is_object(), "{out:#}");
    assert_eq!(out["regex_ok"], true, "{out:#}");
    let g = out["grammar_text"].as_str().unwrap();
    assert!(g == " yes." || g == " no.", "{out:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_constraints_are_refused_before_generation() {
    let Some(model) = qwen() else {
        return;
    };
    let server = start_with(model, "qwen2.5-coder-0.5b", |_, _| {}).await;
    let msgs = serde_json::json!([{"role": "user", "content": "hi"}]);
    let schema = |s: serde_json::Value| serde_json::json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s}});
    let cases = [
        (
            serde_json::json!({"response_format": schema(serde_json::json!({"type": "nope"}))}),
            None,
            "json_schema constraint",
        ),
        (
            serde_json::json!({"response_format": schema(serde_json::json!(3))}),
            Some("response_format"),
            "object or a boolean",
        ),
        (
            serde_json::json!({"response_format": {"type": "json_schema"}}),
            Some("response_format"),
            "json_schema",
        ),
        (
            serde_json::json!({"response_format": {"type": "xml"}}),
            Some("response_format"),
            "unsupported response_format type",
        ),
        (
            serde_json::json!({"regex": "(unclosed"}),
            None,
            "regex constraint",
        ),
        (
            serde_json::json!({"grammar": "start: nothing_here"}),
            None,
            "lark constraint",
        ),
        (
            serde_json::json!({"regex": "a", "response_format": {"type": "json_object"}}),
            Some("regex"),
            "both constrain",
        ),
    ];
    for (extra, param, words) in cases {
        let mut body = serde_json::json!({"messages": msgs, "max_tokens": 4});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r = request(
            server.addr,
            "POST",
            "/v1/chat/completions",
            Some(KEY),
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let err = &r.json()["error"];
        assert!(
            err["message"].as_str().unwrap().contains(words),
            "{body}: {err}"
        );
        if let Some(p) = param {
            assert_eq!(err["param"], p, "{body}: {err}");
        }
    }
    let m = server.engine.stats().await;
    assert_eq!(m.generated_tokens_total, 0, "{m:?}");
}
