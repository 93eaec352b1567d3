//! Writer → reader round trips.

mod common;

use common::{every_value, pseudo_bytes};
use proptest::prelude::*;
use statelm_gguf::{Array, GgmlType, GgufError, GgufFile, GgufWriter, Value};

fn write(w: &GgufWriter) -> Vec<u8> {
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

fn round_trip(w: &GgufWriter) -> GgufFile {
    GgufFile::from_bytes(write(w)).unwrap()
}

#[test]
fn every_value_type_round_trips() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.set(k, v);
    }
    let f = round_trip(&w);
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.metadata(), every_value().as_slice());
    for (k, v) in every_value() {
        assert_eq!(f.get(&k), Some(&v), "{k}");
    }
    assert!(f.tensors().is_empty());
}

/// Adds one tensor of every type, with shapes that are whole blocks.
fn add_every_type(w: &mut GgufWriter) {
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        let dims = [ty.block_size() as u64 * 2, 3];
        let n = ty.bytes_for(dims[0] * dims[1]).unwrap() as usize;
        w.add_tensor(format!("t.{ty}"), &dims, ty, pseudo_bytes(i as u64, n))
            .unwrap();
    }
}

fn check_every_type(f: &GgufFile, alignment: u64) {
    assert_eq!(f.alignment(), alignment);
    assert_eq!(f.tensors().len(), GgmlType::ALL.len());
    assert_eq!(f.data_offset() % alignment, 0);
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        let name = format!("t.{ty}");
        let t = f.tensor(&name).unwrap();
        assert_eq!(&f.tensors()[i], t);
        assert_eq!(t.ty, ty);
        assert_eq!(t.dims, vec![ty.block_size() as u64 * 2, 3]);
        assert_eq!(t.row_len(), ty.block_size() as u64 * 2);
        assert_eq!(t.n_rows(), 3);
        assert_eq!(t.n_elements(), ty.block_size() as u64 * 6);
        assert_eq!(t.offset % alignment, 0, "{name} at {}", t.offset);
        assert!(t.offset >= f.data_offset());
        let expected = pseudo_bytes(i as u64, t.n_bytes as usize);
        assert_eq!(f.tensor_data(t), expected.as_slice(), "{name}");
    }
    assert_eq!(f.file_size() % alignment, 0);
}

#[test]
fn every_tensor_type_round_trips() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::from("test"));
    add_every_type(&mut w);
    let f = round_trip(&w);
    check_every_type(&f, 32);
    assert_eq!(f.get("general.alignment"), None);
    assert_eq!(f.tensor("missing"), None);
}

#[test]
fn custom_alignments_round_trip() {
    for alignment in [1u64, 8, 64, 256, 4096] {
        let mut w = GgufWriter::new();
        w.set("a", Value::U8(1));
        w.set_alignment(alignment);
        add_every_type(&mut w);
        let f = round_trip(&w);
        check_every_type(&f, alignment);
        assert_eq!(f.get_u32("general.alignment").unwrap() as u64, alignment);
        assert_eq!(
            f.get("general.alignment"),
            Some(&Value::U32(alignment as u32))
        );
    }
}

#[test]
fn zero_dim_and_empty_tensors() {
    let mut w = GgufWriter::new();
    w.add_tensor("scalar", &[], GgmlType::F32, vec![1, 2, 3, 4])
        .unwrap();
    w.add_tensor("empty", &[0, 5], GgmlType::Q4_K, vec![])
        .unwrap();
    w.add_tensor("four", &[2, 1, 1, 2], GgmlType::I8, vec![1, 2, 3, 4])
        .unwrap();
    let f = round_trip(&w);
    let s = f.tensor("scalar").unwrap();
    assert_eq!((s.n_elements(), s.n_bytes), (1, 4));
    assert_eq!(f.tensor_data(s), &[1, 2, 3, 4]);
    let e = f.tensor("empty").unwrap();
    assert_eq!(
        (e.n_elements(), e.n_rows(), f.tensor_data(e).len()),
        (0, 5, 0)
    );
    assert_eq!(f.tensor("four").unwrap().n_rows(), 2);
}

#[test]
fn set_replaces_in_place_and_remove() {
    let mut w = GgufWriter::new();
    w.set("a", Value::U8(1));
    w.set("b", Value::U8(2));
    w.set("a", Value::from("x"));
    assert_eq!(w.metadata()[0], ("a".to_string(), Value::from("x")));
    assert_eq!(w.metadata().len(), 2);
    assert_eq!(w.remove("b"), Some(Value::U8(2)));
    assert_eq!(w.remove("b"), None);
    let f = round_trip(&w);
    assert_eq!(f.metadata(), &[("a".to_string(), Value::from("x"))]);
}

#[test]
fn writer_rejects_bad_tensors() {
    let mut w = GgufWriter::new();
    let err = |r: Result<(), GgufError>| match r {
        Err(GgufError::InvalidTensor { name, reason }) => format!("{name}: {reason}"),
        other => panic!("expected InvalidTensor, got {other:?}"),
    };
    let e = err(w.add_tensor("x", &[32], GgmlType::Q8_0, vec![0; 33]));
    assert!(e.contains("33 bytes") && e.contains("34"), "{e}");
    let e = err(w.add_tensor("x", &[16, 2], GgmlType::Q8_0, vec![0; 34]));
    assert!(e.contains("block size 32"), "{e}");
    let e = err(w.add_tensor("x", &[u64::MAX, 2], GgmlType::F32, vec![]));
    assert!(e.contains("overflow"), "{e}");
    let e = err(w.add_tensor("x", &[1; 9], GgmlType::F32, vec![0; 4]));
    assert!(e.contains("9 dims"), "{e}");
    w.add_tensor("x", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    let e = err(w.add_tensor("x", &[1], GgmlType::F32, vec![0; 4]));
    assert!(e.contains("already"), "{e}");
}

#[test]
fn writer_rejects_bad_alignment() {
    for bad in [0u64, 48, 1 << 33] {
        let mut w = GgufWriter::new();
        w.set_alignment(bad);
        let e = w.write_to(&mut Vec::new()).unwrap_err();
        assert!(matches!(e, GgufError::BadAlignment { .. }), "{bad}: {e}");
    }
    let mut w = GgufWriter::new();
    w.set("general.alignment", Value::U64(64));
    let e = w.write_to(&mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("u64 64"), "{e}");
}

#[test]
fn set_general_alignment_sets_layout() {
    let mut w = GgufWriter::new();
    w.set("general.alignment", Value::U32(128));
    w.add_tensor("a", &[3], GgmlType::F32, vec![0; 12]).unwrap();
    w.add_tensor("b", &[3], GgmlType::F32, vec![1; 12]).unwrap();
    let f = round_trip(&w);
    assert_eq!(f.alignment(), 128);
    assert_eq!(
        f.tensor("b").unwrap().offset - f.tensor("a").unwrap().offset,
        128
    );
}

#[test]
fn copy_metadata_carries_alignment() {
    let mut src = GgufWriter::new();
    src.set("general.architecture", Value::from("x"));
    src.set_alignment(64);
    src.set("x.n", Value::U32(3));
    let src = round_trip(&src);

    let mut w = GgufWriter::new();
    w.set("own", Value::Bool(true));
    w.copy_metadata_from(&src);
    w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    let f = round_trip(&w);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.tensor("t").unwrap().offset % 64, 0);
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        ["own", "general.architecture", "general.alignment", "x.n"]
    );

    // A source without general.alignment leaves the writer's alignment alone.
    let plain = round_trip(&GgufWriter::new());
    let mut w = GgufWriter::new();
    w.set_alignment(256);
    w.copy_metadata_from(&plain);
    assert_eq!(round_trip(&w).alignment(), 256);
}

#[test]
fn typed_accessors() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.set(k, v);
    }
    w.set("general.architecture", Value::from("llama"));
    w.set("neg", Value::I32(-1));
    w.set("small", Value::I64(42));
    let f = round_trip(&w);
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u32("t.u8").unwrap(), 200);
    assert_eq!(f.get_u32("small").unwrap(), 42);
    assert_eq!(f.get_u64("t.u64").unwrap(), u64::MAX - 1);
    assert_eq!(f.get_i64("t.i64").unwrap(), i64::MIN + 1);
    assert_eq!(f.get_i64("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_f32("t.f32").unwrap(), -1.25e-3);
    assert_eq!(f.get_f32("t.f64").unwrap(), std::f32::consts::PI);
    assert_eq!(f.get_f32("t.i16").unwrap(), -30_000.0);
    assert!(f.get_bool("t.bool").unwrap());
    assert_eq!(f.get_str("t.str").unwrap(), "héllo\n\"world\"");
    assert_eq!(f.get_str_array("a.str").unwrap(), ["a", "", "ü"]);
    assert_eq!(f.get_f32_array("a.f32").unwrap(), [0.5, -2.0, 1e30]);
    assert_eq!(f.get_f32_array("a.i8").unwrap(), [-128.0, 0.0, 127.0]);
    assert_eq!(
        f.get_f32_array("a.f64").unwrap(),
        [0.1f32, f32::NEG_INFINITY]
    );
    assert_eq!(
        f.get_i32_array("a.i32").unwrap(),
        [i32::MIN, -5, 5, i32::MAX]
    );
    assert_eq!(f.get_i32_array("a.u16").unwrap(), [0, 65_535]);
    assert_eq!(f.get_array("a.u8").unwrap(), &Array::U8(vec![0, 1, 255]));

    assert_eq!(f.opt_u32("nope").unwrap(), None);
    assert_eq!(f.opt_u32("t.u16").unwrap(), Some(60_000));
    assert_eq!(f.opt_u64("nope").unwrap(), None);
    assert_eq!(f.opt_f32("t.f32").unwrap(), Some(-1.25e-3));
    assert_eq!(f.opt_bool("t.bool").unwrap(), Some(true));
    assert_eq!(f.opt_str("t.str").unwrap(), Some("héllo\n\"world\""));
    assert_eq!(f.opt_str("nope").unwrap(), None);
    assert!(f.opt_str("t.u8").is_err());
}

#[test]
fn accessor_errors_name_the_key() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.set(k, v);
    }
    w.set("neg", Value::I32(-1));
    let f = round_trip(&w);
    let msg = |e: GgufError| {
        let s = e.to_string();
        assert!(!s.contains('\n'), "{s}");
        s
    };
    let e = f.get_u32("missing.key").unwrap_err();
    assert!(matches!(&e, GgufError::MissingKey { key } if key == "missing.key"));
    assert_eq!(msg(e), "missing metadata key 'missing.key'");
    let e = f.get_u32("neg").unwrap_err();
    assert!(matches!(&e, GgufError::OutOfRange { key, .. } if key == "neg"));
    assert!(msg(e).contains("-1"));
    assert!(matches!(
        f.get_u32("t.u64"),
        Err(GgufError::OutOfRange { .. })
    ));
    assert!(matches!(
        f.get_u64("t.i8"),
        Err(GgufError::OutOfRange { .. })
    ));
    assert!(matches!(
        f.get_i64("t.u64"),
        Err(GgufError::OutOfRange { .. })
    ));
    let e = f.get_str("t.u32").unwrap_err();
    assert!(matches!(
        &e,
        GgufError::WrongType { key, expected: "string", found: "u32" } if key == "t.u32"
    ));
    assert_eq!(msg(e), "metadata key 't.u32' has type u32, expected string");
    assert!(matches!(
        f.get_u32("t.f32"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.get_f32("t.str"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.get_bool("t.u8"),
        Err(GgufError::WrongType { .. })
    ));
    let e = f.get_str_array("a.u32").unwrap_err();
    assert!(msg(e).contains("array<u32>"));
    assert!(matches!(
        f.get_f32_array("a.str"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.get_i32_array("a.u32"),
        Err(GgufError::OutOfRange { .. })
    ));
    assert!(matches!(
        f.get_i32_array("a.f32"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.get_i32_array("t.i32"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.opt_u32("t.str"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        f.architecture(),
        Err(GgufError::MissingKey { .. })
    ));
}

#[test]
fn file_api_open_and_atomic_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::from("x"));
    add_every_type(&mut w);
    w.write_file_atomic(&path).unwrap();
    // Overwrite: the second write replaces the first atomically.
    w.set("general.architecture", Value::from("y"));
    w.write_file_atomic(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["m.gguf"], "no temporary files left behind");

    let f = GgufFile::open(&path).unwrap();
    assert!(f.is_mmapped());
    assert_eq!(f.architecture().unwrap(), "y");
    check_every_type(&f, 32);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(f.bytes(), bytes.as_slice());
    assert_eq!(f.file_size(), bytes.len() as u64);
    let g = GgufFile::from_bytes(bytes).unwrap();
    assert!(!g.is_mmapped());
    assert_eq!(g.tensors(), f.tensors());
    assert!(format!("{f:?}").contains("tensors_len: 20"));

    // A TensorInfo that is not from this file gives an empty slice, no panic.
    let mut t = f.tensors()[0].clone();
    t.offset = u64::MAX - 1;
    assert!(f.tensor_data(&t).is_empty());
}

#[test]
fn atomic_write_error_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = GgufWriter::new();
    w.set_alignment(3);
    let path = dir.path().join("bad.gguf");
    assert!(w.write_file_atomic(&path).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let e = GgufWriter::new()
        .write_file_atomic(dir.path().join("no/such/dir/x.gguf"))
        .unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }), "{e}");
}

#[test]
fn open_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    let e = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("missing.gguf"), "{e}");
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        GgufFile::open(&empty),
        Err(GgufError::Truncated { offset: 0, .. })
    ));
}

#[test]
fn gguf_file_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<GgufFile>();
    check::<GgufWriter>();
    check::<GgufError>();
}

fn leaf_array() -> impl Strategy<Value = Array> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Array::U8),
        prop::collection::vec(any::<i8>(), 0..8).prop_map(Array::I8),
        prop::collection::vec(any::<u16>(), 0..8).prop_map(Array::U16),
        prop::collection::vec(any::<i16>(), 0..8).prop_map(Array::I16),
        prop::collection::vec(any::<u32>(), 0..8).prop_map(Array::U32),
        prop::collection::vec(any::<i32>(), 0..8).prop_map(Array::I32),
        prop::collection::vec(any::<u64>(), 0..8).prop_map(Array::U64),
        prop::collection::vec(any::<i64>(), 0..8).prop_map(Array::I64),
        prop::collection::vec(-1e30f32..1e30, 0..8).prop_map(Array::F32),
        prop::collection::vec(-1e300f64..1e300, 0..8).prop_map(Array::F64),
        prop::collection::vec(any::<bool>(), 0..8).prop_map(Array::Bool),
        prop::collection::vec(".{0,12}", 0..8).prop_map(Array::String),
    ]
}

fn array() -> impl Strategy<Value = Array> {
    // Depth: a leaf plus up to 3 levels of nesting = 4, the parser's limit.
    leaf_array().prop_recursive(3, 32, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Array::Array)
    })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        (-1e30f32..1e30).prop_map(Value::F32),
        (-1e300f64..1e300).prop_map(Value::F64),
        any::<bool>().prop_map(Value::Bool),
        ".{0,40}".prop_map(Value::String),
        array().prop_map(Value::Array),
    ]
}

proptest! {
    #[test]
    fn arbitrary_metadata_round_trips(
        kvs in prop::collection::btree_map("[a-z.]{1,16}", value(), 0..12)
    ) {
        let mut w = GgufWriter::new();
        for (k, v) in &kvs {
            w.set(k.clone(), v.clone());
        }
        let f = round_trip(&w);
        let want: Vec<(String, Value)> = kvs.into_iter().collect();
        prop_assert_eq!(f.metadata(), want.as_slice());
    }
}

#[test]
fn released_values_become_empty_values_of_their_type() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.set(k, v);
    }
    let mut f = round_trip(&w);
    let keys: Vec<String> = every_value().into_iter().map(|(k, _)| k).collect();
    let refs: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .chain(["absent.key"])
        .collect();
    f.release_values(&refs);
    for (k, v) in every_value() {
        let got = f.get(&k).unwrap();
        match (&v, got) {
            (Value::String(_), Value::String(s)) => assert!(s.is_empty(), "{k}"),
            (Value::Array(a), Value::Array(b)) => {
                assert_eq!(std::mem::discriminant(a), std::mem::discriminant(b), "{k}");
                assert_eq!(b.len(), 0, "{k}");
            }
            (a, b) => assert_eq!(a, b, "{k}: scalars are kept"),
        }
    }
}

/// Found by the fuzzer: a metadata-only file declaring a 2 GiB alignment parsed, and writing it
/// back emitted 2 GiB of padding. A file without tensors now ends with its header.
#[test]
fn metadata_only_file_with_huge_alignment_rewrites_small() {
    let mut w = GgufWriter::new();
    w.set("general.alignment", Value::U32(1 << 31));
    w.set("general.name", Value::String("tiny".into()));
    let bytes = write(&w);
    assert!(bytes.len() < 1024, "{} bytes", bytes.len());
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(f.alignment(), 1 << 31);
    let mut again = GgufWriter::new();
    again.copy_metadata_from(&f);
    assert_eq!(write(&again), bytes);
}
