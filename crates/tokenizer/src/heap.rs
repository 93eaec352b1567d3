//! A 4-ary min-heap of `u64` keys: fewer levels and better cache use than
//! `std`'s binary heap on the large candidate queues of long words.

/// A min-heap of packed `(priority << 32) | position` keys.
#[derive(Debug, Default)]
pub(crate) struct MinHeap {
    v: Vec<u64>,
}

const ARITY: usize = 4;

impl MinHeap {
    /// Builds a heap from unordered keys in O(n).
    pub fn from_vec(v: Vec<u64>) -> MinHeap {
        let mut h = MinHeap { v };
        let n = h.v.len();
        if n > 1 {
            for i in (0..=(n - 2) / ARITY).rev() {
                h.sift_down(i);
            }
        }
        h
    }

    /// Adds a key.
    #[inline]
    pub fn push(&mut self, x: u64) {
        self.v.push(x);
        let mut i = self.v.len() - 1;
        while i > 0 {
            let p = (i - 1) / ARITY;
            if self.v[p] <= x {
                break;
            }
            self.v[i] = self.v[p];
            i = p;
        }
        self.v[i] = x;
    }

    /// Removes and returns the smallest key.
    #[inline]
    pub fn pop(&mut self) -> Option<u64> {
        let last = self.v.pop()?;
        if self.v.is_empty() {
            return Some(last);
        }
        let top = self.v[0];
        self.v[0] = last;
        self.sift_down(0);
        Some(top)
    }

    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let n = self.v.len();
        let x = self.v[i];
        loop {
            let c = ARITY * i + 1;
            if c >= n {
                break;
            }
            let end = (c + ARITY).min(n);
            let mut m = c;
            for j in c + 1..end {
                if self.v[j] < self.v[m] {
                    m = j;
                }
            }
            if self.v[m] >= x {
                break;
            }
            self.v[i] = self.v[m];
            i = m;
        }
        self.v[i] = x;
    }
}

/// Packs a priority and a position into a heap key.
#[inline]
pub(crate) fn key(priority: u32, pos: u32) -> u64 {
    (u64::from(priority) << 32) | u64::from(pos)
}

/// Splits a heap key into `(priority, position)`.
#[inline]
pub(crate) fn unkey(k: u64) -> (u32, u32) {
    ((k >> 32) as u32, k as u32)
}

/// Maps a score to a priority: higher scores give smaller priorities, in
/// IEEE total order.
#[inline]
pub(crate) fn score_priority(score: f32) -> u32 {
    let b = score.to_bits();
    let ascending = if b >> 31 == 1 { !b } else { b | 0x8000_0000 };
    !ascending
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_order() {
        let mut x: u64 = 12345;
        let mut keys = Vec::new();
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            keys.push(x >> 20);
        }
        let mut h = MinHeap::from_vec(keys[..500].to_vec());
        for &k in &keys[500..] {
            h.push(k);
        }
        keys.sort_unstable();
        let popped: Vec<u64> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(popped, keys);
    }

    #[test]
    fn score_order() {
        let s = [
            f32::NEG_INFINITY,
            -236280.0,
            -1000.0,
            -0.0,
            0.0,
            1.5,
            f32::INFINITY,
        ];
        for w in s.windows(2) {
            assert!(score_priority(w[0]) > score_priority(w[1]), "{w:?}");
        }
    }
}
