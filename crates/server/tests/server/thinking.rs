//! A thinking model through the stock `openai` client: its reasoning arrives as
//! `reasoning_content` (in the message and in stream deltas), apart from the answer, and
//! `chat_template_kwargs` reaches the template (`enable_thinking: false` pre-fills an empty
//! block, so everything is answer). The model is a synthetic Qwen3 whose last two tokens are
//! `<think>` and `</think>`, with a template that opens the block in the generation prompt as
//! DeepSeek-R1's and Qwen3-Thinking's do.

use crate::common::{have_openai, no_eog, python_with, start_with, KEY};
use crate::http::request;
use statelm_model::testing::{make_thinking, write_synthetic_model_with, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model};

const TEMPLATE: &str =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n\
{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n\
{% else %}<think>\n{% endif %}{% endif %}";

const SCRIPT: &str = r#"
import json, os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
bias = json.loads(os.environ["BIAS"])
msgs = [{"role": "user", "content": "Why is the sky blue?"}]
out = {}
def create(**kw):
    return c.chat.completions.create(model="think", messages=msgs, max_tokens=10,
                                     temperature=0, logit_bias=bias, **kw)
m = create().choices[0].message
out["content"], out["reasoning"] = m.content, getattr(m, "reasoning_content", None)
m = create(extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices[0].message
out["off_content"], out["off_reasoning"] = m.content, getattr(m, "reasoning_content", None)
text, reasoning = "", ""
for ch in create(stream=True):
    for choice in ch.choices:
        text += choice.delta.content or ""
        reasoning += getattr(choice.delta, "reasoning_content", None) or ""
out["stream_content"], out["stream_reasoning"] = text, reasoning
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_content_and_enable_thinking_through_the_openai_client() {
    assert!(
        have_openai(),
        "the `openai` Python package is missing (scripts/test installs it)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("think.gguf");
    write_synthetic_model_with(&path, &SyntheticSpec::tiny(Arch::Qwen3), |w| {
        make_thinking(w, Some(TEMPLATE))
    })
    .unwrap();
    let model = Model::load(&path, &LoadOptions::default()).unwrap();
    let tok = model.tokenizer();
    // End-of-generation and the block markers banned: ten tokens, in a known part.
    let mut bias = no_eog(&model);
    for marker in ["<think>", "</think>"] {
        bias[tok.token_id(marker).unwrap().to_string()] = serde_json::json!(-100);
    }
    let server = start_with(model.clone(), "think", |_, _| {}).await;
    let (stdout, _) = python_with(
        vec!["-c".into(), SCRIPT.into()],
        vec![
            ("BASE", server.url()),
            ("KEY", KEY.into()),
            ("BIAS", bias.to_string()),
        ],
    )
    .await;
    let out: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Inside the block opened by the template, everything is reasoning.
    let reasoning = out["reasoning"].as_str().unwrap_or_default();
    assert!(!reasoning.trim().is_empty(), "{out}");
    assert_eq!(out["content"].as_str().unwrap_or_default(), "", "{out}");
    // The stream carries the same split.
    assert_eq!(out["stream_reasoning"], out["reasoning"], "{out}");
    assert_eq!(out["stream_content"], "", "{out}");
    // enable_thinking=false closes the block in the prompt: everything is answer.
    assert!(
        !out["off_content"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .is_empty(),
        "{out}"
    );
    assert!(out["off_reasoning"].is_null(), "{out}");
    // A template variable the server sets itself is refused, by name.
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"add_generation_prompt": false},
    });
    let path = "/v1/chat/completions";
    let r = request(
        server.addr,
        "POST",
        path,
        Some(KEY),
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["param"],
        "chat_template_kwargs",
        "{}",
        r.text()
    );
}
