//! Fuzzes the GGUF parser: any input must give `Ok` or `Err`, never a panic,
//! an abort or an unbounded allocation. Inputs that parse are also checked
//! for internal consistency and for a bit-exact writer round trip.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statelm_gguf::{GgufFile, GgufWriter};

/// Re-encodes a parsed file with the writer (metadata and tensors in order).
fn rewrite(f: &GgufFile) -> Option<Vec<u8>> {
    let mut w = GgufWriter::new();
    w.copy_metadata_from(f);
    for t in f.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t).to_vec())
            .ok()?;
    }
    let mut out = Vec::new();
    w.write_to(&mut out).ok()?;
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        assert_eq!(f.tensor(&t.name), Some(t));
        assert_eq!(t.offset % f.alignment(), 0);
    }
    for (k, v) in f.metadata() {
        assert!(f.get(k).is_some());
        let _ = v.to_string();
    }
    let _ = f.architecture();

    // What the writer produces from a parsed file must parse, and writing it
    // again must give the same bytes (compared as bytes, so NaNs are fine).
    let Some(once) = rewrite(&f) else { return };
    let g = GgufFile::from_bytes(once.clone()).expect("writer output must parse");
    assert_eq!(g.metadata().len(), f.metadata().len());
    assert_eq!(g.tensors().len(), f.tensors().len());
    let twice = rewrite(&g).expect("rewriting writer output must work");
    assert_eq!(once, twice);
});
