//! The `statelm` command-line tool: fetch, inspect and run models; chat; serve an
//! OpenAI-compatible API.

mod commands;
mod fetch;
mod model_arg;
mod registry;

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
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch models into the cache.
    Pull(commands::pull::PullArgs),
    /// Show what is in a GGUF file, or describe this device.
    Inspect(commands::inspect::InspectArgs),
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
    let cache = cli.cache_dir.as_deref();
    let result = match &cli.command {
        Command::Pull(a) => commands::pull::run(a, cache),
        Command::Inspect(a) => commands::inspect::run(a, cache),
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
