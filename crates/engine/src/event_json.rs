//! The one JSON form of engine events, shared by the server (the `statelm` fields of replies)
//! and the C ABI (`StatelmEvent::json`): an `"event"` key naming the event, then its fields.

use crate::events::{DoneStats, Event, StopReason, TrimMethod};
use serde_json::{json, Value};

impl TrimMethod {
    /// The method's name in JSON (`shift`, `reprefill`).
    pub fn name(&self) -> &'static str {
        match self {
            TrimMethod::Shift => "shift",
            TrimMethod::Reprefill => "reprefill",
        }
    }
}

impl DoneStats {
    /// The statistics as JSON fields (`stop_reason` by [`StopReason::name`], `stop_string`
    /// when a stop string ended it, token counts, `time_to_first_token_ms`,
    /// `decode_tokens_per_s`, `drafted_tokens`, `accepted_tokens`).
    pub fn to_json(&self) -> Value {
        let stop_string = match &self.stop_reason {
            StopReason::StopString(s) => Some(s.as_str()),
            _ => None,
        };
        json!({
            "stop_reason": self.stop_reason.name(),
            "stop_string": stop_string,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "generated_tokens": self.generated_tokens,
            "time_to_first_token_ms": self.time_to_first_token.as_secs_f64() * 1e3,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
        })
    }
}

impl Event {
    /// The event's name in JSON: `token`, `text`, `reasoning`, `context_trimmed`, `cache_evicted`,
    /// `spilled`, `restored`, `resumed`, `done`, `tool_call_start`, `tool_call_arguments`,
    /// `tool_call_end`, `tool_call_unfinished`.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Token { .. } => "token",
            Event::Text { .. } => "text",
            Event::Reasoning { .. } => "reasoning",
            Event::ContextTrimmed { .. } => "context_trimmed",
            Event::CacheEvicted { .. } => "cache_evicted",
            Event::Spilled { .. } => "spilled",
            Event::Restored => "restored",
            Event::Resumed { .. } => "resumed",
            Event::Done(_) => "done",
            Event::ToolCallStart { .. } => "tool_call_start",
            Event::ToolCallArguments { .. } => "tool_call_arguments",
            Event::ToolCallEnd { .. } => "tool_call_end",
            Event::ToolCallUnfinished { .. } => "tool_call_unfinished",
        }
    }

    /// Whether the event says what happened to the session's memory (trimmed, evicted,
    /// spilled, restored, resumed) rather than carrying output.
    pub fn is_memory(&self) -> bool {
        !matches!(
            self,
            Event::Token { .. }
                | Event::Text { .. }
                | Event::Reasoning { .. }
                | Event::Done(_)
                | Event::ToolCallStart { .. }
                | Event::ToolCallArguments { .. }
                | Event::ToolCallEnd { .. }
                | Event::ToolCallUnfinished { .. }
        )
    }

    /// The event as JSON: `{"event": name, ...fields}`.
    pub fn to_json(&self) -> Value {
        let mut v = match self {
            Event::Token { id, text } => json!({"id": id, "text": text}),
            Event::Text { text } | Event::Reasoning { text } => json!({"text": text}),
            Event::ContextTrimmed {
                dropped,
                kept,
                reason,
                method,
            } => json!({
                "dropped": dropped, "kept": kept, "reason": reason, "method": method.name(),
            }),
            Event::CacheEvicted { reason } | Event::Spilled { reason } => {
                json!({"reason": reason})
            }
            Event::Restored => json!({}),
            Event::Resumed {
                name,
                history_tokens,
                restored_tokens,
                reprefilled_tokens,
                reason,
            } => json!({
                "name": name, "history_tokens": history_tokens,
                "restored_tokens": restored_tokens, "reprefilled_tokens": reprefilled_tokens,
                "reason": reason,
            }),
            Event::Done(d) => d.to_json(),
            Event::ToolCallStart { index, id, name } => {
                json!({"index": index, "id": id, "name": name})
            }
            Event::ToolCallArguments { index, text }
            | Event::ToolCallUnfinished { index, text } => {
                json!({"index": index, "text": text})
            }
            Event::ToolCallEnd { index, arguments } => {
                json!({"index": index, "arguments": arguments})
            }
        };
        v["event"] = json!(self.name());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn events_name_themselves() {
        let e = Event::ContextTrimmed {
            dropped: 3,
            kept: 5,
            reason: "budget".into(),
            method: TrimMethod::Shift,
        };
        let v = e.to_json();
        assert_eq!(v["event"], "context_trimmed");
        assert_eq!(
            (v["dropped"].as_u64(), v["method"].as_str()),
            (Some(3), Some("shift"))
        );
        assert!(e.is_memory());
        let d = DoneStats {
            stop_reason: StopReason::StopString("END".into()),
            prompt_tokens: 7,
            cached_tokens: 2,
            prefilled_tokens: 5,
            generated_tokens: 4,
            time_to_first_token: Duration::from_millis(12),
            decode_tokens_per_s: 30.0,
            drafted_tokens: 0,
            accepted_tokens: 0,
        };
        let v = Event::Done(d).to_json();
        assert_eq!(
            (v["event"].as_str(), v["stop_reason"].as_str()),
            (Some("done"), Some("stop_string"))
        );
        assert_eq!(v["stop_string"], "END");
        assert_eq!(v["time_to_first_token_ms"], 12.0);
        assert!(!Event::Restored.to_json()["event"].is_null());
    }
}
