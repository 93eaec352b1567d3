//! Unit and property tests of the samplers.

use super::*;

use proptest::prelude::*;

fn logits_strategy() -> impl Strategy<Value = Vec<f32>> {
    // Small integers make ties common; the scale keeps values in a realistic range.
    prop::collection::vec((-20i32..20).prop_map(|x| x as f32 * 0.5), 1..200)
}

fn with_probs(logits: &[f32], t: f32) -> Vec<Candidate> {
    let mut c = candidates(logits);
    softmax(&mut c, t);
    c
}

fn ranked_ids(logits: &[f32]) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    ids
}

#[test]
fn argmax_breaks_ties_to_lowest_id() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 0.0, f32::NAN]), 1);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    assert_eq!(argmax(&[]), 0);
}

#[test]
fn greedy_sampler_ignores_randomness() {
    let mut a = Sampler::new(SamplingParams {
        seed: Some(1),
        ..SamplingParams::greedy()
    });
    let mut b = Sampler::new(SamplingParams {
        seed: Some(2),
        ..SamplingParams::greedy()
    });
    let logits = [0.1, 2.0, 2.0, -1.0];
    assert_eq!(a.sample(&mut logits.clone(), &[]), 1);
    assert_eq!(b.sample(&mut logits.clone(), &[]), 1);
}

#[test]
fn logit_bias_can_ban_the_best_token() {
    let mut params = SamplingParams::greedy();
    params.logit_bias.insert(1, f32::NEG_INFINITY);
    params.logit_bias.insert(99, 5.0); // out of range: ignored
    let mut s = Sampler::new(params);
    assert_eq!(s.sample(&mut [0.1, 2.0, 1.5], &[]), 2);
}

#[test]
fn penalties_follow_llama_cpp() {
    let mut l = [2.0, -2.0, 1.0, 4.0];
    apply_penalties(&mut l, &[0, 1, 0, 7], 2.0, 0.5, 0.25);
    // token 0: 2/2 - 2*0.5 - 0.25; token 1: -2*2 - 0.5 - 0.25; id 7 is out of range.
    assert_eq!(l, [1.0 - 1.0 - 0.25, -4.0 - 0.5 - 0.25, 1.0, 4.0]);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let logits: Vec<f32> = (0..1000)
        .map(|i| ((i * 7919) % 101) as f32 * 0.05)
        .collect();
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(1234),
        ..SamplingParams::default()
    };
    let run = |p: SamplingParams| {
        let mut s = Sampler::new(p);
        (0..50)
            .map(|_| s.sample(&mut logits.clone(), &[]))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(params.clone()), run(params.clone()));
    let other = SamplingParams {
        seed: Some(4321),
        ..params.clone()
    };
    assert_ne!(run(params), run(other));
}

#[test]
fn draw_follows_the_distribution() {
    let cands = [
        Candidate {
            id: 3,
            logit: 0.0,
            p: 0.75,
        },
        Candidate {
            id: 9,
            logit: 0.0,
            p: 0.25,
        },
    ];
    let mut rng = crate::rng::Rng::new(5);
    let n = 20_000;
    let threes = (0..n).filter(|_| draw(&cands, &mut rng) == 3).count();
    let frac = threes as f64 / n as f64;
    assert!((frac - 0.75).abs() < 0.02, "{frac}");
}

#[test]
fn all_banned_still_gives_a_distribution() {
    let mut c = candidates(&[f32::NEG_INFINITY; 4]);
    softmax(&mut c, 1.0);
    assert_eq!(c.iter().map(|c| c.p).sum::<f32>(), 1.0);
    assert_eq!(c[0].p, 1.0);
}

#[test]
fn top_p_grows_past_the_first_window() {
    // 1000 equal tokens: reaching p = 0.5 needs 500 of them (more than the first 64 looked at).
    let mut c = with_probs(&[0.0; 1000], 1.0);
    top_p(&mut c, 0.5);
    assert_eq!(c.len(), 500);
    assert_eq!(
        c.iter().map(|c| c.id).collect::<Vec<_>>(),
        (0..500).collect::<Vec<_>>()
    );
}

/// The obvious argmax: first index of the largest value, NaN counting as minus infinity.
fn naive_argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        let k = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x };
        if k(v) > k(logits[best]) {
            best = i;
        }
    }
    best as u32
}

#[test]
fn streaming_top_k_handles_many_ties() {
    let logits = vec![1.0f32; 5000];
    let c = top_k_candidates(&logits, 40);
    assert_eq!(
        c.iter().map(|c| c.id).collect::<Vec<_>>(),
        (0..40).collect::<Vec<_>>()
    );
}

proptest! {
    #[test]
    fn argmax_matches_the_obvious_one(
        logits in prop::collection::vec(prop_oneof![
            (-5i32..5).prop_map(|x| x as f32),
            Just(f32::NAN),
            Just(f32::NEG_INFINITY),
        ], 0..100)
    ) {
        prop_assert_eq!(argmax(&logits), naive_argmax(&logits));
    }

    #[test]
    fn streaming_top_k_equals_full_top_k(
        logits in prop::collection::vec((-8i32..8).prop_map(|x| x as f32), 1..3000),
        k in 1usize..50,
    ) {
        let mut full = candidates(&logits);
        top_k(&mut full, k);
        let fast = top_k_candidates(&logits, k);
        if k < logits.len() {
            prop_assert_eq!(fast, full);
        } else {
            full.sort_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
            prop_assert_eq!(fast, full);
        }
    }

    #[test]
    fn windowed_top_p_equals_full_top_p(logits in logits_strategy(), p in 0.01f32..0.999, t in 0.2f32..2.0) {
        let mut full = with_probs(&logits, t);
        top_p(&mut full, p);
        let fast = top_p_candidates(&logits, p, t);
        prop_assert_eq!(fast.len(), full.len());
        for (a, b) in fast.iter().zip(&full) {
            prop_assert!((a.p - b.p).abs() < 1e-5);
        }
        let ids = |c: &[Candidate]| c.iter().map(|c| c.id).collect::<std::collections::BTreeSet<_>>();
        prop_assert_eq!(ids(&fast), ids(&full));
    }

    #[test]
    fn distributions_sum_to_one(
        logits in logits_strategy(),
        t in 0.1f32..3.0,
        k in 0usize..50,
        p in 0.05f32..1.2,
        mp in 0.0f32..0.5,
    ) {
        let params = SamplingParams {
            temperature: t, top_k: k, top_p: p, min_p: mp, ..SamplingParams::default()
        };
        let d = distribution(&logits, &params);
        prop_assert!(!d.is_empty());
        let sum: f64 = d.iter().map(|c| c.p as f64).sum();
        prop_assert!((sum - 1.0).abs() < 1e-4, "sum {}", sum);
        prop_assert!(d.iter().all(|c| c.p >= 0.0));
        let full = with_probs(&logits, t);
        let full_sum: f64 = full.iter().map(|c| c.p as f64).sum();
        prop_assert!((full_sum - 1.0).abs() < 1e-4);
    }

    #[test]
    fn top_k_keeps_exactly_the_k_best(logits in logits_strategy(), k in 1usize..60) {
        let mut c = candidates(&logits);
        top_k(&mut c, k);
        let expect: Vec<u32> = ranked_ids(&logits).into_iter().take(k).collect();
        if k < logits.len() {
            prop_assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), expect);
        } else {
            prop_assert_eq!(c.len(), logits.len());
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p(logits in logits_strategy(), p in 0.01f32..0.999) {
        let mut c = with_probs(&logits, 1.0);
        let full = c.clone();
        top_p(&mut c, p);
        // The kept set is the most likely tokens (ties to lower ids), in that order ...
        let mut order = full.clone();
        order.sort_by(|a, b| b.p.total_cmp(&a.p).then(a.id.cmp(&b.id)));
        let kept: Vec<u32> = c.iter().map(|c| c.id).collect();
        let prefix: Vec<u32> = order.iter().take(kept.len()).map(|c| c.id).collect();
        prop_assert_eq!(&kept, &prefix);
        // ... reaching p (or all of them), and one fewer would not.
        let sum: f64 = c.iter().map(|c| c.p as f64).sum();
        prop_assert!(sum >= p as f64 || c.len() == full.len());
        let without_last = sum - c.last().map_or(0.0, |c| c.p as f64);
        prop_assert!(without_last < p as f64);
    }

    #[test]
    fn min_p_keeps_the_best_and_drops_the_unlikely(logits in logits_strategy(), mp in 0.0f32..1.0) {
        let mut c = with_probs(&logits, 1.0);
        let max = c.iter().map(|c| c.p).fold(0.0f32, f32::max);
        min_p(&mut c, mp);
        prop_assert!(c.iter().any(|c| c.p == max));
        prop_assert!(c.iter().all(|c| c.p >= mp * max));
    }

    #[test]
    fn penalties_never_raise_a_penalized_probability(
        logits in logits_strategy(),
        picks in prop::collection::vec(0usize..200, 0..20),
        repeat in 1.0f32..3.0,
        freq in 0.0f32..2.0,
        presence in 0.0f32..2.0,
    ) {
        let n = logits.len();
        let recent: Vec<u32> = picks.iter().map(|&i| (i % n) as u32).collect();
        let before = with_probs(&logits, 1.0);
        let mut adjusted = logits.clone();
        apply_penalties(&mut adjusted, &recent, repeat, freq, presence);
        let after = with_probs(&adjusted, 1.0);
        let penalized = |id: u32| recent.contains(&id);
        for i in 0..n {
            // A penalized logit never rises; an untouched one never changes.
            if penalized(i as u32) {
                prop_assert!(adjusted[i] <= logits[i]);
            } else {
                prop_assert_eq!(adjusted[i], logits[i]);
                prop_assert!(after[i].p >= before[i].p * (1.0 - 1e-5));
            }
        }
        // Relative to any untouched token, a penalized token's probability never rises, and
        // with a single penalized token its absolute probability never rises either.
        let distinct: std::collections::BTreeSet<u32> = recent.iter().copied().collect();
        for &i in &distinct {
            let i = i as usize;
            for j in (0..n).filter(|&j| !penalized(j as u32)) {
                let (b, a) = (before[i].p as f64 / before[j].p as f64, after[i].p as f64 / after[j].p as f64);
                prop_assert!(a <= b * (1.0 + 1e-4), "ratio {} -> {}", b, a);
            }
            if distinct.len() == 1 {
                prop_assert!(after[i].p <= before[i].p * (1.0 + 1e-5));
            }
        }
    }

    #[test]
    fn sampling_picks_only_kept_tokens(logits in logits_strategy(), seed in any::<u64>(), k in 1usize..10) {
        let params = SamplingParams { temperature: 1.0, top_k: k, seed: Some(seed), ..SamplingParams::default() };
        let mut s = Sampler::new(params.clone());
        let id = s.sample(&mut logits.clone(), &[]);
        let allowed = distribution(&logits, &params);
        prop_assert!(allowed.iter().any(|c| c.id == id));
    }
}
