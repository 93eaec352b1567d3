//! Tool calls in the engine, on Gemma 3 (whose template has no tool format: the generic JSON
//! form): a required call comes out as tool-call events with arguments valid under the tool's
//! schema, a call cut off by `max_tokens` is reported unfinished (never as text), and a
//! conversation with the call and the tool's result renders for the next turn.

mod common;

use common::{collect, gemma};
use statelm_engine::tools::{ToolChoice, ToolSpec, Tools};
use statelm_engine::{
    ChatMessage, Conversation, Engine, Event, GenerateRequest, Input, SamplingParams,
    SessionOptions,
};

fn tools(choice: ToolChoice) -> Tools {
    let weather = serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
        "additionalProperties": false,
    });
    Tools {
        tools: vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "The weather in a city".into(),
                parameters: weather,
            },
            ToolSpec {
                name: "get_time".into(),
                description: "The time in a city".into(),
                parameters: serde_json::json!({"type": "object"}),
            },
        ],
        choice,
        parallel: false,
    }
}

fn ask(messages: Vec<ChatMessage>, t: Tools) -> Input {
    Input::Chat(Conversation {
        messages,
        vars: Default::default(),
        tools: Some(t),
    })
}

#[tokio::test]
async fn generic_format_calls_are_events_and_cut_off_calls_are_unfinished() {
    let Some(model) = gemma() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::start(model, common::config(dir.path()));
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    let user = vec![ChatMessage::new("user", "What is the weather in Rome?")];
    let named = ToolChoice::Function("get_weather".into());
    let req = |input, max| GenerateRequest {
        sampling: SamplingParams::greedy(),
        ..GenerateRequest::new(s, input, max)
    };
    let run = collect(
        e.generate(req(ask(user.clone(), tools(named.clone())), 80))
            .await
            .unwrap(),
    )
    .await;
    assert!(run.error.is_none(), "{run:?}");
    let (mut name, mut args, mut ended) = (String::new(), String::new(), None);
    for ev in &run.events {
        match ev {
            Event::ToolCallStart { name: n, id, .. } => {
                assert!(id.starts_with("call_"), "{id}");
                name = n.clone();
            }
            Event::ToolCallArguments { text, .. } => args.push_str(text),
            Event::ToolCallEnd { arguments, .. } => ended = Some(arguments.clone()),
            _ => {}
        }
    }
    assert_eq!(name, "get_weather", "{:?}", run.events);
    assert_eq!(ended.as_deref(), Some(args.as_str()));
    let v: serde_json::Value = serde_json::from_str(&args).expect(&args);
    assert!(
        v["city"].is_string() && (v["unit"] == "c" || v["unit"] == "f"),
        "{v}"
    );
    assert_eq!(run.text, "", "the call is not text");

    // Cut off after 6 tokens: an unfinished call, and no text.
    let short = collect(
        e.generate(req(ask(user.clone(), tools(named)), 6))
            .await
            .unwrap(),
    )
    .await;
    let unfinished = short
        .events
        .iter()
        .any(|ev| matches!(ev, Event::ToolCallUnfinished { .. }));
    let ended = short
        .events
        .iter()
        .any(|ev| matches!(ev, Event::ToolCallEnd { .. }));
    assert!(
        unfinished && !ended && short.text.is_empty(),
        "{:?}",
        short.events
    );

    // The call and the tool's answer render for the next turn.
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = Some(vec![serde_json::json!({"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": v}})]);
    let mut result = ChatMessage::new("tool", "{\"temperature\": 21}");
    result.tool_call_id = Some("call_1".into());
    let turn = vec![user[0].clone(), call, result];
    let next = collect(
        e.generate(req(ask(turn, tools(ToolChoice::Auto)), 40))
            .await
            .unwrap(),
    )
    .await;
    assert!(next.error.is_none(), "{next:?}");
}

/// A Llama 3.1-style template: the tools in the system turn, tool results in `ipython` turns.
const LLAMA3: &str = "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\nEnvironment: \
ipython\nCall a function with a JSON object.\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}\
<|eot_id|>{% endif %}{% for m in messages %}{% if m.role == 'tool' %}\
{{ '<|start_header_id|>ipython<|end_header_id|>\n\n' }}{% else %}<|start_header_id|>\
{{ m.role }}<|end_header_id|>\n\n{% endif %}{{ m.content }}<|eot_id|>{% endfor %}\
{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

#[tokio::test]
async fn the_llama3_format_gives_parameters_calls() {
    use statelm_model::testing::{write_synthetic_model_with, SyntheticSpec};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llama3.gguf");
    write_synthetic_model_with(
        &path,
        &SyntheticSpec::tiny(statelm_model::Arch::Llama),
        |w| {
            w.set(
                "tokenizer.chat_template",
                statelm_gguf::Value::String(LLAMA3.into()),
            );
        },
    )
    .unwrap();
    let model = statelm_model::Model::load(&path, &Default::default()).unwrap();
    let format = statelm_engine::tools::ToolFormat::detect(model.tokenizer());
    assert_eq!(format, statelm_engine::tools::ToolFormat::Llama3);
    let e = Engine::start(model, common::config(dir.path()));
    let s = e.create_session(SessionOptions::default()).await.unwrap();
    let pick = Tools {
        tools: vec![ToolSpec {
            name: "pick".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["n"], "additionalProperties": false}),
        }],
        choice: ToolChoice::Required,
        parallel: false,
    };
    let input = ask(vec![ChatMessage::new("user", "hi")], pick);
    let req = GenerateRequest {
        sampling: SamplingParams::greedy(),
        ..GenerateRequest::new(s, input, 60)
    };
    let run = collect(e.generate(req).await.unwrap()).await;
    let ended: Vec<&String> = (run.events.iter())
        .filter_map(|ev| match ev {
            Event::ToolCallEnd { arguments, .. } => Some(arguments),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "{:?}", run.events);
    let v: serde_json::Value = serde_json::from_str(ended[0]).unwrap();
    assert!(v["n"].as_u64().is_some_and(|n| n <= 9), "{v}");
}
