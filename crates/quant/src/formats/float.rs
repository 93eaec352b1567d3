//! Plain float element types: F32, F16 (IEEE half) and BF16 (bfloat16), little-endian.

use half::f16;

/// Converts IEEE half bits to `f32` (exact, branch-free, and without
/// subnormal f32 arithmetic — K-quant scales are often subnormal halves, and a
/// denormal operand costs a microcode assist on x86).
///
/// Normals: rebias the exponent with an integer add. Subnormals (`m · 2^-24`):
/// an exact int-to-float conversion and power-of-two scaling to a normal f32.
/// Inf/NaN keep an all-ones exponent.
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let h = u32::from(bits);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let normal = f32::from_bits((em << 13) + (112 << 23));
    let subnormal = em as f32 * f32::from_bits(0x3380_0000); // 2^-24
    let special = f32::from_bits((em << 13) | 0x7f80_0000);
    let magnitude = if em >= 0x7c00 {
        special
    } else if em >= 0x0400 {
        normal
    } else {
        subnormal
    };
    f32::from_bits(magnitude.to_bits() | sign)
}

/// [`f16_to_f32`] for a `half::f16`.
#[inline(always)]
pub fn h2f(h: f16) -> f32 {
    f16_to_f32(h.to_bits())
}

/// Converts `f32` to IEEE half bits, rounding to nearest even.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// Converts bfloat16 bits to `f32` (exact).
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// Converts `f32` to bfloat16 bits, rounding to nearest even; NaNs stay (quiet) NaNs.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    let rounded = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (rounded >> 16) as u16
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, c) in src.iter().zip(dst.chunks_exact_mut(4)) {
        c.copy_from_slice(&x.to_le_bytes());
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_f16(*x).to_le_bytes());
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: rounds to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(f32_to_bf16(-2.5)), -2.5);
    }

    #[test]
    fn f16_to_f32_is_exact_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let want = f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#06x}"
            );
        }
    }

    #[test]
    fn f16_round_trip() {
        for x in [0.0f32, -0.0, 1.0, 65504.0, 6.1035156e-5, -0.33325195] {
            assert_eq!(f16_to_f32(f32_to_f16(x)), x);
        }
    }
}
