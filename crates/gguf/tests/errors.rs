//! One test per parse error kind, on hand-built files, checking the variant,
//! the reported byte offset and that the message is one line.

mod common;

use statelm_gguf::limits::{MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_KEY_LEN};
use statelm_gguf::{GgmlType, GgufError, GgufFile};

/// Builds GGUF bytes by hand.
#[derive(Clone)]
struct Raw(Vec<u8>);

impl Raw {
    /// Magic, version and counts (24 bytes).
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(version).u64(n_tensors).u64(n_kv)
    }
    fn u8(mut self, v: u8) -> Raw {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(self, s: &str) -> Raw {
        self.bytes_str(s.as_bytes())
    }
    fn bytes_str(mut self, s: &[u8]) -> Raw {
        self.0.extend_from_slice(&(s.len() as u64).to_le_bytes());
        self.0.extend_from_slice(s);
        self
    }
    /// A key and a value type id (the value follows).
    fn kv(self, key: &str, type_id: u32) -> Raw {
        self.str(key).u32(type_id)
    }
    /// A tensor info record.
    fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    /// Zero padding up to a multiple of `a`, then `n` data bytes.
    fn data(mut self, a: usize, n: usize) -> Raw {
        let len = self.0.len().div_ceil(a) * a;
        self.0.resize(len + n, 0xAB);
        self
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn parse(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0)
    }
}

/// Parses, expects an error, checks its message is one clear line.
fn err(r: Raw) -> GgufError {
    let e = r.parse().expect_err("expected a parse error");
    let msg = e.to_string();
    assert!(!msg.contains('\n') && !msg.is_empty(), "{msg:?}");
    eprintln!("{msg}");
    e
}

#[test]
fn valid_minimal_files() {
    let f = Raw::header(3, 0, 0).parse().unwrap();
    assert_eq!((f.version(), f.alignment(), f.data_offset()), (3, 32, 32));
    let f = Raw::header(2, 0, 1).kv("k", 0).u8(7).parse().unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.get_u32("k").unwrap(), 7);
    let r = Raw::header(3, 1, 0).tensor("t", &[4], 0, 0).data(32, 16);
    let f = r.parse().unwrap();
    assert_eq!(f.tensor_data(&f.tensors()[0]), &[0xAB; 16]);
}

#[test]
fn bad_magic() {
    let mut r = Raw::header(3, 0, 0);
    r.0[..4].copy_from_slice(b"GGML");
    let e = err(r);
    assert!(matches!(e, GgufError::BadMagic { found } if &found == b"GGML"));
    assert!(e.to_string().contains("offset 0"));
    assert!(matches!(
        err(Raw(b"GG".to_vec())),
        GgufError::Truncated {
            offset: 0,
            needed: 4,
            ..
        }
    ));
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 99, 0x0300_0000] {
        let e = err(Raw::header(v, 0, 0));
        assert!(matches!(e, GgufError::UnsupportedVersion { version } if version == v));
        assert_eq!(
            e.to_string().contains("big-endian"),
            v == 0x0300_0000,
            "{e}"
        );
    }
}

#[test]
fn huge_counts() {
    let e = err(Raw::header(3, 1 << 40, 0));
    assert!(matches!(
        e,
        GgufError::LimitExceeded {
            what: "tensor count",
            offset: 8,
            ..
        }
    ));
    let e = err(Raw::header(3, 0, u64::MAX));
    assert!(matches!(e, GgufError::LimitExceeded { offset: 16, .. }));
    // Under the limits, but more than the file can hold: no allocation.
    let e = err(Raw::header(3, 1000, 1000));
    assert!(matches!(e, GgufError::Truncated { offset: 24, .. }));
}

#[test]
fn huge_string_lengths() {
    let e = err(Raw::header(3, 0, 1).u64(1 << 62).data(1, 8));
    assert!(matches!(
        e,
        GgufError::LimitExceeded { what: "metadata key length", value, limit, offset: 24 }
            if value == 1 << 62 && limit == MAX_KEY_LEN
    ));
    let e = err(Raw::header(3, 0, 1).kv("k", 8).u64(u64::MAX));
    assert!(matches!(
        e,
        GgufError::LimitExceeded {
            what: "string value length",
            offset: 37,
            ..
        }
    ));
    // Under the limit, but past the end of the file.
    let e = err(Raw::header(3, 0, 1).kv("k", 8).u64(1000).str("short"));
    assert!(matches!(
        e,
        GgufError::Truncated {
            offset: 45,
            needed: 1000,
            ..
        }
    ));
    let e = err(Raw::header(3, 1, 0).u64(1 << 20).data(1, 64));
    assert!(matches!(
        e,
        GgufError::LimitExceeded {
            what: "tensor name length",
            ..
        }
    ));
}

#[test]
fn huge_array_counts() {
    let base = Raw::header(3, 0, 1).kv("arr", 9);
    let e = err(base.clone().u32(0).u64(1 << 60));
    assert!(matches!(
        e,
        GgufError::LimitExceeded { what: "array length", value, limit, offset: 43 }
            if value == 1 << 60 && limit == MAX_ARRAY_LEN
    ));
    // Under the limit but more than the bytes left: checked before allocating.
    for elem_type in 0..=12u32 {
        let e = err(base.clone().u32(elem_type).u64(MAX_ARRAY_LEN).u64(0));
        assert!(
            matches!(e, GgufError::Truncated { offset: 51, .. }),
            "type {elem_type}: {e}"
        );
    }
    // Strings need at least 8 bytes each.
    let e = err(base.clone().u32(8).u64(3).u64(0).u64(0));
    assert!(matches!(e, GgufError::Truncated { needed: 24, .. }));
}

#[test]
fn unknown_value_types() {
    let e = err(Raw::header(3, 0, 1).kv("k", 13).u64(0));
    assert!(matches!(
        e,
        GgufError::UnknownValueType {
            type_id: 13,
            offset: 33
        }
    ));
    let e = err(Raw::header(3, 0, 1).kv("k", 9).u32(u32::MAX).u64(0));
    assert!(matches!(
        e,
        GgufError::UnknownValueType {
            type_id: u32::MAX,
            offset: 37
        }
    ));
}

#[test]
fn bool_must_be_zero_or_one() {
    let e = err(Raw::header(3, 0, 1).kv("flag", 7).u8(2));
    assert!(matches!(
        e,
        GgufError::InvalidBool {
            value: 2,
            offset: 40
        }
    ));
    let e = err(Raw::header(3, 0, 1)
        .kv("b", 9)
        .u32(7)
        .u64(3)
        .u8(1)
        .u8(0)
        .u8(255));
    assert!(matches!(
        e,
        GgufError::InvalidBool {
            value: 255,
            offset: 51
        }
    ));
}

#[test]
fn invalid_utf8() {
    let e = err(Raw::header(3, 0, 1).bytes_str(b"k\xff").u32(0).u8(0));
    assert!(matches!(e, GgufError::InvalidUtf8 { offset: 24 }));
    let e = err(Raw::header(3, 0, 1).kv("k", 8).bytes_str(b"\xc3"));
    assert!(matches!(e, GgufError::InvalidUtf8 { offset: 37 }));
}

#[test]
fn nesting_depth_limit() {
    let depth = MAX_ARRAY_DEPTH as usize;
    // `depth` nested arrays, the innermost empty: fine.
    let mut ok = Raw::header(3, 0, 1).kv("n", 9);
    for _ in 0..depth - 1 {
        ok = ok.u32(9).u64(1);
    }
    let ok = ok.u32(0).u64(0);
    assert!(ok.parse().is_ok());
    let mut deep = Raw::header(3, 0, 1).kv("n", 9);
    for _ in 0..depth {
        deep = deep.u32(9).u64(1);
    }
    let e = err(deep.u32(0).u64(0));
    assert!(matches!(
        e,
        GgufError::LimitExceeded {
            what: "array nesting depth",
            ..
        }
    ));
}

#[test]
fn duplicates() {
    let e = err(Raw::header(3, 0, 2).kv("k", 0).u8(1).kv("k", 0).u8(2));
    assert!(matches!(e, GgufError::DuplicateKey { ref key, offset: 38 } if key == "k"));
    let r = Raw::header(3, 2, 0)
        .tensor("t", &[1], 0, 0)
        .tensor("t", &[1], 0, 32);
    let e = err(r.data(32, 64));
    assert!(matches!(e, GgufError::DuplicateTensor { ref name, info_offset: 57 } if name == "t"));
}

#[test]
fn unknown_tensor_type() {
    let e = err(Raw::header(3, 1, 0).tensor("w", &[32], 4, 0).data(32, 64));
    assert!(matches!(
        e,
        GgufError::UnknownTensorType { ref name, type_id: 4, info_offset: 24 } if name == "w"
    ));
}

#[test]
fn tensor_out_of_bounds() {
    let r = Raw::header(3, 1, 0).tensor("w", &[8], 0, 0).data(32, 31);
    let file_size = r.len();
    let e = err(r);
    assert!(matches!(
        e,
        GgufError::TensorOutOfBounds { ref name, offset: 64, n_bytes: 32, file_size: fs, info_offset: 24 }
            if name == "w" && fs == file_size
    ));
    // An offset that overflows when added to the data section start.
    let e = err(Raw::header(3, 1, 0)
        .tensor("w", &[8], 0, u64::MAX - 31)
        .data(32, 32));
    assert!(matches!(
        e,
        GgufError::TensorOutOfBounds {
            offset: u64::MAX,
            ..
        }
    ));
}

#[test]
fn misaligned_tensor_offset() {
    let e = err(Raw::header(3, 1, 0).tensor("w", &[8], 0, 4).data(32, 64));
    assert!(matches!(
        e,
        GgufError::MisalignedTensor { ref name, offset: 4, alignment: 32, info_offset: 24 }
            if name == "w"
    ));
}

#[test]
fn dimension_overflow() {
    let e = err(Raw::header(3, 1, 0)
        .tensor("w", &[1 << 32, 1 << 32, 2], 0, 0)
        .data(32, 0));
    assert!(matches!(e, GgufError::DimensionOverflow { ref name, .. } if name == "w"));
    // The element count fits but the byte count does not.
    let e = err(Raw::header(3, 1, 0)
        .tensor("w", &[1 << 62], 0, 0)
        .data(32, 0));
    assert!(matches!(e, GgufError::DimensionOverflow { .. }));
    let e = err(Raw::header(3, 1, 0).tensor("w", &[1; 9], 0, 0).data(32, 4));
    assert!(matches!(
        e,
        GgufError::LimitExceeded {
            what: "tensor dimension count",
            offset: 33,
            ..
        }
    ));
}

#[test]
fn bad_shape() {
    let id = GgmlType::Q4_K.id();
    let e = err(Raw::header(3, 1, 0)
        .tensor("w", &[128, 2], id, 0)
        .data(32, 144));
    assert!(matches!(
        e,
        GgufError::BadShape { ref name, row_len: 128, ty: GgmlType::Q4_K, block_size: 256, .. }
            if name == "w"
    ));
}

#[test]
fn bad_alignment() {
    for (type_id, value) in [(4u32, 48u64), (4, 0), (4, 3)] {
        let r = Raw::header(3, 0, 1)
            .kv("general.alignment", type_id)
            .u32(value as u32);
        let e = err(r);
        assert!(
            matches!(e, GgufError::BadAlignment { ref found, offset: 53 } if found == &format!("u32 {value}")),
            "{e}"
        );
    }
    // Must be a u32, as llama.cpp and gguf-py require.
    let e = err(Raw::header(3, 0, 1).kv("general.alignment", 10).u64(32));
    assert!(matches!(e, GgufError::BadAlignment { ref found, .. } if found == "u64 32"));
    // A valid custom alignment moves the data section.
    let r = Raw::header(3, 1, 1).kv("general.alignment", 4).u32(64);
    let f = r.tensor("w", &[1], 0, 0).data(64, 4).parse().unwrap();
    assert_eq!((f.alignment(), f.data_offset()), (64, 128));
}

#[test]
fn truncated_everywhere_reports_offsets() {
    let e = err(Raw::header(3, 0, 1).kv("k", 6).u8(0));
    assert!(matches!(
        e,
        GgufError::Truncated {
            offset: 37,
            needed: 4,
            what: "f32 value"
        }
    ));
    let e = err(Raw(b"GGUF\x03\x00\x00\x00\x00".to_vec()));
    assert!(matches!(
        e,
        GgufError::Truncated {
            offset: 8,
            needed: 8,
            what: "tensor count"
        }
    ));
}
