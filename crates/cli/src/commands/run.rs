//! `statelm run`: generate text from a prompt, streaming tokens to stdout.
//!
//! Also the home of what the engine-driven commands (`run`, `chat`, `serve`) share: the
//! runtime, model loading, terminal styling and the memory monitor.

use crate::Ctx;
use anyhow::{Context, Result};
use futures::StreamExt;
use serde_json::json;
use statelm_engine::{
    ChatMessage, DoneStats, Engine, EngineConfig, EngineHandle, Event, GenerateRequest, Input,
    SamplingParams, SessionOptions, StopReason,
};
use statelm_model::{KvType, Model};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Generate text from a prompt, streaming tokens to stdout (greedy unless --temp > 0)
///
/// The prompt is not echoed when stdout is not a terminal. A statistics line goes to stderr.
/// Ctrl-C stops the generation (exit code 130).
///
/// Examples:
///   statelm run -p "The capital of France is"
///   statelm run -p "Once upon a time" -n 200 --temp 0.8 --seed 42
///   statelm run -m qwen2.5-coder-0.5b --chat -p "Write a haiku about Rust."
///   statelm run -m model.gguf -p "def fib(n):" --stop "\n\n" --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// The prompt.
    #[arg(short, long)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    temp: f32,
    /// Random seed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Keep only the K most likely tokens (0: off).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Nucleus sampling threshold (1: off).
    #[arg(long, default_value_t = 0.95, value_parser = unit_interval)]
    top_p: f32,
    /// Drop tokens less likely than this fraction of the best one (0: off).
    #[arg(long, default_value_t = 0.05, value_parser = unit_interval)]
    min_p: f32,
    /// Repetition control.
    #[command(flatten)]
    repetition: crate::commands::repetition::RepetitionArgs,
    /// Prompt-lookup decoding.
    #[command(flatten)]
    lookup: crate::commands::repetition::LookupArgs,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    chat: bool,
    /// System prompt (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Stop before this text (repeatable; `\n` and `\t` are unescaped).
    #[arg(long, value_parser = unescape)]
    stop: Vec<String>,
    /// Token budget of the context (trimmed, with a notice, beyond it) [default: 4096, or the
    /// tier's budget with --tier].
    #[arg(long)]
    ctx: Option<usize>,
    /// KV cache type.
    #[arg(long, default_value = "f16", value_parser = parse_kv)]
    kv_type: KvType,
    /// Print one JSON object (text and statistics) at the end instead of streaming.
    #[arg(long)]
    json: bool,
}

/// Clap value parser: a float >= 0.
pub(crate) fn non_negative(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("expected a number >= 0, got {s:?}")),
    }
}

fn unit_interval(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("expected a number in [0, 1], got {s:?}")),
    }
}

/// `\n`, `\t` and `\\` in a command-line string, as the characters.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => out.extend(['\\', other]),
            None => out.push('\\'),
        }
    }
    Ok(out)
}

/// Clap value parser for `--kv-type`.
pub(crate) fn parse_kv(s: &str) -> Result<KvType, String> {
    KvType::parse(s).ok_or_else(|| format!("unknown KV type {s:?} (f32, f16, q8_0)"))
}

/// A tokio runtime for a command (the engine computes on its own thread).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// A loaded model and, with `--tier`, the token budget its tier chose.
pub(crate) struct Loaded {
    /// The file loaded.
    pub path: PathBuf,
    /// The model.
    pub model: Arc<Model>,
    /// The tier's token budget (`--tier` only).
    pub tier_budget: Option<usize>,
}

impl Loaded {
    /// The token budget to run with: the one given on the command line, else the tier's,
    /// else the engine's default (4096).
    pub fn budget(&self, explicit: Option<usize>) -> usize {
        explicit
            .or(self.tier_budget)
            .unwrap_or(EngineConfig::default().token_budget)
    }
}

/// Resolves `-m` (fetching a known model when missing) and loads it.
pub(crate) fn load_model(ctx: &Ctx, arg: Option<&str>) -> Result<Loaded> {
    if let Some(tier) = ctx.tier {
        return load_tiered(ctx, arg, tier);
    }
    let path = ctx.model_path(arg, false)?;
    let model = Model::load(&path, &ctx.load_options())
        .with_context(|| format!("cannot load {}", path.display()))?;
    Ok(Loaded {
        path,
        model,
        tier_budget: None,
    })
}

/// `--tier`: picks (or makes) the variant for this device and says what it chose, in one line;
/// the tier's token budget applies unless the command line gives one.
fn load_tiered(ctx: &Ctx, arg: Option<&str>, tier: crate::TierArg) -> Result<Loaded> {
    use statelm_model::tier::{load_for_device, TierOverrides};
    let path = match arg.map(std::path::Path::new) {
        Some(dir) if dir.is_dir() => dir.to_path_buf(),
        _ => ctx.model_path(arg, false)?,
    };
    let profile = crate::commands::device::profile()?;
    let mem = crate::commands::device::memory_of(&profile);
    let ov = TierOverrides {
        quant: tier.quant,
        budget: None,
    };
    let (model, choice) = load_for_device(&[path], &mem, tier.policy, &ov, &ctx.load_options())?;
    eprintln!("{}", choice.summary);
    Ok(Loaded {
        path: choice.path,
        model,
        tier_budget: Some(choice.tier.token_budget),
    })
}

/// Terminal styling: ANSI only where the stream is a terminal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    /// stdout is a terminal.
    pub out_tty: bool,
    /// stderr is a terminal.
    pub err_tty: bool,
}

impl Style {
    /// Looks at stdout and stderr.
    pub fn detect() -> Style {
        Style {
            out_tty: std::io::stdout().is_terminal(),
            err_tty: std::io::stderr().is_terminal(),
        }
    }

    /// `s` dimmed for stderr.
    pub fn dim_err(&self, s: &str) -> String {
        dim(s, self.err_tty)
    }

    /// `s` dimmed for stdout.
    pub fn dim_out(&self, s: &str) -> String {
        dim(s, self.out_tty)
    }
}

fn dim(s: &str, on: bool) -> String {
    if on {
        format!("\x1b[2m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// How `chat` and `serve` watch memory: the OS's pressure signals, and the host levels sent as
/// SIGUSR1 (WARNING) / SIGUSR2 (CRITICAL), which follow the C ABI's rule.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryArgs {
    /// Do not watch the OS's memory-pressure signals (the token budget still applies;
    /// SIGUSR1/SIGUSR2 still deliver WARNING/CRITICAL).
    #[arg(long)]
    no_monitor: bool,
    /// How long a WARNING or CRITICAL sent as SIGUSR1/SIGUSR2 holds before budgets recover
    /// (a second SIGUSR1 within it counts as CRITICAL).
    #[arg(long, value_name = "MS", default_value_t = statelm_engine::DEFAULT_PRESSURE_HOLD.as_millis() as u64)]
    pressure_hold_ms: u64,
}

impl MemoryArgs {
    /// The engine's hold for host levels.
    pub(crate) fn hold(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.pressure_hold_ms)
    }

    /// Starts watching memory for `engine`; keep the result alive while it should watch.
    pub(crate) fn watch(&self, engine: &EngineHandle) -> MemoryWatch {
        let monitor = (!self.no_monitor).then(|| attach_monitor(engine)).flatten();
        let signals = engine
            .forward_signals()
            .map_err(|e| tracing::warn!(error = %e, "SIGUSR1/SIGUSR2 not forwarded"))
            .ok();
        MemoryWatch {
            _monitor: monitor,
            _signals: signals,
        }
    }
}

/// The memory watchers of a command (see [`MemoryArgs::watch`]); dropping it stops them.
pub(crate) struct MemoryWatch {
    _monitor: Option<statelm_governor::Monitor>,
    _signals: Option<statelm_governor::SignalForwarder>,
}

/// Watches the OS's memory-pressure signals (cgroup, PSI, /proc) for `engine`; `None` (with
/// a log line) when no source is available.
fn attach_monitor(engine: &EngineHandle) -> Option<statelm_governor::Monitor> {
    let sources = statelm_governor::detect();
    if sources.is_empty() {
        tracing::info!("no memory-pressure source found; the token budget still applies");
        return None;
    }
    engine
        .attach_monitor(sources, statelm_governor::MonitorConfig::default())
        .map_err(|e| tracing::warn!(error = %e, "memory monitor unavailable"))
        .ok()
}

/// The one-line notice for a memory event (`None` for other events).
pub(crate) fn memory_notice(ev: &Event) -> Option<String> {
    Some(match ev {
        Event::ContextTrimmed { dropped, kept, .. } => {
            format!(
                "[context trimmed: kept {kept} of {} tokens]",
                kept + dropped
            )
        }
        Event::CacheEvicted { reason } => format!("[cache evicted: {reason}]"),
        Event::Spilled { reason } => format!("[state spilled to disk: {reason}]"),
        Event::Restored => "[state restored from disk]".to_string(),
        Event::Resumed {
            name,
            history_tokens,
            restored_tokens,
            reprefilled_tokens,
            ..
        } => format!(
            "[conversation '{name}' resumed: {history_tokens} tokens, {restored_tokens} from the \
             snapshot, {reprefilled_tokens} re-prefilled]"
        ),
        _ => return None,
    })
}

/// The statistics line printed after a generation.
pub(crate) fn stats_line(d: &DoneStats) -> String {
    let lookup = if d.drafted_tokens > 0 {
        format!(
            ", lookup accepted {} of {} drafts",
            d.accepted_tokens, d.drafted_tokens
        )
    } else {
        String::new()
    };
    format!(
        "[prompt {} tokens ({} cached), {} generated, ttft {:.0} ms, {:.1} tok/s{lookup}, stop: {}]",
        d.prompt_tokens,
        d.cached_tokens,
        d.generated_tokens,
        d.time_to_first_token.as_secs_f64() * 1e3,
        d.decode_tokens_per_s,
        stop_name(&d.stop_reason)
    )
}

/// A short name of a stop reason.
pub(crate) fn stop_name(r: &StopReason) -> String {
    match r {
        StopReason::Eog => "end of generation".into(),
        StopReason::StopString(s) => format!("stop string {s:?}"),
        StopReason::MaxTokens => "max tokens".into(),
        StopReason::Cancelled => "interrupted".into(),
        StopReason::Evicted => "cache evicted".into(),
        StopReason::Repetition => "repetition (the answer repeated itself)".into(),
        other => format!("{other:?}"),
    }
}

/// Flushes stdout and stderr and exits with 130 (interrupted).
pub(crate) fn exit_interrupted() -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(130)
}

impl RunArgs {
    fn sampling(&self) -> SamplingParams {
        let mut p = SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            ..SamplingParams::default()
        };
        self.repetition.apply(&mut p);
        self.lookup.apply(&mut p);
        p
    }

    fn input(&self) -> Input {
        if !self.chat {
            return Input::Text(self.prompt.clone());
        }
        let mut messages = Vec::new();
        if let Some(s) = &self.system {
            messages.push(ChatMessage::new("system", s.clone()));
        }
        messages.push(ChatMessage::new("user", self.prompt.clone()));
        Input::Chat(messages)
    }
}

/// Runs the command.
pub fn run(args: &RunArgs, ctx: &Ctx) -> Result<()> {
    let loaded = load_model(ctx, args.model.as_deref())?;
    let budget = loaded.budget(args.ctx);
    let config = EngineConfig {
        session_capacity: budget.max(statelm_engine::MIN_TOKEN_BUDGET),
        token_budget: budget,
        kv_type: args.kv_type,
        ..EngineConfig::default()
    };
    let engine = Engine::start(loaded.model, config);
    let interrupted = runtime()?.block_on(generate(args, &engine, budget))?;
    if interrupted {
        exit_interrupted();
    }
    Ok(())
}

/// Streams one generation; true when Ctrl-C stopped it.
async fn generate(args: &RunArgs, engine: &EngineHandle, budget: usize) -> Result<bool> {
    let style = Style::detect();
    let session = engine.create_session(SessionOptions::default()).await?;
    let mut stream = engine.generate(GenerateRequest {
        session,
        input: args.input(),
        sampling: args.sampling(),
        stop: args.stop.clone(),
        max_tokens: args.max_tokens,
    });
    if style.out_tty && !args.json && !args.chat {
        print!("{}", style.dim_out(&args.prompt));
    }
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let (mut interrupted, mut text, mut notices) = (false, String::new(), Vec::new());
    let mut out = std::io::stdout();
    let done = loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                stream.cancel();
                continue;
            }
        };
        let ev = match item {
            Some(ev) => ev.context("generation failed")?,
            None => anyhow::bail!("the engine stopped before the generation ended"),
        };
        match ev {
            Event::Token { text: t, .. } | Event::Text { text: t } => {
                if !args.json {
                    out.write_all(t.as_bytes())?;
                    out.flush()?;
                }
                text.push_str(&t);
            }
            Event::Done(d) => break d,
            other => {
                if let Some(n) = memory_notice(&other) {
                    if !args.json {
                        eprintln!("{}", style.dim_err(&n));
                    }
                    notices.push(n);
                }
            }
        }
    };
    if args.json {
        let v = json!({
            "text": text, "prompt_tokens": done.prompt_tokens,
            "generated_tokens": done.generated_tokens, "stop_reason": stop_name(&done.stop_reason),
            "time_to_first_token_ms": done.time_to_first_token.as_secs_f64() * 1e3,
            "decode_tokens_per_s": done.decode_tokens_per_s, "notices": notices,
            "drafted_tokens": done.drafted_tokens, "accepted_tokens": done.accepted_tokens,
            "token_budget": budget,
        });
        println!("{v}");
    } else {
        println!();
        eprintln!("{}", style.dim_err(&stats_line(&done)));
    }
    Ok(interrupted)
}

/// The id a served model is known by: the short name given, or the file's stem.
pub(crate) fn model_id(arg: Option<&str>, path: &Path) -> String {
    let name = arg.unwrap_or(crate::registry::DEFAULT_MODEL);
    match crate::registry::find(name) {
        Some(spec) if !Path::new(name).is_file() => spec.name.to_string(),
        _ => path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_unescaped() {
        assert_eq!(unescape(r"a\nb\tc\\d\q\").unwrap(), "a\nb\tc\\d\\q\\");
        assert_eq!(unescape("plain").unwrap(), "plain");
    }

    #[test]
    fn notices_say_what_happened() {
        let ev = Event::ContextTrimmed {
            dropped: 1536,
            kept: 512,
            reason: String::new(),
            method: statelm_engine::TrimMethod::Shift,
        };
        let n = memory_notice(&ev).unwrap();
        assert_eq!(n, "[context trimmed: kept 512 of 2048 tokens]");
        assert_eq!(
            memory_notice(&Event::Restored).unwrap(),
            "[state restored from disk]"
        );
        assert!(memory_notice(&Event::Text { text: "x".into() }).is_none());
        assert_eq!(
            Style {
                out_tty: false,
                err_tty: false
            }
            .dim_err("x"),
            "x"
        );
        assert_eq!(
            Style {
                out_tty: false,
                err_tty: true
            }
            .dim_err("x"),
            "\x1b[2mx\x1b[0m"
        );
    }
}
