//! The error type of this crate.
//!
//! Every error found while parsing carries the byte offset (from the start of
//! the file) where the problem was found, and its `Display` is one line.

use std::io;

/// Everything that can go wrong reading, querying or writing a GGUF file.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum GgufError {
    /// An operating-system I/O error (open, map, write, rename, sync).
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What was being done, e.g. `"opening /models/x.gguf"`.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The file does not start with the bytes `GGUF`.
    #[error("not a GGUF file: magic at offset 0 is {found:02x?}, expected \"GGUF\" (47 47 55 46)")]
    BadMagic {
        /// The first four bytes of the file.
        found: [u8; 4],
    },

    /// The version field (offset 4) is not 2 or 3.
    #[error(
        "unsupported GGUF version {version} at offset 4 (supported: 2 and 3){}",
        endian_hint(*version)
    )]
    UnsupportedVersion {
        /// The version found.
        version: u32,
    },

    /// The file ends before an item that the header says is there.
    #[error("truncated GGUF file: {what} at offset {offset} needs {needed} bytes, past the end of the file")]
    Truncated {
        /// Where the item starts.
        offset: u64,
        /// How many bytes the item needs from `offset`.
        needed: u64,
        /// What was being read.
        what: &'static str,
    },

    /// A count or length exceeds one of the sanity limits in [`crate::limits`].
    #[error("{what} at offset {offset} is {value}, over the limit of {limit}")]
    LimitExceeded {
        /// What was being read.
        what: &'static str,
        /// The value found.
        value: u64,
        /// The limit.
        limit: u64,
        /// Where the value was found.
        offset: u64,
    },

    /// A string is not valid UTF-8.
    #[error("invalid UTF-8 in the string at offset {offset}")]
    InvalidUtf8 {
        /// Where the string (its length prefix) starts.
        offset: u64,
    },

    /// A metadata value type id outside 0..=12.
    #[error("unknown metadata value type {type_id} at offset {offset}")]
    UnknownValueType {
        /// The type id found.
        type_id: u32,
        /// Where the type id was found.
        offset: u64,
    },

    /// A bool metadata value that is neither 0 nor 1.
    #[error("invalid bool value {value} at offset {offset} (must be 0 or 1)")]
    InvalidBool {
        /// The byte found.
        value: u8,
        /// Where the byte was found.
        offset: u64,
    },

    /// A tensor whose ggml type id this crate does not know.
    #[error("tensor '{name}' (info at offset {info_offset}) has unknown ggml type {type_id}")]
    UnknownTensorType {
        /// The tensor name.
        name: String,
        /// The type id found.
        type_id: u32,
        /// Where the tensor info record starts.
        info_offset: u64,
    },

    /// The same metadata key appears twice.
    #[error("duplicate metadata key '{key}' at offset {offset}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where the second occurrence starts.
        offset: u64,
    },

    /// The same tensor name appears twice.
    #[error("duplicate tensor name '{name}' at offset {info_offset}")]
    DuplicateTensor {
        /// The tensor name.
        name: String,
        /// Where the second tensor info record starts.
        info_offset: u64,
    },

    /// A tensor's data does not lie inside the file.
    #[error(
        "tensor '{name}' (info at offset {info_offset}): data at offset {offset} with {n_bytes} \
         bytes runs past the end of the file ({file_size} bytes)"
    )]
    TensorOutOfBounds {
        /// The tensor name.
        name: String,
        /// Absolute start of the data (saturated at `u64::MAX` on overflow).
        offset: u64,
        /// Size of the data.
        n_bytes: u64,
        /// Size of the file.
        file_size: u64,
        /// Where the tensor info record starts.
        info_offset: u64,
    },

    /// A tensor's data offset is not a multiple of the file alignment.
    #[error(
        "tensor '{name}' (info at offset {info_offset}): data offset {offset} is not a multiple \
         of the alignment {alignment}"
    )]
    MisalignedTensor {
        /// The tensor name.
        name: String,
        /// The data offset as stored (relative to the data section).
        offset: u64,
        /// The file alignment.
        alignment: u64,
        /// Where the tensor info record starts.
        info_offset: u64,
    },

    /// The element count or byte size of a tensor overflows 64 bits.
    #[error("tensor '{name}' (info at offset {info_offset}): dimensions {dims:?} overflow")]
    DimensionOverflow {
        /// The tensor name.
        name: String,
        /// The dimensions found.
        dims: Vec<u64>,
        /// Where the tensor info record starts.
        info_offset: u64,
    },

    /// A quantized tensor whose rows are not a whole number of blocks.
    #[error(
        "tensor '{name}' (info at offset {info_offset}): row length {row_len} is not a multiple \
         of the {ty} block size {block_size}"
    )]
    BadShape {
        /// The tensor name.
        name: String,
        /// `dims[0]`.
        row_len: u64,
        /// The tensor type.
        ty: crate::GgmlType,
        /// Elements per block of `ty`.
        block_size: u64,
        /// Where the tensor info record starts.
        info_offset: u64,
    },

    /// `general.alignment` is not a `u32` that is a nonzero power of two.
    #[error(
        "invalid general.alignment at offset {offset}: found {found}, expected a u32 that is a \
         nonzero power of two"
    )]
    BadAlignment {
        /// The value found, with its type, e.g. `"u32 48"`.
        found: String,
        /// Where the value was found (0 when it did not come from a file).
        offset: u64,
    },

    /// A required metadata key is missing.
    #[error("missing metadata key '{key}'")]
    MissingKey {
        /// The key.
        key: String,
    },

    /// A metadata value has a type the caller cannot use.
    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller asked for.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },

    /// An integer metadata value does not fit the requested type.
    #[error("metadata key '{key}' has value {value}, which does not fit in {expected}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value found (as text).
        value: String,
        /// The type the caller asked for.
        expected: &'static str,
    },

    /// The writer was given a tensor it cannot write.
    #[error("invalid tensor '{name}': {reason}")]
    InvalidTensor {
        /// The tensor name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// A note for versions that look like a big-endian GGUF file.
fn endian_hint(version: u32) -> &'static str {
    match version.swap_bytes() {
        2 | 3 => "; this looks like a big-endian GGUF file, which is not supported",
        _ => "",
    }
}

impl GgufError {
    /// An [`GgufError::Io`] with a context string.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> GgufError {
        GgufError::Io {
            context: context.into(),
            source,
        }
    }
}
