//! Matrix-vector and matrix-matrix products over quantized weights.
//!
//! Rows are split into chunks (a multiple of [`ROW_ALIGN`] rows, about
//! [`CHUNKS_PER_THREAD`] per thread) that the pool's threads take dynamically.
//! `matmul` keeps its chunks under [`TILE_BYTES`] of weights (so they stay in
//! L2) and walks each chunk once per tile of [`TILE_VECS`] activation vectors,
//! dotting every weight row against all vectors of the tile while the row is
//! hot in L1: each weight block is fetched from memory once per chunk.

use crate::dispatch::Kernels;
use crate::error::{check_len, QuantError};
use crate::kernels::{Dot4Fn, DotFn, PairBlock, PairTileFn, TileFn};
use crate::matrix::{QMatrix, QuantizedActs};
use crate::pool::ThreadPool;

/// Chunk sizes are multiples of this many rows.
pub const ROW_ALIGN: usize = 16;
/// Target number of chunks per thread (dynamic load balancing).
pub const CHUNKS_PER_THREAD: usize = 4;
/// Upper bound on the weight bytes of one matmul chunk.
pub const TILE_BYTES: usize = 256 * 1024;
/// Activation vectors per matmul tile.
pub const TILE_VECS: usize = 8;

/// `y[r] = w_r · x` for the single vector in `acts`, with the process-wide kernels.
pub fn matvec(
    pool: &ThreadPool,
    w: &QMatrix<'_>,
    acts: &QuantizedActs,
    y: &mut [f32],
) -> Result<(), QuantError> {
    Kernels::global().matvec(pool, w, acts, y)
}

/// `y[i * rows + r] = w_r · x_i` for the `n` vectors in `acts`, with the process-wide kernels.
pub fn matmul(
    pool: &ThreadPool,
    w: &QMatrix<'_>,
    acts: &QuantizedActs,
    y: &mut [f32],
) -> Result<(), QuantError> {
    Kernels::global().matmul(pool, w, acts, y)
}

/// Convenience `y = W x` from f32 activations (quantizes `x` into a fresh
/// buffer; for tests and tools — hot loops keep a [`QuantizedActs`]).
pub fn matvec_f32(
    pool: &ThreadPool,
    w: &QMatrix<'_>,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), QuantError> {
    let mut acts = QuantizedActs::new();
    acts.quantize(crate::vec_dot_type(w.ty()), x, 1, w.cols())?;
    matvec(pool, w, &acts, y)
}

/// One product of [`Kernels::matvec_many`]: `y[r] = w_r · x` for the single vector in `acts`.
pub struct MatvecJob<'a, 'w> {
    /// The weights.
    pub w: &'a QMatrix<'w>,
    /// The activation vector, quantized for `w`'s vec-dot type.
    pub acts: &'a QuantizedActs,
    /// The output, `w.rows()` long.
    pub y: &'a mut [f32],
}

/// How a matrix product over several activation vectors sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOrder {
    /// Every output exactly as a single-vector dot computes it (a batch equals its vectors
    /// one by one).
    Invariant,
    /// As llama.cpp's x86 backend sums a batch: groups of four vectors take ggml's 4-row
    /// kernels where those differ from its single-vector ones (Q4_K), the rest single dots.
    Ggml,
}

/// Rows per chunk for `rows` rows on `threads` threads.
fn chunk_rows(rows: usize, threads: usize) -> usize {
    if threads <= 1 {
        return rows.max(1);
    }
    let target = rows.div_ceil(threads * CHUNKS_PER_THREAD);
    target.div_ceil(ROW_ALIGN).max(1) * ROW_ALIGN
}

/// A raw output pointer shared by tasks that write disjoint ranges.
pub(crate) struct OutPtr(*mut f32);
// SAFETY: tasks only write disjoint index ranges through the pointer, and the
// slice it came from outlives `ThreadPool::run`.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Wraps the start of `y`.
    pub(crate) fn new(y: &mut [f32]) -> OutPtr {
        OutPtr(y.as_mut_ptr())
    }

    /// The pointer (a method, so closures capture the `Sync` wrapper).
    pub(crate) fn get(&self) -> *mut f32 {
        self.0
    }
}

impl Kernels {
    fn prepare(&self, w: &QMatrix<'_>, acts: &QuantizedActs) -> Result<DotFn, QuantError> {
        let f = self.dot_fn(w.ty()).ok_or(QuantError::Unsupported {
            ty: w.ty(),
            op: "matvec",
        })?;
        acts.check_against(w)?;
        Ok(f)
    }

    /// [`matvec`] with this kernel table.
    pub fn matvec(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        y: &mut [f32],
    ) -> Result<(), QuantError> {
        self.matvec_many(pool, [MatvecJob { w, acts, y }])
    }

    /// Several matrix-vector products over one activation vector each, in one pool dispatch
    /// (the q/k/v or gate/up projections of a decode step): the chunks of all `N` matrices
    /// are one task list, so the threads join once instead of `N` times. Each output is what
    /// [`Kernels::matvec`] writes.
    pub fn matvec_many<const N: usize>(
        &self,
        pool: &ThreadPool,
        jobs: [MatvecJob<'_, '_>; N],
    ) -> Result<(), QuantError> {
        let threads = pool.n_threads();
        let mut plans = [None; N];
        for (plan, job) in plans.iter_mut().zip(&jobs) {
            let dot = self.prepare(job.w, job.acts)?;
            check_len("activation vectors (matvec needs 1)", 1, job.acts.n())?;
            check_len("matvec output (rows)", job.w.rows(), job.y.len())?;
            let chunk = chunk_rows(job.w.rows(), threads);
            *plan = Some((dot, chunk, job.w.rows().div_ceil(chunk)));
        }
        let plans = plans.map(|p| p.expect("every plan is set above"));
        // Each output becomes a raw pointer from its own `&mut` (which the job gives up).
        let jobs = jobs.map(|j| (j.w, j.acts, OutPtr::new(j.y)));
        let total: usize = plans.iter().map(|p| p.2).sum();
        pool.run(total, &|mut t| {
            let mut j = 0;
            while t >= plans[j].2 {
                t -= plans[j].2;
                j += 1;
            }
            let (dot, chunk, _) = plans[j];
            let (w, acts, out) = &jobs[j];
            let x = acts.vector(0);
            let r0 = t * chunk;
            let r1 = (r0 + chunk).min(w.rows());
            // SAFETY: rows r0..r1 are within job j's output (r1 <= rows = y.len(), checked
            // above), task (j, t) alone writes them, and the outputs outlive pool.run.
            let ys = unsafe { std::slice::from_raw_parts_mut(out.get().add(r0), r1 - r0) };
            let mut r = r0;
            if let Some(rows8) = self.rows8_fn(w.ty()) {
                for y8 in ys.chunks_exact_mut(8) {
                    let wr = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| w.row(r + i));
                    // SAFETY: as for `dot` below.
                    y8.copy_from_slice(&unsafe { rows8(w.cols(), wr, x) });
                    r += 8;
                }
            }
            for yr in &mut ys[r - r0..] {
                // SAFETY: the table's kernels run on this CPU; row and vector lengths were
                // checked by QMatrix::new and prepare().
                *yr = unsafe { dot(w.cols(), w.row(r), x) };
                r += 1;
            }
        });
        Ok(())
    }

    /// [`matmul`] with this kernel table (each output bit-identical to a single dot).
    pub fn matmul(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        y: &mut [f32],
    ) -> Result<(), QuantError> {
        self.matmul_in(pool, w, acts, y, BatchOrder::Invariant)
    }

    /// [`matmul`] with this kernel table, summing in `order`.
    pub fn matmul_in(
        &self,
        pool: &ThreadPool,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        y: &mut [f32],
        order: BatchOrder,
    ) -> Result<(), QuantError> {
        let dot = self.prepare(w, acts)?;
        // Bit-identical to single dots, which both orders take for these formats.
        let pairs = self.pair_tile_fn(w.ty());
        let fns = TileFns {
            pairs: pairs.map(|(f, _)| f),
            dot,
            dot4: self.batch_dot4_fn(w.ty(), order),
            tile: self.tile_fn(w.ty()),
            // The decode kernels, bit-identical to single dots: only where the order is.
            rows8: match order {
                BatchOrder::Invariant => self.rows8_fn(w.ty()),
                BatchOrder::Ggml => None,
            },
            rows8x4: match order {
                BatchOrder::Invariant => self.rows8x4_fn(w.ty()),
                BatchOrder::Ggml => None,
            },
        };
        let (rows, n) = (w.rows(), acts.n());
        let total = rows.checked_mul(n).ok_or(QuantError::Overflow {
            what: "matmul output",
        })?;
        check_len("matmul output (n * rows)", total, y.len())?;
        if n == 0 || rows == 0 {
            return Ok(());
        }
        let chunk =
            chunk_rows(rows, pool.n_threads()).min((TILE_BYTES / w.row_bytes().max(1)).max(1));
        // The vector tiles of two or more vectors, prepared once for the pair kernel.
        let prepared: Vec<Vec<PairBlock>> = match pairs {
            Some((_, offset)) => (0..n)
                .step_by(TILE_VECS)
                .map(|v0| {
                    let vs: Vec<&[u8]> = (v0..(v0 + TILE_VECS).min(n))
                        .map(|v| acts.vector(v))
                        .collect();
                    let mut p = Vec::new();
                    if vs.len() >= 2 {
                        crate::pairs::prepare(&vs, w.cols() / w.ty().block_size(), offset, &mut p);
                    }
                    p
                })
                .collect(),
            None => Vec::new(),
        };
        let out = OutPtr(y.as_mut_ptr());
        pool.run(rows.div_ceil(chunk), &|t| {
            let r0 = t * chunk;
            let r1 = (r0 + chunk).min(rows);
            for (i, v0) in (0..n).step_by(TILE_VECS).enumerate() {
                let v1 = (v0 + TILE_VECS).min(n);
                let tile = prepared.get(i).map(Vec::as_slice).filter(|p| !p.is_empty());
                // SAFETY: task t alone writes rows r0..r1 of each output vector,
                // and y (n * rows long, checked above) outlives pool.run; `tile` holds the
                // vectors v0..v1 prepared for `fns.pairs`.
                unsafe { fns.rows_by_vecs(w, acts, r0..r1, v0..v1, tile, &out) };
            }
        });
        Ok(())
    }
}

/// The kernels one matmul uses, from the widest register tile down to a single dot.
struct TileFns {
    pairs: Option<PairTileFn>,
    dot: DotFn,
    dot4: Option<Dot4Fn>,
    tile: Option<TileFn>,
    rows8: Option<crate::kernels::Rows8Fn>,
    rows8x4: Option<crate::kernels::Rows8x4Fn>,
}

impl TileFns {
    /// Writes `y[v * rows + r] = w_r · x_v` for `r` in `rs` and `v` in `vs`. Where there is a
    /// tile kernel, the whole quads of vectors go two rows × four vectors per call; the other
    /// vectors go — where the order allows it — eight rows per decode (`rows8`) kernel call,
    /// vector after vector (the eight rows stay in L1, so a small batch reads its weights
    /// once; the K-quants have no tile kernel); what is left, one row × four vectors, then
    /// single dots. With a pair kernel and `prepared` (vectors `vs` prepared for it), two rows
    /// × all of `vs` go per call instead.
    ///
    /// # Safety
    /// The kernels must run on this CPU and `acts` must have been checked
    /// against `w` (`Kernels::prepare`); `out` must point to `w.rows() *
    /// acts.n()` writable floats that no other thread writes in rows `rs`; `prepared`, if
    /// given, must be [`crate::pairs::prepare`] of vectors `vs` over `w`'s blocks.
    unsafe fn rows_by_vecs(
        &self,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        rs: std::ops::Range<usize>,
        vs: std::ops::Range<usize>,
        prepared: Option<&[PairBlock]>,
        out: &OutPtr,
    ) {
        let (rows, cols) = (w.rows(), w.cols());
        let put = |v: usize, r: usize, s: f32| {
            // SAFETY: every call below has r in `rs` (< rows) and v in `vs` (< n), and no
            // other thread writes rows `rs` (the caller's contract).
            unsafe { *out.get().add(v * rows + r) = s }
        };
        if let (Some(f), Some(prepared)) = (self.pairs, prepared) {
            let npairs = vs.len().div_ceil(2);
            let mut r = rs.start;
            while r + 2 <= rs.end {
                // SAFETY: kernels run on this CPU; the rows hold cols / block_size blocks,
                // `prepared` as many blocks of `npairs` pairs (the caller's contract).
                let s = unsafe { f([w.row(r), w.row(r + 1)], prepared, npairs) };
                for (i, row) in s.iter().enumerate() {
                    for (j, v) in vs.clone().enumerate() {
                        put(v, r + i, row[j]);
                    }
                }
                r += 2;
            }
            // SAFETY: as above.
            return unsafe { self.rows_by_dots(w, acts, r..rs.end, vs, &put) };
        }
        let quad = |v: usize| [0, 1, 2, 3].map(|i| acts.vector(v + i));
        let tiled = match self.tile {
            Some(_) => vs.start + (vs.end - vs.start) / 4 * 4,
            None => vs.start,
        };
        let mut r = rs.start;
        if let Some(tile) = self.tile {
            while r + 2 <= rs.end {
                let wr = [w.row(r), w.row(r + 1)];
                for v in (vs.start..tiled).step_by(4) {
                    // SAFETY: kernels run on this CPU; lengths checked by the caller.
                    let s = unsafe { tile(cols, wr, quad(v)) };
                    for (i, row) in s.iter().enumerate() {
                        row.iter()
                            .enumerate()
                            .for_each(|(j, &s)| put(v + j, r + i, s));
                    }
                }
                r += 2;
            }
        }
        // SAFETY: as above.
        unsafe { self.rows_by_dots(w, acts, r..rs.end, vs.start..tiled, &put) };
        let rest = tiled..vs.end;
        let mut r = rs.start;
        if let (Some(many), true) = (self.rows8x4, rest.len() >= 2) {
            // At most TILE_VECS vectors: on the stack, not allocated per chunk.
            let mut slots: [&[u8]; TILE_VECS] = [&[]; TILE_VECS];
            for (slot, v) in slots.iter_mut().zip(rest.clone()) {
                *slot = acts.vector(v);
            }
            let vecs = &slots[..rest.len()];
            while r + 8 <= rs.end {
                let wr = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| w.row(r + i));
                for (g, group) in vecs.chunks(4).enumerate() {
                    // SAFETY: as above (1..=4 vectors per call).
                    let s = unsafe { many(cols, wr, group) };
                    for (j, out) in s.iter().take(group.len()).enumerate() {
                        let v = rest.start + 4 * g + j;
                        out.iter().enumerate().for_each(|(i, &s)| put(v, r + i, s));
                    }
                }
                r += 8;
            }
        } else if let (Some(rows8), false) = (self.rows8, rest.is_empty()) {
            while r + 8 <= rs.end {
                let wr = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| w.row(r + i));
                for v in rest.clone() {
                    // SAFETY: as above.
                    let s = unsafe { rows8(cols, wr, acts.vector(v)) };
                    s.iter().enumerate().for_each(|(i, &s)| put(v, r + i, s));
                }
                r += 8;
            }
        }
        // SAFETY: as above.
        unsafe { self.rows_by_dots(w, acts, r..rs.end, rest, &put) };
    }

    /// [`TileFns::rows_by_vecs`] by one row × four vectors per call, then single dots.
    ///
    /// # Safety
    /// As for [`TileFns::rows_by_vecs`]; `put` writes one output.
    unsafe fn rows_by_dots(
        &self,
        w: &QMatrix<'_>,
        acts: &QuantizedActs,
        rs: std::ops::Range<usize>,
        vs: std::ops::Range<usize>,
        put: &dyn Fn(usize, usize, f32),
    ) {
        let cols = w.cols();
        let quad = |v: usize| [0, 1, 2, 3].map(|i| acts.vector(v + i));
        for r in rs {
            let wr = w.row(r);
            let mut v = vs.start;
            if let Some(f4) = self.dot4 {
                while v + 4 <= vs.end {
                    // SAFETY: kernels run on this CPU; lengths checked by the caller.
                    let s = unsafe { f4(cols, wr, quad(v)) };
                    s.into_iter()
                        .enumerate()
                        .for_each(|(i, s)| put(v + i, r, s));
                    v += 4;
                }
            }
            for v in v..vs.end {
                // SAFETY: as above.
                put(v, r, unsafe { (self.dot)(cols, wr, acts.vector(v)) });
            }
        }
    }
}
