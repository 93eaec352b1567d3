//! What the grammar engine holds, measured by the allocator (each model's vocabulary trie and
//! a compiled grammar), against what the engine counts for it ([`Grammars::bytes`]), and that
//! [`Grammars::release`] hands it back. One test a process: the allocator counts every thread.

use cap::Cap;
use statelm_engine::sampling::constraint::Grammars;
use statelm_engine::Grammar;
use statelm_model::{LoadOptions, Model};
use std::alloc::System;
use std::path::PathBuf;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

fn live() -> i64 {
    ALLOCATOR.allocated() as i64
}

fn schema() -> Grammar {
    Grammar::JsonSchema(serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }))
}

/// Builds the trie and a constraint, runs 40 masked steps, releases; returns what the
/// allocator saw for the trie and what was freed.
fn measure(path: PathBuf) {
    let model = Model::load(&path, &LoadOptions::default()).expect("model loads");
    let g = Grammars::new(model.clone());
    assert_eq!(g.bytes(), 0, "nothing is built before the first grammar");
    let before = live();
    g.prepare().unwrap();
    let trie = live() - before;
    let counted = g.bytes() as i64;
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    eprintln!(
        "{name}: vocabulary {} tokens, trie {trie} bytes allocated, {counted} counted",
        model.config().n_vocab
    );
    let off = (counted - trie).abs() as f64 / trie as f64;
    assert!(off < 0.15, "{name}: the count is {:.0} % off", off * 100.0);

    let mut c = g.constraint(&schema()).unwrap();
    assert!(g.bytes() > counted as u64, "a cached grammar is counted");
    let mut logits = vec![0f32; model.config().n_vocab];
    for _ in 0..40 {
        logits.iter_mut().for_each(|l| *l = 0.0);
        c.mask(&mut logits).unwrap();
        let id = logits.iter().position(|l| l.is_finite()).unwrap();
        c.accept(id as u32).unwrap();
        if c.is_complete() {
            break;
        }
    }
    // A running constraint keeps the trie alive: only the cache goes.
    let freed = g.release(true);
    assert!(freed > 0 && (freed as i64) < counted, "{freed}");
    assert_eq!(
        g.bytes() as i64,
        counted,
        "the trie stays while a constraint runs"
    );
    drop(c);
    let held = live();
    assert_eq!(g.release(true) as i64, counted, "the idle trie goes");
    assert_eq!(g.bytes(), 0);
    let returned = held - live();
    eprintln!("{name}: release returned {returned} bytes to the allocator");
    assert!(
        returned as f64 > 0.85 * trie as f64,
        "{name}: {returned} of {trie} bytes returned"
    );
    // And it is built again on demand.
    g.constraint(&schema()).unwrap();
    assert!(g.bytes() as i64 >= counted);
}

#[test]
fn the_grammar_engine_is_counted_and_released() {
    // Missing models panic with instructions, unless STATELM_SKIP_MODEL_TESTS=1.
    let (Some(qwen), Some(gemma)) = (
        statelm_model::testing::qwen_path(),
        statelm_model::testing::gemma_path(),
    ) else {
        return;
    };
    measure(qwen);
    measure(gemma);
}
