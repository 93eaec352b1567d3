//! The checked single-call entry points of a kernel table: one dot, four vectors, a tile, the
//! eight-row and multi-vector kernels — each operand's length checked, for tests, benchmarks
//! and tools (the hot loops in [`crate::matvec`] check once per matrix and call the table).

use crate::dispatch::Kernels;
use crate::error::{bytes_for, check_len, QuantError};
use crate::kernels::PAIR_TILE_VECS;
use statelm_gguf::GgmlType;

impl Kernels {
    /// Dot product of `n` elements: one weight row `w` (type `w_ty`) against
    /// activations `a` already quantized to [`crate::vec_dot_type`]`(w_ty)`.
    pub fn vec_dot(&self, w_ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
        let f = self.dot_fn(w_ty).ok_or(QuantError::Unsupported {
            ty: w_ty,
            op: "vec_dot",
        })?;
        check_len("vec_dot weight bytes", bytes_for(w_ty, n)?, w.len())?;
        check_len(
            "vec_dot activation bytes",
            bytes_for(crate::vec_dot_type(w_ty), n)?,
            a.len(),
        )?;
        // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
        Ok(unsafe { f(n, w, a) })
    }

    /// Dots one weight row against four activation vectors; bit-identical to
    /// four [`Kernels::vec_dot`] calls (uses a four-vector kernel when the ISA
    /// has one for `w_ty`).
    pub fn vec_dot4(
        &self,
        w_ty: GgmlType,
        n: usize,
        w: &[u8],
        a: [&[u8]; 4],
    ) -> Result<[f32; 4], QuantError> {
        let f = self.dot_fn(w_ty).ok_or(QuantError::Unsupported {
            ty: w_ty,
            op: "vec_dot",
        })?;
        check_len("vec_dot weight bytes", bytes_for(w_ty, n)?, w.len())?;
        let a_bytes = bytes_for(crate::vec_dot_type(w_ty), n)?;
        for v in a {
            check_len("vec_dot activation bytes", a_bytes, v.len())?;
        }
        Ok(match self.dot4_fn(w_ty) {
            // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
            Some(f4) => unsafe { f4(n, w, a) },
            // SAFETY: as above.
            None => a.map(|v| unsafe { f(n, w, v) }),
        })
    }

    /// Dots eight weight rows against one activation vector; bit-identical to
    /// eight [`Kernels::vec_dot`] calls (uses an eight-row kernel when the ISA
    /// has one for `w_ty`).
    pub fn vec_dot_rows8(
        &self,
        w_ty: GgmlType,
        n: usize,
        w: [&[u8]; 8],
        a: &[u8],
    ) -> Result<[f32; 8], QuantError> {
        let Some(f) = self.rows8_fn(w_ty) else {
            let mut out = [0f32; 8];
            for (o, r) in out.iter_mut().zip(w) {
                *o = self.vec_dot(w_ty, n, r, a)?;
            }
            return Ok(out);
        };
        check_batch(w_ty, n, &w, &[a], 1)?;
        // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
        Ok(unsafe { f(n, w, a) })
    }

    /// Dots two weight rows against four activation vectors (`out[row][vector]`);
    /// bit-identical to eight [`Kernels::vec_dot`] calls (uses a tile kernel
    /// when the ISA has one for `w_ty`).
    pub fn vec_dot_tile(
        &self,
        w_ty: GgmlType,
        n: usize,
        w: [&[u8]; 2],
        a: [&[u8]; 4],
    ) -> Result<[[f32; 4]; 2], QuantError> {
        if let Some(f) = self.tile_fn(w_ty) {
            check_batch(w_ty, n, &w, &a, 4)?;
            // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
            return Ok(unsafe { f(n, w, a) });
        }
        Ok([
            self.vec_dot4(w_ty, n, w[0], a)?,
            self.vec_dot4(w_ty, n, w[1], a)?,
        ])
    }

    /// Eight weight rows against 1..=4 activation vectors by the eight-row × four-vector
    /// kernel (`out[v][row]`), or `None` when this ISA has none for `w_ty` (for tests: it must
    /// equal [`Kernels::vec_dot`] bit for bit).
    pub fn vec_dot_rows8x4(
        &self,
        w_ty: GgmlType,
        n: usize,
        w: [&[u8]; 8],
        a: &[&[u8]],
    ) -> Result<Option<Vec<[f32; 8]>>, QuantError> {
        let Some(f) = self.rows8x4_fn(w_ty) else {
            return Ok(None);
        };
        check_batch(w_ty, n, &w, a, 4)?;
        // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
        let out = unsafe { f(n, w, a) };
        Ok(Some(out[..a.len()].to_vec()))
    }

    /// Two weight rows against 1..=[`PAIR_TILE_VECS`] activation vectors by the pair tile
    /// kernel (`out[row][v]`), or `None` when this ISA has none for `w_ty` (for tests: it must
    /// equal [`Kernels::vec_dot`] bit for bit).
    pub fn vec_dot_pair_tile(
        &self,
        w_ty: GgmlType,
        n: usize,
        w: [&[u8]; 2],
        a: &[&[u8]],
    ) -> Result<Option<[Vec<f32>; 2]>, QuantError> {
        let Some((f, offset)) = self.pair_tile_fn(w_ty) else {
            return Ok(None);
        };
        check_batch(w_ty, n, &w, a, PAIR_TILE_VECS)?;
        let mut pairs = Vec::new();
        let nb = n / w_ty.block_size();
        crate::pairs::prepare(a, nb, offset, &mut pairs);
        // SAFETY: table invariant (the kernel runs on this CPU); the rows hold `nb` blocks and
        // `pairs` holds `nb` blocks of `ceil(a.len() / 2)` pairs.
        let out = unsafe { f(w, &pairs, a.len().div_ceil(2)) };
        Ok(Some(out.map(|row| row[..a.len()].to_vec())))
    }
}

/// Checks the operands of a multi-vector kernel: every weight row `n` elements of `w_ty`,
/// every activation vector `n` elements of its vec-dot type, and 1..=`max` vectors.
fn check_batch(
    w_ty: GgmlType,
    n: usize,
    w: &[&[u8]],
    a: &[&[u8]],
    max: usize,
) -> Result<(), QuantError> {
    let w_bytes = bytes_for(w_ty, n)?;
    for r in w {
        check_len("vec_dot weight bytes", w_bytes, r.len())?;
    }
    let a_bytes = bytes_for(crate::vec_dot_type(w_ty), n)?;
    for v in a {
        check_len("vec_dot activation bytes", a_bytes, v.len())?;
    }
    if a.is_empty() || a.len() > max {
        return Err(QuantError::BadLength {
            what: "vectors per multi-vector kernel call (at most)",
            expected: max,
            got: a.len(),
        });
    }
    Ok(())
}
