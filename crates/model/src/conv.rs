//! The state of one short-convolution layer (LFM2): the layer's last gated inputs `b ⊙ x`.
//!
//! A convolution over `l_cache` inputs needs only the last `d_conv = l_cache - 1` of them to go
//! on, so unlike KV its state cannot be cut back by dropping cells: the rows for earlier
//! positions are gone. This cache therefore keeps a ring of the last `d_conv +`
//! [`CONV_ROLLBACK`] rows. Cutting the context back by up to [`CONV_ROLLBACK`] tokens (a
//! rejected lookup draft, a chat template's re-rendered turn end) is exact; a deeper cut makes
//! the State re-prefill what it keeps, and says so ([`crate::RetainOutcome::Reprefill`]).

/// Tokens by which a State holding convolution layers can be cut back without a re-prefill.
pub const CONV_ROLLBACK: usize = 32;

/// The ring of one convolution layer's last inputs.
#[derive(Debug, Clone)]
pub(crate) struct ConvCache {
    /// Channels (`n_embd`).
    width: usize,
    /// Rows the ring holds at most.
    keep: usize,
    /// `keep × width` once the first row arrives (empty before: no memory for a new State).
    data: Vec<f32>,
    /// Rows held (the newest `rows` positions before `end`).
    rows: usize,
    /// Slot of the row for position `end - 1`'s successor (the next write).
    next: usize,
    /// The position after the newest row.
    end: usize,
}

impl ConvCache {
    /// A cache for `width` channels of a convolution whose state is `d_conv` rows.
    pub(crate) fn new(width: usize, d_conv: usize) -> ConvCache {
        ConvCache {
            width,
            keep: d_conv + CONV_ROLLBACK,
            data: Vec::new(),
            rows: 0,
            next: 0,
            end: 0,
        }
    }

    /// Bytes of the ring of a layer of `width` channels (what [`ConvCache::bytes`] reports
    /// once it holds a row).
    pub(crate) fn ring_bytes(width: usize, d_conv: usize) -> usize {
        (d_conv + CONV_ROLLBACK) * width * 4
    }

    /// Bytes allocated.
    pub(crate) fn bytes(&self) -> usize {
        self.data.capacity() * 4
    }

    /// The position after the newest row.
    pub(crate) fn end(&self) -> usize {
        self.end
    }

    /// Rows held.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The row of position `pos`: `None` before the sequence starts (the convolution's zero
    /// padding); panics if the ring no longer holds it (callers keep within `d_conv` rows).
    pub(crate) fn row(&self, pos: isize) -> Option<&[f32]> {
        if pos < 0 {
            return None;
        }
        let back = self.end - pos as usize; // 1 = the newest row
        assert!(
            (1..=self.rows).contains(&back),
            "convolution row {pos} is not held ({} rows before {})",
            self.rows,
            self.end
        );
        let slot = (self.next + self.keep - back) % self.keep;
        Some(&self.data[slot * self.width..(slot + 1) * self.width])
    }

    /// Rows the ring holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.keep
    }

    /// Appends the row of position `pos`. A position past [`ConvCache::end`] starts the ring
    /// over there (the rows between were not kept).
    pub(crate) fn push(&mut self, pos: usize, row: &[f32]) {
        if pos != self.end {
            self.rows = 0;
            self.end = pos;
        }
        if self.data.is_empty() {
            self.data = vec![0.0; self.keep * self.width];
        }
        let w = self.width;
        self.data[self.next * w..(self.next + 1) * w].copy_from_slice(row);
        self.next = (self.next + 1) % self.keep;
        self.rows = (self.rows + 1).min(self.keep);
        self.end = pos + 1;
    }

    /// Cuts the sequence back to its first `n` positions, keeping the `d_conv` rows before `n`
    /// that the convolution needs to go on. Returns `false` (and changes nothing) when the ring
    /// no longer holds them.
    pub(crate) fn truncate(&mut self, n: usize, d_conv: usize) -> bool {
        if !self.can_truncate(n, d_conv) {
            return false;
        }
        if n >= self.end {
            return true;
        }
        if n == 0 {
            self.clear();
            return true;
        }
        let cut = self.end - n;
        self.next = (self.next + self.keep - cut) % self.keep;
        self.rows -= cut;
        self.end = n;
        true
    }

    /// Whether [`ConvCache::truncate`] to `n` would succeed.
    pub(crate) fn can_truncate(&self, n: usize, d_conv: usize) -> bool {
        n >= self.end || n == 0 || n.saturating_sub(d_conv) >= self.end - self.rows
    }

    /// Whether [`ConvCache::shift`] from `start` would succeed.
    pub(crate) fn can_shift(&self, start: usize, d_conv: usize) -> bool {
        self.end.saturating_sub(start) >= d_conv && self.rows >= d_conv
    }

    /// Drops the rows before `start` and renumbers the rest by `-delta` (a context shift that
    /// keeps the suffix from `start`). Returns `false` (and changes nothing) when fewer than
    /// `d_conv` rows of the suffix are held, so the shifted state would be incomplete.
    pub(crate) fn shift(&mut self, start: usize, delta: usize, d_conv: usize) -> bool {
        if !self.can_shift(start, d_conv) {
            return false;
        }
        self.rows = self.rows.min(self.end - start);
        self.end -= delta;
        true
    }

    /// Forgets every row (the allocation stays until [`ConvCache::shrink`]).
    pub(crate) fn clear(&mut self) {
        self.rows = 0;
        self.next = 0;
        self.end = 0;
    }

    /// Frees the ring when it holds nothing.
    pub(crate) fn shrink(&mut self) {
        if self.rows == 0 {
            self.data = Vec::new();
        }
    }

    /// The rows held, oldest first, as little-endian bytes (for snapshots).
    pub(crate) fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.rows * self.width * 4);
        for back in (1..=self.rows).rev() {
            let row = self.row((self.end - back) as isize).unwrap_or_default();
            out.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        }
        out
    }

    /// Restores `rows` rows ending before position `end` from [`ConvCache::to_le_bytes`].
    /// Returns `false` for counts the ring cannot hold or bytes of the wrong length.
    pub(crate) fn restore(&mut self, end: usize, rows: usize, bytes: &[u8]) -> bool {
        let d_conv = self.keep - CONV_ROLLBACK;
        let too_few = rows < end.min(d_conv);
        if too_few || rows > self.keep || rows > end || bytes.len() != rows * self.width * 4 {
            return false;
        }
        self.clear();
        self.end = end - rows;
        let mut row = vec![0.0f32; self.width];
        for (i, chunk) in bytes.chunks_exact(self.width * 4).enumerate() {
            for (v, b) in row.iter_mut().zip(chunk.chunks_exact(4)) {
                *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            self.push(end - rows + i, &row);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: usize) -> ConvCache {
        let mut c = ConvCache::new(2, 2);
        for p in 0..n {
            c.push(p, &[p as f32, -(p as f32)]);
        }
        c
    }

    #[test]
    fn ring_keeps_the_newest_rows() {
        let c = filled(100);
        assert_eq!(c.rows(), 2 + CONV_ROLLBACK);
        assert_eq!(c.row(99), Some(&[99.0, -99.0][..]));
        assert_eq!(
            c.row(100 - 2 - CONV_ROLLBACK as isize),
            Some(&[66.0, -66.0][..])
        );
        assert_eq!(c.row(-1), None);
    }

    #[test]
    fn truncate_within_the_ring_is_exact_and_beyond_it_refused() {
        let mut c = filled(100);
        assert!(c.truncate(90, 2));
        assert_eq!(c.end(), 90);
        assert_eq!(c.row(89), Some(&[89.0, -89.0][..]));
        c.push(90, &[7.0, 7.0]);
        assert_eq!(c.row(90), Some(&[7.0, 7.0][..]));
        let mut d = filled(100);
        assert!(!d.truncate(100 - CONV_ROLLBACK - 1, 2));
        assert_eq!(d.end(), 100, "a refused cut changes nothing");
        assert!(d.truncate(0, 2));
        assert_eq!(d.rows(), 0);
    }

    #[test]
    fn shift_renumbers_the_kept_suffix() {
        let mut c = filled(40);
        assert!(c.shift(30, 26, 2));
        assert_eq!((c.end(), c.rows()), (14, 10));
        assert_eq!(c.row(13), Some(&[39.0, -39.0][..]));
        assert!(
            !filled(100).shift(99, 50, 2),
            "a suffix shorter than the state"
        );
    }

    #[test]
    fn snapshot_bytes_round_trip() {
        let c = filled(50);
        let mut d = ConvCache::new(2, 2);
        assert!(d.restore(c.end(), c.rows(), &c.to_le_bytes()));
        for p in 50 - c.rows()..50 {
            assert_eq!(c.row(p as isize), d.row(p as isize));
        }
        assert!(!d.restore(10, 11, &[]));
    }
}
