//! Typed metadata values.

use std::fmt;

/// GGUF metadata value type ids (the `u32` before every value).
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 6.
    F32(f32),
    /// Type 12.
    F64(f64),
    /// Type 7 (stored as one byte, 0 or 1).
    Bool(bool),
    /// Type 8 (UTF-8).
    String(String),
    /// Type 9: a typed array.
    Array(Array),
}

/// A typed metadata array; arrays of arrays are allowed (each inner array has
/// its own element type).
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// Array of `u8`.
    U8(Vec<u8>),
    /// Array of `i8`.
    I8(Vec<i8>),
    /// Array of `u16`.
    U16(Vec<u16>),
    /// Array of `i16`.
    I16(Vec<i16>),
    /// Array of `u32`.
    U32(Vec<u32>),
    /// Array of `i32`.
    I32(Vec<i32>),
    /// Array of `u64`.
    U64(Vec<u64>),
    /// Array of `i64`.
    I64(Vec<i64>),
    /// Array of `f32`.
    F32(Vec<f32>),
    /// Array of `f64`.
    F64(Vec<f64>),
    /// Array of bools.
    Bool(Vec<bool>),
    /// Array of strings.
    String(Vec<String>),
    /// Array of arrays.
    Array(Vec<Array>),
}

impl Value {
    /// An empty value of the same type: an empty string or array (element type kept); scalars
    /// are returned as they are.
    pub(crate) fn emptied(&self) -> Value {
        match self {
            Value::String(_) => Value::String(String::new()),
            Value::Array(a) => Value::Array(a.emptied()),
            other => other.clone(),
        }
    }

    /// The GGUF value type id.
    pub(crate) fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F32(_) => type_id::F32,
            Value::F64(_) => type_id::F64,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
        }
    }

    /// A short type name: `"u32"`, `"string"`, `"array<string>"`, ...
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(a) => a.type_name(),
        }
    }

    /// The value as an `i128` when it is an integer of any width.
    pub(crate) fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as a `u64` when it is an integer (of any width) that fits.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_int().and_then(|v| u64::try_from(v).ok())
    }

    /// The value as an `i64` when it is an integer (of any width) that fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_int().and_then(|v| i64::try_from(v).ok())
    }

    /// The value as an `f64` when it is a float or an integer (large 64-bit
    /// integers are rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_int().map(|v| v as f64),
        }
    }

    /// The value when it is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value when it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value when it is an array.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    /// An empty array of the same element type.
    pub(crate) fn emptied(&self) -> Array {
        match self {
            Array::U8(_) => Array::U8(Vec::new()),
            Array::I8(_) => Array::I8(Vec::new()),
            Array::U16(_) => Array::U16(Vec::new()),
            Array::I16(_) => Array::I16(Vec::new()),
            Array::U32(_) => Array::U32(Vec::new()),
            Array::I32(_) => Array::I32(Vec::new()),
            Array::U64(_) => Array::U64(Vec::new()),
            Array::I64(_) => Array::I64(Vec::new()),
            Array::F32(_) => Array::F32(Vec::new()),
            Array::F64(_) => Array::F64(Vec::new()),
            Array::Bool(_) => Array::Bool(Vec::new()),
            Array::String(_) => Array::String(Vec::new()),
            Array::Array(_) => Array::Array(Vec::new()),
        }
    }

    /// The GGUF value type id of the elements.
    pub(crate) fn elem_type_id(&self) -> u32 {
        match self {
            Array::U8(_) => type_id::U8,
            Array::I8(_) => type_id::I8,
            Array::U16(_) => type_id::U16,
            Array::I16(_) => type_id::I16,
            Array::U32(_) => type_id::U32,
            Array::I32(_) => type_id::I32,
            Array::U64(_) => type_id::U64,
            Array::I64(_) => type_id::I64,
            Array::F32(_) => type_id::F32,
            Array::F64(_) => type_id::F64,
            Array::Bool(_) => type_id::BOOL,
            Array::String(_) => type_id::STRING,
            Array::Array(_) => type_id::ARRAY,
        }
    }

    /// A short type name: `"array<u32>"`, `"array<array>"`, ...
    pub fn type_name(&self) -> &'static str {
        match self {
            Array::U8(_) => "array<u8>",
            Array::I8(_) => "array<i8>",
            Array::U16(_) => "array<u16>",
            Array::I16(_) => "array<i16>",
            Array::U32(_) => "array<u32>",
            Array::I32(_) => "array<i32>",
            Array::U64(_) => "array<u64>",
            Array::I64(_) => "array<i64>",
            Array::F32(_) => "array<f32>",
            Array::F64(_) => "array<f64>",
            Array::Bool(_) => "array<bool>",
            Array::String(_) => "array<string>",
            Array::Array(_) => "array<array>",
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as `i128` when this is an array of integers.
    pub(crate) fn ints(&self) -> Option<Vec<i128>> {
        fn conv<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => conv(v),
            _ => return None,
        })
    }

    /// Writes up to `max` elements, comma separated, then `, …` if there are more.
    fn fmt_elems(&self, f: &mut fmt::Formatter<'_>, max: usize) -> fmt::Result {
        fn list<T>(
            f: &mut fmt::Formatter<'_>,
            v: &[T],
            max: usize,
            each: impl Fn(&mut fmt::Formatter<'_>, &T) -> fmt::Result,
        ) -> fmt::Result {
            for (i, x) in v.iter().take(max).enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                each(f, x)?;
            }
            if v.len() > max {
                f.write_str(", …")?;
            }
            Ok(())
        }
        fn plain<T: fmt::Display>(f: &mut fmt::Formatter<'_>, x: &T) -> fmt::Result {
            write!(f, "{x}")
        }
        match self {
            Array::U8(v) => list(f, v, max, plain),
            Array::I8(v) => list(f, v, max, plain),
            Array::U16(v) => list(f, v, max, plain),
            Array::I16(v) => list(f, v, max, plain),
            Array::U32(v) => list(f, v, max, plain),
            Array::I32(v) => list(f, v, max, plain),
            Array::U64(v) => list(f, v, max, plain),
            Array::I64(v) => list(f, v, max, plain),
            Array::F32(v) => list(f, v, max, plain),
            Array::F64(v) => list(f, v, max, plain),
            Array::Bool(v) => list(f, v, max, plain),
            Array::String(v) => list(f, v, max, |f, s| fmt_short_str(f, s)),
            Array::Array(v) => list(f, v, max, plain),
        }
    }
}

/// Longest string shown in full by `Display`, in characters.
const DISPLAY_STR_CHARS: usize = 48;
/// Array elements shown by `Display`.
const DISPLAY_ARRAY_ELEMS: usize = 6;

/// Writes a quoted, escaped string, cut after [`DISPLAY_STR_CHARS`] characters.
fn fmt_short_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    match s.char_indices().nth(DISPLAY_STR_CHARS) {
        None => write!(f, "{s:?}"),
        Some((cut, _)) => write!(f, "{:?}… ({} bytes)", &s[..cut], s.len()),
    }
}

impl fmt::Display for Value {
    /// Short, one-line form: strings are quoted and cut, arrays summarized
    /// as `array<string>[262144] ["<pad>", "<eos>", …]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => fmt_short_str(f, s),
            Value::Array(a) => a.fmt(f),
        }
    }
}

impl fmt::Display for Array {
    /// `array<u32>[3] [1, 2, 3]`, with at most a few elements shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] [", self.type_name(), self.len())?;
        self.fmt_elems(f, DISPLAY_ARRAY_ELEMS)?;
        f.write_str("]")
    }
}

macro_rules! from_impls {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Value {
                Value::$v(x)
            }
        }
        impl From<Vec<$t>> for Array {
            fn from(x: Vec<$t>) -> Array {
                Array::$v(x)
            }
        }
        impl From<Vec<$t>> for Value {
            fn from(x: Vec<$t>) -> Value {
                Value::Array(Array::$v(x))
            }
        }
    )*};
}

from_impls!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String,
);

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_owned())
    }
}

impl From<Array> for Value {
    fn from(a: Array) -> Value {
        Value::Array(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(Value::I8(-1).as_u64(), None);
        assert_eq!(Value::I8(-1).as_i64(), Some(-1));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U16(7).as_f64(), Some(7.0));
        assert_eq!(Value::F32(0.5).as_u64(), None);
        assert_eq!(Value::from("x").as_str(), Some("x"));
        assert_eq!(Value::from(vec![1u32, 2]).type_name(), "array<u32>");
    }

    #[test]
    fn display_is_short() {
        let long: String = "é".repeat(100);
        let s = Value::String(long).to_string();
        assert!(s.ends_with("… (200 bytes)"), "{s}");
        let toks: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
        assert_eq!(
            Value::from(toks).to_string(),
            r#"array<string>[1000] ["t0", "t1", "t2", "t3", "t4", "t5", …]"#
        );
        let nested = Value::Array(Array::Array(vec![Array::U8(vec![1]), Array::Bool(vec![])]));
        assert_eq!(
            nested.to_string(),
            "array<array>[2] [array<u8>[1] [1], array<bool>[0] []]"
        );
        assert_eq!(Value::F32(1.5).to_string(), "1.5");
    }
}
