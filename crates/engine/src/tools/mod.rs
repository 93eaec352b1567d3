//! Tool calls: the functions a chat answer may call, in the model's own format.
//!
//! One owner for every front end. A request's [`Tools`] are set up once ([`Tools::setup`]):
//! - **The format** comes from the chat template, as llama.cpp's `common/chat.cpp` chooses it:
//!   a template that writes `<tool_call>` (Qwen2.5, Qwen3, Hermes), with `<tool_call>` a single
//!   token, gets [`ToolFormat::Hermes`]: the template renders the tools itself (its `tools`
//!   variable) and the model answers `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
//!   (small models often write the object without its tags; that is accepted too). Any other
//!   template that has Llama 3.1's `ipython` role gets [`ToolFormat::Llama3`]: the template
//!   renders the tools and the model answers one `{"name": ..., "parameters": {...}}` object.
//!   Any other template gets [`ToolFormat::Generic`]: a system message lists the tools and the
//!   answer is one JSON object, `{"tool_call": {"name", "arguments"}}` (or `"tool_calls": [...]`
//!   with parallel calls) or `{"response": "..."}`.
//! - **The choice is enforced by a grammar** ([`crate::Grammar`]): `required` and a named
//!   function constrain the answer from its first token to a call of an allowed tool with
//!   arguments valid under its parameter schema; `auto` also allows text, which must not start
//!   like a call (`{` or `<`), so a call is constrained from its first token; `none` renders no
//!   tools and parses no calls.
//! - **The answer is parsed as it streams** ([`ToolCallParser`]): text outside calls stays the
//!   answer's text, each call becomes [`crate::Event::ToolCallStart`], its arguments arrive as
//!   [`crate::Event::ToolCallArguments`] pieces while they are generated, and
//!   [`crate::Event::ToolCallEnd`] closes it. A call cut off (max tokens, a stop) is reported
//!   as unfinished, never as text.

mod parse;

pub use parse::{ToolCallParser, ToolOutput};

use crate::error::EngineError;
use crate::sampling::Grammar;
use serde_json::{json, Value};
use statelm_tokenizer::{ChatMessage, TemplateVars, Tokenizer};

/// Most tools a request may offer.
pub const MAX_TOOLS: usize = 128;

/// One function the model may call (OpenAI's `tools[].function`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolSpec {
    /// The function's name: letters, digits, `_` and `-`, at most 64.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its arguments' JSON schema (default: any object).
    #[serde(default = "any_object")]
    pub parameters: Value,
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// Which calls the answer may or must make.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// No calls: the tools are not shown to the model.
    None,
    /// The model chooses: text, or calls.
    #[default]
    Auto,
    /// At least one call, of any tool.
    Required,
    /// A call of this function.
    Function(String),
}

/// The tools of a chat request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tools {
    /// The functions.
    pub tools: Vec<ToolSpec>,
    /// Which calls are allowed or required.
    #[serde(default)]
    pub choice: ToolChoice,
    /// Several calls in one answer (OpenAI's `parallel_tool_calls`, default true).
    #[serde(default = "yes")]
    pub parallel: bool,
}

fn yes() -> bool {
    true
}

/// How the model writes its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>` (Qwen2.5, Qwen3, Hermes).
    Hermes,
    /// One `{"name": ..., "parameters": {...}}` object (Llama 3.1, 3.2, 3.3).
    Llama3,
    /// One JSON object: `{"tool_call": ...}`, `{"tool_calls": [...]}` or `{"response": ...}`.
    Generic,
}

/// What a request's tools change: how calls are written and parsed, and the constraint.
#[derive(Debug, Clone)]
pub struct ToolSetup {
    /// The format calls are written in.
    pub format: ToolFormat,
    /// The answer's constraint (`None` with `tool_choice: none`: then no calls are parsed).
    pub grammar: Option<Grammar>,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

impl ToolFormat {
    /// The format the chat template writes calls in.
    pub fn detect(tok: &Tokenizer) -> ToolFormat {
        let source = tok.chat_template_text();
        let tokens = tok.token_id(OPEN).is_some() && tok.token_id(CLOSE).is_some();
        if source.contains(OPEN) && tokens {
            ToolFormat::Hermes
        } else if source.contains("<|start_header_id|>ipython<|end_header_id|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }
}

impl Tools {
    /// Checks the tools and returns what they change in the answer: its format, its
    /// constraint and the token that starts it.
    pub fn setup(&self, tok: &Tokenizer) -> Result<ToolSetup, EngineError> {
        self.check()?;
        let format = ToolFormat::detect(tok);
        if !self.active() {
            return Ok(ToolSetup {
                format,
                grammar: None,
            });
        }
        let allowed: Vec<&ToolSpec> = match &self.choice {
            ToolChoice::Function(name) => self.tools.iter().filter(|t| &t.name == name).collect(),
            _ => self.tools.iter().collect(),
        };
        let auto = self.choice == ToolChoice::Auto;
        let grammar = match format {
            ToolFormat::Hermes => hermes_grammar(&allowed, self.parallel, auto),
            ToolFormat::Llama3 => llama3_grammar(&allowed, auto),
            ToolFormat::Generic => generic_grammar(&allowed, self.parallel, auto),
        };
        Ok(ToolSetup {
            format,
            grammar: Some(grammar),
        })
    }

    /// Whether the model is shown the tools (`tool_choice` is not `none` and there are some).
    pub fn active(&self) -> bool {
        self.choice != ToolChoice::None && !self.tools.is_empty()
    }

    /// Shows the tools to the model: the template's `tools` variable (Hermes), or the generic
    /// format's instructions in the system message.
    pub(crate) fn shape_prompt(
        &self,
        tok: &Tokenizer,
        messages: &mut Vec<ChatMessage>,
        vars: &mut TemplateVars,
    ) {
        if !self.active() {
            return;
        }
        match ToolFormat::detect(tok) {
            ToolFormat::Hermes | ToolFormat::Llama3 => {
                vars.0.insert("tools".into(), self.template_tools());
            }
            ToolFormat::Generic => {
                let auto = self.choice == ToolChoice::Auto;
                add_system(messages, &self.generic_instructions(auto));
            }
        }
    }

    fn check(&self) -> Result<(), EngineError> {
        let bad = |m: String| EngineError::InvalidRequest(m);
        if self.tools.len() > MAX_TOOLS {
            return Err(bad(format!(
                "at most {MAX_TOOLS} tools (got {})",
                self.tools.len()
            )));
        }
        for (i, t) in self.tools.iter().enumerate() {
            let name_ok = (1..=64).contains(&t.name.len())
                && t.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !name_ok {
                return Err(bad(format!(
                    "tool name {:?}: 1 to 64 letters, digits, '_' or '-'",
                    t.name
                )));
            }
            if self.tools[..i].iter().any(|o| o.name == t.name) {
                return Err(bad(format!("tool {:?} is given twice", t.name)));
            }
            if !t.parameters.is_object() && !t.parameters.is_boolean() {
                return Err(bad(format!(
                    "tool {:?}: parameters must be a JSON schema object",
                    t.name
                )));
            }
        }
        if let ToolChoice::Function(name) = &self.choice {
            if !self.tools.iter().any(|t| &t.name == name) {
                return Err(bad(format!(
                    "tool_choice names {name:?}, which is not among the tools"
                )));
            }
        }
        if self.tools.is_empty()
            && matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
        {
            return Err(bad(
                "tool_choice requires a call but no tools are given".into()
            ));
        }
        Ok(())
    }

    /// The tools as chat templates read them (OpenAI's shape).
    fn template_tools(&self) -> Value {
        let list: Vec<Value> = (self.tools.iter())
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        Value::Array(list)
    }

    fn generic_instructions(&self, auto: bool) -> String {
        let list: Vec<String> = (self.tools.iter())
            .map(|t| {
                json!({"name": t.name, "description": t.description, "parameters": t.parameters})
                    .to_string()
            })
            .collect();
        let call = if self.parallel {
            r#"{"tool_calls": [{"name": "<name>", "arguments": {...}}]}"#
        } else {
            r#"{"tool_call": {"name": "<name>", "arguments": {...}}}"#
        };
        let answer = if auto {
            " to call tools, or {\"response\": \"<your answer>\"} to answer directly".to_string()
        } else {
            String::new()
        };
        format!(
            "You can call these tools:\n{}\n\nRespond with one JSON object: {call}{answer}.",
            list.join("\n")
        )
    }
}

/// Adds `text` to the conversation's system message (after its own text), or makes one.
fn add_system(messages: &mut Vec<ChatMessage>, text: &str) {
    match messages.first_mut().filter(|m| m.role == "system") {
        Some(m) => m.content = format!("{}\n\n{text}", m.content),
        None => messages.insert(0, ChatMessage::new("system", text)),
    }
}

/// JSON written on one line with `", "` and `": "`, as the constraint writes answers.
fn layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// One call of `t`: `{"name": NAME, "arguments": ARGS}`, `key` naming the arguments.
fn call_schema(t: &ToolSpec, key: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, key: t.parameters},
        "required": ["name", key],
        "additionalProperties": false,
    })
}

fn hermes_grammar(allowed: &[&ToolSpec], parallel: bool, auto: bool) -> Grammar {
    let calls: Vec<String> = (allowed.iter())
        .map(|t| {
            let mut s = call_schema(t, "arguments");
            s["x-guidance"] = layout();
            format!("%json {s}")
        })
        .collect();
    let more = if parallel {
        "(\"\\n<tool_call>\\n\" call \"\\n</tool_call>\")*"
    } else {
        ""
    };
    // Calls in their tags, or one bare call object (small models often drop the tags, and
    // llama.cpp accepts that too); with `auto`, or text that starts with neither.
    let text = if auto { " | TEXT" } else { "" };
    Grammar::Lark(format!(
        "start: \"<tool_call>\\n\" call \"\\n</tool_call>\" {more} | call{text}\n\
         call: {}\n\
         TEXT: /[^{{<](.|\\n)*/\n",
        calls.join(" | ")
    ))
}

/// Llama 3.x: one call object, `parameters` for the arguments (no parallel calls); with
/// `auto`, or text that does not start with `{`.
fn llama3_grammar(allowed: &[&ToolSpec], auto: bool) -> Grammar {
    let calls: Vec<String> = (allowed.iter())
        .map(|t| {
            let mut s = call_schema(t, "parameters");
            s["x-guidance"] = layout();
            format!("%json {s}")
        })
        .collect();
    let text = if auto { " | TEXT" } else { "" };
    Grammar::Lark(format!(
        "start: call{text}\ncall: {}\nTEXT: /[^{{](.|\\n)*/\n",
        calls.join(" | ")
    ))
}

fn generic_grammar(allowed: &[&ToolSpec], parallel: bool, auto: bool) -> Grammar {
    let one = Value::Array(
        allowed
            .iter()
            .map(|t| call_schema(t, "arguments"))
            .collect(),
    );
    let call = if parallel {
        json!({"type": "object", "properties": {"tool_calls": {
            "type": "array", "minItems": 1, "items": {"anyOf": one}}},
            "required": ["tool_calls"], "additionalProperties": false})
    } else {
        json!({"type": "object", "properties": {"tool_call": {"anyOf": one}},
            "required": ["tool_call"], "additionalProperties": false})
    };
    let mut schema = if auto {
        let response = json!({"type": "object", "properties": {"response": {"type": "string"}},
            "required": ["response"], "additionalProperties": false});
        json!({"anyOf": [call, response]})
    } else {
        call
    };
    schema["x-guidance"] = layout();
    Grammar::JsonSchema(schema)
}
