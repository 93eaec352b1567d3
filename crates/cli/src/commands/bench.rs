//! `statelm bench`: prefill and decode speed, time to first token, memory, load time, and the
//! memory-bandwidth roofline measured in the same run.

use crate::Ctx;
use anyhow::{Context, Result};
use serde_json::json;
use statelm_model::{argmax, KvType, Model, StateOptions};
use std::sync::Arc;
use std::time::Instant;

/// Measure prefill/decode speed, memory and the bandwidth roofline.
///
/// Examples:
///   statelm bench                              # default model, all cores
///   statelm bench -m qwen2.5-coder-0.5b --threads 2 --reps 5 --json
///   statelm bench --stateless                  # per-token cost with and without a State
///   statelm bench -m qwen2.5-coder-0.5b --lookup 4  # prompt lookup: edit, rewrite, prose
///   statelm bench -m qwen2.5-coder-0.5b --json-schema @schema.json  # what a constraint costs
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct BenchArgs {
    /// Model file or short name (default: gemma3-270m).
    #[arg(short, long)]
    model: Option<String>,
    /// Repetitions of each measurement (median and spread are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Prefill lengths to time.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    prefill: Vec<usize>,
    /// Tokens to decode after a short prompt.
    #[arg(long, default_value_t = 128)]
    decode: usize,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Also time decoding without a State (recompute everything) at contexts 64/256/1024.
    #[arg(long)]
    stateless: bool,
    /// Skip the bandwidth probe.
    #[arg(long)]
    no_roofline: bool,
    /// Also time prompt-lookup decoding with up to N drafts against plain decoding on a code
    /// edit, a rewrite and prose (interleaved rounds; the text must be the same), with each
    /// answer's ceilings: its tokens per pass were every check of drafts free, with this
    /// drafter and with the best copy of any earlier match (what any prompt-lookup drafter
    /// could reach).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=15))]
    lookup: Option<u16>,
    /// With `--lookup`: time these chat prompts (each one user message) instead of the
    /// built-in workloads — how much lookup gains, and could gain, on your own text.
    #[arg(long, value_name = "TEXT", requires = "lookup")]
    lookup_prompt: Vec<String>,
    /// Also time one speculative verification of each of these batch sizes (all logits, after a
    /// 64-token context, reused buffers), in ms and as a multiple of `--verify 1` (a decode step).
    /// With `--lookup`, each answer's any-match ceiling is also priced at these costs.
    #[arg(long, value_delimiter = ',', value_name = "K,..")]
    verify: Vec<usize>,
    /// Also time a JSON-schema constraint (JSON text or @FILE): building the vocabulary's
    /// trie, compiling the schema and reusing it, and per token the mask beside the forward
    /// pass, on greedy chat answers under the schema.
    #[arg(long, value_name = "JSON|@FILE", value_parser = super::constraint::schema)]
    json_schema: Option<serde_json::Value>,
    /// With `--json-schema`: the chat prompt the answers are for.
    #[arg(long, value_name = "TEXT", requires = "json_schema", default_value = super::bench_constraint::DEFAULT_PROMPT)]
    json_prompt: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Median and spread of repeated measurements.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Stat {
    pub(crate) median: f64,
    min: f64,
    max: f64,
}

pub(crate) fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(f64::total_cmp);
    Stat {
        median: v[v.len() / 2],
        min: v[0],
        max: v[v.len() - 1],
    }
}

/// `n` realistic token ids: the tokenized sample text, repeated.
pub(crate) fn tokens(model: &Model, n: usize) -> Result<Vec<u32>> {
    const TEXT: &str = "The history of computing is a story of machines that learned to remember. \
        Early calculators held a single number; later computers kept programs and data side by \
        side, and every generation since has traded speed for memory and memory for speed. ";
    let ids = model.tokenizer().encode(TEXT, false, false)?;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.extend_from_slice(&ids);
    }
    out.truncate(n);
    Ok(out)
}

fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn time_prefill(model: &Model, n: usize, kv: KvType, reps: usize) -> Result<Stat> {
    let toks = tokens(model, n)?;
    let mut rates = Vec::new();
    for _ in 0..reps {
        let mut st = model.new_state_with(StateOptions {
            capacity: n,
            kv_type: kv,
        })?;
        let t = Instant::now();
        model.forward(&mut st, &toks)?;
        rates.push(n as f64 / t.elapsed().as_secs_f64());
    }
    Ok(stat(rates))
}

/// Decode tok/s over `n` tokens after a short prompt; also returns time to first token (s).
fn time_decode(model: &Model, n: usize, kv: KvType, reps: usize) -> Result<(Stat, Stat, usize)> {
    let prompt = tokens(model, 16)?;
    let (mut rates, mut ttfts, mut kv_bytes) = (Vec::new(), Vec::new(), 0);
    for _ in 0..reps {
        let cap = prompt.len() + n + 1;
        let mut st = model.new_state_with(StateOptions {
            capacity: cap,
            kv_type: kv,
        })?;
        // One scratch and one logits buffer for the whole loop, as the engine keeps them.
        let (mut scratch, mut logits) = (model.new_scratch(), statelm_model::Logits::default());
        let t0 = Instant::now();
        model.forward_into(
            &mut scratch,
            &mut st,
            &prompt,
            Default::default(),
            &mut logits,
        )?;
        let mut next = argmax(logits.last());
        ttfts.push(t0.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..n {
            model.forward_into(
                &mut scratch,
                &mut st,
                &[next],
                Default::default(),
                &mut logits,
            )?;
            next = argmax(logits.last());
        }
        rates.push(n as f64 / t.elapsed().as_secs_f64());
        kv_bytes = st.kv_bytes();
    }
    Ok((stat(rates), stat(ttfts), kv_bytes))
}

/// Seconds per new token at context `ctx`, with a State and without.
fn stateless_curve(model: &Model, kv: KvType) -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for ctx in [64usize, 256, 1024] {
        let toks = tokens(model, ctx + 1)?;
        let mut st = model.new_state_with(StateOptions {
            capacity: ctx + 8,
            kv_type: kv,
        })?;
        model.forward(&mut st, &toks[..ctx])?;
        let t = Instant::now();
        model.forward(&mut st, &toks[ctx..ctx + 1])?;
        let stateful = t.elapsed().as_secs_f64();
        let t = Instant::now();
        model.forward_stateless(&toks[..ctx + 1])?;
        let stateless = t.elapsed().as_secs_f64();
        rows.push(
            json!({"context": ctx, "stateful_ms": stateful * 1e3, "stateless_ms": stateless * 1e3,
                         "ratio": stateless / stateful}),
        );
    }
    Ok(rows)
}

/// Runs the command.
pub fn run(args: &BenchArgs, ctx: &Ctx) -> Result<()> {
    let path = ctx.model_path(args.model.as_deref(), args.json)?;
    let t = Instant::now();
    let model: Arc<Model> = Model::load(&path, &ctx.load_options())
        .with_context(|| format!("cannot load {}", path.display()))?;
    let load_s = t.elapsed().as_secs_f64();
    let reps = args.reps.max(1);
    let mut prefill = serde_json::Map::new();
    for &n in &args.prefill {
        prefill.insert(
            format!("pp{n}"),
            serde_json::to_value(time_prefill(&model, n, args.kv_type, reps)?)?,
        );
    }
    let (decode, ttft, kv_bytes) = time_decode(&model, args.decode, args.kv_type, reps)?;
    let (stateless, constraint) = side_measures(args, &model, reps)?;
    let verify = if args.verify.is_empty() {
        None
    } else {
        Some(super::bench_lookup::time_verify(
            &model,
            &args.verify,
            args.kv_type,
            reps,
        )?)
    };
    let lookup = match args.lookup {
        Some(n) => Some(super::bench_lookup::measure(
            &model,
            usize::from(n),
            args.decode,
            reps,
            &args.lookup_prompt,
            verify.as_ref(),
        )?),
        None => None,
    };
    // Read before the bandwidth probe, whose 1 GiB buffer is not the model's.
    let peak_rss = peak_rss_bytes();
    let weights = model.weight_bytes_per_token();
    let bytes_per_token = weights + kv_bytes;
    let roofline = if args.no_roofline {
        None
    } else {
        let pool = statelm_quant::ThreadPool::new(model.threads());
        let bw = statelm_quant::measure_read_bandwidth(&pool, 1 << 30);
        Some(json!({"read_bandwidth_gb_s": bw / 1e9,
                    "roofline_tok_s": bw / bytes_per_token as f64,
                    "share_of_roofline": decode.median * bytes_per_token as f64 / bw}))
    };
    let report = json!({
        "model": path.display().to_string(),
        "threads": model.threads(),
        "isa": statelm_quant::active_isa(),
        "kv_type": args.kv_type.name(),
        "load_s": load_s,
        "prefill_tok_s": prefill,
        "decode_tok_s": decode,
        "decode_tokens": args.decode,
        "time_to_first_token_s": ttft,
        "bytes_per_decoded_token": {"weights": weights, "kv": kv_bytes, "total": bytes_per_token},
        "roofline": roofline,
        "stateless": stateless,
        "lookup": lookup,
        "verify": verify,
        "constraint": constraint,
        "peak_rss_bytes": peak_rss,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// The stateless curve and the constraint's costs, when asked for.
type SideMeasures = (Option<Vec<serde_json::Value>>, Option<serde_json::Value>);

fn side_measures(args: &BenchArgs, model: &Arc<Model>, reps: usize) -> Result<SideMeasures> {
    let stateless = if args.stateless {
        Some(stateless_curve(model, args.kv_type)?)
    } else {
        None
    };
    let constraint = match &args.json_schema {
        Some(schema) => Some(super::bench_constraint::measure(
            model,
            schema,
            &args.json_prompt,
            args.decode,
            reps,
        )?),
        None => None,
    };
    Ok((stateless, constraint))
}

fn print_report(r: &serde_json::Value) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "model     {} ({} threads, {}, kv {})",
        r["model"].as_str().unwrap_or("?"),
        r["threads"],
        r["isa"].as_str().unwrap_or("?"),
        r["kv_type"].as_str().unwrap_or("?")
    );
    println!("load      {:.2} s", f(&r["load_s"]));
    if let Some(m) = r["prefill_tok_s"].as_object() {
        for (k, v) in m {
            println!(
                "prefill   {k:<6} {:>8.1} tok/s  (min {:.1}, max {:.1})",
                f(&v["median"]),
                f(&v["min"]),
                f(&v["max"])
            );
        }
    }
    let d = &r["decode_tok_s"];
    println!(
        "decode    {:>15.1} tok/s  (min {:.1}, max {:.1}) over {} tokens",
        f(&d["median"]),
        f(&d["min"]),
        f(&d["max"]),
        r["decode_tokens"]
    );
    println!(
        "ttft      {:>15.1} ms",
        f(&r["time_to_first_token_s"]["median"]) * 1e3
    );
    let b = &r["bytes_per_decoded_token"];
    println!(
        "bytes/tok {:>15.1} MB (weights {:.1} MB + KV {:.2} MB)",
        f(&b["total"]) / 1e6,
        f(&b["weights"]) / 1e6,
        f(&b["kv"]) / 1e6
    );
    if let Some(rf) = r["roofline"].as_object() {
        println!(
            "bandwidth {:>15.1} GB/s -> roofline {:.1} tok/s; decode at {:.0}% of it",
            f(&rf["read_bandwidth_gb_s"]),
            f(&rf["roofline_tok_s"]),
            100.0 * f(&rf["share_of_roofline"])
        );
    }
    print_comparisons(r);
    print_constraint(&r["constraint"]);
    if let Some(rss) = r["peak_rss_bytes"].as_u64() {
        println!("peak RSS  {:>15.1} MiB", rss as f64 / (1024.0 * 1024.0));
    }
}

/// The constraint's costs, when `--json-schema` asked for them.
fn print_constraint(c: &serde_json::Value) {
    if c.is_null() {
        return;
    }
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let us = |v: &serde_json::Value| f(&v["median"]) * 1e6;
    println!(
        "schema    trie {:.0} ms (once per model), compile {:.2} ms, cached {:.3} ms",
        f(&c["trie_build_s"]) * 1e3,
        f(&c["compile_s"]) * 1e3,
        us(&c["cached_compile_s"]) / 1e3
    );
    println!(
        "mask      {:>15.1} us/token = {:.2}% of decode ({:.2} ms forward); first token {:.0} us",
        us(&c["mask_per_token_s"]),
        100.0 * f(&c["mask_share_of_decode"]["median"]),
        us(&c["forward_per_token_s"]) / 1e3,
        us(&c["first_mask_s"])
    );
    println!(
        "answer    {} tokens, complete {}, valid JSON {}: {}",
        c["tokens"], c["complete"], c["valid_json"], c["text"]
    );
}

/// The report's optional comparisons: stateless vs stateful, lookup vs plain, verification.
fn print_comparisons(r: &serde_json::Value) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    if let Some(rows) = r["stateless"].as_array() {
        for row in rows {
            println!(
                "ctx {:>5}: stateful {:>8.2} ms/token, stateless {:>9.2} ms/token ({:.0}x)",
                row["context"],
                f(&row["stateful_ms"]),
                f(&row["stateless_ms"]),
                f(&row["ratio"])
            );
        }
    }
    for l in r["lookup"].as_array().into_iter().flatten() {
        println!(
            "lookup {:<2} {:>8.1} tok/s vs plain {:.1} ({:.2}x) on {}; accepted {} of {} \
             drafts; same text: {}; ceiling {:.2}x (any match {:.2}x){}",
            l["lookup"],
            f(&l["lookup_tok_s"]),
            f(&l["plain_tok_s"]),
            f(&l["ratio"]),
            l["workload"].as_str().unwrap_or("?"),
            l["accepted"],
            l["drafted"],
            l["same_text"],
            f(&l["ceiling"]),
            f(&l["any_match_ceiling"]),
            l["any_match_bound"]
                .as_f64()
                .map(|b| format!("; bound at these costs {b:.2}x"))
                .unwrap_or_default()
        );
    }
    if let Some(rows) = r["verify"].as_array() {
        for row in rows {
            println!(
                "verify {:>3} {:>10.2} ms  ({:.2}x one decode step; min {:.2}, max {:.2})",
                row["tokens"],
                f(&row["ms"]["median"]),
                f(&row["vs_decode_step"]),
                f(&row["ms"]["min"]),
                f(&row["ms"]["max"])
            );
        }
    }
}
