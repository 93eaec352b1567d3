//! `statelm inspect`: what is in a GGUF file (and, with `--device`, what this device is).

use crate::model_arg;
use anyhow::{bail, Context, Result};
use serde_json::json;
use statelm_gguf::{GgufFile, TensorInfo};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

/// Show a model's architecture, hyperparameters, tokenizer and tensors.
///
/// Examples:
///   statelm inspect                                   # the default model
///   statelm inspect -m model.gguf --json
///   statelm inspect -m qwen --tensor blk.0.attn_q.weight --rows 0..2 --json
///   statelm inspect --device
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct InspectArgs {
    /// Model file or short name (default: gemma3-270m).
    #[arg(short, long)]
    model: Option<String>,
    /// Print one tensor's dequantized rows.
    #[arg(long)]
    tensor: Option<String>,
    /// Half-open row range for --tensor, like `0..4` (default: the first row).
    #[arg(long, value_parser = parse_range)]
    rows: Option<Range<u64>>,
    /// Print the device profile and the memory sources instead of a model.
    #[arg(long)]
    device: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

fn parse_range(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s.split_once("..").ok_or("expected A..B")?;
    let a: u64 = a.trim().parse().map_err(|_| format!("bad start {a:?}"))?;
    let b: u64 = b.trim().parse().map_err(|_| format!("bad end {b:?}"))?;
    if b <= a {
        return Err(format!("empty range {a}..{b}"));
    }
    Ok(a..b)
}

/// Runs the command.
pub fn run(args: &InspectArgs, cache: Option<&Path>) -> Result<()> {
    if args.device {
        return crate::commands::device::print(args.json);
    }
    let path = model_arg::resolve(args.model.as_deref(), cache, args.json)?;
    let file = GgufFile::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Some(name) = &args.tensor {
        return print_tensor(&file, name, args.rows.clone().unwrap_or(0..1), args.json);
    }
    let summary = summarize(&file, &path);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary);
    }
    Ok(())
}

fn summarize(file: &GgufFile, path: &Path) -> serde_json::Value {
    let mut by_type: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for t in file.tensors() {
        let e = by_type.entry(t.ty.name().to_string()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    let config = statelm_model::ModelConfig::from_gguf(file);
    let tokenizer = statelm_tokenizer::Tokenizer::from_gguf(file);
    let hyper = match &config {
        Ok(c) => json!({
            "n_embd": c.n_embd, "n_layer": c.n_layer, "n_head": c.n_head,
            "n_head_kv": c.n_head_kv, "head_dim": c.head_dim, "n_ff": c.n_ff,
            "n_vocab": c.n_vocab, "context_length": c.context_length,
            "architecture": c.arch.name(), "rope_base": c.rope.base, "rope_dim": c.rope.dim,
            "sliding_window": c.sliding_window,
            "norm_eps": c.norm_eps,
        }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let tok = match &tokenizer {
        Ok(t) => json!({
            "kind": format!("{:?}", t.kind()), "pre": t.pre(), "vocab_size": t.vocab_size(),
            "bos": t.bos_id(), "eos": t.eos_id(), "eog": t.eog_ids(),
            "chat_template": format!("{:?}", t.chat_template_source()),
        }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    json!({
        "path": path.display().to_string(),
        "file_size": file.file_size(),
        "gguf_version": file.version(),
        "architecture": file.architecture().ok(),
        "name": file.opt_str("general.name").ok().flatten(),
        "hyperparameters": hyper,
        "tokenizer": tok,
        "tensor_count": file.tensors().len(),
        "tensors_by_type": by_type.iter().map(|(k, (n, b))| (k.clone(), json!({"count": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
        "metadata_keys": file.metadata().len(),
    })
}

fn print_summary(s: &serde_json::Value) {
    println!("file          {}", s["path"].as_str().unwrap_or("?"));
    println!(
        "size          {:.1} MiB (GGUF v{})",
        s["file_size"].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0),
        s["gguf_version"]
    );
    println!(
        "architecture  {}",
        s["architecture"].as_str().unwrap_or("?")
    );
    if let Some(n) = s["name"].as_str() {
        println!("name          {n}");
    }
    println!("hyperparams   {}", s["hyperparameters"]);
    println!("tokenizer     {}", s["tokenizer"]);
    println!("tensors       {}", s["tensor_count"]);
    if let Some(m) = s["tensors_by_type"].as_object() {
        for (ty, v) in m {
            println!(
                "  {:<6} {:>4} tensors {:>9.1} MiB",
                ty,
                v["count"],
                v["bytes"].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0)
            );
        }
    }
}

fn print_tensor(file: &GgufFile, name: &str, rows: Range<u64>, json_out: bool) -> Result<()> {
    let t: &TensorInfo = match file.tensor(name) {
        Some(t) => t,
        None => bail!("no tensor named {name:?}"),
    };
    let (row_len, n_rows) = (t.row_len(), t.n_rows());
    if rows.end > n_rows {
        bail!(
            "rows {}..{} out of range: {name} has {n_rows} rows",
            rows.start,
            rows.end
        );
    }
    let row_bytes = t.ty.bytes_for(row_len).context("row is not whole blocks")? as usize;
    let data = file.tensor_data(t);
    let mut out = Vec::new();
    for r in rows.clone() {
        let src = &data[r as usize * row_bytes..(r as usize + 1) * row_bytes];
        let mut vals = vec![0.0f32; row_len as usize];
        statelm_quant::dequantize_row(t.ty, src, &mut vals)?;
        out.push(vals);
    }
    if json_out {
        let v = json!({"name": name, "type": t.ty.name(), "dims": t.dims,
                       "rows": [rows.start, rows.end], "values": out});
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{name}: {} {:?}", t.ty, t.dims);
        for (r, vals) in rows.zip(&out) {
            let head: Vec<String> = vals.iter().take(8).map(|v| format!("{v:.6}")).collect();
            println!(
                "  row {r}: [{}{}]",
                head.join(", "),
                if vals.len() > 8 { ", …" } else { "" }
            );
        }
    }
    Ok(())
}
