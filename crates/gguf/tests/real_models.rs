//! Reading the real models (see `common::model_path` for where they live).

mod common;

use common::{model_path, GEMMA, QWEN};
use statelm_gguf::{GgmlType, GgufFile, Value};

/// Checks invariants every well-formed file satisfies.
fn check_layout(f: &GgufFile) {
    assert_eq!(f.data_offset() % f.alignment(), 0);
    let mut end = 0;
    for t in f.tensors() {
        assert_eq!(f.tensor(&t.name), Some(t));
        assert_eq!(t.offset % f.alignment(), 0, "{}", t.name);
        assert!(t.offset >= f.data_offset());
        assert_eq!(Some(t.n_bytes), t.ty.bytes_for(t.n_elements()));
        assert_eq!(t.row_len() * t.n_rows(), t.n_elements());
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
        end = end.max(t.offset + t.n_bytes);
    }
    assert!(end <= f.file_size());
    for (k, v) in f.metadata() {
        let shown = v.to_string();
        assert!(shown.len() < 600 && !shown.contains('\n'), "{k} = {shown}");
    }
}

#[test]
fn gemma3_270m() {
    let Some(path) = model_path(GEMMA) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    assert!(f.is_mmapped());
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture().unwrap(), "gemma3");
    assert_eq!(f.tensors().len(), 236);
    assert_eq!(f.get_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        262_144
    );
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
        262_144
    );
    assert_eq!(
        f.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        262_144
    );
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "llama");
    assert!(f.get_u32("gemma3.block_count").unwrap() > 0);
    assert!(
        f.get_f32("gemma3.attention.layer_norm_rms_epsilon")
            .unwrap()
            > 0.0
    );
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.dims, vec![640, 262_144]);
    assert_eq!(emb.row_len(), 640);
    assert!(emb.ty.is_quantized() || emb.ty == GgmlType::F16 || emb.ty == GgmlType::BF16);
    check_layout(&f);
    // The parsed tensor info matches the bytes: the last tensor ends at or
    // near the end of the file.
    let last_end = f
        .tensors()
        .iter()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap();
    assert!(f.file_size() - last_end < f.alignment());
}

#[test]
fn qwen25_coder_05b() {
    let Some(path) = model_path(QWEN) else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.architecture().unwrap(), "qwen2");
    assert_eq!(f.tensors().len(), 291);
    assert_eq!(
        f.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        151_387
    );
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    let n_vocab = f.get_str_array("tokenizer.ggml.tokens").unwrap().len();
    assert!(n_vocab > 150_000, "{n_vocab}");
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));
    assert_eq!(f.get_u32("qwen2.embedding_length").unwrap(), 896);
    let block_count = f.get_u32("qwen2.block_count").unwrap();
    for i in 0..block_count {
        assert!(f.tensor(&format!("blk.{i}.attn_q.weight")).is_some(), "{i}");
    }
    match f.get("general.architecture") {
        Some(Value::String(s)) => assert_eq!(s, "qwen2"),
        other => panic!("{other:?}"),
    }
    check_layout(&f);
}

#[test]
fn header_region_alone_fails_on_first_tensor() {
    let Some(path) = model_path(GEMMA) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    // The header region alone parses up to the tensor bounds check, which
    // fails on the first tensor.
    let header = f.bytes()[..f.data_offset() as usize].to_vec();
    let e = GgufFile::from_bytes(header).unwrap_err();
    assert!(e.to_string().contains(&f.tensors()[0].name), "{e}");
}
