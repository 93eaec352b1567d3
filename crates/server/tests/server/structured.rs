//! Structured output on Qwen2.5-Coder through the stock `openai` client: 20 JSON schemas
//! (nested objects, arrays with item bounds, enums, number ranges, string patterns,
//! `$ref`/`$defs`, `anyOf`, optional fields), greedy or at temperature 0.8 in turn, each checked
//! by the independent `jsonschema` validator (`tests/data/structured.py`);
//! `chat.completions.parse()` with a pydantic model; a streamed JSON object; the `regex` and
//! `grammar` fields on `/v1/completions`. Then every kind of bad constraint is a 400 before
//! any token.

use crate::common::{chat_400, qwen, qwen_script, start_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schemas_regexes_and_grammars_through_the_openai_client() {
    let Some(out) = qwen_script("structured.py").await else {
        return;
    };
    for a in out["answers"].as_array().unwrap() {
        eprintln!("{a}");
    }
    assert_eq!(out["failures"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["ok"], 20, "{out:#}");
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
        let err = chat_400(&server, &extra).await;
        let message = err["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{extra}: {err}");
        if let Some(p) = param {
            assert_eq!(err["param"], p, "{extra}: {err}");
        }
    }
    let m = server.engine.stats().await;
    assert_eq!(m.generated_tokens_total, 0, "{m:?}");
}
