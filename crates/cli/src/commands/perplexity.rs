//! `statelm perplexity`: perplexity of a model on a text file.

use crate::common::{load_model, parse_kv};
use crate::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::json;
use statelm_model::ops::log_sum_exp;
use statelm_model::{ForwardOptions, KvType, LogitsMode, Model, StateOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// Positions whose logits are computed in one forward call (bounds the logits buffer).
const CHUNK: usize = 32;

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
    #[arg(long, default_value = "f16", value_parser = parse_kv)]
    kv_type: KvType,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Negative log-likelihood sum and count of one window (`window[0]` is its first token).
fn score_window(
    model: &Model,
    window: &[u32],
    first: usize,
    kv_type: KvType,
) -> Result<(f64, usize)> {
    let mut state = model.new_state_with(StateOptions {
        capacity: window.len(),
        kv_type,
    })?;
    let (mut nll, mut count, mut pos) = (0.0f64, 0usize, 0usize);
    for chunk in window.chunks(CHUNK) {
        let logits = model.forward_with(
            &mut state,
            chunk,
            ForwardOptions {
                logits: Some(LogitsMode::LastN(chunk.len())),
                ..ForwardOptions::default()
            },
        )?;
        for r in 0..logits.rows() {
            let p = pos + r; // the row predicts window[p + 1]
            if p >= first && p + 1 < window.len() {
                let row = logits.row(r);
                let target = window[p + 1] as usize;
                nll += f64::from(log_sum_exp(row) - row[target]);
                count += 1;
            }
        }
        pos += chunk.len();
    }
    Ok((nll, count))
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
    let tok = model.tokenizer();
    let tokens = tok
        .encode(&text, true, false)
        .context("cannot tokenize the file")?;
    if tokens.len() < 2 {
        bail!(
            "{} has {} tokens; perplexity needs at least 2",
            args.file.display(),
            tokens.len()
        );
    }
    let n_ctx = (args.ctx as usize).min(tokens.len());
    let first = n_ctx / 2;
    let mut windows: Vec<Vec<u32>> = tokens.chunks_exact(n_ctx).map(<[u32]>::to_vec).collect();
    if let Some(max) = args.max_windows {
        windows.truncate(max.max(1));
    }
    let progress = !args.json && std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let (mut nll, mut count) = (0.0f64, 0usize);
    for (i, mut w) in windows.iter().cloned().enumerate() {
        if let Some(bos) = tok.bos_id().filter(|_| tok.add_bos()) {
            w[0] = bos;
        }
        let (n, c) = score_window(&model, &w, first, args.kv_type)
            .with_context(|| format!("window {} failed", i + 1))?;
        nll += n;
        count += c;
        if progress {
            eprint!(
                "\r[{}/{}] ppl {:.4}",
                i + 1,
                windows.len(),
                (nll / count.max(1) as f64).exp()
            );
        }
    }
    if progress {
        eprintln!();
    }
    let secs = t0.elapsed().as_secs_f64();
    let ppl = (nll / count.max(1) as f64).exp();
    let evaluated = windows.len() * n_ctx;
    if args.json {
        let v = json!({
            "perplexity": ppl, "scored_tokens": count, "file_tokens": tokens.len(),
            "windows": windows.len(), "ctx": n_ctx, "seconds": secs,
            "tokens_per_s": evaluated as f64 / secs.max(1e-9), "kv_type": args.kv_type.name(),
        });
        println!("{v}");
    } else {
        println!(
            "perplexity {ppl:.4} over {count} scored tokens ({} windows of {n_ctx}; file {} tokens; \
             {:.1} s, {:.0} tok/s)",
            windows.len(),
            tokens.len(),
            secs,
            evaluated as f64 / secs.max(1e-9)
        );
    }
    Ok(())
}
