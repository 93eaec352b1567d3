//! Typed metadata accessors on [`GgufFile`].
//!
//! `get_*` fail with [`GgufError::MissingKey`] when the key is absent;
//! `opt_*` return `Ok(None)` instead. Both fail with [`GgufError::WrongType`]
//! or [`GgufError::OutOfRange`] (naming the key) when the value cannot be
//! converted. Integer getters accept any integer type whose value fits.

use crate::error::GgufError;
use crate::value::{Array, Value};
use crate::GgufFile;

/// A `WrongType` error for `key`.
fn wrong(key: &str, expected: &'static str, v: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_owned(),
        expected,
        found: v.type_name(),
    }
}

/// Converts an integer value to `T`, or reports why not.
fn int_as<T: TryFrom<i128>>(key: &str, v: &Value, expected: &'static str) -> Result<T, GgufError> {
    let i = v.as_int().ok_or_else(|| wrong(key, expected, v))?;
    T::try_from(i).map_err(|_| GgufError::OutOfRange {
        key: key.to_owned(),
        value: i.to_string(),
        expected,
    })
}

/// Converts a number to `f32` (floats are narrowed, integers rounded).
fn to_f32(key: &str, v: &Value) -> Result<f32, GgufError> {
    match *v {
        Value::F32(x) => Ok(x),
        Value::F64(x) => Ok(x as f32),
        _ => v
            .as_int()
            .map(|i| i as f32)
            .ok_or_else(|| wrong(key, "f32", v)),
    }
}

macro_rules! getters {
    ($(
        $(#[$doc:meta])*
        $get:ident / $opt:ident -> $t:ty = |$key:ident, $v:ident| $conv:expr;
    )*) => {$(
        $(#[$doc])*
        ///
        /// Fails when the key is missing or has an unusable type; the error names the key.
        pub fn $get(&self, $key: &str) -> Result<$t, GgufError> {
            let $v = self.require($key)?;
            $conv
        }

        $(#[$doc])*
        ///
        /// `Ok(None)` when the key is missing; an error when it has an unusable type.
        pub fn $opt(&self, $key: &str) -> Result<Option<$t>, GgufError> {
            match self.get($key) {
                None => Ok(None),
                Some($v) => $conv.map(Some),
            }
        }
    )*};
}

impl GgufFile {
    /// The value of `key`, or `MissingKey`.
    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    /// The array value of `key`.
    pub fn get_array(&self, key: &str) -> Result<&Array, GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| wrong(key, "array", v))
    }

    getters! {
        /// An integer value of any type that fits in `u32`.
        get_u32 / opt_u32 -> u32 = |key, v| int_as(key, v, "u32");
        /// An integer value of any type that fits in `u64`.
        get_u64 / opt_u64 -> u64 = |key, v| int_as(key, v, "u64");
        /// An integer value of any type that fits in `i64`.
        get_i64 / opt_i64 -> i64 = |key, v| int_as(key, v, "i64");
        /// A float value (`f32`, `f64` narrowed) or an integer value (converted).
        get_f32 / opt_f32 -> f32 = |key, v| to_f32(key, v);
        /// A bool value.
        get_bool / opt_bool -> bool = |key, v| v.as_bool().ok_or_else(|| wrong(key, "bool", v));
        /// A string value.
        get_str / opt_str -> &str = |key, v| v.as_str().ok_or_else(|| wrong(key, "string", v));
        /// An array of strings.
        get_str_array / opt_str_array -> &[String] = |key, v| match v {
            Value::Array(Array::String(s)) => Ok(s.as_slice()),
            _ => Err(wrong(key, "array<string>", v)),
        };
    }

    /// An array of numbers as `f32`: `f32` arrays as is, `f64` arrays narrowed,
    /// integer arrays converted.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        let v = self.require(key)?;
        match v {
            Value::Array(Array::F32(x)) => Ok(x.clone()),
            Value::Array(Array::F64(x)) => Ok(x.iter().map(|&f| f as f32).collect()),
            Value::Array(a) => match a.ints() {
                Some(ints) => Ok(ints.into_iter().map(|i| i as f32).collect()),
                None => Err(wrong(key, "array<f32>", v)),
            },
            _ => Err(wrong(key, "array<f32>", v)),
        }
    }

    /// An array of integers of any type, each of which must fit in `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        let v = self.require(key)?;
        if let Value::Array(Array::I32(x)) = v {
            return Ok(x.clone());
        }
        let ints = v
            .as_array()
            .and_then(Array::ints)
            .ok_or_else(|| wrong(key, "array<i32>", v))?;
        ints.into_iter()
            .map(|i| {
                i32::try_from(i).map_err(|_| GgufError::OutOfRange {
                    key: key.to_owned(),
                    value: format!("{i} (in array)"),
                    expected: "i32",
                })
            })
            .collect()
    }

    /// The model architecture: `general.architecture` (e.g. `"gemma3"`).
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }
}
