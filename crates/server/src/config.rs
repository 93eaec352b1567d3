//! Server configuration.

use statelm_engine::ChatDefaults;
use statelm_engine::Model;
use std::sync::Arc;
use std::time::Duration;

/// How the server runs. Build it with [`ServerConfig::new`] and change what you need.
#[derive(Clone)]
pub struct ServerConfig {
    /// The model the engine serves (its tokenizer picks sessions for conversation reuse and
    /// checks prompt sizes and `logit_bias` ids).
    pub model: Arc<Model>,
    /// The id `/v1/models` reports and replies carry.
    pub model_id: String,
    /// Other names requests may use for the model (`"statelm"` is always accepted).
    pub aliases: Vec<String>,
    /// Bearer keys `/v1/*` requests must present, one of them (empty: no authentication).
    /// Each key is a tenant of its own: requests never reuse sessions — cached prefixes,
    /// `cached_tokens`, memory events — of another key, nor of another `user` of the same key.
    pub api_keys: Vec<String>,
    /// Largest request body in bytes (larger: 413).
    pub max_body_bytes: usize,
    /// Largest prompt in tokens (larger: 400 `context_length_exceeded`). Prompts over a
    /// session's token budget but under this limit are trimmed by the engine, which says so.
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens_limit: usize,
    /// What requests that leave a setting out get: sampling (temperature, top-k/p, min-p,
    /// DRY, the loop guard) and `max_tokens` — the model file's `general.sampling.*` where it
    /// has them, else built-in chat values ([`statelm_engine::ChatDefaults`]).
    pub defaults: ChatDefaults,
    /// Token budget of each session (`None`: the engine's default).
    pub token_budget: Option<usize>,
    /// Requests with a `user` (a plain identifier) run in the durable engine session of that
    /// name, which survives a restart or a kill (needs the engine's `session_dir`); other
    /// requests use the engine's pool of anonymous sessions.
    pub durable_sessions: bool,
    /// On shutdown, how long in-flight generations may run before they are cancelled.
    pub shutdown_grace: Duration,
    /// Host names requests may address the server by, besides IP addresses and `localhost`
    /// (other `Host` headers get 403: the DNS-rebinding guard).
    pub allowed_hosts: Vec<String>,
    /// Generations running at once (`None`: the engine's `max_sessions`); more wait in a fair
    /// queue.
    pub max_concurrent: Option<usize>,
    /// Requests that may wait for a generation slot; beyond them, 503 with `Retry-After`.
    pub max_queued: usize,
    /// How long a request waits for a slot before it gets 503.
    pub queue_timeout: Duration,
    /// Longest a generation may run; then it is stopped and the reply says so.
    pub max_generation_time: Duration,
    /// Time a connection has to send a request's headers — and the longest an idle keep-alive
    /// connection is kept (hyper's header-read timer, which starts as it waits for a request).
    pub header_read_timeout: Duration,
    /// Open connections at most; beyond them new ones get 503 and are closed.
    pub max_connections: usize,
    /// Web origins whose cross-origin requests are allowed (`*`: any), with CORS headers;
    /// other requests carrying an `Origin` that is not the server itself get 403.
    pub cors_origins: Vec<String>,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("model_id", &self.model_id)
            .field("aliases", &self.aliases)
            .field("api_keys", &format!("<{} set>", self.api_keys.len()))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_prompt_tokens", &self.max_prompt_tokens)
            .field("max_tokens_limit", &self.max_tokens_limit)
            .field("defaults", &self.defaults)
            .field("token_budget", &self.token_budget)
            .field("durable_sessions", &self.durable_sessions)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("cors_origins", &self.cors_origins)
            .field("max_concurrent", &self.max_concurrent)
            .field("max_queued", &self.max_queued)
            .field("queue_timeout", &self.queue_timeout)
            .field("max_generation_time", &self.max_generation_time)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

impl ServerConfig {
    /// Defaults: no API key, 1 MiB bodies, prompts up to 32768 tokens, `max_tokens` up to
    /// 8192, the model's chat defaults for what requests leave out, 16 sessions, the engine's
    /// token budget, 10 s shutdown grace, no host names beyond `localhost` and no cross-origin
    /// callers; as many generations at once as sessions, 64 waiting up to 30 s, 10 minutes per
    /// generation, 10 s to send headers (and idle keep-alive), 512 connections.
    /// The model's `general.name` is accepted as an alias.
    pub fn new(model: Arc<Model>, model_id: impl Into<String>) -> ServerConfig {
        let mut aliases = Vec::new();
        if let Ok(Some(name)) = model.gguf().opt_str("general.name") {
            aliases.push(name.to_string());
        }
        let defaults = ChatDefaults::for_model(&model);
        ServerConfig {
            model,
            model_id: model_id.into(),
            aliases,
            api_keys: Vec::new(),
            max_body_bytes: 1 << 20,
            max_prompt_tokens: 32768,
            max_tokens_limit: 8192,
            defaults,
            token_budget: None,
            durable_sessions: false,
            shutdown_grace: Duration::from_secs(10),
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            max_concurrent: None,
            max_queued: 64,
            queue_timeout: Duration::from_secs(30),
            max_generation_time: Duration::from_secs(600),
            header_read_timeout: Duration::from_secs(10),
            max_connections: 512,
        }
    }

    /// Generations running at once: `max_concurrent`, at most `sessions` (the engine's
    /// `max_sessions`: a generation needs a session of its own).
    pub fn concurrency(&self, sessions: usize) -> usize {
        (self.max_concurrent.unwrap_or(sessions)).clamp(1, sessions.max(1))
    }

    /// Whether a request's `model` names the served model. Lenient: `"statelm"`, the id and
    /// the aliases match ignoring case and punctuation, and so does a prefix of them
    /// (`"gemma3"` for `"gemma3-270m"`) or a name they are a prefix of.
    pub fn accepts_model(&self, requested: &str) -> bool {
        let names: Vec<&str> = std::iter::once(self.model_id.as_str())
            .chain(self.aliases.iter().map(String::as_str))
            .collect();
        name_matches(requested, &names)
    }
}

/// See [`ServerConfig::accepts_model`].
fn name_matches(requested: &str, names: &[&str]) -> bool {
    let want = normalize(requested);
    if want.is_empty() || want == "statelm" || want == "default" {
        return true;
    }
    names
        .iter()
        .map(|n| normalize(n))
        .filter(|n| !n.is_empty())
        .any(|n| n == want || (want.len() >= 4 && (n.starts_with(&want) || want.starts_with(&n))))
}

/// Lowercase letters and digits only.
fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{name_matches, normalize};

    #[test]
    fn normalizes_names() {
        assert_eq!(normalize("Gemma-3 270M_q4"), "gemma3270mq4");
        assert_eq!(normalize("--"), "");
    }

    #[test]
    fn model_names_are_matched_leniently() {
        let names = ["gemma3-270m", "Gemma 3 270m"];
        for ok in [
            "statelm",
            "",
            "gemma3-270m",
            "GEMMA-3-270M",
            "gemma3",
            "gemma3-270m-it",
        ] {
            assert!(name_matches(ok, &names), "{ok}");
        }
        for bad in ["gpt-4o", "llama3", "qwen2.5-coder-0.5b", "gem"] {
            assert!(!name_matches(bad, &names), "{bad}");
        }
    }
}
