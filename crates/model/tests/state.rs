//! The State contract: stateful decode equals stateless recompute, snapshots resume exactly,
//! context shifts match a fresh prefill, and bad input is a typed error.

use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::{
    argmax, Arch, KvType, LoadOptions, Model, ModelError, RetainOutcome, SnapshotError,
    StateOptions,
};
use std::sync::Arc;

fn synthetic(arch: Arch, ubatch: usize) -> (tempfile::TempDir, Arc<Model>) {
    synthetic_with(SyntheticSpec::tiny(arch), ubatch)
}

fn synthetic_with(spec: SyntheticSpec, ubatch: usize) -> (tempfile::TempDir, Arc<Model>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_synthetic_model(&path, &spec).unwrap();
    let opts = LoadOptions {
        threads: 2,
        ubatch,
        ..LoadOptions::default()
    };
    (dir, Model::load(&path, &opts).unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| 3 + ((i * 37 + 11) % 300) as u32).collect()
}

/// Greedy-decodes `steps` tokens one at a time and checks each step against recomputing the
/// whole sequence from scratch.
fn stateful_equals_stateless(model: &Model, prompt: &[u32], steps: usize, tol: f32) {
    let mut state = model
        .new_state_with(StateOptions {
            capacity: 256,
            kv_type: KvType::F32,
        })
        .unwrap();
    let mut all = prompt.to_vec();
    let mut logits = model.forward(&mut state, prompt).unwrap();
    for step in 0..steps {
        let fresh = model.forward_stateless(&all).unwrap();
        let d = max_diff(logits.last(), fresh.last());
        assert!(d < tol, "step {step}: stateful vs stateless differ by {d}");
        let next = argmax(logits.last());
        all.push(next);
        logits = model.forward(&mut state, &[next]).unwrap();
    }
    assert_eq!(state.tokens(), &all[..]);
}

#[test]
fn synthetic_models_stateful_equals_stateless() {
    for arch in Arch::ALL {
        let (_d, model) = synthetic_with(SyntheticSpec::tiny_with_rope_factors(arch), 4);
        stateful_equals_stateless(&model, &prompt(21), 12, 2e-3);
    }
}

#[test]
fn sliding_window_ring_matches_unwrapped_cache() {
    // ubatch 2: the window-8 layers keep a 10-cell ring that wraps many times.
    // ubatch 512: the ring is as large as the state, so only the mask applies.
    // 30 tokens keep both runs below the GEMM threshold (32): the same projection kernels, so
    // only the cells' order differs. (Across the threshold, f32 summation order flips an
    // activation's 8-bit rounding now and then: ~1e-2 on this tiny model.)
    let (_d1, small) = synthetic(Arch::Gemma3, 2);
    let (_d2, large) = synthetic(Arch::Gemma3, 512);
    let toks = prompt(30);
    let opts = StateOptions {
        capacity: 64,
        kv_type: KvType::F32,
    };
    let mut s1 = small.new_state_with(opts).unwrap();
    let mut s2 = large.new_state_with(opts).unwrap();
    let a = small.forward(&mut s1, &toks).unwrap();
    let b = large.forward(&mut s2, &toks).unwrap();
    let d = max_diff(a.last(), b.last());
    assert!(d < 1e-4, "ring vs unwrapped cache: {d}");
    assert!(
        s1.kv_bytes() < s2.kv_bytes(),
        "the ring must hold less than the full cache"
    );
}

#[test]
fn snapshot_resumes_exactly_and_rejects_corruption() {
    for arch in Arch::ALL {
        let (dir, model) = synthetic_with(SyntheticSpec::tiny_with_rope_factors(arch), 8);
        let mut state = model.new_state(128);
        model.forward(&mut state, &prompt(17)).unwrap();
        let path = dir.path().join("s.snap");
        state.save_to_file(&path).unwrap();
        let mut restored = statelm_model::State::load_from_file(&path, &model).unwrap();
        assert_eq!(restored.tokens(), state.tokens());
        let a = model.forward(&mut state, &[42]).unwrap();
        let b = model.forward(&mut restored, &[42]).unwrap();
        assert_eq!(
            a.last(),
            b.last(),
            "{arch:?}: a restored state must continue bit for bit"
        );
    }
    let (dir, model) = synthetic(Arch::Qwen2, 8);
    let mut state = model.new_state(128);
    model.forward(&mut state, &prompt(17)).unwrap();
    let path = dir.path().join("s.snap");
    state.save_to_file(&path).unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x10;
    let err = statelm_model::State::load(&mut &flipped[..], &model).unwrap_err();
    assert!(
        matches!(err, ModelError::Snapshot(SnapshotError::Checksum)),
        "{err}"
    );
    for cut in [0, 7, 12, 100, bytes.len() - 1] {
        assert!(statelm_model::State::load(&mut &bytes[..cut], &model).is_err());
    }
    let (_d2, other) = synthetic(Arch::Llama, 8);
    let err = statelm_model::State::load(&mut &bytes[..], &other).unwrap_err();
    assert!(
        matches!(err, ModelError::Snapshot(SnapshotError::WrongModel)),
        "{err}"
    );
}

/// With one layer, every cached key and value depends only on its token and position, so a
/// shift (re-rotated keys) must equal a fresh prefill of the kept tokens. With more layers the
/// kept tokens' deeper keys still carry the dropped context — a shift is an approximation
/// there by nature (the real-model test measures how close).
#[test]
fn retain_matches_fresh_prefill_of_kept_tokens() {
    // Every architecture without sliding windows (Gemma's shifts inside the window re-prefill:
    // `gemma_shift_within_window_falls_back_to_reprefill`): the shift re-rotates with the
    // layer's own RoPE (factors, YaRN, partial rotary; none on NoPE layers).
    let shifting = Arch::ALL
        .into_iter()
        .filter(|a| !matches!(a, Arch::Gemma2 | Arch::Gemma3));
    for arch in shifting {
        let mut spec = SyntheticSpec::tiny_with_rope_factors(arch);
        spec.n_layer = 1;
        let (_d, model) = synthetic_with(spec, 4);
        let toks = prompt(30);
        let opts = StateOptions {
            capacity: 64,
            kv_type: KvType::F32,
        };
        let mut state = model.new_state_with(opts).unwrap();
        model.forward(&mut state, &toks).unwrap();
        let outcome = model.retain(&mut state, 4, 6).unwrap();
        assert_eq!(
            outcome,
            RetainOutcome::Shifted {
                dropped: 20,
                kept: 10
            }
        );
        let kept: Vec<u32> = toks[..4].iter().chain(&toks[24..]).copied().collect();
        assert_eq!(state.tokens(), &kept[..]);
        let a = model.forward(&mut state, &[50]).unwrap();
        let mut fresh = model.new_state_with(opts).unwrap();
        let mut with_next = kept.clone();
        with_next.push(50);
        let b = model.forward(&mut fresh, &with_next).unwrap();
        let d = max_diff(a.last(), b.last());
        assert!(
            d < 2e-3,
            "{arch:?} after retain: differs from fresh prefill by {d}"
        );
    }
}

#[test]
fn gemma_shift_within_window_falls_back_to_reprefill() {
    // Window 8 with a 12-cell ring: keeping 2 + 3 tokens of 40 needs keys the ring dropped.
    let (_d, model) = synthetic(Arch::Gemma3, 4);
    let mut state = model.new_state(64);
    model.forward(&mut state, &prompt(40)).unwrap();
    let outcome = state.retain(2, 3);
    assert_eq!(
        outcome,
        RetainOutcome::Reprefill {
            dropped: 35,
            kept: 5
        }
    );
    assert_eq!(state.pending_reprefill(), 5);
    model.forward(&mut state, &[9]).unwrap();
    assert_eq!(state.pending_reprefill(), 0);
    assert_eq!(state.len(), 6);
}

#[test]
fn q8_kv_cache_shift_reprefills() {
    let (_d, model) = synthetic(Arch::Llama, 4);
    let mut state = model
        .new_state_with(StateOptions {
            capacity: 64,
            kv_type: KvType::Q8_0,
        })
        .unwrap();
    model.forward(&mut state, &prompt(20)).unwrap();
    assert!(matches!(
        model.retain(&mut state, 2, 5).unwrap(),
        RetainOutcome::Reprefill { .. }
    ));
    assert_eq!(state.len(), 7);
}

#[test]
fn bad_input_is_a_typed_error() {
    let (dir, model) = synthetic(Arch::Llama, 4);
    let mut state = model.new_state(8);
    let err = model.forward(&mut state, &prompt(9)).unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::ContextFull {
                len: 0,
                adding: 9,
                capacity: 8
            }
        ),
        "{err}"
    );
    assert!(
        state.is_empty(),
        "a refused forward must not change the state"
    );
    let err = model.forward(&mut state, &[1_000_000]).unwrap_err();
    assert!(matches!(err, ModelError::InvalidToken { .. }), "{err}");
    let (_d2, other) = synthetic(Arch::Qwen2, 4);
    let mut foreign = other.new_state(8);
    assert!(matches!(
        model.forward(&mut foreign, &[5]),
        Err(ModelError::StateMismatch)
    ));

    // An unsupported architecture and a missing tensor are named.
    let mut spec = SyntheticSpec::tiny(Arch::Llama);
    spec.n_layer = 1;
    let path = dir.path().join("x.gguf");
    write_synthetic_model(&path, &spec).unwrap();
    let f = statelm_gguf::GgufFile::open(&path).unwrap();
    let mut w = statelm_gguf::GgufWriter::new();
    w.copy_metadata_from(&f);
    w.set(
        "general.architecture",
        statelm_gguf::Value::String("mamba".into()),
    );
    let bad = dir.path().join("bad.gguf");
    w.write_file_atomic(&bad).unwrap();
    let err = Model::load(&bad, &LoadOptions::default()).unwrap_err();
    assert!(err.to_string().contains("mamba"), "{err}");
    let mut w = statelm_gguf::GgufWriter::new();
    w.copy_metadata_from(&f);
    let missing = dir.path().join("missing.gguf");
    w.write_file_atomic(&missing).unwrap();
    let err = Model::load(&missing, &LoadOptions::default()).unwrap_err();
    assert!(err.to_string().contains("token_embd.weight"), "{err}");
}

#[test]
fn bytes_grow_with_tokens_and_clear_keeps_capacity() {
    let (_d, model) = synthetic(Arch::Qwen2, 4);
    let mut state = model.new_state(1024);
    let empty = state.kv_bytes();
    model.forward(&mut state, &prompt(10)).unwrap();
    let some = state.kv_bytes();
    assert!(some > empty);
    for _ in 0..300 {
        model.forward(&mut state, &[7]).unwrap();
    }
    assert!(state.kv_bytes() > some, "the cache grows as tokens arrive");
    let grown = state.kv_bytes();
    state.retain(2, 8);
    state.shrink();
    assert!(
        state.kv_bytes() < grown,
        "shrink after a trim returns cache memory"
    );
    model.forward(&mut state, &[7]).unwrap();
    assert_eq!(state.len(), 11, "the state keeps working after a shrink");
    state.clear();
    assert_eq!(state.len(), 0);
    state.shrink();
    assert!(state.bytes() <= some);
}

/// A CRC-valid snapshot can still be hostile: token ids outside the vocabulary and absurd
/// capacities are refused before anything is allocated or computed; and an authenticated
/// snapshot (a spill file) refuses any file but the one this process wrote.
#[test]
fn snapshots_are_checked_for_meaning_and_authenticity() {
    let (dir, model) = synthetic(Arch::Qwen2, 8);
    let mut state = model.new_state(128);
    model.forward(&mut state, &prompt(17)).unwrap();
    let mut bytes = Vec::new();
    state.save(&mut bytes).unwrap();
    // Header: magic 8, version 4, fingerprint 32, KV type 1, capacity 8, token count 8.
    let patched = |at: usize, value: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        let body = b.len() - 4;
        let crc = crc32fast::hash(&b[..body]);
        b[body..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let invalid = |b: Vec<u8>| match statelm_model::State::load(&mut &b[..], &model) {
        Err(ModelError::Snapshot(SnapshotError::Invalid(m))) => m,
        other => panic!("{:?}", other.map(|s| s.len())),
    };
    assert!(invalid(patched(61, &999_999_999u32.to_le_bytes())).contains("vocabulary"));
    assert!(invalid(patched(45, &(1u64 << 40).to_le_bytes())).contains("capacity"));

    let a = dir.path().join("a.snap");
    let b = dir.path().join("b.snap");
    let tag = state.save_to_file_authenticated(&a).unwrap();
    let back = statelm_model::State::load_from_file_authenticated(&a, &model, &tag).unwrap();
    assert_eq!(back.tokens(), state.tokens());
    let mut other = model.new_state(128);
    model.forward(&mut other, &prompt(9)).unwrap();
    other.save_to_file_authenticated(&b).unwrap();
    std::fs::copy(&b, &a).unwrap();
    let err = statelm_model::State::load_from_file_authenticated(&a, &model, &tag).unwrap_err();
    assert!(
        matches!(err, ModelError::Snapshot(SnapshotError::NotAuthentic)),
        "{err}"
    );
}

/// Private directories: created 0700, an existing one tightened, a symlink or another user's
/// directory refused.
#[cfg(unix)]
#[test]
fn private_directories_are_this_users_own() {
    use statelm_model::files::ensure_private_dir;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let nested = dir.path().join("a/b");
    ensure_private_dir(&nested).unwrap();
    assert_eq!(mode(&nested), 0o700);
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    ensure_private_dir(&open).unwrap();
    assert_eq!(mode(&open), 0o700);
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    let err = ensure_private_dir(&link).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
    // Another user's directory (only root can make one here).
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    if std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).is_ok() {
        let err = ensure_private_dir(&theirs).unwrap_err();
        assert!(err.to_string().contains("another user"), "{err}");
    }
}
