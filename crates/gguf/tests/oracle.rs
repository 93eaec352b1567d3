//! Cross-check against the reference reader: the `gguf` Python package
//! (gguf-py, from llama.cpp) reads a file written by [`GgufWriter`].
//!
//! Skipped with a note when `python3 -c 'import gguf'` fails, except under CI (`CI` set), where
//! that fails: scripts/test installs gguf-py.

mod common;

use std::path::Path;
use std::process::Command;

use common::{every_value, pseudo_bytes};
use serde_json::Value as Json;
use statelm_gguf::{Array, GgmlType, GgufFile, GgufWriter, Value};

const READER: &str = r#"
import json, sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
full = sys.argv[2] == "full"
fields = []
for name, f in r.fields.items():
    if name.startswith("GGUF."):
        continue
    types = [int(t) for t in f.types]
    nested = len(types) > 1 and types[1] == int(gguf.GGUFValueType.ARRAY)
    scalar = types[0] != int(gguf.GGUFValueType.ARRAY)
    show = not nested and (full or scalar)
    fields.append([name, {"types": types, "contents": f.contents() if show else None}])
tensors = [{
    "name": t.name,
    "type": int(t.tensor_type),
    "shape": [int(d) for d in t.shape],
    "n_bytes": int(t.n_bytes),
    "offset": int(t.data_offset),
    "data": bytes(t.data.tobytes()).hex() if full else None,
} for t in r.tensors]
print(json.dumps({"alignment": int(r.alignment), "data_offset": int(r.data_offset),
                  "fields": fields, "tensors": tensors}))
"#;

fn python_has_gguf() -> bool {
    Command::new("python3")
        .args(["-c", "import gguf"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The JSON gguf-py's `contents()` gives for a (non-nested) value.
/// Whether gguf-py is there. Without it the tests skip with a note, except under CI (`CI` set),
/// where a skip would hide that the oracle never ran: there they fail.
fn oracle_available() -> bool {
    if python_has_gguf() {
        return true;
    }
    let why = "the `gguf` Python package is not installed (pip install gguf; scripts/test does)";
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipping: {why}");
    false
}

fn expected_json(v: &Value) -> Json {
    fn arr(a: &Array) -> Json {
        match a {
            Array::U8(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::I8(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::U16(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::I16(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::U32(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::I32(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::U64(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::I64(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::F32(v) => v.iter().map(|&x| Json::from(f64::from(x))).collect(),
            Array::F64(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::Bool(v) => v.iter().map(|&x| Json::from(x)).collect(),
            Array::String(v) => v.iter().map(|x| Json::from(x.as_str())).collect(),
            Array::Array(_) => Json::Null,
        }
    }
    match v {
        Value::U8(x) => (*x).into(),
        Value::I8(x) => (*x).into(),
        Value::U16(x) => (*x).into(),
        Value::I16(x) => (*x).into(),
        Value::U32(x) => (*x).into(),
        Value::I32(x) => (*x).into(),
        Value::U64(x) => (*x).into(),
        Value::I64(x) => (*x).into(),
        Value::F32(x) => f64::from(*x).into(),
        Value::F64(x) => (*x).into(),
        Value::Bool(x) => (*x).into(),
        Value::String(s) => s.as_str().into(),
        Value::Array(a) => arr(a),
    }
}

/// The gguf-py type list of a value: `[type]` for scalars; for arrays
/// `[ARRAY]` followed, when the array is not empty, by the type list of its
/// first element.
fn expected_types(v: &Value) -> Vec<u64> {
    fn arr_types(a: &Array) -> Vec<u64> {
        let first = match a {
            _ if a.is_empty() => vec![],
            Array::U8(_) => vec![0],
            Array::I8(_) => vec![1],
            Array::U16(_) => vec![2],
            Array::I16(_) => vec![3],
            Array::U32(_) => vec![4],
            Array::I32(_) => vec![5],
            Array::F32(_) => vec![6],
            Array::Bool(_) => vec![7],
            Array::String(_) => vec![8],
            Array::U64(_) => vec![10],
            Array::I64(_) => vec![11],
            Array::F64(_) => vec![12],
            Array::Array(inner) => arr_types(&inner[0]),
        };
        [vec![9], first].concat()
    }
    match v {
        Value::Array(a) => arr_types(a),
        Value::U8(_) => vec![0],
        Value::I8(_) => vec![1],
        Value::U16(_) => vec![2],
        Value::I16(_) => vec![3],
        Value::U32(_) => vec![4],
        Value::I32(_) => vec![5],
        Value::F32(_) => vec![6],
        Value::Bool(_) => vec![7],
        Value::String(_) => vec![8],
        Value::U64(_) => vec![10],
        Value::I64(_) => vec![11],
        Value::F64(_) => vec![12],
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs the gguf-py reader on `path`; `full` includes array contents and
/// tensor bytes.
fn gguf_py_read(path: &Path, full: bool) -> Json {
    let mode = if full { "full" } else { "infos" };
    let out = Command::new("python3")
        .args(["-c", READER])
        .arg(path)
        .arg(mode)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gguf-py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Checks keys (order and types), scalar values and tensor infos against
/// gguf-py's reading of the same file.
fn compare(ours: &GgufFile, py: &Json, full: bool) {
    assert_eq!(py["alignment"], ours.alignment());
    assert_eq!(py["data_offset"], ours.data_offset());
    let fields = py["fields"].as_array().unwrap();
    let py_keys: Vec<&str> = fields.iter().map(|f| f[0].as_str().unwrap()).collect();
    let our_keys: Vec<&str> = ours.metadata().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(py_keys, our_keys, "same keys in the same order");
    for ((k, v), field) in ours.metadata().iter().zip(fields) {
        let field = &field[1];
        let types: Vec<u64> = serde_json::from_value(field["types"].clone()).unwrap();
        assert_eq!(types, expected_types(v), "{k}");
        if full || !matches!(v, Value::Array(_)) {
            assert_eq!(field["contents"], expected_json(v), "{k}");
        }
    }
    let tensors = py["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), ours.tensors().len());
    for (py_t, t) in tensors.iter().zip(ours.tensors()) {
        assert_eq!(py_t["name"], t.name.as_str());
        assert_eq!(py_t["type"], t.ty.id());
        assert_eq!(py_t["shape"], serde_json::json!(t.dims));
        assert_eq!(py_t["n_bytes"], t.n_bytes);
        assert_eq!(py_t["offset"], t.offset);
        if full {
            assert_eq!(py_t["data"], hex(ours.tensor_data(t)), "{}", t.name);
        }
    }
}

#[test]
fn gguf_py_reads_our_files() {
    if !oracle_available() {
        return;
    }
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::from("llama"));
    for (k, v) in every_value() {
        w.set(k, v);
    }
    w.set_alignment(64);
    // Every type, each with a distinct shape, except Q8_1: gguf-py's size
    // table says 40 bytes per block (two f32), a stale value; ggml's
    // `block_q8_1` is 36 (two f16 + 32 quants, static_assert in
    // ggml-common.h), which `GgmlType` follows. Q8_1 only ever holds
    // activations, never file weights.
    let types = GgmlType::ALL.into_iter().filter(|&t| t != GgmlType::Q8_1);
    for (i, ty) in types.enumerate() {
        let dims = [
            ty.block_size() as u64 * (1 + i as u64 % 3),
            2,
            1 + i as u64 % 2,
        ];
        let n = ty.bytes_for(dims.iter().product()).unwrap() as usize;
        w.add_tensor(
            format!("blk.{i}.{ty}"),
            &dims,
            ty,
            pseudo_bytes(100 + i as u64, n),
        )
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oracle.gguf");
    w.write_file_atomic(&path).unwrap();
    let ours = GgufFile::open(&path).unwrap();

    let py = gguf_py_read(&path, true);
    assert_eq!(py["alignment"], 64);
    compare(&ours, &py, true);
}

/// The real models read the same through gguf-py: every key, value and tensor (name, type,
/// shape, offset), so the counts `real_models.rs` states have a source CI checks (~13 s per
/// model).
#[test]
fn gguf_py_agrees_on_real_models() {
    if !oracle_available() {
        return;
    }
    for name in [common::GEMMA, common::QWEN] {
        let Some(path) = common::model_path(name) else {
            return;
        };
        let ours = GgufFile::open(&path).unwrap();
        compare(&ours, &gguf_py_read(&path, false), false);
    }
}
