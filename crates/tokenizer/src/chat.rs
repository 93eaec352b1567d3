//! Chat templates: the GGUF's `tokenizer.chat_template` (Jinja, rendered with
//! minijinja plus Python-style string methods), or a built-in template chosen
//! by architecture when the file has none.

use std::collections::BTreeMap;

use minijinja::{Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::error::TokenizerError;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or `tool`...).
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant message's tool calls, as templates read them: `[{"type": "function",
    /// "function": {"name": ..., "arguments": {...}}, "id": ...}]` (arguments as an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` message's answer to this call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// Extra variables for the chat template: OpenAI's `chat_template_kwargs`, such as Qwen3's
/// `enable_thinking`. The template reads them as globals beside `messages`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TemplateVars(pub BTreeMap<String, serde_json::Value>);

/// Names the renderer sets itself; a [`TemplateVars`] entry may not replace them.
pub const RESERVED_TEMPLATE_VARS: [&str; 5] = [
    "messages",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
    "raise_exception",
];

impl TemplateVars {
    /// No extra variables.
    pub fn new() -> TemplateVars {
        TemplateVars::default()
    }

    /// These variables with `name` set to `value`.
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> TemplateVars {
        self.0.insert(name.to_string(), value.into());
        self
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first name that the renderer reserves, if any is set.
    pub fn reserved(&self) -> Option<&str> {
        (self.0.keys()).find_map(|k| {
            RESERVED_TEMPLATE_VARS
                .contains(&k.as_str())
                .then_some(k.as_str())
        })
    }
}

/// Where the chat template in use comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    /// `tokenizer.chat_template` from the model file.
    Gguf,
    /// A built-in template (`"gemma"`, `"chatml"` or `"llama3"`), used because
    /// the model file has none.
    BuiltIn(&'static str),
}

/// Gemma: no system role; system text is merged into the first user turn
/// (as llama.cpp's built-in Gemma template does); BOS is not rendered.
const GEMMA: &str = r#"
{%- set ns = namespace(sys='') -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}
    {%- set ns.sys = ns.sys + (m.content | trim) -%}
  {%- else -%}
    {%- set role = 'model' if m.role == 'assistant' else m.role -%}
    {{- '<start_of_turn>' + role + '\n' -}}
    {%- if ns.sys and role != 'model' -%}
      {{- ns.sys + '\n\n' -}}
      {%- set ns.sys = '' -%}
    {%- endif -%}
    {{- (m.content | trim) + '<end_of_turn>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
"#;

/// ChatML (Qwen and the generic fallback).
const CHATML: &str = r#"
{%- for m in messages -%}
  {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"#;

/// Llama 3 headers (BOS is not rendered; tokenization adds it).
const LLAMA3: &str = r#"
{%- for m in messages -%}
  {{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
"#;

/// The built-in template for an architecture: `(name, source)`.
pub(crate) fn builtin_for(arch: &str) -> (&'static str, &'static str) {
    if arch.starts_with("gemma") {
        ("gemma", GEMMA)
    } else if arch == "llama" {
        ("llama3", LLAMA3)
    } else {
        ("chatml", CHATML)
    }
}

const NAME: &str = "chat";

/// A compiled chat template with its context values.
#[derive(Debug)]
pub(crate) struct ChatTemplate {
    source: TemplateSource,
    /// The template's text.
    text: String,
    /// The environment holding the template, or the compile error.
    env: Result<Environment<'static>, String>,
    bos_token: String,
    eos_token: String,
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

impl ChatTemplate {
    /// Compiles the GGUF template, or the architecture's built-in one.
    pub fn new(gguf: Option<&str>, arch: &str, bos_token: String, eos_token: String) -> Self {
        let (source, text) = match gguf {
            Some(t) => (TemplateSource::Gguf, t.to_string()),
            None => {
                let (name, t) = builtin_for(arch);
                (TemplateSource::BuiltIn(name), t.to_string())
            }
        };
        let mut env = Environment::new();
        // Hugging Face renders chat templates with these two settings.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", raise_exception);
        let env = match env.add_template_owned(NAME, text.clone()) {
            Ok(()) => Ok(env),
            Err(e) => Err(format!("{e:#}")),
        };
        ChatTemplate {
            source,
            text,
            env,
            bos_token,
            eos_token,
        }
    }

    pub fn source(&self) -> TemplateSource {
        self.source
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    fn error(&self, message: String) -> TokenizerError {
        let source_name = match self.source {
            TemplateSource::Gguf => "gguf".to_string(),
            TemplateSource::BuiltIn(n) => format!("built-in {n}"),
        };
        TokenizerError::ChatTemplate {
            source_name,
            message,
        }
    }

    /// Renders `messages` with the extra variables `vars` (a reserved name among them is an
    /// error that names it).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<String, TokenizerError> {
        if let Some(name) = vars.reserved() {
            return Err(self.error(format!(
                "`{name}` is set by the renderer and cannot be a template variable"
            )));
        }
        let env = self.env.as_ref().map_err(|e| self.error(e.clone()))?;
        let tmpl = env
            .get_template(NAME)
            .map_err(|e| self.error(format!("{e:#}")))?;
        let mut ctx: BTreeMap<String, Value> = (vars.0.iter())
            .map(|(k, v)| (k.clone(), Value::from_serialize(v)))
            .collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("add_generation_prompt".into(), add_generation_prompt.into());
        ctx.insert("bos_token".into(), self.bos_token.as_str().into());
        ctx.insert("eos_token".into(), self.eos_token.as_str().into());
        tmpl.render(Value::from(ctx))
            .map_err(|e| self.error(format!("{e:#}")))
    }
}
