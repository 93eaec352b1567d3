//! The crate's error type.

use statelm_gguf::GgmlType;

/// Errors from quantization, dequantization and the matrix kernels.
///
/// Every bad length or unsupported type is reported here instead of panicking.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum QuantError {
    /// The operation is not implemented for this element type.
    #[error("{op} is not supported for {ty}")]
    Unsupported {
        /// The element type.
        ty: GgmlType,
        /// The operation that was asked for (e.g. `"quantize"`, `"vec_dot"`).
        op: &'static str,
    },
    /// A buffer has the wrong length.
    #[error("{what}: expected {expected}, got {got}")]
    BadLength {
        /// Which buffer or dimension.
        what: &'static str,
        /// The length required.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// An element count is not a whole number of blocks of the type.
    #[error("{n} elements is not a multiple of {ty}'s block size {block}")]
    NotBlockMultiple {
        /// The element type.
        ty: GgmlType,
        /// The element count given.
        n: usize,
        /// The block size of `ty`.
        block: usize,
    },
    /// A size computation overflowed `usize`.
    #[error("size overflow: {what}")]
    Overflow {
        /// What was being sized.
        what: &'static str,
    },
    /// The activations were quantized to a type the weights cannot dot against.
    #[error("weights of type {weights} need activations of type {expected}, got {got}")]
    ActsType {
        /// The weight type.
        weights: GgmlType,
        /// The activation type required (see [`crate::vec_dot_type`]).
        expected: GgmlType,
        /// The activation type given.
        got: GgmlType,
    },
}

/// Bytes for `n` elements of `ty`, as a typed error when `n` is not a whole number of blocks.
pub(crate) fn bytes_for(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    let block = ty.block_size();
    if !n.is_multiple_of(block) {
        return Err(QuantError::NotBlockMultiple { ty, n, block });
    }
    (n / block)
        .checked_mul(ty.block_bytes())
        .ok_or(QuantError::Overflow { what: "row bytes" })
}

/// Checks a buffer length.
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), QuantError> {
    if expected == got {
        Ok(())
    } else {
        Err(QuantError::BadLength {
            what,
            expected,
            got,
        })
    }
}
