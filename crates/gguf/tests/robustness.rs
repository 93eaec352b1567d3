//! Corrupt input never panics: every truncation, random mutations
//! (proptest), and a deterministic mutation corpus from a real model header.

mod common;

use std::time::Instant;

use common::{model_path, small_file, Rng, GEMMA};
use proptest::prelude::*;
use statelm_gguf::{Array, GgufFile, GgufWriter, Value};

#[test]
fn every_truncation_is_an_error() {
    let full = small_file();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let last = f.tensors().last().unwrap();
    assert_eq!(
        last.offset + last.n_bytes,
        full.len() as u64,
        "no trailing padding"
    );
    for len in 0..full.len() {
        let r = GgufFile::from_bytes(full[..len].to_vec());
        assert!(r.is_err(), "prefix of {len} bytes parsed");
    }
}

/// Re-encodes a parsed file with the writer (as the fuzz target does).
fn rewrite(f: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.copy_metadata_from(f);
    for t in f.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t).to_vec())
            .unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

/// Values that stress counts, lengths, offsets and dims.
const NASTY_U64: [u64; 10] = [
    u64::MAX,
    u64::MAX - 7,
    1 << 63,
    1 << 60,
    1 << 32,
    (1 << 32) - 1,
    16 << 20,
    (16 << 20) + 1,
    65_536,
    0,
];

/// Applies one mutation chosen by `kind` at `pos` (taken modulo the length).
fn mutate(bytes: &mut [u8], kind: u8, pos: usize, val: u64) {
    if bytes.is_empty() {
        return;
    }
    let pos = pos % bytes.len();
    match kind % 5 {
        0 => bytes[pos] ^= 1 << (val % 8),
        1 => bytes[pos] = val as u8,
        2 | 3 => {
            let v = if kind % 5 == 2 {
                NASTY_U64[(val % 10) as usize]
            } else {
                val
            };
            let le = v.to_le_bytes();
            let n = le.len().min(bytes.len() - pos);
            bytes[pos..pos + n].copy_from_slice(&le[..n]);
        }
        _ => {
            let le = (val as u32).to_le_bytes();
            let n = le.len().min(bytes.len() - pos);
            bytes[pos..pos + n].copy_from_slice(&le[..n]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_mutations_never_panic(
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u64>()), 1..6),
        cut in any::<Option<usize>>(),
    ) {
        let mut bytes = small_file();
        for (kind, pos, val) in muts {
            mutate(&mut bytes, kind, pos, val);
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        // Ok or Err are both fine; a panic fails the test. A mutant that
        // parses must survive the fuzz target's writer round trip.
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            for t in f.tensors() {
                prop_assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
                prop_assert_eq!(f.tensor(&t.name), Some(t));
            }
            for (_, v) in f.metadata() {
                let _ = v.to_string();
            }
            let once = rewrite(&f);
            let g = GgufFile::from_bytes(once.clone()).unwrap();
            prop_assert_eq!(rewrite(&g), once);
        }
    }

    #[test]
    fn random_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
        bytes.extend_from_slice(&tail);
        let _ = GgufFile::from_bytes(bytes);
    }
}

/// Encoded size of a metadata value (without its type id).
fn encoded_len(v: &Value) -> usize {
    match v {
        Value::U8(_) | Value::I8(_) | Value::Bool(_) => 1,
        Value::U16(_) | Value::I16(_) => 2,
        Value::U32(_) | Value::I32(_) | Value::F32(_) => 4,
        Value::U64(_) | Value::I64(_) | Value::F64(_) => 8,
        Value::String(s) => 8 + s.len(),
        Value::Array(a) => 12 + elems_len(a, a.len()),
    }
}

/// Encoded size of the first `n` elements of an array.
fn elems_len(a: &Array, n: usize) -> usize {
    let fixed = |size: usize| size * n.min(a.len());
    match a {
        Array::U8(_) | Array::I8(_) | Array::Bool(_) => fixed(1),
        Array::U16(_) | Array::I16(_) => fixed(2),
        Array::U32(_) | Array::I32(_) | Array::F32(_) => fixed(4),
        Array::U64(_) | Array::I64(_) | Array::F64(_) => fixed(8),
        Array::String(v) => v.iter().take(n).map(|s| 8 + s.len()).sum(),
        Array::Array(v) => v.iter().take(n).map(|a| 12 + elems_len(a, a.len())).sum(),
    }
}

/// The header region of `f` (bytes up to the data section) with every
/// metadata array cut to at most `keep` elements, spliced from the real
/// bytes: same keys, values, strings and tensor infos, a fraction of the
/// parse cost (the full Gemma header holds 262 144 token strings).
fn shrunk_header(f: &GgufFile, keep: usize) -> Vec<u8> {
    let header = &f.bytes()[..f.data_offset() as usize];
    let mut out = header[..24].to_vec();
    let mut pos = 24;
    for (k, v) in f.metadata() {
        let kv_len = 8 + k.len() + 4 + encoded_len(v);
        match v {
            Value::Array(a) if a.len() > keep => {
                let head = 8 + k.len() + 4 + 4; // key, value type, element type
                out.extend_from_slice(&header[pos..pos + head]);
                out.extend_from_slice(&(keep as u64).to_le_bytes());
                let elems = pos + head + 8;
                out.extend_from_slice(&header[elems..elems + elems_len(a, keep)]);
            }
            _ => out.extend_from_slice(&header[pos..pos + kv_len]),
        }
        pos += kv_len;
    }
    out.extend_from_slice(&header[pos..]);
    out
}

/// Parses `n` deterministic mutants of `seed`; returns how many parsed.
fn mutants(seed: &[u8], n: usize, info_len: usize, rng: &mut Rng) -> usize {
    let info_start = seed.len().saturating_sub(info_len);
    let mut ok = 0;
    for i in 0..n {
        let mut bytes = seed.to_vec();
        for _ in 0..1 + rng.below(3) {
            // A third anywhere, a third in the first 4 KiB (metadata), a
            // third in the tensor infos at the end.
            let pos = match i % 3 {
                0 => rng.below(bytes.len() as u64),
                1 => rng.below(4096),
                _ => info_start as u64 + rng.below((bytes.len() - info_start) as u64),
            } as usize;
            let (kind, val) = (rng.next() as u8, rng.next());
            mutate(&mut bytes, kind, pos, val);
        }
        // Sometimes trim, sometimes pad with zeros.
        match rng.below(4) {
            0 => bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize),
            1 => bytes.resize(bytes.len() + rng.below(1 << 16) as usize, 0),
            _ => {}
        }
        ok += usize::from(GgufFile::from_bytes(bytes).is_ok());
    }
    ok
}

/// Mutates the header region of the real Gemma file 2000 times
/// (deterministically, no `rand`) and parses each: no panic. Most mutants
/// use the header with its arrays cut to 512 elements (see `shrunk_header`);
/// 100 use the full header, whose parse costs ~25 ms each.
#[test]
fn real_header_mutation_corpus() {
    let Some(path) = model_path(GEMMA) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    let full = &f.bytes()[..f.data_offset() as usize];
    let shrunk = shrunk_header(&f, 512);
    // The splice is right: the shrunk header parses up to the tensor bounds
    // check, with the same keys and tensors.
    let padded = {
        let mut b = shrunk.clone();
        let end = f
            .tensors()
            .iter()
            .map(|t| t.offset + t.n_bytes)
            .max()
            .unwrap();
        b.resize(
            b.len() + (end - f.data_offset() + f.alignment()) as usize,
            0,
        );
        GgufFile::from_bytes(b).unwrap()
    };
    assert_eq!(padded.metadata().len(), f.metadata().len());
    assert_eq!(
        padded.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        512
    );
    assert_eq!(padded.tensors().len(), f.tensors().len());
    drop(padded);

    let info_len = 16 << 10;
    let started = Instant::now();
    let mut rng = Rng::new(0x5EED);
    let ok = mutants(&shrunk, 1900, info_len, &mut rng) + mutants(full, 100, info_len, &mut rng);
    eprintln!("2000 mutants: {ok} parsed, in {:?}", started.elapsed());
}
