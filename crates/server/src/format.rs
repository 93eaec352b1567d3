//! The JSON of replies and stream chunks, in OpenAI's formats, plus statelm's own fields:
//! memory events as a `statelm` object (which standard clients ignore) and an
//! `x-statelm-events` header.

use serde_json::{json, Value};
use statelm_engine::{DoneStats, Event, StopReason};

/// Which endpoint a reply belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

/// The envelope shared by a reply and all its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// A memory event as JSON (`None` for events that are not about memory).
pub(crate) fn event_json(ev: &Event) -> Option<Value> {
    ev.is_memory().then(|| ev.to_json())
}

/// Adds the `x-statelm-events` header naming `events` (none: no header).
pub(crate) fn add_event_header(resp: &mut axum::response::Response, events: &[Value]) {
    if events.is_empty() {
        return;
    }
    let items: Vec<String> = events.iter().map(event_header_item).collect();
    if let Ok(v) = axum::http::HeaderValue::from_str(&items.join(", ")) {
        resp.headers_mut().insert("x-statelm-events", v);
    }
}

/// The `x-statelm-events` header item of an event's JSON: `context_trimmed;kept=..;dropped=..`.
fn event_header_item(ev: &Value) -> String {
    let name = ev["event"].as_str().unwrap_or("event");
    match (ev["kept"].as_u64(), ev["dropped"].as_u64()) {
        (Some(k), Some(d)) => format!("{name};kept={k};dropped={d}"),
        _ => name.to_string(),
    }
}

/// OpenAI's `finish_reason` of an answer that made `calls` finished tool calls.
pub(crate) fn finish_reason_after(r: &StopReason, calls: usize) -> &'static str {
    match r {
        StopReason::MaxTokens => "length",
        _ if calls > 0 => "tool_calls",
        _ => "stop",
    }
}

/// The `usage` object.
pub(crate) fn usage(d: &DoneStats) -> Value {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.generated_tokens,
        "total_tokens": d.prompt_tokens + d.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": d.cached_tokens},
    })
}

/// The `statelm` object of a reply: memory events and timings.
pub(crate) fn statelm_summary(d: &DoneStats, events: &[Value]) -> Value {
    let mut v = d.to_json();
    v["events"] = Value::Array(events.to_vec());
    v
}

impl Shape {
    fn chunk_object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id, "object": self.chunk_object(), "created": self.created,
            "model": self.model, "choices": choices,
        })
    }

    /// A chunk carrying `text` (and `finish_reason`, on the last one).
    fn choice(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Kind::Completion => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish,
            }),
        }
    }

    /// The first chunk of a chat stream (the assistant role); none for completions.
    pub fn role_chunk(&self) -> Option<Value> {
        (self.kind == Kind::Chat).then(|| self.chunk(json!([self.choice(Some(""), true, None)])))
    }

    /// A chunk of generated text.
    pub fn text_chunk(&self, text: &str) -> Value {
        self.chunk(json!([self.choice(Some(text), false, None)]))
    }

    /// A chunk of reasoning text (a thinking block): `reasoning_content` in the delta (chat)
    /// or the choice (completions), as llama-server streams it.
    pub fn reasoning_chunk(&self, text: &str) -> Value {
        let mut choice = self.choice(None, false, None);
        match self.kind {
            Kind::Chat => choice["delta"]["reasoning_content"] = json!(text),
            Kind::Completion => choice["reasoning_content"] = json!(text),
        }
        self.chunk(json!([choice]))
    }

    /// The chunk that ends the choice.
    pub fn finish_chunk(&self, finish: &str) -> Value {
        self.chunk(json!([self.choice(None, false, Some(finish))]))
    }

    /// A memory event: an empty delta plus the `statelm` field.
    pub fn event_chunk(&self, ev: Value) -> Value {
        let mut c = self.chunk(json!([self.choice(None, false, None)]));
        c["statelm"] = ev;
        c
    }

    /// The usage chunk (`stream_options.include_usage`): no choices.
    pub fn usage_chunk(&self, d: &DoneStats, events: &[Value]) -> Value {
        let mut c = self.chunk(json!([]));
        c["usage"] = usage(d);
        c["statelm"] = statelm_summary(d, events);
        c
    }

    /// A tool-call delta chunk (chat streams).
    pub fn tool_chunk(&self, delta: Value) -> Value {
        let mut choice = self.choice(None, false, None);
        choice["delta"] = delta;
        self.chunk(json!([choice]))
    }

    /// A whole (non-streaming) reply: the answer, its tool calls, and the thinking blocks'
    /// text as `reasoning_content` when there was any. Calls cut off are not in
    /// `tool_calls`: `statelm.unfinished_tool_calls` has their text.
    pub fn response(
        &self,
        text: (&str, &str),
        calls: &crate::tools::Calls,
        d: &DoneStats,
        events: &[Value],
    ) -> Value {
        let (text, reasoning) = text;
        let reason = finish_reason_after(&d.stop_reason, calls.done.len());
        let (object, mut choice) = match self.kind {
            Kind::Chat => (
                "chat.completion",
                json!({"index": 0, "message": {"role": "assistant", "content": text},
                       "logprobs": null, "finish_reason": reason}),
            ),
            Kind::Completion => (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason}),
            ),
        };
        if !reasoning.is_empty() {
            match self.kind {
                Kind::Chat => choice["message"]["reasoning_content"] = json!(reasoning),
                Kind::Completion => choice["reasoning_content"] = json!(reasoning),
            }
        }
        if !calls.done.is_empty() {
            choice["message"]["tool_calls"] = json!(calls.done);
            if text.is_empty() {
                choice["message"]["content"] = Value::Null;
            }
        }
        let mut statelm = statelm_summary(d, events);
        if !calls.unfinished.is_empty() {
            statelm["unfinished_tool_calls"] = json!(calls.unfinished);
        }
        json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": [choice], "usage": usage(d), "statelm": statelm,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statelm_engine::TrimMethod;
    use std::time::Duration;

    /// Replies carry the engine's JSON of memory events (the C ABI's event JSON is the same).
    #[test]
    fn memory_events_are_the_engines_json() {
        let ev = Event::Spilled { reason: "r".into() };
        assert_eq!(event_json(&ev), Some(ev.to_json()));
        assert_eq!(event_json(&Event::Text { text: "t".into() }), None);
    }

    fn shape(kind: Kind) -> Shape {
        Shape {
            kind,
            id: "x".into(),
            created: 1,
            model: "m".into(),
        }
    }

    fn done() -> DoneStats {
        DoneStats {
            stop_reason: StopReason::MaxTokens,
            prompt_tokens: 10,
            cached_tokens: 4,
            prefilled_tokens: 6,
            generated_tokens: 3,
            time_to_first_token: Duration::from_millis(5),
            decode_tokens_per_s: 50.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
        }
    }

    #[test]
    fn chat_chunks_have_openai_shape() {
        let s = shape(Kind::Chat);
        let r = s.role_chunk().unwrap();
        assert_eq!(r["choices"][0]["delta"]["role"], "assistant");
        let t = s.text_chunk("hi");
        assert_eq!(t["object"], "chat.completion.chunk");
        assert_eq!(t["choices"][0]["delta"]["content"], "hi");
        assert!(t["choices"][0]["finish_reason"].is_null());
        let f = s.finish_chunk("length");
        assert_eq!(f["choices"][0]["delta"], json!({}));
        assert_eq!(f["choices"][0]["finish_reason"], "length");
    }

    #[test]
    fn reasoning_is_reasoning_content() {
        let s = shape(Kind::Chat);
        let c = s.reasoning_chunk("hmm");
        assert_eq!(
            c["choices"][0]["delta"],
            json!({"reasoning_content": "hmm"})
        );
        let r = s.response(("42", "hmm"), &Default::default(), &done(), &[]);
        assert_eq!(r["choices"][0]["message"]["content"], "42");
        assert_eq!(r["choices"][0]["message"]["reasoning_content"], "hmm");
        let plain = s.response(("42", ""), &Default::default(), &done(), &[]);
        assert!(plain["choices"][0]["message"]
            .get("reasoning_content")
            .is_none());
        let c = shape(Kind::Completion).reasoning_chunk("hmm");
        assert_eq!(c["choices"][0]["reasoning_content"], "hmm");
    }

    #[test]
    fn events_and_usage() {
        let ev = Event::ContextTrimmed {
            dropped: 7,
            kept: 9,
            reason: "budget".into(),
            method: TrimMethod::Shift,
        };
        let v = event_json(&ev).unwrap();
        assert_eq!(event_header_item(&v), "context_trimmed;kept=9;dropped=7");
        let c = shape(Kind::Completion).event_chunk(v);
        assert_eq!(c["statelm"]["event"], "context_trimmed");
        assert_eq!(c["choices"][0]["text"], "");
        assert!(event_json(&Event::Text { text: "x".into() }).is_none());
        let r = shape(Kind::Chat).response(("hey", ""), &Default::default(), &done(), &[]);
        assert_eq!(r["usage"]["total_tokens"], 13);
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(r["choices"][0]["message"]["content"], "hey");
        assert_eq!(r["choices"][0]["finish_reason"], "length");
        assert_eq!(r["statelm"]["stop_reason"], "max_tokens");
    }
}
