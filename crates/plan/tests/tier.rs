//! Device tiers: decisions for a matrix of simulated devices under both policies, overrides,
//! and applying a tier to a set of GGUF variants (pick a file, or requantize in memory).

use statelm_gguf::GgmlType;
use statelm_governor::DeviceProfile;
use statelm_model::quantize::{quantize_file, QuantTarget, QuantizeOptions};
use statelm_model::testing::{self, write_synthetic_model, SyntheticSpec};
use statelm_model::{Arch, LoadOptions};
use statelm_plan::capacity::{plan, ModelSketch, PlanOptions};
use statelm_plan::tier::{
    choose_tier, default_tier, discover_variants, fit_tier, load_for_device, QuantTier,
    TierOverrides, TierPolicy, MIN_BUDGET, Q8_BUDGET, SAFETY_MARGIN,
};
use std::path::PathBuf;

const GIB: u64 = 1 << 30;

/// 4, 6, 8 and 12 GiB devices, and a 64 GiB host whose cgroup allows 1 GiB.
fn devices() -> Vec<DeviceProfile> {
    let mut v: Vec<DeviceProfile> = [4, 6, 8, 12]
        .iter()
        .map(|g| DeviceProfile::simulated(&format!("{g} GiB device"), g * GIB))
        .collect();
    let mut host = DeviceProfile::simulated("64 GiB host, 1 GiB cgroup", 64 * GIB);
    host.cgroup_limit = Some(GIB);
    v.push(host);
    v
}

#[test]
fn default_policy_matrix() {
    let want = [
        (QuantTier::Q4, 1024),
        (QuantTier::Q4, 1024),
        (QuantTier::Q8_0, 2048),
        (QuantTier::Q8_0, 2048),
        // The gate is the RAM; the 1 GiB cgroup decides what fits (the fit policy), not the tier.
        (QuantTier::Q8_0, 2048),
    ];
    for (mem, want) in devices().iter().zip(want) {
        let t = default_tier(mem, &TierOverrides::default());
        eprintln!(
            "default {:>28}: {} / {} — {}",
            mem.describe_memory(),
            t.quant.name(),
            t.token_budget,
            t.reason
        );
        assert_eq!((t.quant, t.token_budget), want, "{}", t.reason);
        assert!(t.reason.contains("8 GiB"), "{}", t.reason);
    }
    let big = &devices()[3];
    let forced = TierOverrides {
        quant: Some(QuantTier::Q4),
        budget: Some(4096),
    };
    let t = default_tier(big, &forced);
    assert_eq!((t.quant, t.token_budget), (QuantTier::Q4, 4096));
    assert!(
        t.reason.contains("--quant q4") && t.reason.contains("--budget 4096"),
        "{}",
        t.reason
    );
}

/// The tiering statelm follows, pinned: 8 GB iPhones (A17 Pro, A18 Pro) get int8 weights and
/// 2048 tokens, 6 GB ones (A15, A16) 4-bit and 1024 — whatever their per-app ceilings — and
/// an "8 GB" Android phone whose kernel reports 7.4 GiB counts as 8 GB.
#[test]
fn default_tier_rows_of_the_iphone_guide() {
    let device = |name: &str, physical: u64, ceiling: u64| {
        let mut d = DeviceProfile::simulated(name, physical);
        d.cgroup_limit = Some(ceiling);
        d
    };
    let rows = [
        (
            device("iPhone 15 Pro (A17 Pro)", 8 * GIB, 4 * GIB),
            QuantTier::Q8_0,
            2048,
        ),
        (
            device("iPhone 16 Pro (A18 Pro)", 8 * GIB, 4 * GIB),
            QuantTier::Q8_0,
            2048,
        ),
        (
            device("iPhone 13 Pro (A15)", 6 * GIB, 3 * GIB),
            QuantTier::Q4,
            1024,
        ),
        (
            device("iPhone 14 (A15)", 6 * GIB, 3 * GIB),
            QuantTier::Q4,
            1024,
        ),
        (
            device("iPhone 14 Pro (A16)", 6 * GIB, 3 * GIB),
            QuantTier::Q4,
            1024,
        ),
        (
            device("iPhone 15 (A16)", 6 * GIB, 3 * GIB),
            QuantTier::Q4,
            1024,
        ),
        (
            device("8 GB Android, MemTotal 7.4 GiB", 74 * GIB / 10, 7 * GIB / 2),
            QuantTier::Q8_0,
            2048,
        ),
        (
            device("6 GB Android, MemTotal 5.5 GiB", 11 * GIB / 2, 3 * GIB),
            QuantTier::Q4,
            1024,
        ),
    ];
    for (mem, quant, budget) in rows {
        let t = default_tier(&mem, &TierOverrides::default());
        assert_eq!(
            (t.quant, t.token_budget),
            (quant, budget),
            "{}: {}",
            mem.describe_memory(),
            t.reason
        );
    }
}

/// Footprint of a hypothetical dense model of `params` parameters at each precision.
fn hypothetical(params: u64) -> impl Fn(QuantTier, usize) -> Option<u64> {
    move |q, budget| {
        let bpw = if q == QuantTier::Q8_0 { 8.5 } else { 4.85 };
        Some(
            plan(
                &ModelSketch::hypothetical(params, bpw),
                &PlanOptions::new(budget),
            )
            .total,
        )
    }
}

/// The fit policy's search order: precision first, then budgets halving from `budget`.
fn search_order(budget: usize) -> Vec<(QuantTier, usize)> {
    let mut out = Vec::new();
    for q in [QuantTier::Q8_0, QuantTier::Q4] {
        let mut b = budget;
        loop {
            out.push((q, b));
            if b / 2 < MIN_BUDGET {
                break;
            }
            b /= 2;
        }
    }
    out
}

#[test]
fn fit_policy_matrix() {
    for params in [1_000_000_000u64, 3_000_000_000, 7_000_000_000] {
        let f = hypothetical(params);
        for mem in devices() {
            let t = fit_tier(&mem, &TierOverrides::default(), Q8_BUDGET, &f);
            eprintln!(
                "fit {:.0}B {:>28}: {} / {} — {}",
                params as f64 / 1e9,
                mem.describe_memory(),
                t.quant.name(),
                t.token_budget,
                t.reason
            );
            assert!(!t.reason.is_empty());
            let usable = (mem.effective_memory() as f64 * (1.0 - SAFETY_MARGIN)) as u64;
            let order = search_order(Q8_BUDGET);
            let first_fit = order.iter().position(|&(q, b)| f(q, b).unwrap() <= usable);
            match first_fit {
                Some(i) => assert_eq!((t.quant, t.token_budget), order[i], "{}", t.reason),
                None => {
                    assert!(t.reason.contains("nothing fits"), "{}", t.reason);
                    assert_eq!((t.quant, t.token_budget), (QuantTier::Q4, MIN_BUDGET));
                }
            }
        }
    }
    // Spot checks: a 1B model gets Q8_0 at 2048 tokens from 4 GiB up; a 7B model needs 12 GiB
    // for Q8_0; nothing 3B fits a 1 GiB cgroup.
    let ov = TierOverrides::default();
    let d = devices();
    let t = fit_tier(&d[0], &ov, 2048, &hypothetical(1_000_000_000));
    assert_eq!((t.quant, t.token_budget), (QuantTier::Q8_0, 2048));
    let t = fit_tier(&d[2], &ov, 2048, &hypothetical(7_000_000_000));
    assert_eq!(t.quant, QuantTier::Q4, "{}", t.reason);
    let t = fit_tier(&d[3], &ov, 2048, &hypothetical(7_000_000_000));
    assert_eq!((t.quant, t.token_budget), (QuantTier::Q8_0, 2048));
    let t = fit_tier(&d[4], &ov, 2048, &hypothetical(3_000_000_000));
    assert!(t.reason.contains("nothing fits"), "{}", t.reason);
}

#[test]
fn fit_prefers_a_smaller_budget_to_a_lower_precision() {
    // Q8_0 fits 1 GiB only at 1024 tokens or fewer; Q4 would fit at 2048.
    let f = |q: QuantTier, b: usize| {
        Some(match q {
            QuantTier::Q8_0 => (700 << 20) + ((b as u64) << 18),
            QuantTier::Q4 => 400 << 20,
        })
    };
    let mem = DeviceProfile::with_memory(GIB, None);
    let t = fit_tier(&mem, &TierOverrides::default(), 2048, &f);
    assert_eq!(
        (t.quant, t.token_budget),
        (QuantTier::Q8_0, 512),
        "{}",
        t.reason
    );
    assert!(t.reason.contains("rejected: q8_0 at 2048"), "{}", t.reason);
    // A fixed --budget forbids the fallback: the precision drops instead.
    let ov = TierOverrides {
        budget: Some(2048),
        quant: None,
    };
    let t = fit_tier(&mem, &ov, 2048, &f);
    assert_eq!(
        (t.quant, t.token_budget),
        (QuantTier::Q4, 2048),
        "{}",
        t.reason
    );
    // No Q8_0 variant at all: straight to Q4, saying so.
    let t = fit_tier(&mem, &TierOverrides::default(), 2048, &|q, _| {
        (q == QuantTier::Q4).then_some(1 << 20)
    });
    assert_eq!(t.quant, QuantTier::Q4);
    assert!(t.reason.contains("no q8_0 variant"), "{}", t.reason);
    // --quant q8_0 without a Q8_0 variant: kept (the loader falls back and says so).
    let ov = TierOverrides {
        quant: Some(QuantTier::Q8_0),
        budget: None,
    };
    let t = fit_tier(&mem, &ov, 2048, &|q, _| {
        (q == QuantTier::Q4).then_some(1 << 20)
    });
    assert_eq!(
        (t.quant, t.token_budget),
        (QuantTier::Q8_0, 2048),
        "{}",
        t.reason
    );
    assert!(t.reason.contains("nothing to plan"), "{}", t.reason);
}

fn synthetic(dir: &std::path::Path, name: &str, ty: GgmlType, arch: Arch) -> PathBuf {
    let path = dir.join(name);
    let spec = SyntheticSpec {
        weight_type: ty,
        ..SyntheticSpec::tiny(arch)
    };
    write_synthetic_model(&path, &spec).unwrap();
    path
}

#[test]
fn applying_a_tier_picks_or_requantizes_a_variant() {
    let dir = tempfile::tempdir().unwrap();
    let f16 = synthetic(dir.path(), "m-f16.gguf", GgmlType::F16, Arch::Llama);
    let opts = LoadOptions {
        threads: 1,
        ubatch: 8,
        ..LoadOptions::default()
    };
    let (small, big) = (
        DeviceProfile::with_memory(4 * GIB, None),
        DeviceProfile::with_memory(12 * GIB, None),
    );
    let ov = TierOverrides::default();
    // Only F16: both tiers requantize in memory.
    for (mem, target) in [(&big, QuantTarget::Q8_0), (&small, QuantTarget::Q4_0)] {
        let (model, choice) =
            load_for_device(&[dir.path().into()], mem, TierPolicy::Default, &ov, &opts).unwrap();
        eprintln!("{}", choice.summary);
        let r = choice.requantized.as_ref().expect("requantized");
        assert_eq!(r.target, target);
        assert!(
            choice.summary.contains("requantized F16"),
            "{}",
            choice.summary
        );
        let logits = model
            .forward(&mut model.new_state(16), &[5, 9, 13])
            .unwrap();
        assert!(logits.last().iter().all(|v| v.is_finite()));
    }
    // With a Q4_0 file beside it, the small device loads that file as it is.
    let q4 = dir.path().join("m-q4_0.gguf");
    quantize_file(&f16, &q4, &QuantizeOptions::new(QuantTarget::Q4_0)).unwrap();
    let (_, choice) = load_for_device(
        &[dir.path().into()],
        &small,
        TierPolicy::Default,
        &ov,
        &opts,
    )
    .unwrap();
    eprintln!("{}", choice.summary);
    assert!(choice.requantized.is_none());
    assert_eq!(
        (choice.path.as_path(), choice.variant.as_str()),
        (q4.as_path(), "Q4_0")
    );
    // Only the Q4_0 file on a big device: the lower variant, said so.
    let (_, choice) = load_for_device(
        std::slice::from_ref(&q4),
        &big,
        TierPolicy::Default,
        &ov,
        &opts,
    )
    .unwrap();
    assert!(
        choice
            .summary
            .contains("no q8_0 or higher-precision variant"),
        "{}",
        choice.summary
    );
    // The fit policy on the 1 GiB cgroup host picks Q8_0 (the synthetic model is tiny).
    let cg = &devices()[4];
    let (_, choice) =
        load_for_device(&[dir.path().into()], cg, TierPolicy::Fit, &ov, &opts).unwrap();
    assert_eq!(choice.tier.quant, QuantTier::Q8_0, "{}", choice.summary);
    // Two different models are refused.
    let other = synthetic(dir.path(), "other.gguf", GgmlType::Q8_0, Arch::Qwen2);
    let err = discover_variants(&[f16, other]).unwrap_err();
    assert!(err.to_string().contains("different models"), "{err}");
}

#[test]
fn real_model_requantized_at_load() {
    let Some(gemma) = testing::gemma_path() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let q8 = dir.path().join("gemma-3-270m-q8_0.gguf");
    quantize_file(&gemma, &q8, &QuantizeOptions::new(QuantTarget::Q8_0)).unwrap();
    let opts = LoadOptions::default();
    let ov = TierOverrides::default();
    let small = DeviceProfile::with_memory(4 * GIB, None);
    // Both files: the 4 GiB device gets the Q4_K_M file as it is.
    let both = [gemma.clone(), q8.clone()];
    let (_, choice) = load_for_device(&both, &small, TierPolicy::Default, &ov, &opts).unwrap();
    eprintln!("{}", choice.summary);
    assert_eq!(choice.variant, "Q4_K_M");
    // Only the Q8_0 file: requantized to Q4_0 in memory (rows of 640 rule out Q4_K_M).
    let (model, choice) = load_for_device(&[q8], &small, TierPolicy::Default, &ov, &opts).unwrap();
    eprintln!("{}", choice.summary);
    let r = choice.requantized.expect("requantized");
    assert_eq!(r.target, QuantTarget::Q4_0);
    let prompt = model
        .tokenizer()
        .encode("The capital of France is", true, false)
        .unwrap();
    let logits = model.forward(&mut model.new_state(64), &prompt).unwrap();
    let next = model
        .tokenizer()
        .decode(&[statelm_model::argmax(logits.last())]);
    eprintln!("requantized model continues with {next:?}");
    // llama.cpp's own Q4_0 of this model says " the" (19.8) or " a" (19.1) here.
    assert!(next == " the" || next == " a", "{next:?}");
    // The fit policy on a 1 GiB cgroup: Q8_0 at 2048 tokens fits (~400 MiB).
    let cg = &devices()[4];
    let variants = discover_variants(&both).unwrap();
    let t = choose_tier(&variants, cg, TierPolicy::Fit, &ov, &opts).unwrap();
    eprintln!(
        "fit on {}: {} / {} — {}",
        cg.describe_memory(),
        t.quant.name(),
        t.token_budget,
        t.reason
    );
    assert_eq!((t.quant, t.token_budget), (QuantTier::Q8_0, 2048));
}
