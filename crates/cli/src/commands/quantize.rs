//! `statelm quantize`: requantize a GGUF file (q8_0, q4_0, q5_0, q4_k, q6_k, q4_k_m).

use crate::Ctx;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use statelm_governor::format_bytes;
use statelm_model::quantize::{
    perplexity, quantize_file, Perplexity, QuantTarget, QuantizeOptions, QuantizeReport,
    SAMPLE_TEXT,
};
use statelm_model::{LoadOptions, Model};
use std::path::{Path, PathBuf};

/// Requantize a GGUF file: every matrix is dequantized to f32 and quantized to the target with
/// llama.cpp's recipe (1-D tensors stay as they are; K-quants fall back to Q5_0/Q5_1/Q8_0 when
/// rows are not multiples of 256; q4_k_m gives half of attn_v/ffn_down and the output Q6_K).
///
/// Examples:
///   statelm quantize model-f16.gguf model-q4_k_m.gguf --type q4_k_m
///   statelm quantize qwen2.5-coder-0.5b /tmp/qwen-q8_0.gguf --type q8_0 --perplexity
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct QuantizeArgs {
    /// Input GGUF file (or a known model's short name).
    input: String,
    /// Output GGUF file (written atomically).
    output: PathBuf,
    /// Target: q8_0, q4_0, q5_0, q4_k, q6_k or q4_k_m.
    #[arg(long = "type", value_parser = parse_target)]
    target: QuantTarget,
    /// Also measure perplexity of input and output (on FILE, or a built-in English sample).
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    perplexity: Option<String>,
    /// Perplexity window in tokens.
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Print every tensor's decision.
    #[arg(long)]
    tensors: bool,
    /// Machine-readable summary.
    #[arg(long)]
    json: bool,
}

fn parse_target(s: &str) -> Result<QuantTarget, String> {
    QuantTarget::parse(s).ok_or_else(|| {
        let names: Vec<&str> = QuantTarget::ALL.iter().map(|t| t.name()).collect();
        format!("unknown type {s:?} (one of {})", names.join(", "))
    })
}

/// Runs the command.
pub fn run(args: &QuantizeArgs, ctx: &Ctx) -> Result<()> {
    let input = ctx.model_path(Some(&args.input), args.json)?;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {percent:>3}% {elapsed} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(format!("quantizing to {}", args.target.name()));
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let opts = QuantizeOptions {
        target: args.target,
        threads: ctx.threads.unwrap_or(0),
        progress: Some(&progress),
    };
    let report = quantize_file(&input, &args.output, &opts)
        .with_context(|| format!("quantizing {}", input.display()))?;
    bar.finish_and_clear();
    let sizes = (file_size(&input), file_size(&args.output));
    let ppl = match &args.perplexity {
        Some(src) => Some(measure(ctx, &input, &args.output, src, args.window)?),
        None => None,
    };
    if args.json {
        print_json(&report, sizes, ppl)?;
    } else {
        print_text(args, &report, sizes, ppl);
    }
    Ok(())
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Perplexity of the input and the output on the same text.
fn measure(
    ctx: &Ctx,
    input: &Path,
    output: &Path,
    src: &str,
    window: usize,
) -> Result<(Perplexity, Perplexity)> {
    let text = if src.is_empty() {
        SAMPLE_TEXT.to_string()
    } else {
        std::fs::read_to_string(src).with_context(|| format!("cannot read {src}"))?
    };
    let opts = LoadOptions {
        threads: ctx.threads.unwrap_or(0),
        ..Default::default()
    };
    let eval = |p: &Path| -> Result<Perplexity> {
        let m = Model::load(p, &opts).with_context(|| format!("loading {}", p.display()))?;
        Ok(perplexity(&m, &text, window.max(8))?)
    };
    Ok((eval(input)?, eval(output)?))
}

fn print_json(
    r: &QuantizeReport,
    (size_in, size_out): (u64, u64),
    ppl: Option<(Perplexity, Perplexity)>,
) -> Result<()> {
    let v = json!({
        "target": r.target.name(),
        "file_bytes_in": size_in,
        "file_bytes_out": size_out,
        "tensor_bytes_in": r.bytes_in,
        "tensor_bytes_out": r.bytes_out,
        "bits_per_weight": r.bits_per_weight(),
        "converted": r.converted,
        "copied": r.tensors.len() - r.converted,
        "seconds": r.seconds,
        "by_type": r.by_type.iter().map(|(k, t)| (k.clone(), json!({"tensors": t.tensors, "bytes": t.bytes})))
            .collect::<serde_json::Map<_, _>>(),
        "perplexity": ppl.map(|(a, b)| json!({
            "input": a.ppl, "output": b.ppl, "change": b.ppl / a.ppl - 1.0, "tokens": b.scored,
        })),
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn print_text(
    args: &QuantizeArgs,
    r: &QuantizeReport,
    (size_in, size_out): (u64, u64),
    ppl: Option<(Perplexity, Perplexity)>,
) {
    if args.tensors {
        for t in &r.tensors {
            println!(
                "{:<36} {:>5} → {:<5} {:?}",
                t.name,
                t.from.name(),
                t.to.name(),
                t.reason
            );
        }
    }
    println!(
        "{} → {} ({}): {} → {} ({:+.1}%), {:.2} bits/weight, {} tensors requantized, {} copied, {:.1} s",
        args.input,
        args.output.display(),
        r.target.name(),
        format_bytes(size_in),
        format_bytes(size_out),
        100.0 * (size_out as f64 / size_in.max(1) as f64 - 1.0),
        r.bits_per_weight(),
        r.converted,
        r.tensors.len() - r.converted,
        r.seconds
    );
    for (ty, t) in &r.by_type {
        println!(
            "  {ty:<6} {:>4} tensors {:>12}",
            t.tensors,
            format_bytes(t.bytes)
        );
    }
    if let Some((a, b)) = ppl {
        println!(
            "perplexity ({} tokens in {} windows of {}): {:.4} → {:.4} ({:+.2}%)",
            b.scored,
            b.windows,
            args.window,
            a.ppl,
            b.ppl,
            100.0 * (b.ppl / a.ppl - 1.0)
        );
    }
}
