//! Parsing and validating the GGUF header (everything before the tensor data).

use std::collections::HashMap;

use crate::cursor::Cursor;
use crate::decode::{read_type_id, read_value};
use crate::error::GgufError;
use crate::limits::{
    DEFAULT_ALIGNMENT, MAX_DIMS, MAX_KEY_LEN, MAX_KV_COUNT, MAX_TENSOR_COUNT, MAX_TENSOR_NAME_LEN,
};
use crate::tensor::TensorInfo;
use crate::value::Value;
use crate::GgmlType;

/// The magic bytes at offset 0.
pub(crate) const MAGIC: [u8; 4] = *b"GGUF";

/// The metadata key that sets the data alignment.
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";

/// Smallest encoded key/value pair: 8-byte key length, 4-byte type, 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoded tensor info: name length, n_dims, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// A parsed and validated header.
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) alignment: u64,
    pub(crate) data_offset: u64,
    pub(crate) metadata: Vec<(String, Value)>,
    pub(crate) key_index: HashMap<String, usize>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) tensor_index: HashMap<String, usize>,
}

/// A tensor info as read, before its data is placed in the file.
struct RawTensor {
    info: TensorInfo,
    /// Offset relative to the data section, as stored.
    rel_offset: u64,
    /// Where the tensor info record starts.
    info_offset: u64,
}

/// Parses and validates the header of the GGUF file `bytes` (the whole file).
///
/// On success every tensor's data lies inside `bytes`.
pub(crate) fn parse(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor::new(bytes);
    let (version, tensor_count, kv_count) = parse_preamble(&mut c)?;
    let meta = parse_metadata(&mut c, kv_count)?;
    let alignment = alignment_of(&meta)?;
    let Metadata {
        metadata,
        index: key_index,
        ..
    } = meta;
    let mut raw = Vec::new();
    let mut tensor_index = HashMap::new();
    for i in 0..tensor_count {
        let t = parse_tensor_info(&mut c, alignment)?;
        if tensor_index.contains_key(&t.info.name) {
            return Err(GgufError::DuplicateTensor {
                name: t.info.name,
                info_offset: t.info_offset,
            });
        }
        // `i < tensor_count <= MAX_TENSOR_COUNT`, which fits in usize.
        tensor_index.insert(t.info.name.clone(), i as usize);
        raw.push(t);
    }
    let data_offset = align_up(c.pos(), alignment).ok_or_else(|| GgufError::Truncated {
        offset: c.pos(),
        needed: alignment,
        what: "alignment padding",
    })?;
    let tensors = place_tensors(raw, data_offset, bytes.len() as u64)?;
    Ok(Header {
        version,
        alignment,
        data_offset,
        metadata,
        key_index,
        tensors,
        tensor_index,
    })
}

/// Reads magic, version and the two counts, and checks the counts.
fn parse_preamble(c: &mut Cursor<'_>) -> Result<(u32, u64, u64), GgufError> {
    let magic = c.array::<4>("magic")?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = read_count(c, "tensor count", MAX_TENSOR_COUNT)?;
    let kv_count = read_count(c, "metadata key/value count", MAX_KV_COUNT)?;
    let needed = kv_count
        .saturating_mul(MIN_KV_BYTES)
        .saturating_add(tensor_count.saturating_mul(MIN_TENSOR_INFO_BYTES));
    c.ensure(needed, "metadata and tensor infos")?;
    Ok((version, tensor_count, kv_count))
}

/// Reads a `u64` count and checks it against `limit`.
fn read_count(c: &mut Cursor<'_>, what: &'static str, limit: u64) -> Result<u64, GgufError> {
    let offset = c.pos();
    let value = c.u64(what)?;
    if value > limit {
        return Err(GgufError::LimitExceeded {
            what,
            value,
            limit,
            offset,
        });
    }
    Ok(value)
}

/// Metadata as read.
struct Metadata {
    /// Key/value pairs in file order.
    metadata: Vec<(String, Value)>,
    /// Key → position in `metadata`.
    index: HashMap<String, usize>,
    /// Where the value of `general.alignment` starts, if the key is present.
    alignment_offset: Option<u64>,
}

/// Reads `kv_count` key/value pairs.
fn parse_metadata(c: &mut Cursor<'_>, kv_count: u64) -> Result<Metadata, GgufError> {
    let mut metadata = Vec::new();
    let mut index = HashMap::new();
    let mut alignment_offset = None;
    for i in 0..kv_count {
        let offset = c.pos();
        let key = c.string(("metadata key", "metadata key length"), MAX_KEY_LEN)?;
        if index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset });
        }
        let id = read_type_id(c, "metadata value type")?;
        if key == ALIGNMENT_KEY {
            alignment_offset = Some(c.pos());
        }
        let value = read_value(c, id)?;
        // `i < kv_count <= MAX_KV_COUNT`, which fits in usize.
        index.insert(key.clone(), i as usize);
        metadata.push((key, value));
    }
    Ok(Metadata {
        metadata,
        index,
        alignment_offset,
    })
}

/// The alignment from `general.alignment` (which must be a `u32` that is a
/// nonzero power of two), or [`DEFAULT_ALIGNMENT`].
fn alignment_of(meta: &Metadata) -> Result<u64, GgufError> {
    let Some((_, value)) = meta
        .index
        .get(ALIGNMENT_KEY)
        .and_then(|&i| meta.metadata.get(i))
    else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    check_alignment(value).map_err(|()| GgufError::BadAlignment {
        found: format!("{} {}", value.type_name(), value),
        offset: meta.alignment_offset.unwrap_or(0),
    })
}

/// The alignment a `general.alignment` value stands for, if it is valid.
pub(crate) fn check_alignment(value: &Value) -> Result<u64, ()> {
    match *value {
        Value::U32(a) if a.is_power_of_two() => Ok(a.into()),
        _ => Err(()),
    }
}

/// Reads and validates one tensor info record (all but its placement).
fn parse_tensor_info(c: &mut Cursor<'_>, alignment: u64) -> Result<RawTensor, GgufError> {
    let info_offset = c.pos();
    let name = c.string(("tensor name", "tensor name length"), MAX_TENSOR_NAME_LEN)?;
    let n_dims_offset = c.pos();
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::LimitExceeded {
            what: "tensor dimension count",
            value: n_dims.into(),
            limit: MAX_DIMS.into(),
            offset: n_dims_offset,
        });
    }
    let dims = (0..n_dims)
        .map(|_| c.u64("tensor dimension"))
        .collect::<Result<Vec<u64>, _>>()?;
    let type_id = c.u32("tensor type")?;
    let rel_offset = c.u64("tensor data offset")?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            name,
            type_id,
            info_offset,
        });
    };
    let n_bytes = tensor_n_bytes(&name, &dims, ty, info_offset)?;
    if rel_offset % alignment != 0 {
        return Err(GgufError::MisalignedTensor {
            name,
            offset: rel_offset,
            alignment,
            info_offset,
        });
    }
    let info = TensorInfo {
        name,
        dims,
        ty,
        offset: 0,
        n_bytes,
    };
    Ok(RawTensor {
        info,
        rel_offset,
        info_offset,
    })
}

/// Bytes of a tensor, checking the shape: the element count must not
/// overflow and rows must be whole blocks.
fn tensor_n_bytes(
    name: &str,
    dims: &[u64],
    ty: GgmlType,
    info_offset: u64,
) -> Result<u64, GgufError> {
    let overflow = || GgufError::DimensionOverflow {
        name: name.to_owned(),
        dims: dims.to_vec(),
        info_offset,
    };
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let block_size = ty.block_size() as u64;
    let row_len = dims.first().copied().unwrap_or(1);
    if row_len % block_size != 0 {
        return Err(GgufError::BadShape {
            name: name.to_owned(),
            row_len,
            ty,
            block_size,
            info_offset,
        });
    }
    ty.bytes_for(n_elements).ok_or_else(overflow)
}

/// Turns relative offsets into absolute ones and checks every tensor lies
/// inside the file.
fn place_tensors(
    raw: Vec<RawTensor>,
    data_offset: u64,
    file_size: u64,
) -> Result<Vec<TensorInfo>, GgufError> {
    raw.into_iter()
        .map(|t| {
            let start = data_offset.checked_add(t.rel_offset);
            let end = start.and_then(|s| s.checked_add(t.info.n_bytes));
            match (start, end) {
                (Some(offset), Some(end)) if end <= file_size => {
                    Ok(TensorInfo { offset, ..t.info })
                }
                _ => Err(GgufError::TensorOutOfBounds {
                    offset: start.unwrap_or(u64::MAX),
                    n_bytes: t.info.n_bytes,
                    file_size,
                    info_offset: t.info_offset,
                    name: t.info.name,
                }),
            }
        })
        .collect()
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_works() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX, 32), None);
        assert_eq!(align_up(5, 0), None);
    }
}
