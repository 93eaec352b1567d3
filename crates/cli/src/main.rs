//! The `statelm` command-line tool: fetch, inspect and run models; chat; serve an
//! OpenAI-compatible API.

#![forbid(unsafe_code)]

mod commands;
mod common;
mod fetch;
mod model_arg;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Stateful, memory-safe LLM inference on the device.
#[derive(Debug, Parser)]
#[command(name = "statelm", version, about, propagate_version = true)]
struct Cli {
    /// More logging (-v: info and full error chains, -vv: debug). `RUST_LOG` also works.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Model cache directory (default: $STATELM_CACHE or ~/.cache/statelm).
    #[arg(long, global = true, env = "STATELM_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Choose the weights' quantization tier from this device's memory when loading a model:
    /// `default` (≥ 8 GiB → q8_0, else a 4-bit variant), `fit` (the planner's highest precision
    /// that fits), or force `q8_0` / `q4`. `-m` may then name a directory of variants; a missing
    /// variant is made by requantizing a higher-precision file in memory. Off unless given.
    #[arg(long, global = true, env = "STATELM_TIER", value_parser = parse_tier)]
    tier: Option<TierArg>,
    /// Worker threads for inference (default: one per available core).
    #[arg(short = 't', long, global = true, env = "STATELM_THREADS")]
    threads: Option<usize>,
    /// How prefill batches sum: `fast` (f32 GEMMs for 32+ tokens) or `llama-cpp` (llama.cpp's
    /// x86 summation order in every batch, for bit-level comparisons; slower prefill).
    #[arg(long, global = true, env = "STATELM_NUMERICS", default_value = "fast")]
    numerics: statelm_model::Numerics,
    #[command(subcommand)]
    command: Option<Command>,
}

/// What `statelm` alone prints: the first commands and where the docs are.
const FIRST_STEPS: &str = "statelm: stateful, memory-safe LLM inference on the device

First steps:
  statelm run -p \"The capital of France is\"        complete a text (fetches Gemma 3 270M)
  statelm run -m qwen2.5-coder-0.5b --chat -p \"Hi\"  ask an instruction-tuned model
  statelm chat -m qwen2.5-coder-0.5b                a conversation in the terminal
  statelm serve -m qwen2.5-coder-0.5b               an OpenAI-compatible server on :8080
  statelm doctor                                    what this machine runs, and how fast

Every command: statelm help, statelm COMMAND --help.
Docs: README.md and docs/ in the repository.";

/// `--tier`: a policy, or a forced precision.
#[derive(Debug, Clone, Copy)]
pub struct TierArg {
    /// How to choose.
    pub policy: statelm_plan::TierPolicy,
    /// Forced precision, if any.
    pub quant: Option<statelm_plan::QuantTier>,
}

fn parse_tier(s: &str) -> Result<TierArg, String> {
    use statelm_plan::{QuantTier, TierPolicy};
    if let Ok(policy) = s.parse::<TierPolicy>() {
        return Ok(TierArg {
            policy,
            quant: None,
        });
    }
    match s.parse::<QuantTier>() {
        Ok(q) => Ok(TierArg {
            policy: TierPolicy::Default,
            quant: Some(q),
        }),
        Err(_) => Err(format!("unknown tier {s:?} (default, fit, q8_0, q4)")),
    }
}

/// What every command may need from the global flags.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `--cache-dir`.
    pub cache: Option<PathBuf>,
    /// `-v` count.
    pub verbose: u8,
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--tier`.
    pub tier: Option<TierArg>,
    /// `--numerics`.
    pub numerics: statelm_model::Numerics,
}

impl Ctx {
    /// Load options from the global flags.
    pub fn load_options(&self) -> statelm_model::LoadOptions {
        statelm_model::LoadOptions {
            threads: self.threads.unwrap_or(0),
            numerics: self.numerics,
            ..Default::default()
        }
    }

    /// Resolves `-m` (path or short name; pulled when missing).
    pub fn model_path(&self, arg: Option<&str>, quiet: bool) -> anyhow::Result<PathBuf> {
        model_arg::resolve(arg, self.cache.as_deref(), quiet)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch models into the cache.
    Pull(commands::pull::PullArgs),
    /// Show what is in a GGUF file, or describe this device.
    Inspect(commands::inspect::InspectArgs),
    // Plain comments on run/chat/serve/tokenize/logits/perplexity: without a doc comment here,
    // clap shows the Args struct's doc (with its examples) in `--help`.
    // Generate text from a prompt, streaming tokens to stdout.
    Run(commands::run::RunArgs),
    // Interactive chat that keeps the conversation's State across turns.
    Chat(commands::chat::ChatArgs),
    // Serve an OpenAI-compatible HTTP API.
    Serve(commands::serve::ServeArgs),
    /// Measure prefill/decode speed, memory and the bandwidth roofline.
    Bench(commands::bench::BenchArgs),
    /// Capacity planner: which model fits which device, with a memory breakdown.
    Plan(commands::plan::PlanArgs),
    /// Requantize a GGUF file (q8_0, q4_0, q5_0, q4_k, q6_k, q4_k_m).
    Quantize(commands::quantize::QuantizeArgs),
    // Tokenize text with a model's tokenizer.
    Tokenize(commands::tokenize::TokenizeArgs),
    // Teacher-forced top-K logits at every position of an input.
    Logits(commands::logits::LogitsArgs),
    // Perplexity of a model on a text file.
    Perplexity(commands::perplexity::PerplexityArgs),
    /// Describe this device and the memory-pressure sources statelm will use.
    Doctor(commands::doctor::DoctorArgs),
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let ctx = Ctx {
        cache: cli.cache_dir.clone(),
        verbose: cli.verbose,
        threads: cli.threads,
        tier: cli.tier,
        numerics: cli.numerics,
    };
    let cache = ctx.cache.as_deref();
    let Some(command) = &cli.command else {
        println!("{FIRST_STEPS}");
        return ExitCode::SUCCESS;
    };
    let result = match command {
        Command::Pull(a) => commands::pull::run(a, cache),
        Command::Inspect(a) => commands::inspect::run(a, cache),
        Command::Run(a) => commands::run::run(a, &ctx),
        Command::Chat(a) => commands::chat::run(a, &ctx),
        Command::Serve(a) => commands::serve::run(a, &ctx),
        Command::Bench(a) => commands::bench::run(a, &ctx),
        Command::Plan(a) => commands::plan::run(a, &ctx),
        Command::Quantize(a) => commands::quantize::run(a, &ctx),
        Command::Tokenize(a) => commands::tokenize::run(a, &ctx),
        Command::Logits(a) => commands::logits::run(a, &ctx),
        Command::Perplexity(a) => commands::perplexity::run(a, &ctx),
        Command::Doctor(a) => commands::doctor::run(a, &ctx),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if cli.verbose > 0 {
                eprintln!("error: {e:?}");
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::from(1)
        }
    }
}
