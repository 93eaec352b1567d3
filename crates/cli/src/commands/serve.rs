//! `statelm serve`: serve an OpenAI-compatible HTTP API.

use crate::common::{load_model, model_id, runtime, MemoryArgs};
use crate::Ctx;
use anyhow::{Context, Result};
use statelm_engine::{Engine, EngineConfig};
use statelm_model::KvType;
use statelm_server::ServerConfig;
use std::time::Duration;

/// Serve an OpenAI-compatible HTTP API (chat and text completions, streaming or not)
///
/// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
/// GET /metrics (Prometheus). A chat that resends its conversation reuses the State of its
/// earlier turns (`usage.prompt_tokens_details.cached_tokens`). Memory events (context
/// trimmed, spilled, restored, evicted) are reported in a `statelm` field of stream chunks
/// and replies, and in the `x-statelm-events` header. SIGINT/SIGTERM shut down gracefully.
///
/// With --session-dir, a request whose `user` field is a plain identifier runs in the
/// durable conversation of that name: its history is fsynced to DIR after every answer and
/// its KV snapshot written under memory pressure and on shutdown, so after a crash or a kill
/// the restarted server resumes it (a `resumed` event in the `statelm` field says how).
///
/// Examples:
///   statelm serve
///   statelm serve -m qwen2.5-coder-0.5b --port 9000 --api-key secret
///   STATELM_API_KEY=secret statelm serve --host 0.0.0.0 --budget 2048 --max-sessions 8
///   curl localhost:8080/v1/chat/completions -H 'content-type: application/json' \
///     -d '{"model": "statelm", "messages": [{"role": "user", "content": "Hi"}]}'
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 routes. Repeat it (or separate keys by
    /// commas) for several keys: each key is a tenant, never reusing another's sessions.
    #[arg(
        long,
        env = "STATELM_API_KEY",
        hide_env_values = true,
        value_delimiter = ','
    )]
    api_key: Vec<String>,
    /// Token budget of each conversation: beyond it the middle is trimmed (and reported)
    /// [default: 4096, or the tier's budget with --tier].
    #[arg(long, value_parser = clap::value_parser!(u32).range(8..))]
    budget: Option<u32>,
    /// Conversations kept for reuse (engine sessions).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_sessions: u32,
    /// Largest prompt in tokens (longer: 400; prompts over --budget are trimmed, and say so).
    #[arg(long, default_value_t = 32768)]
    max_prompt_tokens: usize,
    /// Largest max_tokens a request may ask for.
    #[arg(long, default_value_t = 8192)]
    max_tokens_limit: usize,
    /// max_tokens of requests that leave it out [default: 512].
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Temperature of requests that leave it out [default: the model file's
    /// `general.sampling.temp`, else 0.7]. Top-k, top-p, min-p and the repeat penalty also
    /// follow the file's `general.sampling.*` settings when it has them; the startup line
    /// shows what is in force.
    #[arg(long, value_parser = crate::common::non_negative)]
    temp: Option<f32>,
    /// Repetition control of requests that leave it out (on by default, as in chat).
    #[command(flatten)]
    repetition: crate::commands::repetition::RepetitionArgs,
    /// Prompt-lookup decoding.
    #[command(flatten)]
    lookup: crate::commands::repetition::LookupArgs,
    /// Model id reported by /v1/models (default: the short name or the file's stem).
    #[arg(long)]
    name: Option<String>,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Seconds in-flight requests may run after a shutdown signal.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
    /// Memory watching.
    #[command(flatten)]
    memory: MemoryArgs,
    /// Keep conversations named by a request's `user` durably in this directory (created
    /// with mode 0700): they survive a crash or a kill of the server.
    #[arg(long, value_name = "DIR")]
    session_dir: Option<std::path::PathBuf>,
    /// A host name clients may address the server by (repeatable); IP addresses and
    /// localhost always work, other Host headers get 403 (the DNS-rebinding guard).
    #[arg(long, value_name = "NAME")]
    allowed_host: Vec<String>,
    /// A web origin allowed to call the server from a browser (repeatable; "*": any), with
    /// CORS headers; other cross-origin requests get 403.
    #[arg(long, value_name = "ORIGIN")]
    cors_origin: Vec<String>,
    /// Limits on connections and work.
    #[command(flatten)]
    limits: LimitArgs,
}

/// Connection and work limits of `serve`.
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Generations running at once [default: --max-sessions]; more wait in a fair queue.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent: Option<u32>,
    /// Requests that may wait for a generation; beyond them, 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    max_queued: usize,
    /// Seconds a request waits for a generation before it gets 503.
    #[arg(long, default_value_t = 30)]
    queue_timeout: u64,
    /// Seconds a generation may run; then it stops and the reply says so (time_limit).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    max_generation_time: u64,
    /// Seconds a connection has to send its request headers, and an idle keep-alive
    /// connection stays open.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout: u64,
    /// Open connections at most; beyond them new ones get 503 and are closed.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
}

impl LimitArgs {
    fn apply(&self, cfg: &mut ServerConfig) {
        cfg.max_concurrent = self.max_concurrent.map(|n| n as usize);
        cfg.max_queued = self.max_queued;
        cfg.queue_timeout = Duration::from_secs(self.queue_timeout);
        cfg.max_generation_time = Duration::from_secs(self.max_generation_time);
        cfg.header_read_timeout = Duration::from_secs(self.header_timeout);
        cfg.max_connections = self.max_connections as usize;
    }
}

/// Runs the command.
pub fn run(args: &ServeArgs, ctx: &Ctx) -> Result<()> {
    let loaded = load_model(ctx, args.model.as_deref())?;
    let budget = loaded.budget(args.budget.map(|b| b as usize));
    let (path, model) = (loaded.path, loaded.model);
    let id = args
        .name
        .clone()
        .unwrap_or_else(|| model_id(args.model.as_deref(), &path));
    let engine = Engine::start(
        model.clone(),
        EngineConfig {
            max_sessions: args.max_sessions as usize,
            session_capacity: budget,
            token_budget: budget,
            kv_type: args.kv_type,
            pressure_hold: args.memory.hold(),
            real_memory: args.memory.real_memory(),
            session_dir: args.session_dir.clone(),
            ..EngineConfig::default()
        },
    );
    let _memory = args.memory.watch(&engine);
    let mut cfg = ServerConfig::new(model, id.clone());
    if let Some(stem) = path.file_stem() {
        cfg.aliases.push(stem.to_string_lossy().into_owned());
    }
    cfg.api_keys = args
        .api_key
        .iter()
        .filter(|k| !k.is_empty())
        .cloned()
        .collect();
    cfg.token_budget = Some(budget);
    cfg.durable_sessions = args.session_dir.is_some();
    cfg.max_prompt_tokens = args.max_prompt_tokens;
    cfg.max_tokens_limit = args.max_tokens_limit.max(1);
    let d = &mut cfg.defaults;
    d.max_tokens = args
        .max_tokens
        .unwrap_or(d.max_tokens)
        .clamp(1, cfg.max_tokens_limit);
    d.sampling.temperature = args.temp.unwrap_or(d.sampling.temperature);
    args.repetition.apply(&mut d.sampling);
    args.lookup.apply(&mut d.sampling);
    cfg.shutdown_grace = Duration::from_secs(args.shutdown_grace);
    cfg.allowed_hosts = args.allowed_host.clone();
    cfg.cors_origins = args.cors_origin.clone();
    args.limits.apply(&mut cfg);
    let auth = if !cfg.api_keys.is_empty() {
        "API key required"
    } else {
        "no API key"
    };
    runtime()?.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("statelm: serving {id} on http://{local}/v1 ({auth}; Ctrl-C to stop)");
        eprintln!("statelm: request defaults: {}", cfg.defaults.describe());
        if !local.ip().is_loopback() && cfg.api_keys.is_empty() {
            eprintln!(
                "statelm: WARNING: listening on {} without --api-key: anyone who can reach this \
                 address can use the model and read its conversations' cached prefixes",
                local.ip()
            );
        }
        statelm_server::serve(listener, engine, cfg).await?;
        eprintln!("statelm: stopped");
        Ok(())
    })
}
