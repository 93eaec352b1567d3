//! What the engine-driven commands (`run`, `chat`, `serve`, `bench`, `logits`, `perplexity`)
//! share: value parsers, the async runtime, model loading, terminal styling, the memory
//! watchers and the one-line renderings of engine events.

use crate::Ctx;
use anyhow::{Context, Result};
use statelm_engine::{DoneStats, EngineConfig, EngineHandle, Event, StopReason};
use statelm_model::Model;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Clap value parser: a float >= 0.
pub(crate) fn non_negative(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("expected a number >= 0, got {s:?}")),
    }
}

/// A tokio runtime for a command (the engine computes on its own thread).
/// Parses `--chat-template-kwargs`: a JSON object of chat template variables.
pub(crate) fn template_kwargs(s: &str) -> Result<statelm_engine::TemplateVars, String> {
    let vars: statelm_engine::TemplateVars = serde_json::from_str(s).map_err(|e| {
        format!("expected a JSON object such as '{{\"enable_thinking\": false}}': {e}")
    })?;
    match vars.reserved() {
        Some(name) => Err(format!(
            "`{name}` is set by statelm and cannot be a template variable"
        )),
        None => Ok(vars),
    }
}

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
    use statelm_plan::tier::{load_for_device, TierOverrides};
    let path = match arg.map(std::path::Path::new) {
        Some(dir) if dir.is_dir() => dir.to_path_buf(),
        _ => ctx.model_path(arg, false)?,
    };
    let profile = crate::commands::device::profile()?;
    let ov = TierOverrides {
        quant: tier.quant,
        budget: None,
    };
    let (model, choice) =
        load_for_device(&[path], &profile, tier.policy, &ov, &ctx.load_options())?;
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
    /// Turn the memory governor off: no pressure monitor and no admission against the real
    /// footprint (the token budget still applies). For negative controls only: under a tight
    /// limit the OS kills the process, which is what such a test shows.
    #[arg(long, hide = true)]
    no_governor: bool,
}

impl MemoryArgs {
    /// The engine's hold for host levels.
    pub(crate) fn hold(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.pressure_hold_ms)
    }

    /// The engine's admission against the real footprint (off with `--no-governor`).
    pub(crate) fn real_memory(&self) -> statelm_engine::RealMemory {
        statelm_engine::RealMemory {
            enabled: !self.no_governor,
            ..Default::default()
        }
    }

    /// Starts watching memory for `engine`; keep the result alive while it should watch.
    pub(crate) fn watch(&self, engine: &EngineHandle) -> MemoryWatch {
        let watch = !self.no_monitor && !self.no_governor;
        let monitor = watch.then(|| attach_monitor(engine)).flatten();
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
        StopReason::Complete => "complete (the constraint's grammar ended)".into(),
        other => format!("{other:?}"),
    }
}

/// Flushes stdout and stderr and exits with 130 (interrupted).
pub(crate) fn exit_interrupted() -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(130)
}

/// The id a served model is known by: the short name given, or the file's stem.
pub(crate) fn model_id(arg: Option<&str>, path: &Path) -> String {
    let name = arg.unwrap_or(statelm_model::registry::DEFAULT_MODEL);
    match statelm_model::registry::find(name) {
        Some(spec) if !Path::new(name).is_file() => spec.name.to_string(),
        _ => path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned()),
    }
}
