//! The request bodies of `/v1/chat/completions` and `/v1/completions`, and their validation
//! into engine parameters.

use crate::error::ApiError;
use serde::Deserialize;
use statelm_engine::{ChatMessage, SamplingParams, TemplateVars};
use std::collections::HashMap;

/// Most stop strings a request may give (as OpenAI).
const MAX_STOP: usize = 4;

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields both endpoints share. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Common {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub logit_bias: Option<HashMap<String, f64>>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub n: Option<i64>,
    /// OpenAI's end-user id: with durable sessions, the conversation's name.
    pub user: Option<String>,
    /// DRY repetition penalty (llama.cpp's server names; see `SamplingParams`).
    pub dry_multiplier: Option<f64>,
    pub dry_base: Option<f64>,
    pub dry_allowed_length: Option<i64>,
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// End an answer that repeats itself (finish reason `stop`, statelm reason `repetition`).
    pub loop_guard: Option<bool>,
    /// Prompt-lookup decoding: drafts checked per forward pass (0: off; the text is unchanged).
    pub lookup: Option<i64>,
    /// Longest n-gram drafts are looked up by.
    pub ngram_max: Option<i64>,
    /// Structured output: JSON (any object, or under a schema) (`crate::structured`).
    pub response_format: Option<serde_json::Value>,
    /// statelm's own: the answer matches this regular expression, whole.
    pub regex: Option<String>,
    /// statelm's own: the answer follows this Lark-style grammar (llguidance's dialect).
    pub grammar: Option<String>,
    /// OpenAI fields that would change what the reply means, which this server does not
    /// implement: refused with a 400 naming them unless they ask for nothing.
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// The OpenAI request fields statelm does not implement and that change a reply's meaning.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Unsupported {
    logprobs: Option<serde_json::Value>,
    top_logprobs: Option<serde_json::Value>,
    echo: Option<serde_json::Value>,
    suffix: Option<serde_json::Value>,
    best_of: Option<serde_json::Value>,
    tools: Option<serde_json::Value>,
    tool_choice: Option<serde_json::Value>,
    functions: Option<serde_json::Value>,
    function_call: Option<serde_json::Value>,
}

impl Unsupported {
    /// A 400 naming the first field that asks for something unsupported. Values that ask for
    /// nothing (`false`, `0`, `1` for `best_of`, `[]`, `"none"`,
    /// an empty suffix, `null`) pass.
    fn check(&self) -> Result<(), ApiError> {
        use serde_json::Value as V;
        let asks = |v: &Option<V>, none: &[V]| {
            v.as_ref()
                .is_some_and(|v| !v.is_null() && !none.contains(v) && v != &V::Array(vec![]))
        };
        let fields: [(&str, &Option<V>, Vec<V>); 9] = [
            ("logprobs", &self.logprobs, vec![V::Bool(false), 0.into()]),
            ("top_logprobs", &self.top_logprobs, vec![0.into()]),
            ("echo", &self.echo, vec![V::Bool(false)]),
            ("suffix", &self.suffix, vec!["".into()]),
            ("best_of", &self.best_of, vec![1.into()]),
            ("tools", &self.tools, vec![]),
            ("tool_choice", &self.tool_choice, vec!["none".into()]),
            ("functions", &self.functions, vec![]),
            ("function_call", &self.function_call, vec!["none".into()]),
        ];
        match fields.iter().find(|(_, v, none)| asks(v, none)) {
            Some((name, ..)) => Err(ApiError::bad_param(
                name,
                format!("{name} is not supported by this server"),
            )),
            None => Ok(()),
        }
    }
}

/// Message content: a string, or an array of `{"type": "text", "text": ...}` parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<serde_json::Value>),
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant message's tool calls (OpenAI's shape: arguments as a JSON string).
    #[serde(default)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` message's call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChatRequest {
    pub messages: Vec<Message>,
    /// Variables for the model's chat template (vLLM's and llama-server's name), such as
    /// Qwen3's `enable_thinking`.
    #[serde(default)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// Functions the model may call (`crate::tools`).
    #[serde(default)]
    pub tools: Option<serde_json::Value>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name": ...}}`.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// Several calls in one answer (default true).
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    pub common: Common,
}

/// `prompt` of `/v1/completions`: a string, one-element array of strings, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub common: Common,
}

/// What bounds a request's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest `max_tokens`.
    pub max_tokens_limit: usize,
    /// `max_tokens` when absent.
    pub default_max_tokens: usize,
    /// Vocabulary size (bounds `logit_bias` ids).
    pub n_vocab: usize,
}

/// Validated generation parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Params {
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub max_tokens: usize,
    pub stream: bool,
    pub include_usage: bool,
}

/// Parses a JSON body into `T`, with a 400 that says what is wrong.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "the request body is empty (expected a JSON object)",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "the request body is not valid JSON"
        } else {
            "the request body does not match the API"
        };
        ApiError::invalid(format!("{what}: {e}"))
    })
}

/// The chat messages for the engine: content parts joined, `developer` read as `system`.
pub(crate) fn chat_messages(messages: &[Message]) -> Result<Vec<ChatMessage>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match m.role.as_str() {
                "developer" => "system",
                r @ ("system" | "user" | "assistant" | "tool") => r,
                other => {
                    return Err(ApiError::bad_param(
                        &format!("messages[{i}].role"),
                        format!("unsupported role {other:?} (system, user, assistant, tool)"),
                    ))
                }
            };
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => text_of_parts(parts, i)?,
            };
            let mut msg = ChatMessage::new(role, content);
            msg.tool_calls = crate::tools::message_calls(m.tool_calls.as_deref(), i)?;
            msg.tool_call_id = m.tool_call_id.clone();
            Ok(msg)
        })
        .collect()
}

/// `chat_template_kwargs` as template variables; a name the renderer sets itself is a 400.
pub(crate) fn template_vars(
    kwargs: &Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<TemplateVars, ApiError> {
    let vars = TemplateVars(
        kwargs
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    match vars.reserved() {
        Some(name) => Err(ApiError::bad_param(
            "chat_template_kwargs",
            format!("`{name}` is set by the server and cannot be a template variable"),
        )),
        None => Ok(vars),
    }
}

fn text_of_parts(parts: &[serde_json::Value], i: usize) -> Result<String, ApiError> {
    let mut out = String::new();
    for p in parts {
        match (p["type"].as_str(), p["text"].as_str()) {
            (Some("text"), Some(t)) => out.push_str(t),
            (kind, _) => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].content"),
                    format!(
                        "unsupported content part {:?} (only text parts are supported)",
                        kind.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    Ok(out)
}

impl Common {
    /// Checks every parameter (but the model name).
    /// Absent sampling fields take their value from `base` (the server's defaults).
    pub fn validate(&self, limits: &Limits, base: &SamplingParams) -> Result<Params, ApiError> {
        self.unsupported.check()?;
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::bad_param(
                    "n",
                    format!("only n = 1 is supported (got {n})"),
                ));
            }
        }
        let max_tokens = self.max_tokens(limits)?;
        let mut sampling = self.sampling(base, limits.n_vocab)?;
        sampling.grammar = crate::structured::constraint(
            self.response_format.as_ref(),
            self.regex.as_deref(),
            self.grammar.as_deref(),
        )?;
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP {
            return Err(ApiError::bad_param(
                "stop",
                format!("at most {MAX_STOP} stop strings"),
            ));
        }
        let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
        Ok(Params {
            sampling,
            stop,
            max_tokens,
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|o| o.include_usage),
        })
    }

    fn max_tokens(&self, cfg: &Limits) -> Result<usize, ApiError> {
        let (param, value) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(v), _) => ("max_completion_tokens", v),
            (None, Some(v)) => ("max_tokens", v),
            (None, None) => return Ok(cfg.default_max_tokens.min(cfg.max_tokens_limit)),
        };
        if value < 1 || value as u64 > cfg.max_tokens_limit as u64 {
            return Err(ApiError::bad_param(
                param,
                format!(
                    "{param} must be between 1 and {} (got {value})",
                    cfg.max_tokens_limit
                ),
            ));
        }
        Ok(value as usize)
    }

    fn sampling(&self, base: &SamplingParams, n_vocab: usize) -> Result<SamplingParams, ApiError> {
        let mut p = base.clone();
        // Ranges are the engine's (`SamplingParams::check`, below): the C ABI and the CLI
        // reject the same values with the same messages.
        let set = |field: &mut f32, v: Option<f64>| {
            if let Some(v) = v {
                *field = v as f32;
            }
        };
        set(&mut p.temperature, self.temperature);
        set(&mut p.top_p, self.top_p);
        if let Some(k) = self.top_k {
            if k < 0 {
                return Err(ApiError::bad_param(
                    "top_k",
                    format!("top_k must be >= 0 (got {k})"),
                ));
            }
            p.top_k = k as usize;
        }
        set(&mut p.min_p, self.min_p);
        set(&mut p.repeat_penalty, self.repeat_penalty);
        set(&mut p.frequency_penalty, self.frequency_penalty);
        set(&mut p.presence_penalty, self.presence_penalty);
        for (k, &v) in self.logit_bias.iter().flatten() {
            let Ok(id) = k.trim().parse::<u32>() else {
                return Err(ApiError::bad_param(
                    "logit_bias",
                    format!("logit_bias key {k:?} is not a token id below {n_vocab}"),
                ));
            };
            // OpenAI's range; -100 bans the token, as OpenAI documents.
            if !(-100.0..=100.0).contains(&v) {
                return Err(ApiError::bad_param(
                    "logit_bias",
                    format!("logit_bias values must be between -100 and 100 (got {v})"),
                ));
            }
            let bias = if v <= -100.0 {
                f32::NEG_INFINITY
            } else {
                v as f32
            };
            p.logit_bias.insert(id, bias);
        }
        p.seed = self.seed.map(|s| s as u64);
        self.dry(&mut p)?;
        p.check(n_vocab)
            .map_err(|e| ApiError::bad_param(e.param, e.message))?;
        Ok(p)
    }

    /// The DRY fields, the loop guard and prompt lookup.
    fn dry(&self, p: &mut SamplingParams) -> Result<(), ApiError> {
        if let Some(v) = self.dry_multiplier {
            p.dry_multiplier = v as f32;
        }
        if let Some(v) = self.dry_base {
            p.dry_base = v as f32;
        }
        let max = statelm_engine::MAX_WINDOW as i64;
        let count = |name: &str, v: Option<i64>| match v {
            Some(n) if !(0..=max).contains(&n) => Err(ApiError::bad_param(
                name,
                format!("{name} must be between 0 and {max} (got {n})"),
            )),
            _ => Ok(v.map(|n| n as usize)),
        };
        if let Some(n) = count("dry_allowed_length", self.dry_allowed_length)? {
            p.dry_allowed_length = n;
        }
        if let Some(n) = count("dry_penalty_last_n", self.dry_penalty_last_n)? {
            p.dry_last_n = n;
        }
        if let Some(b) = &self.dry_sequence_breakers {
            p.dry_sequence_breakers = b.clone();
        }
        if let Some(g) = self.loop_guard {
            p.loop_guard = g;
        }
        let max = statelm_engine::speculate::MAX_LOOKUP as i64;
        match self.lookup {
            Some(n) if !(0..=max).contains(&n) => {
                let msg = format!("lookup must be between 0 and {max} (got {n})");
                return Err(ApiError::bad_param("lookup", msg));
            }
            Some(n) => p.lookup = n as usize,
            None => {}
        }
        let max = statelm_engine::lookup::MAX_NGRAM as i64;
        match self.ngram_max {
            Some(n) if !(1..=max).contains(&n) => {
                let msg = format!("ngram_max must be between 1 and {max} (got {n})");
                return Err(ApiError::bad_param("ngram_max", msg));
            }
            Some(n) => p.ngram_max = n as usize,
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
