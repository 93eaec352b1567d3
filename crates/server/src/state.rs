//! What every handler shares: the engine, the configuration, the sessions' options, the counters
//! and the shutdown switch; plus prompt tokenization (the way the engine tokenizes prompts).

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::format::{Kind, Shape};
use crate::gate::Gate;
use crate::metrics::Metrics;
use crate::request::Limits;
use statelm_engine::{Encoded, EngineHandle, Input, SessionOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// The state of one server.
#[derive(Debug)]
pub(crate) struct AppState {
    pub engine: EngineHandle,
    pub cfg: ServerConfig,
    /// Options of the sessions the engine's pool creates for requests.
    pub session_options: SessionOptions,
    /// Bounds the generations running and waiting.
    pub gate: Gate,
    pub metrics: Metrics,
    /// Set when in-flight generations must stop (the shutdown grace period is over).
    pub abort: watch::Sender<bool>,
    /// Unix time the server started (the model's `created`).
    pub started: u64,
    next_id: AtomicU64,
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AppState {
    /// A server over `engine`.
    pub fn new(engine: EngineHandle, cfg: ServerConfig) -> Arc<AppState> {
        let session_options = SessionOptions {
            token_budget: cfg.token_budget,
            ..SessionOptions::default()
        };
        let gate = Gate::new(
            cfg.concurrency(engine.max_sessions()),
            cfg.max_queued,
            cfg.queue_timeout,
        );
        Arc::new(AppState {
            engine,
            cfg,
            session_options,
            gate,
            metrics: Metrics::default(),
            abort: watch::channel(false).0,
            started: unix_now(),
            next_id: AtomicU64::new(1),
        })
    }

    /// The bounds of request parameters.
    pub fn limits(&self) -> Limits {
        Limits {
            max_tokens_limit: self.cfg.max_tokens_limit,
            default_max_tokens: self.cfg.defaults.max_tokens,
            n_vocab: self.cfg.model.config().n_vocab,
        }
    }

    /// 404 unless `model` (when given) names the served model.
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(m) if !self.cfg.accepts_model(m) => {
                Err(ApiError::model_not_found(m, &self.cfg.model_id))
            }
            _ => Ok(()),
        }
    }

    /// The envelope of a new reply.
    pub fn shape(&self, kind: Kind) -> Shape {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let created = unix_now();
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        Shape {
            kind,
            id: format!("{prefix}-{created:x}{n:06x}"),
            created,
            model: self.cfg.model_id.clone(),
        }
    }

    /// Tokenizes a text or chat input once, the way the engine does
    /// ([`statelm_engine::Encoded`]: message contents are text), off the async threads, and
    /// checks its size; the engine then uses these tokens instead of tokenizing again.
    pub async fn encode(&self, input: Input) -> Result<Encoded, ApiError> {
        let model = self.cfg.model.clone();
        let chat = matches!(input, Input::Chat(_));
        let encoded =
            tokio::task::spawn_blocking(move || Encoded::new(model.tokenizer(), input, None))
                .await
                .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?
                .map_err(|e| match chat {
                    true => ApiError::bad_param(
                        "messages",
                        format!("cannot encode the conversation: {e}"),
                    ),
                    false => ApiError::invalid(format!("cannot tokenize the prompt: {e}")),
                })?;
        self.check_prompt_len(encoded.tokens().len())?;
        Ok(encoded)
    }

    /// 400 `context_length_exceeded` for prompts over the limit.
    pub fn check_prompt_len(&self, n: usize) -> Result<(), ApiError> {
        if n > self.cfg.max_prompt_tokens {
            return Err(ApiError::invalid(format!(
                "the prompt has {n} tokens; this server takes at most {}",
                self.cfg.max_prompt_tokens
            ))
            .with_code("context_length_exceeded"));
        }
        Ok(())
    }
}
