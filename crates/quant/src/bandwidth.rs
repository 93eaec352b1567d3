//! A memory read-bandwidth probe, to put kernel throughput in context.

use crate::pool::ThreadPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Measures read bandwidth in bytes per second: sums a `bytes`-sized buffer
/// (rounded up to 1 MiB chunks) with every thread of `pool`, prefetching
/// [`PREFETCH_BYTES`] ahead as the weight kernels do, best of 3 passes after a
/// warm-up. Use a buffer well beyond the last-level cache (≥ 256 MiB).
pub fn measure_read_bandwidth(pool: &ThreadPool, bytes: usize) -> f64 {
    const CHUNK: usize = 1024 * 1024;
    let words = bytes.div_ceil(CHUNK).max(1) * CHUNK / 8;
    let buf: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let chunks: Vec<&[u64]> = buf.chunks(CHUNK / 8).collect();
    let sink = AtomicU64::new(0);
    let mut best = f64::INFINITY;
    for pass in 0..4 {
        let t = Instant::now();
        pool.run(chunks.len(), &|i| {
            let s = sum_words(chunks[i]);
            sink.fetch_xor(s, Ordering::Relaxed);
        });
        let secs = t.elapsed().as_secs_f64();
        if pass > 0 {
            best = best.min(secs);
        }
    }
    std::hint::black_box(sink.load(Ordering::Relaxed));
    (words * 8) as f64 / best
}

/// How far ahead the probe prefetches (the kernels' distance: without it this
/// host's probe reads ~15 GB/s with 2 threads while decode streams ~18).
const PREFETCH_BYTES: usize = 8192;

/// Hints that the cache line at `p` will be read soon (never faults; a no-op off x86_64).
#[inline(always)]
pub(crate) fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` needs SSE, which every x86_64 CPU has; a prefetch
    // never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sums words with 8 independent lanes (vectorizes without reassociation),
/// one cache line per step.
fn sum_words(w: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = w.chunks_exact(8);
    for c in it.by_ref() {
        prefetch_read(c.as_ptr().wrapping_add(PREFETCH_BYTES / 8));
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(v);
        }
    }
    let tail = it.remainder().iter().fold(0u64, |a, &v| a.wrapping_add(v));
    acc.iter().fold(tail, |a, &v| a.wrapping_add(v))
}
