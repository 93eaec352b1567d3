//! The JSON arguments of the C API: model options, engine configuration, session options,
//! generation input and generation parameters. Unknown fields are rejected (a typo is an
//! error, not a silently ignored setting).

use crate::status::FfiError;
use serde::Deserialize;
use statelm_engine::{
    ChatDefaults, ChatMessage, ConfigPatch, Conversation, EngineConfig, GenerateRequest, Input,
    SessionId, SessionOptions, TemplateVars,
};
use statelm_model::LoadOptions;

/// Parses `json` (`None`: `{}`) into `T`, naming `what` in the error.
fn parse<T: for<'de> Deserialize<'de> + Default>(
    json: Option<&str>,
    what: &str,
) -> Result<T, FfiError> {
    match json {
        None => Ok(T::default()),
        Some(s) => serde_json::from_str(s)
            .map_err(|e| FfiError::invalid(format!("invalid {what} JSON: {e}"))),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelJson {
    threads: Option<usize>,
    ubatch: Option<usize>,
}

/// `statelm_model_load` options: `{"threads": N, "ubatch": N}` (both optional).
pub(crate) fn load_options(json: Option<&str>) -> Result<LoadOptions, FfiError> {
    let j: ModelJson = parse(json, "model options")?;
    let mut opts = LoadOptions::default();
    if let Some(t) = j.threads {
        opts.threads = t;
    }
    if let Some(u) = j.ubatch {
        if u == 0 {
            return Err(FfiError::invalid("`ubatch` must be at least 1"));
        }
        opts.ubatch = u;
    }
    Ok(opts)
}

/// Whether an engine watches the OS's memory signals itself unless told otherwise: on the
/// phones and Macs (iOS and macOS jetsam figures and libdispatch events, Android's polled
/// `/proc`), where no host code may forward a warning in time; not on other Linux systems,
/// where the embedding server or tool usually runs its own governor.
pub(crate) const DEFAULT_OS_MEMORY_WATCH: bool =
    cfg!(any(target_vendor = "apple", target_os = "android"));

/// What `statelm_engine_start` starts: the engine's configuration, and whether statelm
/// watches the OS's memory signals itself (`os_memory_watch`).
#[derive(Debug)]
pub(crate) struct EngineStart {
    /// The engine configuration.
    pub config: EngineConfig,
    /// Attach a governor monitor over the OS's own memory sources.
    pub os_memory_watch: bool,
}

/// `statelm_engine_start` configuration (every field optional; see the header): the engine's
/// own [`ConfigPatch`] — its names, checks and messages — plus `os_memory_watch`.
pub(crate) fn engine_config(json: Option<&str>) -> Result<EngineStart, FfiError> {
    let mut j: serde_json::Map<String, serde_json::Value> = parse(json, "engine config")?;
    let os_memory_watch = match j.remove("os_memory_watch") {
        None => DEFAULT_OS_MEMORY_WATCH,
        Some(serde_json::Value::Bool(on)) => on,
        Some(other) => {
            return Err(FfiError::invalid(format!(
                "invalid engine config JSON: `os_memory_watch` must be true or false, got {other}"
            )))
        }
    };
    let patch: ConfigPatch = serde_json::from_value(serde_json::Value::Object(j))
        .map_err(|e| FfiError::invalid(format!("invalid engine config JSON: {e}")))?;
    let config = patch.apply(EngineConfig::default())?;
    Ok(EngineStart {
        config,
        os_memory_watch,
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionJson {
    token_budget: Option<usize>,
    pinned_prefix: Option<usize>,
    system_prompt: Option<String>,
    chat_template_kwargs: Option<TemplateVars>,
}

/// Template variables, checked: a name the renderer sets itself is refused.
fn checked_vars(vars: Option<TemplateVars>) -> Result<TemplateVars, FfiError> {
    let vars = vars.unwrap_or_default();
    match vars.reserved() {
        Some(name) => Err(FfiError::invalid(format!(
            "`chat_template_kwargs`: `{name}` is set by the renderer and cannot be a template \
             variable"
        ))),
        None => Ok(vars),
    }
}

/// `statelm_session_new` options: `{"token_budget", "pinned_prefix", "system_prompt",
/// "chat_template_kwargs"}`.
pub(crate) fn session_options(json: Option<&str>) -> Result<SessionOptions, FfiError> {
    let j: SessionJson = parse(json, "session options")?;
    Ok(SessionOptions {
        token_budget: j.token_budget,
        pinned_prefix: j.pinned_prefix,
        system_prompt: j.system_prompt,
        template_vars: checked_vars(j.chat_template_kwargs)?,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageJson {
    role: String,
    #[serde(default)]
    content: String,
    /// An assistant message's calls: `[{"id", "type": "function", "function": {"name",
    /// "arguments": {...}}}]`.
    #[serde(default)]
    tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` message's call id.
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputJson {
    prompt: Option<String>,
    messages: Option<Vec<MessageJson>>,
    chat_template_kwargs: Option<TemplateVars>,
    /// With `messages`: the functions the answer may call.
    tools: Option<statelm_engine::tools::Tools>,
    append: Option<String>,
    user_turn: Option<String>,
    tokens: Option<Vec<u32>>,
}

/// The generation input: exactly one of `{"prompt": "..."}`, `{"messages": [{"role",
/// "content"}, ...]}` (with `"chat_template_kwargs": {...}` and `"tools": {"tools": [{"name",
/// "description", "parameters"}], "choice": "auto"|"required"|"none"|{"function": NAME},
/// "parallel": true}` if wanted), `{"append": "..."}`,
/// `{"user_turn": "..."}` or `{"tokens": [ids]}`.
pub(crate) fn input(json: &str) -> Result<Input, FfiError> {
    let j: InputJson = parse(Some(json), "input")?;
    if j.chat_template_kwargs.is_some() && j.messages.is_none() {
        return Err(FfiError::invalid(
            "input JSON: \"chat_template_kwargs\" goes with \"messages\" (a session's own are \
             a session option)",
        ));
    }
    if j.tools.is_some() && j.messages.is_none() {
        return Err(FfiError::invalid(
            "input JSON: \"tools\" goes with \"messages\"",
        ));
    }
    let mut found = Vec::new();
    if let Some(p) = j.prompt {
        found.push(Input::Text(p));
    }
    if let Some(m) = j.messages {
        found.push(Input::Chat(Conversation {
            messages: (m.into_iter())
                .map(|m| ChatMessage {
                    tool_calls: m.tool_calls,
                    tool_call_id: m.tool_call_id,
                    ..ChatMessage::new(m.role, m.content)
                })
                .collect(),
            vars: checked_vars(j.chat_template_kwargs)?,
            tools: j.tools,
        }));
    }
    if let Some(a) = j.append {
        found.push(Input::Append(a));
    }
    if let Some(u) = j.user_turn {
        found.push(Input::UserTurn(u));
    }
    if let Some(t) = j.tokens {
        found.push(Input::Tokens(t));
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(FfiError::invalid(format!(
            "input JSON needs exactly one of \"prompt\", \"messages\", \"append\", \
             \"user_turn\", \"tokens\" (found {n})"
        ))),
    }
}

/// Stop strings: one string or an array of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StopJson {
    One(String),
    Many(Vec<String>),
}

/// A request on `session` from `input` and the generation parameters: `max_tokens`
/// (default: `defaults`), `stop` (a string or an array), and the sampling fields
/// of [`SamplingParams`] (`temperature`, `top_k`, `top_p`, `min_p`, `repeat_penalty`,
/// `frequency_penalty`, `presence_penalty`, `penalty_last_n`, `logit_bias`, `seed`,
/// `dry_multiplier`, `dry_base`, `dry_allowed_length`, `dry_last_n`, `dry_sequence_breakers`,
/// `loop_guard`, `lookup`, `ngram_max`, and `grammar`: the answer's constraint, one of
/// `{"json_schema": SCHEMA}`, `"json_object"`, `{"regex": "..."}`, `{"lark": "..."}`).
pub(crate) fn request(
    session: u64,
    input: Input,
    params: Option<&str>,
    defaults: &ChatDefaults,
) -> Result<GenerateRequest, FfiError> {
    let mut req = GenerateRequest::new(SessionId(session), input, defaults.max_tokens);
    req.sampling = defaults.sampling.clone();
    let Some(params) = params else {
        return Ok(req);
    };
    let bad = |e: serde_json::Error| FfiError::invalid(format!("invalid params JSON: {e}"));
    let mut map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(params).map_err(bad)?;
    if let Some(v) = map.remove("max_tokens") {
        req.max_tokens = serde_json::from_value(v).map_err(bad)?;
    }
    if let Some(v) = map.remove("stop") {
        req.stop = match serde_json::from_value(v).map_err(bad)? {
            StopJson::One(s) => vec![s],
            StopJson::Many(v) => v,
        };
        if req.stop.iter().any(String::is_empty) {
            return Err(FfiError::invalid("stop strings must not be empty"));
        }
    }
    let mut merged = serde_json::to_value(&defaults.sampling).map_err(bad)?;
    if let Some(unknown) = map.keys().find(|k| merged.get(k.as_str()).is_none()) {
        return Err(FfiError::invalid(format!(
            "invalid params JSON: unknown field {unknown:?}"
        )));
    }
    if let Some(obj) = merged.as_object_mut() {
        obj.extend(map);
    }
    req.sampling = serde_json::from_value(merged).map_err(bad)?;
    // The engine's ranges (the HTTP server rejects the same values with the same messages);
    // `logit_bias` ids are checked against the vocabulary when the generation starts.
    req.sampling
        .check_ranges()
        .map_err(|e| FfiError::invalid(e.message))?;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use statelm_model::KvType;
    use std::time::Duration;

    #[test]
    fn configs_parse_and_reject_typos() {
        let c = engine_config(Some(
            r#"{"max_sessions":3,"idle_after_ms":0,"kv_type":"q8_0",
                "policy":{"hard_trim_suffix":4}}"#,
        ))
        .unwrap();
        assert_eq!(c.os_memory_watch, DEFAULT_OS_MEMORY_WATCH);
        let c = c.config;
        assert_eq!(c.max_sessions, 3);
        assert_eq!(c.idle_after, Duration::ZERO);
        assert_eq!(c.kv_type, KvType::Q8_0);
        assert_eq!(c.policy.hard_trim_suffix, 4);
        for (json, watch) in [(r#"{"os_memory_watch":true}"#, true), ("{}", false)] {
            let json = json.replace("{}", r#"{"os_memory_watch":false}"#);
            assert_eq!(engine_config(Some(&json)).unwrap().os_memory_watch, watch);
        }
        assert!(engine_config(Some(r#"{"os_memory_watch":"yes"}"#)).is_err());
        // Channel sizes are bounded (a huge one used to panic inside the engine's start).
        for bad in [
            r#"{"queue_depth":0}"#,
            r#"{"stream_buffer":18446744073709551615}"#,
            r#"{"queue_depth":65537}"#,
        ] {
            assert!(engine_config(Some(bad)).is_err(), "{bad}");
        }
        let c = engine_config(Some(r#"{"queue_depth":65536}"#)).unwrap();
        assert_eq!(c.config.queue_depth, 65536);
        let c = engine_config(Some(r#"{"pressure_hold_ms":250}"#))
            .unwrap()
            .config;
        assert_eq!(c.pressure_hold, Duration::from_millis(250));
        // The device's tier sets the budget and the KV type; explicit fields still win.
        let c = engine_config(Some(r#"{"tier":"auto"}"#)).unwrap().config;
        assert!([1024, 2048].contains(&c.token_budget), "{c:?}");
        let c = engine_config(Some(
            r#"{"tier":"auto","token_budget":300,"kv_type":"f32"}"#,
        ))
        .unwrap()
        .config;
        assert_eq!((c.token_budget, c.kv_type), (300, KvType::F32));
        assert!(engine_config(Some(r#"{"tier":"big"}"#)).is_err());
        assert!(engine_config(Some(r#"{"max_session":3}"#)).is_err());
        assert!(engine_config(Some(r#"{"kv_type":"f8"}"#)).is_err());
        assert!(engine_config(Some(r#"{"policy":{"warning_factor":2}}"#)).is_err());
        assert_eq!(load_options(Some(r#"{"threads":2}"#)).unwrap().threads, 2);
        assert!(load_options(Some(r#"{"thread":2}"#)).is_err());
        assert!(load_options(Some("not json")).is_err());
        let s = session_options(Some(r#"{"system_prompt":"be brief"}"#)).unwrap();
        assert_eq!(s.system_prompt.as_deref(), Some("be brief"));
    }

    /// The C ABI rejects out-of-range sampling values with the engine's own messages — the
    /// ones the HTTP server gives (its request tests check the same values).
    #[test]
    fn sampling_values_get_the_engines_check() {
        let defaults = ChatDefaults::default();
        for (json, param) in [
            (r#"{"temperature":5}"#, "temperature"),
            (r#"{"top_p":0}"#, "top_p"),
            (r#"{"repeat_penalty":0}"#, "repeat_penalty"),
            (r#"{"dry_base":0.5}"#, "dry_base"),
            (r#"{"lookup":1000}"#, "lookup"),
        ] {
            let input = Input::Text("x".into());
            let e = request(1, input, Some(json), &defaults).unwrap_err();
            let mut v: serde_json::Value = serde_json::to_value(&defaults.sampling).unwrap();
            let field: serde_json::Value = serde_json::from_str(json).unwrap();
            v[param] = field[param].clone();
            let p: statelm_engine::SamplingParams = serde_json::from_value(v).unwrap();
            let expected = p.check_ranges().unwrap_err();
            assert_eq!(expected.param, param);
            assert!(
                e.message.contains(&expected.message),
                "{json}: {}",
                e.message
            );
        }
    }

    #[test]
    fn inputs_need_exactly_one_kind() {
        assert_eq!(
            input(r#"{"prompt":"hi"}"#).unwrap(),
            Input::Text("hi".into())
        );
        let chat = input(r#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(
            chat,
            Input::Chat(vec![ChatMessage::new("user", "hi")].into())
        );
        assert_eq!(
            input(r#"{"user_turn":"and then?"}"#).unwrap(),
            Input::UserTurn("and then?".into())
        );
        assert_eq!(
            input(r#"{"tokens":[1,2]}"#).unwrap(),
            Input::Tokens(vec![1, 2])
        );
        assert!(input("{}").is_err());
        assert!(input(r#"{"prompt":"a","append":"b"}"#).is_err());
        assert!(input(r#"{"promt":"a"}"#).is_err());
    }

    #[test]
    fn template_variables_go_with_messages_and_sessions() {
        let chat = input(
            r#"{"messages":[{"role":"user","content":"hi"}],
                "chat_template_kwargs":{"enable_thinking":false}}"#,
        )
        .unwrap();
        let want = TemplateVars::new().with("enable_thinking", false);
        assert!(
            matches!(&chat, Input::Chat(c) if c.vars == want),
            "{chat:?}"
        );
        let e = input(r#"{"prompt":"hi","chat_template_kwargs":{}}"#).unwrap_err();
        assert!(e.message.contains("chat_template_kwargs"), "{}", e.message);
        let e = input(r#"{"messages":[],"chat_template_kwargs":{"messages":1}}"#).unwrap_err();
        assert!(e.message.contains("`messages`"), "{}", e.message);
        let s = session_options(Some(
            r#"{"chat_template_kwargs":{"enable_thinking":false}}"#,
        ));
        assert_eq!(s.unwrap().template_vars, want);
    }

    #[test]
    fn params_fill_the_request() {
        let d = ChatDefaults::default();
        let r = request(
            7,
            Input::Append("x".into()),
            Some(
                r#"{"max_tokens":5,"temperature":0,"seed":42,"stop":"\n","logit_bias":{"2":-100}}"#,
            ),
            &d,
        )
        .unwrap();
        assert_eq!(r.session, SessionId(7).into());
        assert_eq!(r.max_tokens, 5);
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert_eq!(r.sampling.temperature, 0.0);
        assert_eq!(r.sampling.seed, Some(42));
        assert_eq!(r.sampling.logit_bias.get(&2), Some(&-100.0));
        // What the params leave out is the chat defaults.
        assert_eq!(r.sampling.top_k, d.sampling.top_k);
        assert!(r.sampling.loop_guard && r.sampling.dry_multiplier == d.sampling.dry_multiplier);
        let spec = request(1, Input::Append("x".into()), Some(r#"{"lookup":4}"#), &d).unwrap();
        assert_eq!(spec.sampling.lookup, 4);
        let none = request(1, Input::Append("x".into()), None, &d).unwrap();
        assert_eq!(none.max_tokens, d.max_tokens);
        assert_eq!(none.sampling, d.sampling);
        assert!(request(
            1,
            Input::Append("x".into()),
            Some(r#"{"temprature":0}"#),
            &d
        )
        .is_err());
        assert!(request(1, Input::Append("x".into()), Some(r#"{"stop":[""]}"#), &d).is_err());
        assert!(request(
            1,
            Input::Append("x".into()),
            Some(r#"{"max_tokens":-1}"#),
            &d
        )
        .is_err());
    }
}
