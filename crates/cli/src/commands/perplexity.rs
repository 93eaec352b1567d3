//! `statelm perplexity`: perplexity of a model on a text file.

use crate::common::load_model;
use crate::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::json;
use statelm_model::quantize::{perplexity_of_tokens, PerplexityOptions};
use statelm_model::KvType;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// Perplexity of a model on a text file, computed as llama.cpp's `perplexity` tool does
///
/// The file is tokenized once (with BOS) and cut into windows of --ctx tokens; each window
/// starts a fresh context with BOS in its first position, and only its second half is scored
/// (every scored token sees at least ctx/2 tokens of context). A file shorter than one
/// window is scored as a single window.
///
/// Examples:
///   statelm perplexity -f wiki.test.raw
///   statelm perplexity -m qwen2.5-coder-0.5b -f code.txt --ctx 256 --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct PerplexityArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// The text file (UTF-8).
    #[arg(short, long)]
    file: PathBuf,
    /// Window size in tokens.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(4..))]
    ctx: u32,
    /// Score at most this many windows.
    #[arg(long)]
    max_windows: Option<usize>,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: &PerplexityArgs, ctx: &Ctx) -> Result<()> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid UTF-8 (invalid byte at offset {})",
            args.file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let model = load_model(ctx, args.model.as_deref())?.model;
    let tokens = model
        .tokenizer()
        .encode(&text, true, false)
        .context("cannot tokenize the file")?;
    if tokens.len() < 2 {
        bail!(
            "{} has {} tokens; perplexity needs at least 2",
            args.file.display(),
            tokens.len()
        );
    }
    let opts = PerplexityOptions {
        window: args.ctx as usize,
        max_windows: args.max_windows,
        kv_type: args.kv_type,
    };
    let show = !args.json && std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let mut progress = |done: usize, all: usize, ppl: f64| {
        if show {
            eprint!("\r[{done}/{all}] ppl {ppl:.4}");
        }
    };
    let p = perplexity_of_tokens(&model, &tokens, &opts, &mut progress)
        .context("scoring a window failed")?;
    if show {
        eprintln!();
    }
    let secs = t0.elapsed().as_secs_f64();
    let evaluated = p.windows * p.window;
    if args.json {
        let v = json!({
            "perplexity": p.ppl, "scored_tokens": p.scored, "file_tokens": tokens.len(),
            "windows": p.windows, "ctx": p.window, "seconds": secs,
            "tokens_per_s": evaluated as f64 / secs.max(1e-9), "kv_type": args.kv_type.name(),
        });
        println!("{v}");
    } else {
        println!(
            "perplexity {:.4} over {} scored tokens ({} windows of {}; file {} tokens; \
             {:.1} s, {:.0} tok/s)",
            p.ppl,
            p.scored,
            p.windows,
            p.window,
            tokens.len(),
            secs,
            evaluated as f64 / secs.max(1e-9)
        );
    }
    Ok(())
}
