//! The official `openai` Python client against the server: chat (streaming and not),
//! completions, conversation reuse, and eight concurrent streams.

use crate::common::{have_openai, python, start};

fn need_openai() {
    assert!(
        have_openai(),
        "the `openai` Python package is missing: `python3 -m pip install openai` \
         (scripts/test installs it)"
    );
}

const CHAT: &str = r#"
import json, os, openai
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
out = {}
msgs = [{"role": "user", "content": "Name three colors."}]
r = c.chat.completions.create(model="gemma3-270m", messages=msgs, max_tokens=12, temperature=0)
out["text"] = r.choices[0].message.content
out["role"] = r.choices[0].message.role
out["finish"] = r.choices[0].finish_reason
out["usage"] = r.usage.model_dump()
msgs += [{"role": "assistant", "content": out["text"]},
         {"role": "user", "content": "And three animals?"}]
r2 = c.chat.completions.create(model="gemma3-270m", messages=msgs, max_tokens=12, temperature=0)
out["text2"] = r2.choices[0].message.content
out["usage2"] = r2.usage.model_dump()
text, finishes, usage = "", [], None
stream = c.chat.completions.create(model="statelm", messages=msgs[:1], max_tokens=12,
    temperature=0, stream=True, stream_options={"include_usage": True})
for ch in stream:
    if ch.usage:
        usage = ch.usage.model_dump()
    for choice in ch.choices:
        text += choice.delta.content or ""
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
out["stream_text"], out["stream_finishes"], out["stream_usage"] = text, finishes, usage
r3 = c.completions.create(model="statelm", prompt="The capital of France is", max_tokens=6,
    temperature=0)
out["completion"] = r3.choices[0].text
out["completion_usage"] = r3.usage.model_dump()
text = ""
for ch in c.completions.create(model="statelm", prompt="The capital of France is",
                               max_tokens=6, temperature=0, stream=True):
    text += ch.choices[0].text
out["completion_stream"] = text
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_chat_stream_and_reuse() {
    let Some(server) = start(|_, _| {}).await else {
        return;
    };
    need_openai();
    let out = python(&server, CHAT).await;
    let text = out["text"].as_str().unwrap();
    assert!(!text.trim().is_empty(), "{out}");
    assert_eq!(out["role"], "assistant");
    let u = &out["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 5, "{out}");
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0, "{out}");
    // The second turn extends the first: its session's State is reused.
    let u2 = &out["usage2"];
    let cached = u2["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= u["prompt_tokens"].as_u64().unwrap(), "{out}");
    assert!(cached < u2["prompt_tokens"].as_u64().unwrap(), "{out}");
    // Streaming gives the same greedy text, one finish_reason, and usage.
    assert_eq!(out["stream_text"], out["text"], "{out}");
    assert_eq!(out["stream_finishes"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        out["stream_usage"]["completion_tokens"], u["completion_tokens"],
        "{out}"
    );
    // Completions.
    let c = out["completion"].as_str().unwrap();
    assert!(!c.is_empty(), "{out}");
    assert_eq!(out["completion_stream"], out["completion"], "{out}");
    assert!(out["completion_usage"]["prompt_tokens"].as_u64().unwrap() >= 5);
}

const CONCURRENT: &str = r#"
import json, os, openai
from concurrent.futures import ThreadPoolExecutor
c = openai.OpenAI(base_url=os.environ["BASE"], api_key=os.environ["KEY"], max_retries=0)
prompts = ["Count from one to five.", "What is the capital of Italy?", "Say hello in French.",
           "Name a large animal.", "What color is the sky?", "Write the word banana.",
           "What is two plus two?", "Name a planet."]
def run(p):
    text, n = "", 0
    for ch in c.chat.completions.create(model="statelm", max_tokens=10, temperature=0,
            messages=[{"role": "user", "content": p}], stream=True):
        for choice in ch.choices:
            text += choice.delta.content or ""
        n += 1
    return {"text": text, "chunks": n}
if os.environ.get("MODE") == "solo":
    res = [run(p) for p in prompts]
else:
    with ThreadPoolExecutor(max_workers=8) as ex:
        res = list(ex.map(run, prompts))
print(json.dumps(res))
"#;

const CONCURRENT_SOLO: &str = r#"
import os
os.environ["MODE"] = "solo"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_streams_match_solo_runs() {
    let Some(solo_server) = start(|_, _| {}).await else {
        return;
    };
    need_openai();
    let solo = python(&solo_server, &format!("{CONCURRENT_SOLO}{CONCURRENT}")).await;
    drop(solo_server);
    // A fresh server, so that every concurrent request starts from an empty session as the
    // solo ones did.
    let server = start(|_, _| {}).await.expect("model present");
    let conc = python(&server, CONCURRENT).await;
    let (solo, conc) = (solo.as_array().unwrap(), conc.as_array().unwrap());
    assert_eq!(solo.len(), 8);
    for (i, (s, c)) in solo.iter().zip(conc).enumerate() {
        assert!(!s["text"].as_str().unwrap().is_empty(), "{i}: {s}");
        assert_eq!(s["text"], c["text"], "prompt {i}: solo vs concurrent");
    }
    let texts: std::collections::HashSet<&str> =
        conc.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert!(
        texts.len() >= 6,
        "answers should differ by prompt: {texts:?}"
    );
    let stats = server.engine.stats().await;
    assert!(
        stats.sessions >= 8,
        "concurrent requests got their own sessions: {stats:?}"
    );
}
