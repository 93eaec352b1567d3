//! `statelm logits`: teacher-forced top-K logits at every position of an input.

use crate::common::load_model;
use crate::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::json;
use statelm_model::ops::log_sum_exp;
use statelm_model::{ForwardOptions, KvType, LogitsMode, Model, StateOptions};

/// Positions whose logits are computed in one forward call (bounds the logits buffer).
const CHUNK: usize = 32;

/// Teacher-forced top-K logits at every position of an input
///
/// Feeds the whole input and prints, after every position, the top-K `[id, logit]` pairs and
/// the log-sum-exp of the full logit vector. Row i is the model's prediction after input
/// token i (for the token at i + 1). The text is tokenized with BOS as the model's metadata
/// says (not with --no-bos).
///
/// With --prefill N the input runs as llama.cpp runs a prompt and its continuation: the first
/// N tokens in one batch (one row, after the last of them), then one token per forward call
/// with a row after each — the protocol of the reference files, so anyone can check the
/// parity claim on their own prompts (`--numerics llama-cpp --kv-type f32`).
///
/// Examples:
///   statelm logits --text "The capital of France is"
///   statelm logits --tokens 2,651,6207,529,7001,563 --top 20 --json
///   statelm logits -m qwen2.5-coder-0.5b --text "def f(x):" --kv-type f16
///   statelm --numerics llama-cpp logits --tokens 2,651,6207,529,7001,563,9079 --prefill 6
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct LogitsArgs {
    /// Model file or short name (default: gemma3-270m, fetched when missing).
    #[arg(short, long)]
    model: Option<String>,
    /// Input text.
    #[arg(long, required_unless_present = "tokens", conflicts_with = "tokens")]
    text: Option<String>,
    /// Input token ids, comma-separated.
    #[arg(long, value_delimiter = ',')]
    tokens: Option<Vec<u32>>,
    /// Logits to show per position.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// Do not add BOS to --text.
    #[arg(long)]
    no_bos: bool,
    /// Parse special-token texts in --text.
    #[arg(long)]
    special: bool,
    /// KV cache type (f32 is the precise reference).
    #[arg(long, default_value = "f32")]
    kv_type: KvType,
    /// Feed the first N tokens as one batch, then one token per call (llama.cpp's protocol);
    /// rows after the batch's last token and after each decoded one.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    prefill: Option<u32>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// One position's result.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    pos: usize,
    token: u32,
    lse: f32,
    top: Vec<(u32, f32)>,
}

/// The `k` largest logits (ties: the lower id first).
fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(k - 1, order);
    idx.truncate(k);
    idx.sort_by(order);
    idx
}

/// Runs `tokens` through a fresh state in calls of the given sizes, returning a row for each
/// of the last `rows` positions of every call.
fn teacher_force(
    model: &Model,
    tokens: &[u32],
    kv_type: KvType,
    top: usize,
    calls: &[(usize, usize)],
) -> Result<Vec<Row>> {
    let mut state = model.new_state_with(StateOptions {
        capacity: tokens.len(),
        kv_type,
    })?;
    let mut out = Vec::with_capacity(tokens.len());
    let mut at = 0;
    for &(len, rows) in calls {
        let chunk = &tokens[at..at + len];
        let logits = model.forward_with(
            &mut state,
            chunk,
            ForwardOptions {
                logits: Some(LogitsMode::LastN(rows)),
                ..ForwardOptions::default()
            },
        )?;
        at += len;
        for r in 0..logits.rows() {
            let row = logits.row(r);
            let pos = at - logits.rows() + r;
            out.push(Row {
                pos,
                token: tokens[pos],
                lse: log_sum_exp(row),
                top: top_k(row, top),
            });
        }
    }
    Ok(out)
}

/// The forward calls `(tokens, rows)`: chunks of [`CHUNK`] with every row, or with `prefill`
/// one batch of that many tokens (its last row) and then one call per token.
fn calls(n: usize, prefill: Option<usize>) -> Vec<(usize, usize)> {
    match prefill {
        None => (0..n)
            .step_by(CHUNK)
            .map(|s| ((n - s).min(CHUNK), (n - s).min(CHUNK)))
            .collect(),
        Some(p) => {
            let p = p.min(n);
            std::iter::once((p, 1))
                .chain((p..n).map(|_| (1, 1)))
                .collect()
        }
    }
}

/// Runs the command.
pub fn run(args: &LogitsArgs, ctx: &Ctx) -> Result<()> {
    let model = load_model(ctx, args.model.as_deref())?.model;
    let tok = model.tokenizer();
    let tokens = match (&args.tokens, &args.text) {
        (Some(t), _) => t.clone(),
        (None, Some(text)) => tok
            .encode(text, !args.no_bos, args.special)
            .context("cannot tokenize the text")?,
        (None, None) => bail!("give --text or --tokens"),
    };
    if tokens.is_empty() {
        bail!("the input has no tokens");
    }
    let plan = calls(tokens.len(), args.prefill.map(|p| p as usize));
    let rows = teacher_force(&model, &tokens, args.kv_type, args.top as usize, &plan)
        .context("forward pass failed")?;
    if args.json {
        let v = json!({"tokens": tokens, "kv_type": args.kv_type.name(), "positions": rows});
        println!("{v}");
        return Ok(());
    }
    let piece = |id: u32| {
        format!(
            "{:?}",
            String::from_utf8_lossy(tok.token_bytes(id).unwrap_or_default())
        )
    };
    for r in &rows {
        let top: Vec<String> = r
            .top
            .iter()
            .map(|&(id, l)| format!("{id} {} {l:.3}", piece(id)))
            .collect();
        println!(
            "{:>5} {:>7} {:<14} lse {:>8.3} | {}",
            r.pos,
            r.token,
            piece(r.token),
            r.lse,
            top.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{calls, top_k};

    #[test]
    fn calls_follow_the_protocol() {
        assert_eq!(calls(40, None), vec![(32, 32), (8, 8)]);
        assert_eq!(calls(5, Some(3)), vec![(3, 1), (1, 1), (1, 1)]);
        assert_eq!(calls(2, Some(9)), vec![(2, 1)]);
    }

    #[test]
    fn top_k_orders_by_logit_then_id() {
        let v = [1.0, 3.0, 3.0, -1.0, 2.0];
        assert_eq!(top_k(&v, 3), vec![(1, 3.0), (2, 3.0), (4, 2.0)]);
        assert_eq!(top_k(&v, 10).len(), 5);
        assert!(top_k(&[], 3).is_empty());
    }
}
