//! Sanity limits applied while parsing.
//!
//! They keep a corrupt or hostile header from making the parser allocate or
//! loop without bound. Real models are far below every one of them (Gemma 3
//! has 262 144 tokens, a few dozen keys and a few hundred tensors). Besides
//! these limits, every count is checked against the bytes left in the file
//! (at the smallest possible encoded size per item) before anything is
//! allocated, so a file claiming 2^60 array elements fails with
//! [`crate::GgufError::Truncated`] instead of allocating.

/// Longest metadata key, in bytes (the GGUF spec caps keys at 65 535 bytes).
pub const MAX_KEY_LEN: u64 = 65_535;

/// Longest tensor name, in bytes.
pub const MAX_TENSOR_NAME_LEN: u64 = 65_535;

/// Longest string value (including each string in an array), in bytes: 16 MiB.
pub const MAX_STRING_LEN: u64 = 16 << 20;

/// Most elements in one metadata array: 16 Mi.
pub const MAX_ARRAY_LEN: u64 = 16 << 20;

/// Deepest nesting of metadata arrays (an array of arrays has depth 2).
pub const MAX_ARRAY_DEPTH: u32 = 4;

/// Most metadata key/value pairs in one file.
pub const MAX_KV_COUNT: u64 = 1 << 20;

/// Most tensors in one file.
pub const MAX_TENSOR_COUNT: u64 = 1 << 20;

/// Most dimensions of one tensor (ggml itself uses 4).
pub const MAX_DIMS: u32 = 8;

/// Alignment used when the file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u64 = 32;
