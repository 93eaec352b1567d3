//! What the loader refuses: a model feature statelm does not implement is an error naming it at
//! load, never skipped (issue 34: Llama 3.x's `rope_freqs` was once silently ignored).

use statelm_gguf::{GgmlType, Value};
use statelm_model::testing::{write_synthetic_model, write_synthetic_model_with, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model, ModelError};

fn load_with(arch: Arch, edit: impl FnOnce(&mut statelm_gguf::GgufWriter)) -> ModelError {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write_synthetic_model_with(&path, &SyntheticSpec::tiny(arch), edit).unwrap();
    Model::load(&path, &LoadOptions::default()).unwrap_err()
}

#[test]
fn every_architecture_loads_and_runs() {
    for arch in Arch::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_synthetic_model(&path, &SyntheticSpec::tiny_with_rope_factors(arch)).unwrap();
        let model = Model::load(&path, &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", arch.name()));
        assert_eq!(model.config().arch, arch);
        let mut state = model.new_state(16);
        let logits = model.forward(&mut state, &[1, 40, 41, 42]).unwrap();
        assert!(
            logits.last().iter().all(|v| v.is_finite()),
            "{}",
            arch.name()
        );
    }
}

#[test]
fn an_unknown_key_of_the_architecture_is_refused_by_name() {
    let e = load_with(Arch::Llama, |w| w.set("llama.expert_count", Value::U32(8)));
    assert!(
        matches!(&e, ModelError::UnsupportedKey { key, .. } if key == "llama.expert_count"),
        "{e}"
    );
    let e = load_with(Arch::Qwen3, |w| {
        w.set("qwen3.rope.scaling.type", Value::String("dynamic".into()));
    });
    assert!(e.to_string().contains("qwen3.rope.scaling.type"), "{e}");
}

#[test]
fn an_unused_tensor_is_refused_by_name() {
    let e = load_with(Arch::Llama, |w| {
        let data = vec![0u8; 64 * 4];
        w.add_tensor("blk.0.attn_output.bias", &[64], GgmlType::F32, data)
            .unwrap();
    });
    assert!(
        matches!(&e, ModelError::UnsupportedTensor { name, arch: "llama" } if name == "blk.0.attn_output.bias"),
        "{e}"
    );
    // rope_freqs on an architecture that has no use for it.
    let e = load_with(Arch::Qwen3, |w| {
        let data = vec![0u8; 24 * 4];
        w.add_tensor("rope_freqs.weight", &[24], GgmlType::F32, data)
            .unwrap();
    });
    assert!(e.to_string().contains("rope_freqs.weight"), "{e}");
}

#[test]
fn an_unsupported_architecture_lists_the_supported_ones() {
    let e = load_with(Arch::Llama, |w| {
        w.set("general.architecture", Value::String("lfm2moe".into()));
    });
    let msg = e.to_string();
    assert!(msg.contains("\"lfm2moe\""), "{msg}");
    for arch in Arch::ALL {
        assert!(msg.contains(arch.name()), "{msg}");
    }
}
