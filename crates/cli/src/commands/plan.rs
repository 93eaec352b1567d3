//! `statelm plan`: capacity planner: which model fits which device, with a memory breakdown.

use crate::commands::device;
use crate::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use statelm_governor::{format_bytes, parse_bytes, DeviceProfile, DeviceSpec};
use statelm_model::{KvType, LoadOptions};
use statelm_plan::capacity::{
    max_params_that_fit, plan, Footprint, ModelSketch, PlanOptions, REFERENCE_SHAPES,
    RUNTIME_BASE_BYTES, THREAD_STACK_BYTES,
};
use statelm_plan::tier::{
    choose_tier, default_tier, discover_variants, QuantTier, TierOverrides, TierPolicy,
    SAFETY_MARGIN,
};
use std::path::Path;

/// Capacity planner: the memory a model needs at a context, line by line, against a device's
/// ceiling; or (`--table`) the largest model that fits each known device.
///
/// Examples:
///   statelm plan -m qwen2.5-coder-0.5b --device iphone-15-pro
///   statelm plan -m model.gguf --memory 1GiB --context 4096 --kv-type q8_0 --json
///   statelm plan --table
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct PlanArgs {
    /// Model file or short name (default: gemma3-270m).
    #[arg(short, long, conflicts_with = "table")]
    model: Option<String>,
    /// Plan against a listed device's per-app ceiling (see --table for the ids).
    #[arg(long, conflicts_with = "memory")]
    device: Option<String>,
    /// Plan against this memory ceiling (e.g. 1GiB, 512MiB).
    #[arg(long)]
    memory: Option<String>,
    /// Context (tokens held by the State).
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// KV cache type: f16, f32 or q8_0.
    #[arg(long, default_value = "f16")]
    kv_type: KvType,
    /// Prefill micro-batch.
    #[arg(long, default_value_t = LoadOptions::default().ubatch)]
    ubatch: usize,
    /// Tier override shown in the tier lines: q8_0 or q4.
    #[arg(long)]
    quant: Option<QuantTier>,
    /// Token-budget override shown in the tier lines.
    #[arg(long)]
    budget: Option<usize>,
    /// Plan for prompt-lookup decoding with up to N drafts (`run --lookup N`): each
    /// verification returns N + 1 logits rows.
    #[arg(long, default_value_t = 0)]
    lookup: usize,
    /// For every listed device, the largest parameter count that fits at 4 and 8 bits.
    #[arg(long)]
    table: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: &PlanArgs, ctx: &Ctx) -> Result<()> {
    if args.context == 0 {
        bail!("--context must be at least 1");
    }
    if args.lookup > statelm_engine::MAX_LOOKUP {
        bail!("--lookup must be at most {}", statelm_engine::MAX_LOOKUP);
    }
    let mut opts = PlanOptions::new(args.context);
    opts.kv_type = args.kv_type;
    opts.ubatch = args.ubatch.max(1);
    opts.logits_rows = args.lookup + 1;
    if args.table {
        opts.threads = ctx.threads.unwrap_or(4);
        return table(args, &opts);
    }
    let mem = target_memory(args)?;
    opts.threads = ctx.threads.unwrap_or(if mem.name.is_some() {
        4
    } else {
        statelm_model::default_threads()
    });
    opts.ceiling = Some(mem.effective_memory());
    let path = ctx.model_path(args.model.as_deref(), args.json)?;
    let file = statelm_gguf::GgufFile::open(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    let sketch = ModelSketch::from_gguf(&file, &name)?;
    let f = plan(&sketch, &opts);
    let ov = TierOverrides {
        quant: args.quant,
        budget: args.budget,
    };
    let tiers = tier_lines(&path, &mem, &opts, &ov)?;
    if args.json {
        let mut v = footprint_json(&f, &sketch);
        v["memory"] = json!({"description": mem.describe_memory(), "physical": mem.physical_memory,
                             "ceiling": mem.cgroup_limit, "effective": mem.effective_memory()});
        v["tiers"] = json!(tiers
            .iter()
            .map(|(p, t)| json!({"policy": p, "line": t}))
            .collect::<Vec<_>>());
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_footprint(&f, &sketch, &mem);
        for (policy, line) in &tiers {
            println!("tier ({policy:<7}) {line}");
        }
    }
    Ok(())
}

/// The ceiling: `--device`, `--memory`, or this machine (environment-aware).
fn target_memory(args: &PlanArgs) -> Result<DeviceProfile> {
    if let Some(id) = &args.device {
        let Some(d) = statelm_governor::device(id) else {
            let ids: Vec<String> = statelm_governor::devices()
                .into_iter()
                .map(|d| d.id)
                .collect();
            bail!("unknown device {id:?} (known: {})", ids.join(", "));
        };
        return Ok(DeviceProfile::for_device(&d));
    }
    if let Some(m) = &args.memory {
        let bytes = parse_bytes(m).with_context(|| format!("bad --memory {m:?}"))?;
        return Ok(DeviceProfile::simulated(&format!("--memory {m}"), bytes));
    }
    device::profile()
}

/// Both policies' decisions for this model on this device.
fn tier_lines(
    path: &Path,
    mem: &DeviceProfile,
    o: &PlanOptions,
    ov: &TierOverrides,
) -> Result<Vec<(String, String)>> {
    let variants = discover_variants(&[path.to_path_buf()])?;
    let load = LoadOptions {
        threads: o.threads,
        ubatch: o.ubatch,
        ..LoadOptions::default()
    };
    let d = default_tier(mem, ov);
    let f = choose_tier(&variants, mem, TierPolicy::Fit, ov, &load)?;
    Ok(vec![
        (
            "default".into(),
            format!(
                "{} / {} tokens: {}",
                d.quant.name(),
                d.token_budget,
                d.reason
            ),
        ),
        (
            "fit".into(),
            format!(
                "{} / {} tokens: {}",
                f.quant.name(),
                f.token_budget,
                f.reason
            ),
        ),
    ])
}

fn footprint_json(f: &Footprint, s: &ModelSketch) -> Value {
    let c = &s.config;
    json!({
        "model": f.model,
        "architecture": c.arch.name(),
        "params": s.params,
        "n_layer": c.n_layer, "n_embd": c.n_embd, "n_head_kv": c.n_head_kv,
        "head_dim": c.head_dim, "sliding_window": c.sliding_window, "n_vocab": c.n_vocab,
        "context": f.options.context,
        "kv_type": f.options.kv_type.name(),
        "ubatch": f.options.ubatch,
        "threads": f.options.threads,
        "weights_by_type": f.weights_by_type.iter()
            .map(|t| json!({"type": t.ty, "tensors": t.tensors, "bytes": t.bytes}))
            .collect::<Vec<_>>(),
        "weights_total": f.weights_total,
        "weight_vectors": f.weight_vectors,
        "kv_per_token": f.kv_per_token,
        "kv_per_token_beyond_window": f.kv_per_token_beyond_window,
        "kv_at_context": f.kv_at_context,
        "scratch": f.scratch,
        "token_history": f.token_history,
        "logits": f.logits,
        "tokenizer": f.tokenizer,
        "runtime": f.runtime,
        "state_bytes": f.state_bytes(),
        "total": f.total,
        "ceiling": f.ceiling,
        "headroom": f.headroom,
        "fits": f.fits(),
    })
}

fn print_footprint(f: &Footprint, s: &ModelSketch, mem: &DeviceProfile) {
    let c = &s.config;
    let window = c
        .sliding_window
        .map_or(String::new(), |w| format!(", sliding window {w}"));
    println!(
        "model         {} ({}, {:.0}M params, {} layers, {}×{} kv heads{window})",
        f.model,
        c.arch.name(),
        s.params as f64 / 1e6,
        c.n_layer,
        c.n_head_kv,
        c.head_dim
    );
    let o = &f.options;
    println!(
        "context       {} tokens, {} KV cache, ubatch {}, {} threads",
        o.context,
        o.kv_type.name(),
        o.ubatch,
        o.threads
    );
    println!("ceiling       {}", mem.describe_memory());
    println!();
    for (label, bytes) in f.lines() {
        println!("{label:<30}{:>12}", format_bytes(bytes));
        if label.starts_with("weights") {
            for t in &f.weights_by_type {
                let l = format!("  {} ×{}", t.ty, t.tensors);
                println!("{l:<30}{:>12}", format_bytes(t.bytes));
            }
        }
        if label == "KV cache" {
            let beyond = if f.kv_per_token_beyond_window != f.kv_per_token {
                format!(
                    ", {} beyond the window",
                    format_bytes(f.kv_per_token_beyond_window)
                )
            } else {
                String::new()
            };
            println!("  per token {}{beyond}", format_bytes(f.kv_per_token));
        }
    }
    println!("{:<30}{:>12}", "total", format_bytes(f.total));
    if let Some(h) = f.headroom {
        let verdict = if h >= 0 { "fits" } else { "DOES NOT FIT" };
        let abs = format_bytes(h.unsigned_abs());
        println!(
            "{:<30}{:>12}  {verdict}",
            "headroom",
            if h >= 0 { abs } else { format!("-{abs}") }
        );
    }
    println!();
}

/// The guide's figures: (RAM, chips, params at 4-bit, params at 8-bit).
const GUIDE: [(u64, &str, f64, f64); 2] = [
    (6 << 30, "A15/A16", 2.5e9, 1.2e9),
    (8 << 30, "A17 Pro/A18 Pro", 3.5e9, 1.8e9),
];
/// Bits per weight of real 4-bit (llama.cpp Q4_K_M mix, scales included) and 8-bit (Q8_0).
const BPW_4: f64 = 4.85;
const BPW_8: f64 = 8.5;
/// The guide's OS overhead.
const GUIDE_OS: u64 = 2 << 30;

/// One device row of the table: the planner's figures against the device's per-app ceiling,
/// and the tier statelm applies there (its gate is the physical RAM).
struct Row {
    spec: DeviceSpec,
    usable: u64,
    q4: u64,
    q8: u64,
    tier: (QuantTier, usize),
}

/// One row of the iPhone tiering guide, labelled by its chips (the guide speaks of chips and
/// their RAM, not of any device): its own figures beside the planner's at RAM − 2 GB.
struct GuideRow {
    chips: &'static str,
    ram: u64,
    params: (f64, f64),
    planned: (u64, u64),
    tier: (QuantTier, usize),
}

/// The tier the default policy gives a device with `ram` of physical memory.
fn tier_at(ram: u64, ceiling: Option<u64>) -> (QuantTier, usize) {
    let t = default_tier(
        &DeviceProfile::with_memory(ram, ceiling),
        &TierOverrides::default(),
    );
    (t.quant, t.token_budget)
}

fn rows(o: &PlanOptions) -> Vec<Row> {
    statelm_governor::devices()
        .into_iter()
        .map(|spec| {
            let usable = (spec.app_ceiling as f64 * (1.0 - SAFETY_MARGIN)) as u64;
            Row {
                q4: max_params_that_fit(usable, BPW_4, o),
                q8: max_params_that_fit(usable, BPW_8, o),
                tier: tier_at(spec.ram, Some(spec.app_ceiling)),
                usable,
                spec,
            }
        })
        .collect()
}

fn guide_rows(o: &PlanOptions) -> Vec<GuideRow> {
    GUIDE
        .iter()
        .map(|&(ram, chips, p4, p8)| {
            let budget = ram.saturating_sub(GUIDE_OS);
            GuideRow {
                chips,
                ram,
                params: (p4, p8),
                planned: (
                    max_params_that_fit(budget, BPW_4, o),
                    max_params_that_fit(budget, BPW_8, o),
                ),
                tier: tier_at(ram, None),
            }
        })
        .collect()
}

/// `q8_0/2048`.
fn tier_label(t: (QuantTier, usize)) -> String {
    format!("{}/{}", t.0.name(), t.1)
}

fn b(params: u64) -> String {
    format!("{:.2}B", params as f64 / 1e9)
}

/// What the planner needs for the guide's own figures.
fn guide_checks(o: &PlanOptions) -> Vec<String> {
    GUIDE
        .iter()
        .flat_map(|&(ram, chips, p4, p8)| {
            [(p4, BPW_4, "4-bit"), (p8, BPW_8, "8-bit")].map(|(p, bpw, what)| {
                let f = plan(&ModelSketch::hypothetical(p as u64, bpw), o);
                format!(
                    "{} GiB ({chips}) {what} {}: statelm plans {} total ({} weights, {} KV) — \
                     {:.0}% of RAM−2GB",
                    ram >> 30,
                    b(p as u64),
                    format_bytes(f.total),
                    format_bytes(f.weights_total),
                    format_bytes(f.kv_at_context),
                    100.0 * f.total as f64 / (ram - GUIDE_OS) as f64
                )
            })
        })
        .collect()
}

fn assumptions(o: &PlanOptions) -> Vec<String> {
    let three = plan(&ModelSketch::hypothetical(3_000_000_000, BPW_4), o);
    let refs: Vec<&str> = REFERENCE_SHAPES.iter().map(|r| r.name).collect();
    vec![
        format!(
            "weights: 4-bit = {BPW_4} bits/weight (llama.cpp Q4_K_M incl. scales and its Q6_K \
             bumps; pure Q4_0/Q4_K are 4.5), 8-bit = Q8_0 {BPW_8} bpw (32 int8 + an f16 scale); \
             the guide's round figures imply 4.0 / 8.0"
        ),
        format!(
            "KV: {} cache at {} tokens; shapes interpolated (log-params) between {}; e.g. 3B → \
             {} of KV ({} per token); the guide assumes 200–400 MB",
            o.kv_type.name(),
            o.context,
            refs.join(", "),
            format_bytes(three.kv_at_context),
            format_bytes(three.kv_per_token)
        ),
        format!(
            "tokenizer: a {}-token BPE vocabulary ≈ {} (metadata + index); scratch at ubatch {} \
             ≈ {}; runtime {} + {} per thread × {}",
            REFERENCE_SHAPES[2].n_vocab,
            format_bytes(three.tokenizer),
            o.ubatch,
            format_bytes(three.scratch),
            format_bytes(RUNTIME_BASE_BYTES),
            format_bytes(THREAD_STACK_BYTES),
            o.threads
        ),
        format!(
            "ceiling: statelm uses each device's per-app ceiling (devices.json; e.g. iOS jetsam \
             ≈ 50% of RAM without the increased-memory-limit entitlement) minus a {:.0}% safety \
             margin; the guide uses RAM − 2 GB of OS overhead",
            SAFETY_MARGIN * 100.0
        ),
    ]
}

fn table(args: &PlanArgs, o: &PlanOptions) -> Result<()> {
    let (rows, guide) = (rows(o), guide_rows(o));
    let checks = guide_checks(o);
    let notes = assumptions(o);
    if args.json {
        let tier = |t: (QuantTier, usize)| json!({"quant": t.0.name(), "token_budget": t.1});
        let v = json!({
            "context": o.context, "kv_type": o.kv_type.name(), "threads": o.threads,
            "bits_per_weight": {"4bit": BPW_4, "8bit": BPW_8},
            "safety_margin": SAFETY_MARGIN,
            "devices": rows.iter().map(|r| json!({
                "id": r.spec.id, "name": r.spec.name, "ram": r.spec.ram,
                "app_ceiling": r.spec.app_ceiling, "usable": r.usable,
                "max_params_4bit": r.q4, "max_params_8bit": r.q8,
                "tier": tier(r.tier),
            })).collect::<Vec<_>>(),
            "guide": guide.iter().map(|g| json!({
                "chips": g.chips, "ram": g.ram,
                "params_4bit": g.params.0, "params_8bit": g.params.1,
                "ram_minus_2gb": g.ram.saturating_sub(GUIDE_OS),
                "planned_4bit_ram_minus_2gb": g.planned.0,
                "planned_8bit_ram_minus_2gb": g.planned.1,
                "tier": tier(g.tier),
            })).collect::<Vec<_>>(),
            "guide_checks": checks,
            "assumptions": notes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_table(&rows, &guide, o);
    println!("\nThe guide's own figures, planned by statelm:");
    checks.iter().for_each(|c| println!("  {c}"));
    println!("\nAssumptions:");
    notes.iter().for_each(|n| println!("  - {n}"));
    Ok(())
}

fn print_table(rows: &[Row], guide: &[GuideRow], o: &PlanOptions) {
    println!(
        "Largest model that fits, {} tokens of {} KV (params; 4-bit = {BPW_4} bpw, 8-bit = {BPW_8} bpw)\n",
        o.context,
        o.kv_type.name()
    );
    println!(
        "{:<20} {:>8} {:>8} | {:>7} {:>7} | {:<10}",
        "device", "RAM", "ceiling", "4-bit", "8-bit", "tier"
    );
    println!("{:<20} {:>8} {:>8} | {:^15} |", "", "", "", "ceiling−15%");
    for r in rows {
        println!(
            "{:<20} {:>8} {:>8} | {:>7} {:>7} | {:<10}",
            r.spec.id,
            format_bytes(r.spec.ram),
            format_bytes(r.spec.app_ceiling),
            b(r.q4),
            b(r.q8),
            tier_label(r.tier)
        );
    }
    println!(
        "\nThe iPhone tiering guide, by chip (its figures; statelm's planner at RAM − 2 GiB):\n"
    );
    println!(
        "{:<20} {:>8} | {:>7} {:>7} | {:>7} {:>7} | {:<10}",
        "chips", "RAM", "guide4", "guide8", "4-bit", "8-bit", "tier"
    );
    for g in guide {
        println!(
            "{:<20} {:>8} | {:>7} {:>7} | {:>7} {:>7} | {:<10}",
            g.chips,
            format_bytes(g.ram),
            b(g.params.0 as u64),
            b(g.params.1 as u64),
            b(g.planned.0),
            b(g.planned.1),
            tier_label(g.tier)
        );
    }
}
