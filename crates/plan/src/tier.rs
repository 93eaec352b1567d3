//! Device tiers: the weight precision and token budget are chosen at run time from the memory
//! the device really has (physical RAM, or the cgroup / per-app ceiling when lower), then
//! applied by picking the matching GGUF variant of a model or requantizing one in memory.
//!
//! Two policies:
//! - [`TierPolicy::Default`]: physical memory ≥ 8 GB (as sold; see [`Q8_MIN_PHYSICAL`]) → Q8_0
//!   weights and a 2048-token budget, else 4-bit weights (Q4_0 / Q4_K family) and 1024 tokens.
//! - [`TierPolicy::Fit`]: with the capacity planner, the highest-precision variant whose
//!   footprint at the requested budget stays under the ceiling minus [`SAFETY_MARGIN`]; a
//!   smaller budget (halving, down to [`MIN_BUDGET`]) is tried before a lower precision.
//!
//! `--quant` / `--budget` overrides win over both. Every decision carries a one-line reason.
//!
//! A device is a governor [`DeviceProfile`]: detected, simulated from the device list, or
//! given as RAM and a ceiling ([`DeviceProfile::with_memory`]).

use crate::capacity::{plan, ModelSketch, PlanOptions};
use statelm_gguf::{GgmlType, GgufFile};
use statelm_governor::{format_bytes, DeviceProfile};
use statelm_model::quantize::{quantize_to_bytes, QuantTarget, QuantizeOptions};
use statelm_model::{LoadOptions, Model, ModelConfig, ModelError, UnknownName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Physical memory from which the default policy picks Q8_0 (8 GiB, as devices are sold).
pub const Q8_MIN_MEMORY: u64 = 8 << 30;
/// What an "8 GB" device may read as physical memory and still count as 8 GB: the kernel,
/// firmware and carve-outs keep a few hundred MiB (Linux/Android `MemTotal` of 8 GB phones
/// reads 7.2–7.8 GiB), so the gate allows 1 GiB below [`Q8_MIN_MEMORY`].
pub const Q8_MIN_PHYSICAL: u64 = Q8_MIN_MEMORY - (1 << 30);
/// Token budget of the Q8_0 default tier.
pub const Q8_BUDGET: usize = 2048;
/// Token budget of the 4-bit default tier.
pub const Q4_BUDGET: usize = 1024;
/// Share of the ceiling the fit policy keeps free (for the OS's own variance, allocator
/// fragmentation and the governor's reaction time).
pub const SAFETY_MARGIN: f64 = 0.15;
/// The fit policy never halves the budget below this.
pub const MIN_BUDGET: usize = 256;

/// Weight precision of a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantTier {
    /// 8-bit weights (Q8_0).
    Q8_0,
    /// 4-bit weights (Q4_0, Q4_K, Q4_K_M).
    Q4,
}

impl QuantTier {
    /// `"q8_0"` or `"q4"`.
    pub fn name(self) -> &'static str {
        match self {
            QuantTier::Q8_0 => "q8_0",
            QuantTier::Q4 => "q4",
        }
    }

    /// Parses `q8_0`/`q8`/`8` or `q4`/`q4_0`/`q4_k`/`q4_k_m`/`int4`/`4`.
    pub fn parse(s: &str) -> Option<QuantTier> {
        match s.trim().to_ascii_lowercase().as_str() {
            "q8_0" | "q8" | "8" | "int8" => Some(QuantTier::Q8_0),
            "q4" | "q4_0" | "q4_k" | "q4_k_s" | "q4_k_m" | "int4" | "4" => Some(QuantTier::Q4),
            _ => None,
        }
    }

    /// Nominal bits (the variant ranking uses them).
    fn bits(self) -> u8 {
        match self {
            QuantTier::Q8_0 => 8,
            QuantTier::Q4 => 4,
        }
    }

    /// What an in-memory requantization to this tier produces for a model of this shape:
    /// Q8_0, or Q4_K_M when the widths are whole K-quant blocks and Q4_0 otherwise (Q4_K_M
    /// would fall back to Q5_0 on most matrices).
    pub fn requant_target(self, config: &ModelConfig) -> QuantTarget {
        match self {
            QuantTier::Q8_0 => QuantTarget::Q8_0,
            QuantTier::Q4
                if config.n_embd.is_multiple_of(256) && config.n_ff.is_multiple_of(256) =>
            {
                QuantTarget::Q4KM
            }
            QuantTier::Q4 => QuantTarget::Q4_0,
        }
    }
}

/// How the tier is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierPolicy {
    /// The memory threshold rule (8 GiB).
    #[default]
    Default,
    /// The planner: highest precision that fits under the ceiling with a margin.
    Fit,
}

impl TierPolicy {
    /// Parses `default` or `fit`.
    pub fn parse(s: &str) -> Option<TierPolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "default" => Some(TierPolicy::Default),
            "fit" => Some(TierPolicy::Fit),
            _ => None,
        }
    }
}

impl std::str::FromStr for QuantTier {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownName::check(QuantTier::parse(s), s, "tier", "q8_0, q4")
    }
}

impl std::str::FromStr for TierPolicy {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownName::check(TierPolicy::parse(s), s, "tier policy", "default, fit")
    }
}

/// User overrides (`--quant`, `--budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TierOverrides {
    /// Force this precision.
    pub quant: Option<QuantTier>,
    /// Force this token budget.
    pub budget: Option<usize>,
}

/// A tier decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Weight precision.
    pub quant: QuantTier,
    /// Token budget (State capacity).
    pub token_budget: usize,
    /// Why, in one line.
    pub reason: String,
}

/// The default policy, the iPhone tiering statelm follows: a device with 8 GB of physical
/// memory or more (as sold: [`Q8_MIN_PHYSICAL`] counts) → Q8_0 weights and a 2048-token
/// budget, else 4-bit weights and 1024; overrides win. The gate is the RAM, not the per-app
/// ceiling: the ceiling decides what fits (the fit policy, the planner and the governor).
pub fn default_tier(mem: &DeviceProfile, ov: &TierOverrides) -> Tier {
    let big = mem.physical_memory >= Q8_MIN_PHYSICAL;
    let (quant, budget) = if big {
        (QuantTier::Q8_0, Q8_BUDGET)
    } else {
        (QuantTier::Q4, Q4_BUDGET)
    };
    let reason = format!(
        "physical memory {} {} 8 GiB → {} weights, {budget} tokens",
        mem.describe_memory(),
        if big { "≥" } else { "<" },
        quant.name()
    );
    let tier = Tier {
        quant,
        token_budget: budget,
        reason,
    };
    apply_overrides(tier, ov)
}

fn apply_overrides(mut t: Tier, ov: &TierOverrides) -> Tier {
    if let Some(q) = ov.quant.filter(|&q| q != t.quant) {
        t.reason.push_str(&format!(
            "; --quant {} overrides {}",
            q.name(),
            t.quant.name()
        ));
        t.quant = q;
    }
    if let Some(b) = ov.budget.filter(|&b| b != t.token_budget) {
        t.reason
            .push_str(&format!("; --budget {b} overrides {}", t.token_budget));
        t.token_budget = b;
    }
    t
}

/// The budgets the fit policy tries: `budget`, then halves down to [`MIN_BUDGET`].
fn budgets(budget: usize, fixed: bool) -> Vec<usize> {
    let mut out = vec![budget];
    while !fixed && out[out.len() - 1] / 2 >= MIN_BUDGET {
        out.push(out[out.len() - 1] / 2);
    }
    out
}

/// The fit policy. `footprint(quant, budget)` is the planned total for that precision and
/// budget, or `None` when no variant of that precision can be provided.
pub fn fit_tier(
    mem: &DeviceProfile,
    ov: &TierOverrides,
    requested_budget: usize,
    footprint: &dyn Fn(QuantTier, usize) -> Option<u64>,
) -> Tier {
    let usable = (mem.effective_memory() as f64 * (1.0 - SAFETY_MARGIN)) as u64;
    let quants: Vec<QuantTier> = match ov.quant {
        Some(q) => vec![q],
        None => vec![QuantTier::Q8_0, QuantTier::Q4],
    };
    let budget = ov.budget.unwrap_or(requested_budget).max(1);
    let head = format!(
        "fit: usable {} ({} − {:.0}% margin)",
        format_bytes(usable),
        mem.describe_memory(),
        SAFETY_MARGIN * 100.0
    );
    let mut tried: Vec<String> = Vec::new();
    let mut smallest: Option<(QuantTier, usize, u64)> = None;
    for &q in &quants {
        for b in budgets(budget, ov.budget.is_some()) {
            let Some(need) = footprint(q, b) else {
                tried.push(format!("no {} variant", q.name()));
                break;
            };
            if need <= usable {
                let mut reason = format!(
                    "{head}; {} at {b} tokens needs {}",
                    q.name(),
                    format_bytes(need)
                );
                if !tried.is_empty() {
                    reason.push_str(&format!(" (rejected: {})", tried.join(", ")));
                }
                return Tier {
                    quant: q,
                    token_budget: b,
                    reason,
                };
            }
            tried.push(format!("{} at {b} needs {}", q.name(), format_bytes(need)));
            if smallest.is_none_or(|s| need < s.2) {
                smallest = Some((q, b, need));
            }
        }
    }
    let Some((quant, token_budget, need)) = smallest else {
        let quant = ov.quant.unwrap_or(QuantTier::Q4);
        return Tier {
            quant,
            token_budget: budget,
            reason: format!(
                "{head}; nothing to plan ({}): keeping {} at {budget} tokens",
                tried.join(", "),
                quant.name()
            ),
        };
    };
    Tier {
        quant,
        token_budget,
        reason: format!(
            "{head}; nothing fits ({}): taking the smallest, {} at {token_budget} tokens \
             ({}), and relying on the governor",
            tried.join(", "),
            quant.name(),
            format_bytes(need)
        ),
    }
}

/// One GGUF file of a model.
#[derive(Debug, Clone)]
pub struct Variant {
    /// The file.
    pub path: PathBuf,
    /// Its precision label (`"Q4_K_M"`, `"Q8_0"`, `"F16"` …).
    pub label: String,
    /// Nominal bits per weight of the label (32, 16, 8, 6, 5, 4, 3, 2).
    pub bits: u8,
    /// File size.
    pub file_bytes: u64,
}

impl Variant {
    /// The tier this file provides as it is.
    pub fn tier(&self) -> Option<QuantTier> {
        match (self.label.as_str(), self.bits) {
            ("Q8_0", _) => Some(QuantTier::Q8_0),
            (_, 4) => Some(QuantTier::Q4),
            _ => None,
        }
    }
}

/// Label and nominal bits of a `general.file_type` (llama.cpp's `llama_ftype`).
fn ftype_label(ft: u32) -> Option<(&'static str, u8)> {
    Some(match ft {
        0 => ("F32", 32),
        1 => ("F16", 16),
        32 => ("BF16", 16),
        7 => ("Q8_0", 8),
        18 => ("Q6_K", 6),
        8 => ("Q5_0", 5),
        9 => ("Q5_1", 5),
        16 => ("Q5_K_S", 5),
        17 => ("Q5_K_M", 5),
        2 => ("Q4_0", 4),
        3 => ("Q4_1", 4),
        14 => ("Q4_K_S", 4),
        15 => ("Q4_K_M", 4),
        11..=13 => ("Q3_K", 3),
        10 => ("Q2_K", 2),
        _ => return None,
    })
}

/// Classifies a file by `general.file_type`, else by the type holding most matrix bytes.
fn classify(file: &GgufFile) -> (String, u8) {
    let ft = file.opt_u32("general.file_type").ok().flatten();
    if let Some((label, bits)) = ft.and_then(ftype_label) {
        return (label.to_string(), bits);
    }
    let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
    for t in file.tensors().iter().filter(|t| t.dims.len() >= 2) {
        match by_type.iter_mut().find(|e| e.0 == t.ty) {
            Some(e) => e.1 += t.n_bytes,
            None => by_type.push((t.ty, t.n_bytes)),
        }
    }
    let ty = by_type
        .iter()
        .max_by_key(|e| e.1)
        .map_or(GgmlType::F32, |e| e.0);
    let bits = match ty {
        GgmlType::F32 => 32,
        GgmlType::F16 | GgmlType::BF16 => 16,
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => 8,
        GgmlType::Q6_K => 6,
        GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q5_K => 5,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => 4,
        GgmlType::Q3_K => 3,
        _ => 2,
    };
    (ty.name().to_string(), bits)
}

/// The GGUF files among `paths` (a directory contributes its `*.gguf` files), classified.
/// Fails when they are not all the same model (architecture and shape).
pub fn discover_variants(paths: &[PathBuf]) -> Result<Vec<Variant>, ModelError> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.extension()
                        .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                })
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(p.clone());
        }
    }
    let mut out: Vec<Variant> = Vec::new();
    let mut shape: Option<(String, ModelConfig)> = None;
    for path in files {
        let file = GgufFile::open(&path)?;
        let config = ModelConfig::from_gguf(&file)?;
        match &shape {
            Some((first, c)) if !same_model(c, &config) => {
                return Err(ModelError::BadConfig(format!(
                    "{} and {first} are different models",
                    path.display()
                )))
            }
            Some(_) => {}
            None => shape = Some((path.display().to_string(), config)),
        }
        let (label, bits) = classify(&file);
        out.push(Variant {
            file_bytes: file.file_size(),
            path,
            label,
            bits,
        });
    }
    if out.is_empty() {
        return Err(ModelError::BadConfig("no GGUF file given".into()));
    }
    Ok(out)
}

fn same_model(a: &ModelConfig, b: &ModelConfig) -> bool {
    (
        a.arch,
        a.n_embd,
        a.n_layer,
        a.n_head,
        a.n_head_kv,
        a.n_ff,
        a.n_vocab,
    ) == (
        b.arch,
        b.n_embd,
        b.n_layer,
        b.n_head,
        b.n_head_kv,
        b.n_ff,
        b.n_vocab,
    )
}

/// How a tier is provided from the variants at hand.
#[derive(Debug, Clone)]
pub enum Provision {
    /// This file, as it is.
    File(Variant),
    /// This higher-precision file, requantized in memory to the target.
    Requantize(Variant, QuantTarget),
    /// No variant at or above the tier: the closest lower one, as it is.
    Lower(Variant),
}

/// How `quant` is provided: a file of that tier; else the highest-precision file above it,
/// requantized; else the most precise file below it.
pub fn provision(variants: &[Variant], quant: QuantTier) -> Result<Provision, ModelError> {
    if let Some(v) = variants.iter().find(|v| v.tier() == Some(quant)) {
        return Ok(Provision::File(v.clone()));
    }
    let best = |pred: &dyn Fn(&Variant) -> bool| {
        variants
            .iter()
            .filter(|v| pred(v))
            .max_by_key(|v| v.bits)
            .cloned()
    };
    if let Some(v) = best(&|v| v.bits > quant.bits()) {
        let file = GgufFile::open(&v.path)?;
        let target = quant.requant_target(&ModelConfig::from_gguf(&file)?);
        return Ok(Provision::Requantize(v, target));
    }
    best(&|_| true)
        .map(Provision::Lower)
        .ok_or_else(|| ModelError::BadConfig("no GGUF file given".into()))
}

/// The planner's sketch of what `provision` would load.
fn sketch_of(p: &Provision) -> Result<ModelSketch, ModelError> {
    let (v, target) = match p {
        Provision::File(v) | Provision::Lower(v) => (v, None),
        Provision::Requantize(v, t) => (v, Some(*t)),
    };
    let file = GgufFile::open(&v.path)?;
    let name = v.path.display().to_string();
    match target {
        None => ModelSketch::from_gguf(&file, &name),
        Some(t) => ModelSketch::from_recipe(&file, &name, t),
    }
}

/// Chooses the tier for these variants under `policy`.
pub fn choose_tier(
    variants: &[Variant],
    mem: &DeviceProfile,
    policy: TierPolicy,
    ov: &TierOverrides,
    opts: &LoadOptions,
) -> Result<Tier, ModelError> {
    if policy == TierPolicy::Default {
        return Ok(default_tier(mem, ov));
    }
    let mut sketches = Vec::new();
    for q in [QuantTier::Q8_0, QuantTier::Q4] {
        let s = match provision(variants, q)? {
            Provision::Lower(_) => None, // not really this tier
            p => Some(sketch_of(&p)?),
        };
        sketches.push((q, s));
    }
    let footprint = |q: QuantTier, budget: usize| {
        let (_, s) = sketches.iter().find(|e| e.0 == q)?;
        let mut o = PlanOptions::new(budget);
        o.ubatch = opts.ubatch;
        o.threads = if opts.threads == 0 {
            statelm_model::default_threads()
        } else {
            opts.threads
        };
        s.as_ref().map(|s| plan(s, &o).total)
    };
    Ok(fit_tier(mem, ov, Q8_BUDGET, &footprint))
}

/// An in-memory requantization done at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Requantized {
    /// The source file's label.
    pub from: String,
    /// The target.
    pub target: QuantTarget,
    /// Seconds spent requantizing and parsing the result.
    pub seconds: f64,
    /// Bytes of the in-memory GGUF.
    pub bytes: u64,
}

/// What [`load_for_device`] chose and did.
#[derive(Debug, Clone)]
pub struct TierChoice {
    /// The tier.
    pub tier: Tier,
    /// The file loaded (or requantized).
    pub path: PathBuf,
    /// Its label.
    pub variant: String,
    /// Set when the weights were requantized in memory.
    pub requantized: Option<Requantized>,
    /// Seconds to load (including any requantization).
    pub load_seconds: f64,
    /// One line: what was chosen and why.
    pub summary: String,
}

/// Chooses a tier for `mem` and loads the model variant that provides it: a file of the tier,
/// or a higher-precision file requantized in memory (an owned GGUF buffer), or — when neither
/// exists — the closest lower-precision file. `paths` are files or directories of one model.
pub fn load_for_device(
    paths: &[PathBuf],
    mem: &DeviceProfile,
    policy: TierPolicy,
    ov: &TierOverrides,
    opts: &LoadOptions,
) -> Result<(Arc<Model>, TierChoice), ModelError> {
    let variants = discover_variants(paths)?;
    let tier = choose_tier(&variants, mem, policy, ov, opts)?;
    let start = Instant::now();
    let (model, path, variant, requantized, how) = match provision(&variants, tier.quant)? {
        Provision::File(v) => {
            let m = Model::load(&v.path, opts)?;
            (m, v.path, v.label, None, "loaded".to_string())
        }
        Provision::Lower(v) => {
            let m = Model::load(&v.path, opts)?;
            let how = format!(
                "no {} or higher-precision variant: loaded",
                tier.quant.name()
            );
            (m, v.path, v.label, None, how)
        }
        Provision::Requantize(v, target) => {
            let (m, r) = load_requantized(&v.path, &v.label, target, opts)?;
            let how = format!(
                "requantized {} → {} in memory in {:.2} s ({}) from",
                r.from,
                r.target.name(),
                r.seconds,
                format_bytes(r.bytes)
            );
            (m, v.path, v.label, Some(r), how)
        }
    };
    let load_seconds = start.elapsed().as_secs_f64();
    let summary = format!(
        "tier {} / {} tokens [{}]; {how} {} ({variant}) in {load_seconds:.2} s",
        tier.quant.name(),
        tier.token_budget,
        tier.reason,
        file_name(&path),
    );
    let choice = TierChoice {
        tier,
        path,
        variant,
        requantized,
        load_seconds,
        summary,
    };
    Ok((model, choice))
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// Requantizes the file at `path` to `target` into an owned GGUF buffer and loads it.
pub fn load_requantized(
    path: &Path,
    label: &str,
    target: QuantTarget,
    opts: &LoadOptions,
) -> Result<(Arc<Model>, Requantized), ModelError> {
    let start = Instant::now();
    let source = GgufFile::open(path)?;
    let mut q = QuantizeOptions::new(target);
    q.threads = opts.threads;
    let (bytes, _) = quantize_to_bytes(&source, &q)?;
    drop(source);
    let n = bytes.len() as u64;
    let file = GgufFile::from_bytes(bytes)?;
    let model = Model::from_gguf(file, opts)?;
    let r = Requantized {
        from: label.to_string(),
        target,
        seconds: start.elapsed().as_secs_f64(),
        bytes: n,
    };
    Ok((Arc::new(model), r))
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn tiers_and_policies_parse_by_name() {
        assert_eq!("int4".parse::<QuantTier>(), Ok(QuantTier::Q4));
        assert_eq!("fit".parse::<TierPolicy>(), Ok(TierPolicy::Fit));
        let e = "q3".parse::<QuantTier>().unwrap_err();
        assert_eq!(e.to_string(), "unknown tier \"q3\" (q8_0, q4)");
    }
}
