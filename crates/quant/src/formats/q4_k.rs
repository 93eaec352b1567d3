//! Q4_K: 256-weight super-blocks of 8 sub-blocks of 32; 4-bit codes, a 6-bit
//! scale and 6-bit min per sub-block, f16 super-scales `d` and `dmin`:
//! `x = d * sc_j * q - dmin * m_j`.
//!
//! `qs` holds 4 chunks of 32 bytes; chunk `c` stores element `64c + l` in the
//! low nibble of byte `l` and element `64c + 32 + l` in the high nibble.

use super::kquant_fit::fit_affine;
use super::{blocks, nearest_int, write_block, Block, QK_K};
use half::f16;
use statelm_gguf::GgmlType;

/// One Q4_K super-block (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4K {
    /// Super-scale of the sub-block scales.
    pub d: f16,
    /// Super-scale of the sub-block mins.
    pub dmin: f16,
    /// 8 scales and 8 mins, 6 bits each, packed (see [`unpack_scales`]).
    pub scales: [u8; 12],
    /// 256 4-bit codes.
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(size_of::<BlockQ4K>() == 144);

// SAFETY: repr(C), two f16 then bytes: no padding, all bit patterns valid.
unsafe impl Block for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    const ELEMS: usize = QK_K;
}

/// Unpacks the 12-byte K-quant scale field into 8 scales and 8 mins (6 bits each).
///
/// Sub-blocks 0..4 keep their scale/min in the low 6 bits of bytes `j`/`j + 4`;
/// sub-blocks 4..8 keep the low 4 bits in byte `j + 4` (scale low nibble, min
/// high nibble) and the top 2 bits in the top bits of bytes `j - 4`/`j`.
#[inline]
pub fn unpack_scales(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, a2) = (word(0), word(1), word(2));
    let (m6, m4, m2) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
    let sc_lo = a0 & m6;
    let mn_lo = a1 & m6;
    let sc_hi = (a2 & m4) | (((a0 >> 6) & m2) << 4);
    let mn_hi = ((a2 >> 4) & m4) | (((a1 >> 6) & m2) << 4);
    let join = |lo: u32, hi: u32| (u64::from(lo) | (u64::from(hi) << 32)).to_le_bytes();
    (join(sc_lo, sc_hi), join(mn_lo, mn_hi))
}

/// Packs 8 scales and 8 mins (each `< 64`) into the 12-byte field; inverse of [`unpack_scales`].
pub fn pack_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] & 63;
        s[j + 4] = mn[j] & 63;
    }
    for j in 4..8 {
        s[j + 4] = (sc[j] & 0x0f) | ((mn[j] & 0x0f) << 4);
        s[j - 4] |= (sc[j] >> 4) << 6;
        s[j] |= (mn[j] >> 4) << 6;
    }
    s
}

impl BlockQ4K {
    /// The 256 codes (0..=15) in element order, the 8 scales and the 8 mins.
    #[inline]
    pub fn unpack(&self) -> ([u8; QK_K], [u8; 8], [u8; 8]) {
        let mut q = [0u8; QK_K];
        for (c, chunk) in self.qs.chunks_exact(32).enumerate() {
            for (l, &b) in chunk.iter().enumerate() {
                q[64 * c + l] = b & 0x0f;
                q[64 * c + 32 + l] = b >> 4;
            }
        }
        let (sc, mn) = unpack_scales(&self.scales);
        (q, sc, mn)
    }
}

/// Dequantizes affine K-quant codes: `(d * sc) * q - (dmin * m)` per 32-element sub-block.
pub(crate) fn dequantize_affine(
    q: &[u8],
    sc: &[u8; 8],
    mn: &[u8; 8],
    d: f32,
    dmin: f32,
    out: &mut [f32],
) {
    for (j, (o, qj)) in out.chunks_exact_mut(32).zip(q.chunks_exact(32)).enumerate() {
        let d1 = d * f32::from(sc[j]);
        let m1 = dmin * f32::from(mn[j]);
        for (v, &c) in o.iter_mut().zip(qj) {
            *v = d1 * f32::from(c) - m1;
        }
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, out) in blocks::<BlockQ4K>(src).zip(dst.chunks_exact_mut(QK_K)) {
        let (q, sc, mn) = b.unpack();
        dequantize_affine(&q, &sc, &mn, b.d.to_f32(), b.dmin.to_f32(), out);
    }
}

/// The quantized form of one affine super-block (shared by Q4_K and Q5_K).
pub(crate) struct AffineSuper {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub q: [u8; QK_K],
}

/// Quantizes a 256-element super-block to codes `0..=nmax` with 6-bit
/// sub-block scales/mins. Weights favour large values: `w = rms(x) + |x|`.
pub(crate) fn quantize_affine(x: &[f32], nmax: i32) -> AffineSuper {
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / QK_K as f32).sqrt();
    let (mut scale, mut min) = ([0f32; 8], [0f32; 8]);
    let mut q = [0u8; QK_K];
    let mut w = [0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        for (wi, v) in w.iter_mut().zip(xs) {
            *wi = rms + v.abs();
        }
        (scale[j], min[j]) = fit_affine(xs, &w, nmax, &mut q[32 * j..32 * j + 32]);
    }
    let max_scale = scale.iter().copied().fold(0.0f32, f32::max);
    let max_min = min.iter().copied().fold(0.0f32, f32::max);
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..8 {
        ls[j] = nearest_int(inv_scale * scale[j]).clamp(0, 63) as u8;
        lm[j] = nearest_int(inv_min * min[j]).clamp(0, 63) as u8;
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..8 {
        let dl = d.to_f32() * f32::from(ls[j]);
        let ml = dmin.to_f32() * f32::from(lm[j]);
        for (c, &v) in q[32 * j..32 * j + 32]
            .iter_mut()
            .zip(&x[32 * j..32 * j + 32])
        {
            *c = if dl > 0.0 {
                nearest_int((v + ml) / dl).clamp(0, nmax) as u8
            } else {
                0
            };
        }
    }
    AffineSuper {
        d,
        dmin,
        scales: pack_scales(&ls, &lm),
        q,
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(144)) {
        let a = quantize_affine(x, 15);
        let mut b = BlockQ4K {
            d: a.d,
            dmin: a.dmin,
            scales: a.scales,
            qs: [0; QK_K / 2],
        };
        for (c, chunk) in b.qs.chunks_exact_mut(32).enumerate() {
            for (l, byte) in chunk.iter_mut().enumerate() {
                *byte = a.q[64 * c + l] | (a.q[64 * c + 32 + l] << 4);
            }
        }
        write_block(&b, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field layout spelled out per sub-block.
    fn unpack_scales_simple(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
        let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
        for j in 0..4 {
            sc[j] = s[j] & 63;
            mn[j] = s[j + 4] & 63;
        }
        for j in 4..8 {
            sc[j] = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
            mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        (sc, mn)
    }

    #[test]
    fn unpack_scales_matches_layout() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2000 {
            let mut s = [0u8; 12];
            for b in s.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            assert_eq!(unpack_scales(&s), unpack_scales_simple(&s));
        }
    }

    #[test]
    fn scales_round_trip() {
        let sc = [0, 1, 63, 17, 32, 63, 5, 48];
        let mn = [63, 2, 0, 33, 62, 1, 44, 16];
        assert_eq!(unpack_scales(&pack_scales(&sc, &mn)), (sc, mn));
    }
}
