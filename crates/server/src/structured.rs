//! Structured output: OpenAI's `response_format` as the engine's constraint
//! ([`statelm_engine::Grammar`]).
//!
//! - `{"type": "text"}`: no constraint.
//! - `{"type": "json_object"}`: any JSON object (with a `"schema"`, as llama-server allows:
//!   that schema).
//! - `{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}`:
//!   a value valid under the schema. Every schema is enforced whether `strict` is set or not.
//!
//! Two request fields of statelm's own, on both endpoints: `regex` (the text matches it, whole)
//! and `grammar` (a Lark-style grammar in llguidance's dialect; not llama.cpp's GBNF). At most
//! one of the three may ask for a constraint.
//!
//! A format this server does not know, or one without what its type needs, is a 400 naming
//! its field; a schema or grammar that does not compile is a 400 from the engine, before any
//! token is generated.

use crate::error::ApiError;
use serde_json::Value;
use statelm_engine::Grammar;

const PARAM: &str = "response_format";

/// The constraint a request asks for (`None`: plain text).
pub(crate) fn constraint(
    response_format: Option<&Value>,
    regex: Option<&str>,
    grammar: Option<&str>,
) -> Result<Option<Grammar>, ApiError> {
    let asked = [
        response_format_of(response_format)?.map(|g| ("response_format", g)),
        regex.map(|r| ("regex", Grammar::Regex(r.to_string()))),
        grammar.map(|g| ("grammar", Grammar::Lark(g.to_string()))),
    ];
    let mut asked = asked.into_iter().flatten();
    let first = asked.next();
    if let (Some((a, _)), Some((b, _))) = (&first, asked.next()) {
        return Err(ApiError::bad_param(
            b,
            format!("{a} and {b} both constrain the answer: give one"),
        ));
    }
    Ok(first.map(|(_, g)| g))
}

/// The constraint `response_format` asks for (`None`: plain text).
fn response_format_of(v: Option<&Value>) -> Result<Option<Grammar>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let bad = |m: String| ApiError::bad_param(PARAM, m);
    let obj = v
        .as_object()
        .ok_or_else(|| bad("response_format must be an object with a \"type\"".into()))?;
    let kind = obj.get("type").and_then(Value::as_str).ok_or_else(|| {
        bad("response_format needs a \"type\": text, json_object or json_schema".into())
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(match obj.get("schema") {
            Some(s) => Grammar::JsonSchema(schema(s)?),
            None => Grammar::JsonObject,
        })),
        "json_schema" => {
            let inner = obj
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    bad("response_format of type json_schema needs a \"json_schema\" object".into())
                })?;
            let s = inner
                .get("schema")
                .ok_or_else(|| bad("response_format.json_schema needs a \"schema\"".into()))?;
            Ok(Some(Grammar::JsonSchema(schema(s)?)))
        }
        other => Err(bad(format!(
            "unsupported response_format type {other:?} (text, json_object, json_schema; \
             statelm's own `regex` and `grammar` fields take the other constraints)"
        ))),
    }
}

/// A schema must be an object or a boolean (JSON Schema's two forms).
fn schema(s: &Value) -> Result<Value, ApiError> {
    match s {
        Value::Object(_) | Value::Bool(_) => Ok(s.clone()),
        _ => Err(ApiError::bad_param(
            PARAM,
            "a JSON schema must be an object or a boolean",
        )),
    }
}
