//! LFM2's short-convolution state: cut back exactly within its ring (lookup rollbacks, a
//! re-rendered turn end), re-prefilled beyond it, sized by the one cache formula, and
//! bit-identical whatever the micro-batch (rows carried across batches by the ring).

use statelm_model::kv::kv_bytes_for;
use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::{
    Arch, KvType, LoadOptions, Model, Numerics, RetainOutcome, StateOptions, CONV_ROLLBACK,
};
use std::sync::Arc;

fn lfm2(ubatch: usize) -> (tempfile::TempDir, Arc<Model>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lfm2.gguf");
    write_synthetic_model(&path, &SyntheticSpec::tiny(Arch::Lfm2)).unwrap();
    let opts = LoadOptions {
        threads: 2,
        ubatch,
        // llama.cpp's summation orders whatever the batch's shape, so that results are
        // bit-identical across micro-batches (the fast kernels choose per shape).
        numerics: Numerics::LlamaCpp,
    };
    (dir, Model::load(&path, &opts).unwrap())
}

const OPTS: StateOptions = StateOptions {
    capacity: 128,
    kv_type: KvType::F32,
};

fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| 3 + ((i * 37 + 11) % 300) as u32).collect()
}

/// The logits of `next` after `kept`, from a fresh state.
fn fresh(model: &Model, kept: &[u32], next: u32) -> Vec<f32> {
    let mut s = model.new_state_with(OPTS).unwrap();
    let mut all = kept.to_vec();
    all.push(next);
    model.forward(&mut s, &all).unwrap().last().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn the_model_has_both_kinds_of_layer() {
    let (_d, model) = lfm2(4);
    let c = model.config();
    assert!((0..c.n_layer).any(|il| c.is_conv_layer(il)));
    assert!((0..c.n_layer).any(|il| !c.is_conv_layer(il)));
}

#[test]
fn a_cut_within_the_ring_is_exact_and_a_deeper_one_reprefills() {
    let (_d, model) = lfm2(4);
    let toks = prompt(70);
    for (keep, reprefill) in [(70 - 5, false), (70 - CONV_ROLLBACK, false), (10, true)] {
        let mut s = model.new_state_with(OPTS).unwrap();
        model.forward(&mut s, &toks).unwrap();
        let outcome = model.retain(&mut s, keep, 0).unwrap();
        let dropped = 70 - keep;
        let want = if reprefill {
            RetainOutcome::Reprefill {
                dropped,
                kept: keep,
            }
        } else {
            RetainOutcome::Shifted {
                dropped,
                kept: keep,
            }
        };
        assert_eq!(outcome, want, "cut to {keep}");
        let a = model.forward(&mut s, &[50]).unwrap();
        let d = max_diff(a.last(), &fresh(&model, &toks[..keep], 50));
        assert_eq!(d, 0.0, "cut to {keep}: differs from a fresh prefill by {d}");
    }
}

#[test]
fn micro_batches_and_single_steps_agree() {
    let toks = prompt(40);
    let (_a, one) = lfm2(1);
    let (_b, many) = lfm2(64);
    let mut s1 = one.new_state_with(OPTS).unwrap();
    let mut s2 = many.new_state_with(OPTS).unwrap();
    let a = one.forward(&mut s1, &toks).unwrap();
    let b = many.forward(&mut s2, &toks).unwrap();
    assert_eq!(a.last(), b.last(), "ubatch 1 vs 64");
}

#[test]
fn cache_bytes_follow_the_one_formula() {
    let (_d, model) = lfm2(4);
    let mut s = model.new_state_with(OPTS).unwrap();
    assert_eq!(s.kv_bytes(), 0, "a new state holds nothing");
    model.forward(&mut s, &prompt(20)).unwrap();
    let ring = Some(model.ubatch());
    let want = kv_bytes_for(model.config(), OPTS.kv_type, OPTS.capacity, ring, 20);
    assert_eq!(s.kv_bytes() as u64, want);
    let attn_only = (0..model.config().n_layer)
        .filter(|&il| !model.config().is_conv_layer(il))
        .count();
    assert!(want > 0 && attn_only > 0);
    s.clear();
    s.shrink();
    assert_eq!(
        s.kv_bytes(),
        0,
        "a cleared, shrunk state gives its memory back"
    );
}

#[test]
fn a_trim_by_reprefill_equals_a_fresh_prefill_of_what_was_kept() {
    let (_d, model) = lfm2(4);
    let toks = prompt(60);
    let mut s = model.new_state_with(OPTS).unwrap();
    model.forward(&mut s, &toks).unwrap();
    let outcome = model
        .retain_with(&mut s, 4, 10, statelm_model::RetainMethod::Reprefill)
        .unwrap();
    assert_eq!(
        outcome,
        RetainOutcome::Reprefill {
            dropped: 46,
            kept: 14
        }
    );
    let kept: Vec<u32> = toks[..4].iter().chain(&toks[50..]).copied().collect();
    let a = model.forward(&mut s, &[50]).unwrap();
    assert_eq!(a.last(), &fresh(&model, &kept, 50)[..]);
    // A shift keeps the suffix's last inputs: the state goes on from them.
    let mut s = model.new_state_with(OPTS).unwrap();
    model.forward(&mut s, &toks).unwrap();
    let outcome = model.retain(&mut s, 4, 10).unwrap();
    assert_eq!(
        outcome,
        RetainOutcome::Shifted {
            dropped: 46,
            kept: 14
        }
    );
    assert_eq!(s.tokens(), &kept[..]);
    model.forward(&mut s, &[50]).unwrap();
}
