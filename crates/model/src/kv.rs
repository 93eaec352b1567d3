//! The KV cache of one decoder layer: cells holding one key and one value row each.
//!
//! Every cell carries the position of its token. Global layers keep every token (cells in
//! position order); sliding-window layers keep a ring of `window + ubatch` cells, so their
//! memory stops growing: a query at position `p` only sees keys with `p - pos < window`, and the
//! extra `ubatch` cells keep the keys that earlier queries of the same batch still need.

use crate::config::ModelConfig;
use half::f16;
use statelm_gguf::GgmlType;
use statelm_quant::Kernels;

/// Cells a layer's cache allocates at a time as it grows.
pub const GROW_CELLS: usize = 256;

/// The most cells layer `il` holds in a State of `capacity` tokens (none for a short-convolution
/// layer, which holds [`conv_state_bytes`] instead): the capacity, or for a
/// sliding-window layer its ring of `window + ring_extra` cells (`ring_extra` is the model's
/// micro-batch; `None` keeps full-size caches, as `Numerics::LlamaCpp` does).
pub fn layer_cells(
    c: &ModelConfig,
    il: usize,
    capacity: usize,
    ring_extra: Option<usize>,
) -> usize {
    if c.is_conv_layer(il) {
        return 0;
    }
    let cells = match (c.sliding_window, ring_extra) {
        (Some(w), Some(extra)) if c.is_swa_layer(il) => (w + extra).min(capacity),
        _ => capacity,
    };
    cells.max(1)
}

/// Bytes one cell takes in every layer: key row, value row and its 4-byte position.
pub fn cell_bytes(c: &ModelConfig, kv: KvType) -> u64 {
    (kv.row_bytes(c.k_dim()) + kv.row_bytes(c.v_dim()) + 4) as u64
}

/// Bytes of the short-convolution layers' state (LFM2): a ring of recent inputs per layer,
/// allocated with the first token, whatever the context's length.
pub fn conv_state_bytes(c: &ModelConfig) -> u64 {
    let Some(sc) = c.shortconv else { return 0 };
    let layers = (0..c.n_layer).filter(|&il| c.is_conv_layer(il)).count();
    (layers * crate::conv::ConvCache::ring_bytes(c.n_embd, sc.d_conv())) as u64
}

/// The cache bytes a State of `capacity` tokens allocates once it holds `tokens` tokens: per
/// layer, whole growth steps of [`GROW_CELLS`] cells up to [`layer_cells`], plus the
/// convolution layers' state ([`conv_state_bytes`]) once it holds any. The one formula
/// of the cache's size: the planner and the engine's admission control use it, and it is
/// what [`crate::State::kv_bytes`] reports after a prefill.
pub fn kv_bytes_for(
    c: &ModelConfig,
    kv: KvType,
    capacity: usize,
    ring_extra: Option<usize>,
    tokens: usize,
) -> u64 {
    let per_cell = cell_bytes(c, kv);
    let conv = if tokens > 0 { conv_state_bytes(c) } else { 0 };
    conv + (0..c.n_layer)
        .map(|il| {
            let max = layer_cells(c, il, capacity, ring_extra);
            let used = tokens.min(max);
            let alloc = match used {
                0 => 0,
                u => (u.div_ceil(GROW_CELLS) * GROW_CELLS).min(max),
            };
            alloc as u64 * per_cell
        })
        .sum::<u64>()
}

/// Element type of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// 32-bit floats: exact, twice the memory of f16.
    F32,
    /// 16-bit floats (the default, like llama.cpp).
    #[default]
    F16,
    /// 8-bit blocks of 32 with an f16 scale: about half of f16.
    Q8_0,
}

impl KvType {
    /// Parses `f32`, `f16` or `q8_0`.
    pub fn parse(s: &str) -> Option<KvType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }

    /// The name used on the command line and in snapshots.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Stable id for snapshots.
    pub(crate) fn id(self) -> u8 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
            KvType::Q8_0 => 2,
        }
    }

    /// Inverse of [`KvType::id`].
    pub(crate) fn from_id(id: u8) -> Option<KvType> {
        [KvType::F32, KvType::F16, KvType::Q8_0]
            .into_iter()
            .find(|t| t.id() == id)
    }

    /// Bytes of one row of `n` elements (`n` a multiple of 32 for Q8_0).
    pub fn row_bytes(self, n: usize) -> usize {
        match self {
            KvType::F32 => 4 * n,
            KvType::F16 => 2 * n,
            KvType::Q8_0 => n / 32 * GgmlType::Q8_0.block_bytes(),
        }
    }

    /// Whether keys of this type can be re-rotated in place without compounding error.
    pub fn supports_shift(self) -> bool {
        !matches!(self, KvType::Q8_0)
    }
}

/// Typed element storage of a [`Rows`].
#[derive(Debug, Clone)]
enum Data {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8_0(Vec<u8>),
}

/// Growable row storage: `cells × row_len` elements of one [`KvType`].
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    row_len: usize,
    data: Data,
}

impl Rows {
    fn new(ty: KvType, row_len: usize) -> Rows {
        let data = match ty {
            KvType::F32 => Data::F32(Vec::new()),
            KvType::F16 => Data::F16(Vec::new()),
            KvType::Q8_0 => Data::Q8_0(Vec::new()),
        };
        Rows { row_len, data }
    }

    fn ty(&self) -> KvType {
        match self.data {
            Data::F32(_) => KvType::F32,
            Data::F16(_) => KvType::F16,
            Data::Q8_0(_) => KvType::Q8_0,
        }
    }

    /// Storage units (elements, or bytes for Q8_0) of one row.
    fn row_units(&self) -> usize {
        match self.data {
            Data::Q8_0(_) => self.ty().row_bytes(self.row_len),
            _ => self.row_len,
        }
    }

    fn row_bytes(&self) -> usize {
        self.ty().row_bytes(self.row_len)
    }

    /// Makes room for `cells` rows (exact allocation).
    fn ensure_cells(&mut self, cells: usize) {
        let need = cells * self.row_units();
        fn grow<T: Clone + Default>(v: &mut Vec<T>, need: usize) {
            if v.len() < need {
                v.reserve_exact(need - v.len());
                v.resize(need, T::default());
            }
        }
        match &mut self.data {
            Data::F32(v) => grow(v, need),
            Data::F16(v) => grow(v, need),
            Data::Q8_0(v) => grow(v, need),
        }
    }

    /// Frees rows past the first `cells`.
    fn shrink_to_cells(&mut self, cells: usize) {
        let n = cells * self.row_units();
        fn cut<T>(v: &mut Vec<T>, n: usize) {
            v.truncate(n);
            v.shrink_to_fit();
        }
        match &mut self.data {
            Data::F32(v) => cut(v, n),
            Data::F16(v) => cut(v, n),
            Data::Q8_0(v) => cut(v, n),
        }
    }

    fn allocated(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.capacity() * 4,
            Data::F16(v) => v.capacity() * 2,
            Data::Q8_0(v) => v.capacity(),
        }
    }

    /// Stores `src` (`row_len` floats) in cell `cell`.
    fn write(&mut self, cell: usize, src: &[f32]) {
        let u = self.row_units();
        let range = cell * u..(cell + 1) * u;
        match &mut self.data {
            Data::F32(v) => v[range].copy_from_slice(src),
            Data::F16(v) => Kernels::global().f32_to_f16(src, &mut v[range]),
            Data::Q8_0(v) => {
                statelm_quant::quantize_row(GgmlType::Q8_0, src, &mut v[range])
                    .expect("row_len is a multiple of 32");
            }
        }
    }

    /// Reads elements `[start, start + out.len())` of cell `cell` as f32.
    /// For Q8_0 `start` and `out.len()` are multiples of 32 (whole heads).
    pub(crate) fn read(&self, cell: usize, start: usize, out: &mut [f32]) {
        let u = self.row_units();
        let row = cell * u;
        match &self.data {
            Data::F32(v) => out.copy_from_slice(&v[row + start..row + start + out.len()]),
            Data::F16(v) => Kernels::global().f16_to_f32(&v[row + start..][..out.len()], out),
            Data::Q8_0(v) => {
                let bb = GgmlType::Q8_0.block_bytes();
                let src = &v[row + start / 32 * bb..row + (start + out.len()) / 32 * bb];
                statelm_quant::dequantize_row(GgmlType::Q8_0, src, out).expect("whole blocks");
            }
        }
    }

    /// Reads the first `cells` rows, all elements, as f32 into `out` (`cells × row_len`).
    pub(crate) fn read_cells(&self, cells: usize, out: &mut [f32]) {
        let n = cells * self.row_units();
        match &self.data {
            Data::F32(v) => out.copy_from_slice(&v[..n]),
            Data::F16(v) => Kernels::global().f16_to_f32(&v[..n], out),
            Data::Q8_0(v) => {
                statelm_quant::dequantize_row(GgmlType::Q8_0, &v[..n], out).expect("whole blocks");
            }
        }
    }

    fn copy_cell(&mut self, from: usize, to: usize) {
        let u = self.row_units();
        match &mut self.data {
            Data::F32(v) => v.copy_within(from * u..(from + 1) * u, to * u),
            Data::F16(v) => v.copy_within(from * u..(from + 1) * u, to * u),
            Data::Q8_0(v) => v.copy_within(from * u..(from + 1) * u, to * u),
        }
    }

    /// Rotates the first `cells` rows left by `by` rows.
    fn rotate_cells(&mut self, cells: usize, by: usize) {
        let u = self.row_units();
        match &mut self.data {
            Data::F32(v) => v[..cells * u].rotate_left(by * u),
            Data::F16(v) => v[..cells * u].rotate_left(by * u),
            Data::Q8_0(v) => v[..cells * u].rotate_left(by * u),
        }
    }

    /// The first `cells` rows as little-endian bytes (for snapshots).
    pub(crate) fn to_le_bytes(&self, cells: usize) -> Vec<u8> {
        let n = cells * self.row_units();
        match &self.data {
            Data::F32(v) => v[..n].iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::F16(v) => v[..n].iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::Q8_0(v) => v[..n].to_vec(),
        }
    }

    /// Overwrites the first rows from little-endian bytes (a whole number of rows).
    fn fill_from_le_bytes(&mut self, bytes: &[u8]) {
        match &mut self.data {
            Data::F32(v) => {
                for (d, s) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                    *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                }
            }
            Data::F16(v) => {
                for (d, s) in v.iter_mut().zip(bytes.chunks_exact(2)) {
                    *d = f16::from_le_bytes([s[0], s[1]]);
                }
            }
            Data::Q8_0(v) => v[..bytes.len()].copy_from_slice(bytes),
        }
    }
}

/// The cache of one layer.
#[derive(Debug, Clone)]
pub(crate) struct LayerCache {
    /// Keys, post-RoPE, `[cell][kv_head][head_dim]`.
    pub(crate) k: Rows,
    /// Values `[cell][kv_head][v_head_dim]`.
    pub(crate) v: Rows,
    /// Position of the token in each used cell.
    pub(crate) pos: Vec<u32>,
    /// Maximum number of cells.
    max_cells: usize,
    /// Next cell to write (ring order for sliding-window layers).
    head: usize,
}

impl LayerCache {
    pub(crate) fn new(ty: KvType, k_dim: usize, v_dim: usize, max_cells: usize) -> LayerCache {
        LayerCache {
            k: Rows::new(ty, k_dim),
            v: Rows::new(ty, v_dim),
            pos: Vec::new(),
            max_cells,
            head: 0,
        }
    }

    /// Number of cells in use.
    pub(crate) fn used(&self) -> usize {
        self.pos.len()
    }

    /// Bytes allocated by this layer.
    pub(crate) fn bytes(&self) -> usize {
        self.k.allocated() + self.v.allocated() + self.pos.capacity() * 4
    }

    /// Appends the key and value of the token at `pos`, overwriting the oldest cell of a full
    /// ring. Returns the cell written.
    pub(crate) fn push(&mut self, pos: u32, k: &[f32], v: &[f32]) -> usize {
        let cell = self.head;
        if cell == self.pos.len() {
            if cell.is_multiple_of(GROW_CELLS) {
                let cells = (cell + GROW_CELLS).min(self.max_cells);
                self.k.ensure_cells(cells);
                self.v.ensure_cells(cells);
                self.pos.reserve_exact(cells - self.pos.len());
            }
            self.pos.push(pos);
        } else {
            self.pos[cell] = pos;
        }
        self.k.write(cell, k);
        self.v.write(cell, v);
        self.head = (cell + 1) % self.max_cells;
        cell
    }

    /// Whether a push would overwrite a cell (full ring) — for full-context layers this means
    /// the state's capacity was exceeded, which callers check first.
    pub(crate) fn is_full(&self) -> bool {
        self.pos.len() == self.max_cells
    }

    /// Keeps only cells whose position satisfies `keep`, renumbering each kept position with
    /// `renumber`, compacted in position order, in place (no copy of the cache: this runs
    /// under memory pressure). Returns the kept cells' (old, new) positions.
    pub(crate) fn retain_positions(
        &mut self,
        keep: impl Fn(u32) -> bool,
        renumber: impl Fn(u32) -> u32,
    ) -> Vec<(u32, u32)> {
        let used = self.pos.len();
        if self.is_full() && self.head != 0 {
            // A wrapped ring: rotate so that cell order is position order again.
            self.k.rotate_cells(used, self.head);
            self.v.rotate_cells(used, self.head);
            self.pos.rotate_left(self.head);
        }
        let mut moved = Vec::new();
        let mut next = 0;
        for cell in 0..used {
            let old = self.pos[cell];
            if keep(old) {
                let new = renumber(old);
                self.k.copy_cell(cell, next);
                self.v.copy_cell(cell, next);
                self.pos[next] = new;
                moved.push((old, new));
                next += 1;
            }
        }
        self.pos.truncate(next);
        self.head = next % self.max_cells.max(1);
        moved
    }

    /// Returns the memory of unused cells (keeps whole growth chunks).
    pub(crate) fn shrink_to_fit(&mut self) {
        let cells = self.pos.len().div_ceil(GROW_CELLS) * GROW_CELLS;
        let cells = cells.min(self.max_cells);
        self.k.shrink_to_cells(cells);
        self.v.shrink_to_cells(cells);
        self.pos.shrink_to_fit();
    }

    /// Drops every cell.
    pub(crate) fn clear(&mut self) {
        self.pos.clear();
        self.head = 0;
    }

    /// Keys of cell `cell` for elements `[start, start + out.len())`, as f32.
    pub(crate) fn read_k(&self, cell: usize, start: usize, out: &mut [f32]) {
        self.k.read(cell, start, out);
    }

    /// Values of cell `cell` for elements `[start, start + out.len())`, as f32.
    pub(crate) fn read_v(&self, cell: usize, start: usize, out: &mut [f32]) {
        self.v.read(cell, start, out);
    }

    /// All used keys as f32, `[cell][k_dim]`, into `out`.
    pub(crate) fn read_all_k(&self, out: &mut [f32]) {
        self.k.read_cells(self.used(), out);
    }

    /// All used values as f32, `[cell][v_dim]`, into `out`.
    pub(crate) fn read_all_v(&self, out: &mut [f32]) {
        self.v.read_cells(self.used(), out);
    }

    /// Rewrites the key row of `cell`.
    pub(crate) fn rewrite_k(&mut self, cell: usize, k: &[f32]) {
        self.k.write(cell, k);
    }

    /// Key and value bytes of the used cells (little-endian), for snapshots.
    pub(crate) fn to_le_bytes(&self) -> (Vec<u8>, Vec<u8>) {
        (
            self.k.to_le_bytes(self.used()),
            self.v.to_le_bytes(self.used()),
        )
    }

    /// The next cell to be written (ring order), for snapshots.
    pub(crate) fn head(&self) -> usize {
        self.head
    }

    /// Restores cells from snapshot bytes, cell for cell, with the ring's next-write cell.
    pub(crate) fn restore(&mut self, pos: Vec<u32>, head: usize, k: &[u8], v: &[u8]) {
        let cells = pos.len();
        let alloc = cells.div_ceil(GROW_CELLS).max(1) * GROW_CELLS;
        let alloc = alloc.min(self.max_cells).max(cells);
        self.k.ensure_cells(alloc);
        self.v.ensure_cells(alloc);
        self.k.fill_from_le_bytes(k);
        self.v.fill_from_le_bytes(v);
        self.pos = pos;
        self.head = head % self.max_cells.max(1);
    }

    /// Row sizes in bytes (key, value), for snapshot validation.
    pub(crate) fn row_bytes(&self) -> (usize, usize) {
        (self.k.row_bytes(), self.v.row_bytes())
    }

    /// Maximum cells of this layer.
    pub(crate) fn max_cells(&self) -> usize {
        self.max_cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_overwrites_oldest_and_compacts() {
        let mut c = LayerCache::new(KvType::F32, 2, 2, 4);
        for p in 0..6u32 {
            c.push(p, &[p as f32, 0.0], &[0.0, p as f32]);
        }
        assert!(c.is_full());
        let mut ps = c.pos.clone();
        ps.sort();
        assert_eq!(ps, vec![2, 3, 4, 5]);
        let moved = c.retain_positions(|p| p >= 4, |p| p - 3);
        assert_eq!(moved, vec![(4, 1), (5, 2)]);
        let mut k = [0.0; 2];
        c.read_k(0, 0, &mut k);
        assert_eq!(k, [4.0, 0.0]);
        c.read_k(1, 0, &mut k);
        assert_eq!(k, [5.0, 0.0]);
        assert_eq!(c.used(), 2);
    }

    #[test]
    fn f16_and_q8_round_trip_closely() {
        for ty in [KvType::F16, KvType::Q8_0] {
            let mut c = LayerCache::new(ty, 64, 64, 8);
            let row: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 10.0).collect();
            c.push(0, &row, &row);
            let mut out = vec![0.0; 32];
            c.read_k(0, 32, &mut out);
            for (a, b) in out.iter().zip(&row[32..]) {
                assert!((a - b).abs() < 0.03, "{ty:?} {a} {b}");
            }
        }
    }
}
