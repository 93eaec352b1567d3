//! Tool calls on Qwen2.5-Coder through the stock `openai` client (`tests/data/tools.py`): a
//! round trip with two tools, named and `required` choices enforced on prompts that ask for
//! no tool, `none`, and streamed deltas that reassemble into the same calls; then bad tool
//! requests are a 400 naming the field.

use crate::common::{chat_400, qwen, qwen_script, start_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_round_trip_through_the_openai_client() {
    let Some(out) = qwen_script("tools.py").await else {
        return;
    };
    eprintln!("{out:#}");
    let name = |part: &str| out[part]["calls"][0]["name"].clone();
    // auto: the model calls the weather tool, with arguments valid under its schema (the
    // script validated them).
    assert_eq!(name("auto"), "get_weather", "{out:#}");
    assert_eq!(out["auto"]["finish"], "tool_calls", "{out:#}");
    // The tool's result went back through the template: a final answer in text.
    assert!(
        out["final"]["content"]
            .as_str()
            .is_some_and(|t| !t.trim().is_empty()),
        "{out:#}"
    );
    // A named choice and `required` are enforced on prompts that ask for no tool.
    assert_eq!(name("named"), "get_time", "{out:#}");
    assert_eq!(out["named"]["finish"], "tool_calls", "{out:#}");
    assert!(name("required").is_string(), "{out:#}");
    // none: no calls.
    assert_eq!(out["none"]["calls"], serde_json::json!([]), "{out:#}");
    // The stream's deltas reassemble into the non-streamed calls.
    let plain: Vec<_> = (out["required_weather"]["calls"].as_array().unwrap().iter())
        .map(|c| (c["name"].clone(), c["arguments"].clone()))
        .collect();
    let streamed: Vec<_> = (out["stream"]["calls"].as_array().unwrap().iter())
        .map(|c| (c["name"].clone(), c["arguments"].clone()))
        .collect();
    assert!(!streamed.is_empty(), "{out:#}");
    assert_eq!(streamed, plain, "{out:#}");
    assert!(
        out["stream"]["calls"][0]["has_id"].as_bool().unwrap(),
        "{out:#}"
    );
    assert_eq!(out["stream"]["finish"], "tool_calls", "{out:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_requests_are_refused() {
    let Some(model) = qwen() else {
        return;
    };
    let server = start_with(model, "qwen2.5-coder-0.5b", |_, _| {}).await;
    let f = |name: &str| serde_json::json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}});
    let cases = [
        (
            serde_json::json!({"tools": [f("a")], "tool_choice": {"type": "function", "function": {"name": "b"}}}),
            "not among the tools",
        ),
        (
            serde_json::json!({"tools": [f("a"), f("a")]}),
            "given twice",
        ),
        (serde_json::json!({"tools": [f("bad name")]}), "tool name"),
        (
            serde_json::json!({"tools": [{"type": "retrieval"}]}),
            "tools[0]",
        ),
        (serde_json::json!({"tool_choice": "required"}), "no tools"),
        (
            serde_json::json!({"tools": [f("a")], "tool_choice": "sometimes"}),
            "unknown tool_choice",
        ),
        (
            serde_json::json!({"tools": [f("a")], "regex": "x"}),
            "both constrain",
        ),
    ];
    for (extra, words) in cases {
        let err = chat_400(&server, &extra).await;
        assert!(format!("{err}").contains(words), "{extra}: {err}");
    }
}
