//! Activation vectors prepared in pairs for the small-batch tile kernels
//! ([`crate::kernels::PairTileFn`]): a prompt-lookup verification or a short
//! prefill multiplies each weight matrix by 2–16 vectors, and decoding each
//! weight block once for all of them only pays if the per-vector work is
//! small. Two Q8_0 vectors share one 512-bit register (vector `2p` in the low
//! half, `2p + 1` in the high half), so one integer dot instruction sums a
//! weight block against both; what depends only on the activations — the
//! codes side by side, the code-offset correction of each i32 lane and the
//! block scales broadcast over their halves — is computed here once per
//! matmul instead of once per weight row.

use crate::kernels::PairBlock;

/// Q8_0 block bytes: an f16 scale, then 32 signed codes.
const Q8_0_BYTES: usize = 34;

/// Vectors `vs` (Q8_0, `nb` blocks each) prepared for a pair tile kernel whose
/// weights' unsigned codes exceed the signed ones by `offset`: block-major, `npairs =
/// ceil(len / 2)` entries per block, `out[b * npairs + p]` holding vectors `2p` and `2p + 1`
/// of `vs` (an odd count repeats the last vector in the last pair's high half).
///
/// Lane `l` of a half is the sum over codes `4l..4l + 4` (the i32 lanes of a 256-bit dot);
/// `start` is `-offset ·` that sum, `d` the block's scale widened to f32.
pub fn prepare(vs: &[&[u8]], nb: usize, offset: i32, out: &mut Vec<PairBlock>) {
    out.clear();
    if vs.is_empty() {
        return;
    }
    let npairs = vs.len().div_ceil(2);
    out.resize(nb * npairs, PairBlock::default());
    for (p, pair) in vs.chunks(2).enumerate() {
        let halves = [pair[0], pair[pair.len() - 1]];
        for (h, v) in halves.into_iter().enumerate() {
            for (b, y) in v.chunks_exact(Q8_0_BYTES).take(nb).enumerate() {
                fill_half(&mut out[b * npairs + p], h, y, offset);
            }
        }
    }
}

/// Writes half `h` of `blk` from one Q8_0 block `y`.
fn fill_half(blk: &mut PairBlock, h: usize, y: &[u8], offset: i32) {
    let d = half::f16::from_le_bytes([y[0], y[1]]).to_f32();
    let codes = &y[2..Q8_0_BYTES];
    for (i, &c) in codes.iter().enumerate() {
        blk.q[32 * h + i] = c as i8;
    }
    for l in 0..8 {
        let sum: i32 = codes[4 * l..4 * l + 4]
            .iter()
            .map(|&c| i32::from(c as i8))
            .sum();
        blk.start[8 * h + l] = -offset * sum;
        blk.d[8 * h + l] = d;
    }
}
