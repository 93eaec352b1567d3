//! `--json-schema`, `--json-object`, `--regex`, `--grammar`: the engine's constraint
//! ([`statelm_engine::Grammar`]) from the command line.

use statelm_engine::{Grammar, SamplingParams};

/// What the answer must match (at most one of these).
#[derive(Debug, Clone, clap::Args)]
#[group(multiple = false)]
pub(crate) struct ConstraintArgs {
    /// The answer is JSON valid under this schema: the schema's JSON text, or @FILE.
    #[arg(long, value_name = "JSON|@FILE", value_parser = schema)]
    json_schema: Option<serde_json::Value>,
    /// The answer is a JSON object.
    #[arg(long)]
    json_object: bool,
    /// The answer matches this regular expression, whole.
    #[arg(long, value_name = "REGEX")]
    regex: Option<String>,
    /// The answer follows this Lark-style grammar (llguidance's dialect): its text, or @FILE.
    #[arg(long, value_name = "LARK|@FILE", value_parser = text_or_file)]
    grammar: Option<String>,
}

impl ConstraintArgs {
    /// Sets `p.grammar` when one of the flags was given.
    pub(crate) fn apply(&self, p: &mut SamplingParams) {
        let g = if let Some(s) = &self.json_schema {
            Some(Grammar::JsonSchema(s.clone()))
        } else if self.json_object {
            Some(Grammar::JsonObject)
        } else if let Some(r) = &self.regex {
            Some(Grammar::Regex(r.clone()))
        } else {
            self.grammar.clone().map(Grammar::Lark)
        };
        if g.is_some() {
            p.grammar = g;
        }
    }
}

/// The argument's text, or the file's when it starts with `@`.
fn text_or_file(s: &str) -> Result<String, String> {
    match s.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}")),
        None => Ok(s.to_string()),
    }
}

/// A JSON schema from its text or `@FILE`.
pub(crate) fn schema(s: &str) -> Result<serde_json::Value, String> {
    let text = text_or_file(s)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not a JSON schema: {e}"))?;
    match v {
        serde_json::Value::Object(_) | serde_json::Value::Bool(_) => Ok(v),
        _ => Err("a JSON schema must be an object or a boolean".into()),
    }
}
