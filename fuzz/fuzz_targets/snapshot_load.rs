//! Fuzzes the State snapshot loader (spill files, saved sessions) against a small synthetic
//! model: any bytes give `Ok` or `Err`, never a panic, an abort or a huge allocation; what
//! loads saves back and loads again. Besides the raw input, a real snapshot is mutated at the
//! offsets the input names and its checksum fixed, so the fields behind the CRC get fuzzed too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::{Arch, LoadOptions, Model};
use std::sync::{Arc, OnceLock};

struct Fixture {
    _dir: tempfile::TempDir,
    model: Arc<Model>,
    snapshot: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("m.gguf");
        write_synthetic_model(&path, &SyntheticSpec::tiny(Arch::Qwen2)).expect("model written");
        let opts = LoadOptions {
            threads: 1,
            ..LoadOptions::default()
        };
        let model = Model::load(&path, &opts).expect("model loads");
        let mut state = model.new_state(16);
        model
            .forward(&mut state, &[1, 2, 3, 4, 5])
            .expect("forward");
        let mut snapshot = Vec::new();
        state.save(&mut snapshot).expect("save");
        Fixture {
            _dir: dir,
            model,
            snapshot,
        }
    })
}

fn check(bytes: &[u8], model: &Model) {
    let Ok(state) = statelm_model::State::load(&mut &bytes[..], model) else {
        return;
    };
    let mut again = Vec::new();
    state.save(&mut again).expect("a loaded state saves");
    let back = statelm_model::State::load(&mut &again[..], model).expect("what was saved loads");
    assert_eq!(back.tokens(), state.tokens());
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    check(data, &f.model);
    let mut b = f.snapshot.clone();
    let body = b.len() - 4;
    for c in data.chunks_exact(3) {
        let at = u16::from_le_bytes([c[0], c[1]]) as usize % body;
        b[at] ^= c[2];
    }
    let crc = crc32fast::hash(&b[..body]);
    b[body..].copy_from_slice(&crc.to_le_bytes());
    check(&b, &f.model);
});
