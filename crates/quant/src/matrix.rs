//! Quantized weight matrices and quantized activation buffers.

use crate::dispatch::{vec_dot_type, Kernels};
use crate::error::{bytes_for, check_len, QuantError};
use statelm_gguf::GgmlType;

/// A row-major weight matrix borrowed from a byte buffer (e.g. an mmapped
/// GGUF tensor): `rows` rows of `cols` elements of type `ty`, each row
/// `ty.bytes_for(cols)` bytes.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` elements of `ty`.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        let row_bytes = bytes_for(ty, cols)?;
        let total = row_bytes.checked_mul(rows).ok_or(QuantError::Overflow {
            what: "matrix bytes",
        })?;
        check_len("matrix bytes", total, data.len())?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Number of rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The whole matrix's bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The bytes of row `r`.
    ///
    /// # Panics
    /// If `r >= rows()`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `out` (`cols()` elements).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        if r >= self.rows {
            return Err(QuantError::BadLength {
                what: "row index (must be < rows)",
                expected: self.rows,
                got: r,
            });
        }
        check_len("dequantize_row output", self.cols, out.len())?;
        crate::formats::dequantize_row(self.ty, self.row(r), out)
    }
}

/// A reusable buffer of `n` activation vectors of `cols` elements, quantized
/// to a vec-dot type (see [`vec_dot_type`]). Re-quantizing reuses the
/// allocation when its capacity suffices.
#[derive(Clone, Debug)]
pub struct QuantizedActs {
    ty: GgmlType,
    n: usize,
    cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
}

impl Default for QuantizedActs {
    fn default() -> Self {
        Self::new()
    }
}

impl QuantizedActs {
    /// An empty buffer.
    pub fn new() -> Self {
        QuantizedActs {
            ty: GgmlType::F32,
            n: 0,
            cols: 0,
            row_bytes: 0,
            data: Vec::new(),
        }
    }

    /// Quantizes `n` vectors of `cols` values (`x.len() == n * cols`) to `ty`
    /// (Q8_0, Q8_1, Q8_K or F32) with the process-wide kernels.
    pub fn quantize(
        &mut self,
        ty: GgmlType,
        x: &[f32],
        n: usize,
        cols: usize,
    ) -> Result<(), QuantError> {
        self.quantize_with(Kernels::global(), ty, x, n, cols)
    }

    /// Like [`QuantizedActs::quantize`] with an explicit kernel table.
    pub fn quantize_with(
        &mut self,
        kernels: &Kernels,
        ty: GgmlType,
        x: &[f32],
        n: usize,
        cols: usize,
    ) -> Result<(), QuantError> {
        let total = n.checked_mul(cols).ok_or(QuantError::Overflow {
            what: "activation elements",
        })?;
        check_len("activation values (n * cols)", total, x.len())?;
        let row_bytes = bytes_for(ty, cols)?;
        if kernels.quant_fn(ty).is_none() {
            return Err(QuantError::Unsupported {
                ty,
                op: "quantize activations",
            });
        }
        // Shrinks without writing, or zero-fills only the grown part.
        self.data.resize(row_bytes * n, 0);
        (self.ty, self.n, self.cols, self.row_bytes) = (ty, n, cols, row_bytes);
        if cols == 0 {
            return Ok(());
        }
        for (xs, out) in x
            .chunks_exact(cols)
            .zip(self.data.chunks_exact_mut(row_bytes))
        {
            kernels.quantize_acts(ty, xs, out)?;
        }
        Ok(())
    }

    /// The activation type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Number of vectors.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Elements per vector.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes per vector.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The bytes of vector `i`.
    ///
    /// # Panics
    /// If `i >= n()`.
    pub fn vector(&self, i: usize) -> &[u8] {
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// The bytes of all vectors, `n() * row_bytes()` long, vector `i` at `i * row_bytes()`.
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.n * self.row_bytes]
    }

    /// Allocated capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// Dequantizes all vectors into `out` (`n() * cols()` values, row-major): the exact
    /// values the integer kernels multiply, for [`crate::matmul_f32`] to reproduce the
    /// integer path up to f32 summation order.
    pub fn dequantize(&self, out: &mut [f32]) -> Result<(), QuantError> {
        check_len(
            "dequantized activations (n * cols)",
            self.n * self.cols,
            out.len(),
        )?;
        if self.cols == 0 {
            return Ok(());
        }
        for (src, dst) in self
            .data
            .chunks_exact(self.row_bytes)
            .zip(out.chunks_exact_mut(self.cols))
        {
            crate::formats::dequantize_row(self.ty, src, dst)?;
        }
        Ok(())
    }

    /// Checks that these activations fit weights `w`.
    pub(crate) fn check_against(&self, w: &QMatrix<'_>) -> Result<(), QuantError> {
        let expected = vec_dot_type(w.ty());
        if self.ty != expected {
            return Err(QuantError::ActsType {
                weights: w.ty(),
                expected,
                got: self.ty,
            });
        }
        check_len(
            "activation cols (must equal weight cols)",
            w.cols(),
            self.cols,
        )
    }
}
