//! Tensor descriptors.

use crate::GgmlType;

/// Where a tensor lives in the file and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor name, e.g. `"blk.0.attn_q.weight"`.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the row length (the contiguous
    /// dimension), `dims[1]` the number of rows, and so on.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (the product of the dims; 1 for zero dims).
    ///
    /// For tensors read from a file the product was checked not to overflow;
    /// for hand-built ones it saturates at `u64::MAX`.
    pub fn n_elements(&self) -> u64 {
        product(&self.dims)
    }

    /// Elements per row: `dims[0]` (1 for a tensor with no dims).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of `dims[1..]`.
    pub fn n_rows(&self) -> u64 {
        product(self.dims.get(1..).unwrap_or(&[]))
    }
}

/// Saturating product.
fn product(dims: &[u64]) -> u64 {
    dims.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_helpers() {
        let t = TensorInfo {
            name: "w".into(),
            dims: vec![256, 3, 2],
            ty: GgmlType::Q4_K,
            offset: 0,
            n_bytes: 0,
        };
        assert_eq!(t.n_elements(), 1536);
        assert_eq!(t.row_len(), 256);
        assert_eq!(t.n_rows(), 6);
        let s = TensorInfo { dims: vec![], ..t };
        assert_eq!((s.n_elements(), s.row_len(), s.n_rows()), (1, 1, 1));
    }
}
