//! Tool calls over HTTP: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` as the
//! engine's [`Tools`], assistant messages' `tool_calls` for the template, and the answer's
//! calls as `tool_calls` (whole, or as stream deltas the stock client reassembles).

use crate::error::ApiError;
use serde_json::{json, Value};
use statelm_engine::tools::{ToolChoice, ToolSpec, Tools};
use statelm_engine::Event;

/// The request's tools (`None`: it offers none).
pub(crate) fn tools_of(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<Tools>, ApiError> {
    let list: &[Value] = match tools {
        None | Some(Value::Null) => &[],
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::bad_param("tools", "tools must be an array")),
    };
    if list.is_empty() {
        let asks =
            choice.is_some_and(|c| !c.is_null() && !matches!(c.as_str(), Some("none" | "auto")));
        if asks {
            return Err(ApiError::bad_param(
                "tool_choice",
                "tool_choice asks for a call but no tools are given",
            ));
        }
        return Ok(None);
    }
    let mut specs = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let param = format!("tools[{i}]");
        if t["type"].as_str() != Some("function") {
            return Err(ApiError::bad_param(
                &param,
                "only tools of type \"function\" are supported",
            ));
        }
        let f = &t["function"];
        let name = f["name"]
            .as_str()
            .ok_or_else(|| ApiError::bad_param(&param, "a function tool needs function.name"))?;
        specs.push(ToolSpec {
            name: name.to_string(),
            description: f["description"].as_str().unwrap_or_default().to_string(),
            parameters: match &f["parameters"] {
                Value::Null => json!({"type": "object"}),
                p => p.clone(),
            },
        });
    }
    let choice = match choice.filter(|c| !c.is_null()) {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!("unknown tool_choice {other:?} (none, auto, required, or a function)"),
                ))
            }
        },
        Some(c) => match c["function"]["name"].as_str() {
            Some(name) if c["type"].as_str() == Some("function") => {
                ToolChoice::Function(name.to_string())
            }
            _ => return Err(ApiError::bad_param(
                "tool_choice",
                "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
            )),
        },
    };
    Ok(Some(Tools {
        tools: specs,
        choice,
        parallel: parallel.unwrap_or(true),
    }))
}

/// An assistant message's `tool_calls` as templates read them: arguments parsed from their
/// JSON string into an object.
pub(crate) fn message_calls(
    calls: Option<&[Value]>,
    i: usize,
) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(calls) = calls.filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    let param = format!("messages[{i}].tool_calls");
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let f = &c["function"];
        let name = f["name"]
            .as_str()
            .ok_or_else(|| ApiError::bad_param(&param, "each tool call needs function.name"))?;
        let arguments = match &f["arguments"] {
            Value::String(s) => serde_json::from_str(s).map_err(|e| {
                ApiError::bad_param(&param, format!("arguments of {name:?} are not JSON: {e}"))
            })?,
            Value::Null => json!({}),
            v => v.clone(),
        };
        out.push(json!({"id": c["id"], "type": "function",
                        "function": {"name": name, "arguments": arguments}}));
    }
    Ok(Some(out))
}

/// An answer's tool calls, gathered from its events.
#[derive(Debug, Default, Clone)]
pub(crate) struct Calls {
    /// Finished calls, OpenAI's shape (`arguments` a JSON string).
    pub done: Vec<Value>,
    /// Calls cut off: `{"index", "text"}`.
    pub unfinished: Vec<Value>,
    names: Vec<(String, String)>,
}

impl Calls {
    /// Notes a tool-call event.
    pub fn note(&mut self, ev: &Event) {
        match ev {
            Event::ToolCallStart { id, name, .. } => self.names.push((id.clone(), name.clone())),
            Event::ToolCallEnd { index, arguments } => {
                let (id, name) = self.names.get(*index).cloned().unwrap_or_default();
                self.done.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments}}));
            }
            Event::ToolCallUnfinished { index, text } => {
                self.unfinished.push(json!({"index": index, "text": text}));
            }
            _ => {}
        }
    }
}

/// A stream delta for a tool-call event (`None`: the event needs none).
pub(crate) fn delta(ev: &Event) -> Option<Value> {
    match ev {
        Event::ToolCallStart { index, id, name } => Some(json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]})),
        Event::ToolCallArguments { index, text } => Some(json!({"tool_calls": [{
            "index": index, "function": {"arguments": text}}]})),
        _ => None,
    }
}
