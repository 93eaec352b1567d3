//! Decoding metadata values from a [`Cursor`].

use crate::cursor::Cursor;
use crate::error::GgufError;
use crate::limits::{MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_STRING_LEN};
use crate::value::{type_id as t, Array, Value};

/// Smallest encoded size of one element of value type `id`, or `None` for an
/// unknown type. Strings need their 8-byte length; arrays their 4-byte type
/// and 8-byte count.
fn min_encoded_size(id: u32) -> Option<u64> {
    Some(match id {
        t::U8 | t::I8 | t::BOOL => 1,
        t::U16 | t::I16 => 2,
        t::U32 | t::I32 | t::F32 => 4,
        t::U64 | t::I64 | t::F64 | t::STRING => 8,
        t::ARRAY => 12,
        _ => return None,
    })
}

/// Reads a value type id and fails on unknown ids.
pub(crate) fn read_type_id(c: &mut Cursor<'_>, what: &'static str) -> Result<u32, GgufError> {
    let offset = c.pos();
    let id = c.u32(what)?;
    match min_encoded_size(id) {
        Some(_) => Ok(id),
        None => Err(GgufError::UnknownValueType {
            type_id: id,
            offset,
        }),
    }
}

/// Reads a bool byte, which must be 0 or 1.
fn read_bool(c: &mut Cursor<'_>) -> Result<bool, GgufError> {
    let offset = c.pos();
    match c.u8("bool value")? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::InvalidBool { value, offset }),
    }
}

/// Reads one value of the (already validated) type `id`.
pub(crate) fn read_value(c: &mut Cursor<'_>, id: u32) -> Result<Value, GgufError> {
    Ok(match id {
        t::U8 => Value::U8(c.u8("u8 value")?),
        t::I8 => Value::I8(i8::from_le_bytes(c.array("i8 value")?)),
        t::U16 => Value::U16(u16::from_le_bytes(c.array("u16 value")?)),
        t::I16 => Value::I16(i16::from_le_bytes(c.array("i16 value")?)),
        t::U32 => Value::U32(c.u32("u32 value")?),
        t::I32 => Value::I32(i32::from_le_bytes(c.array("i32 value")?)),
        t::F32 => Value::F32(f32::from_le_bytes(c.array("f32 value")?)),
        t::U64 => Value::U64(c.u64("u64 value")?),
        t::I64 => Value::I64(i64::from_le_bytes(c.array("i64 value")?)),
        t::F64 => Value::F64(f64::from_le_bytes(c.array("f64 value")?)),
        t::BOOL => Value::Bool(read_bool(c)?),
        t::STRING => {
            Value::String(c.string(("string value", "string value length"), MAX_STRING_LEN)?)
        }
        t::ARRAY => Value::Array(read_array(c, 1)?),
        other => {
            return Err(GgufError::UnknownValueType {
                type_id: other,
                offset: c.pos(),
            })
        }
    })
}

/// Reads `count` fixed-size little-endian numbers in one bounds check.
fn read_numbers<T, const N: usize>(
    c: &mut Cursor<'_>,
    count: u64,
    decode: fn([u8; N]) -> T,
) -> Result<Vec<T>, GgufError> {
    // The caller checked `count * N <= remaining`, so this cannot overflow.
    let bytes = c.take(count.saturating_mul(N as u64), "array elements")?;
    Ok(bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut a = [0u8; N];
            a.copy_from_slice(chunk);
            decode(a)
        })
        .collect())
}

/// Reads an array (element type, count, elements) at nesting `depth` (1 for
/// an array that is not inside another array).
fn read_array(c: &mut Cursor<'_>, depth: u32) -> Result<Array, GgufError> {
    let start = c.pos();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::LimitExceeded {
            what: "array nesting depth",
            value: depth.into(),
            limit: MAX_ARRAY_DEPTH.into(),
            offset: start,
        });
    }
    let elem = read_type_id(c, "array element type")?;
    let count_offset = c.pos();
    let count = c.u64("array length")?;
    if count > MAX_ARRAY_LEN {
        return Err(GgufError::LimitExceeded {
            what: "array length",
            value: count,
            limit: MAX_ARRAY_LEN,
            offset: count_offset,
        });
    }
    // Check against the bytes left before allocating anything.
    let min = min_encoded_size(elem).unwrap_or(1);
    c.ensure(count.saturating_mul(min), "array elements")?;
    Ok(match elem {
        t::U8 => Array::U8(read_numbers(c, count, u8::from_le_bytes)?),
        t::I8 => Array::I8(read_numbers(c, count, i8::from_le_bytes)?),
        t::U16 => Array::U16(read_numbers(c, count, u16::from_le_bytes)?),
        t::I16 => Array::I16(read_numbers(c, count, i16::from_le_bytes)?),
        t::U32 => Array::U32(read_numbers(c, count, u32::from_le_bytes)?),
        t::I32 => Array::I32(read_numbers(c, count, i32::from_le_bytes)?),
        t::F32 => Array::F32(read_numbers(c, count, f32::from_le_bytes)?),
        t::U64 => Array::U64(read_numbers(c, count, u64::from_le_bytes)?),
        t::I64 => Array::I64(read_numbers(c, count, i64::from_le_bytes)?),
        t::F64 => Array::F64(read_numbers(c, count, f64::from_le_bytes)?),
        t::BOOL => Array::Bool(repeat(count, || read_bool(c))?),
        t::STRING => Array::String(repeat(count, || {
            c.string(
                ("string in array", "string length in array"),
                MAX_STRING_LEN,
            )
        })?),
        _ => Array::Array(repeat(count, || read_array(c, depth + 1))?),
    })
}

/// Calls `f` `count` times and collects the results. `count` was checked
/// against the remaining bytes, so the capacity is bounded by the file size.
fn repeat<T>(count: u64, mut f: impl FnMut() -> Result<T, GgufError>) -> Result<Vec<T>, GgufError> {
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        out.push(f()?);
    }
    Ok(out)
}
