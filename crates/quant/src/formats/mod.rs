//! ggml block formats: one `#[repr(C)]` block struct per file, with scalar
//! dequantization and (where the format has one) quantization from `f32`.
//!
//! Blocks are read from unaligned byte slices through [`read_block`], which
//! copies the bytes into the struct (every block is plain old data: no padding,
//! every bit pattern valid). The entry points [`dequantize_row`],
//! [`quantize_row`] and [`can_quantize`] dispatch on [`GgmlType`].

use crate::error::{bytes_for, check_len, QuantError};
use statelm_gguf::GgmlType;

pub mod float;
pub(crate) mod kquant_fit;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;

pub use q2_k::BlockQ2K;
pub use q3_k::BlockQ3K;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::BlockQ4K;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::BlockQ8_0;
pub use q8_1::BlockQ8_1;
pub use q8_k::BlockQ8K;

#[cfg(target_endian = "big")]
compile_error!(
    "statelm-quant reads little-endian ggml blocks in place; big-endian hosts are not supported"
);

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// A ggml block: a `#[repr(C)]` plain-old-data struct.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain no padding bytes, and be valid for
/// every bit pattern (only integers, integer arrays, `f32` and `half::f16`).
/// `size_of::<Self>()` must equal `Self::TYPE.block_bytes()`.
pub unsafe trait Block: Copy {
    /// The ggml type this block encodes.
    const TYPE: GgmlType;
    /// Elements per block.
    const ELEMS: usize;
}

/// Reads one block from the start of `bytes` (any alignment).
///
/// # Panics
/// If `bytes` is shorter than the block; internal callers pass exact chunks.
#[inline(always)]
pub fn read_block<B: Block>(bytes: &[u8]) -> B {
    let bytes = &bytes[..size_of::<B>()];
    // SAFETY: `bytes` holds exactly size_of::<B>() readable bytes (sliced above),
    // `read_unaligned` has no alignment requirement, and `Block` guarantees every
    // bit pattern is a valid `B`.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<B>()) }
}

/// Writes one block to the start of `out` (any alignment).
///
/// # Panics
/// If `out` is shorter than the block; internal callers pass exact chunks.
#[inline(always)]
pub fn write_block<B: Block>(block: &B, out: &mut [u8]) {
    let out = &mut out[..size_of::<B>()];
    // SAFETY: `out` holds exactly size_of::<B>() writable bytes; the write is
    // unaligned-safe, and `B: Copy` has no drop glue.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<B>(), *block) }
}

/// Iterates the blocks stored in `src` (whole blocks only).
#[inline]
pub(crate) fn blocks<B: Block + 'static>(src: &[u8]) -> impl Iterator<Item = B> + '_ {
    src.chunks_exact(size_of::<B>()).map(read_block::<B>)
}

/// Dequantizes `dst.len()` elements of type `ty` from `src`.
///
/// `src.len()` must equal the bytes of `dst.len()` elements of `ty`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_len(
        "dequantize_row src bytes",
        bytes_for(ty, dst.len())?,
        src.len(),
    )?;
    match ty {
        GgmlType::F32 => float::dequantize_f32(src, dst),
        GgmlType::F16 => float::dequantize_f16(src, dst),
        GgmlType::BF16 => float::dequantize_bf16(src, dst),
        GgmlType::Q4_0 => q4_0::dequantize(src, dst),
        GgmlType::Q4_1 => q4_1::dequantize(src, dst),
        GgmlType::Q5_0 => q5_0::dequantize(src, dst),
        GgmlType::Q5_1 => q5_1::dequantize(src, dst),
        GgmlType::Q8_0 => q8_0::dequantize(src, dst),
        GgmlType::Q8_1 => q8_1::dequantize(src, dst),
        GgmlType::Q2_K => q2_k::dequantize(src, dst),
        GgmlType::Q3_K => q3_k::dequantize(src, dst),
        GgmlType::Q4_K => q4_k::dequantize(src, dst),
        GgmlType::Q5_K => q5_k::dequantize(src, dst),
        GgmlType::Q6_K => q6_k::dequantize(src, dst),
        GgmlType::Q8_K => q8_k::dequantize(src, dst),
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: "dequantize",
            })
        }
    }
    Ok(())
}

/// Whether [`quantize_row`] supports `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K
    )
}

/// Quantizes `src.len()` elements into `dst` with the scalar reference quantizer.
///
/// `dst.len()` must equal the bytes of `src.len()` elements of `ty`. Legacy
/// formats follow ggml's reference round-to-nearest rules bit for bit; K-quants
/// use a weighted least-squares scale/min search (see the format files).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let unsupported = QuantError::Unsupported { ty, op: "quantize" };
    if !can_quantize(ty) {
        return Err(unsupported);
    }
    check_len(
        "quantize_row dst bytes",
        bytes_for(ty, src.len())?,
        dst.len(),
    )?;
    match ty {
        GgmlType::F32 => float::quantize_f32(src, dst),
        GgmlType::F16 => float::quantize_f16(src, dst),
        GgmlType::BF16 => float::quantize_bf16(src, dst),
        GgmlType::Q4_0 => q4_0::quantize(src, dst),
        GgmlType::Q4_1 => q4_1::quantize(src, dst),
        GgmlType::Q5_0 => q5_0::quantize(src, dst),
        GgmlType::Q5_1 => q5_1::quantize(src, dst),
        GgmlType::Q8_0 => q8_0::quantize(src, dst),
        GgmlType::Q8_1 => q8_1::quantize(src, dst),
        GgmlType::Q4_K => q4_k::quantize(src, dst),
        GgmlType::Q5_K => q5_k::quantize(src, dst),
        GgmlType::Q6_K => q6_k::quantize(src, dst),
        GgmlType::Q8_K => q8_k::quantize(src, dst),
        _ => return Err(unsupported),
    }
    Ok(())
}

/// Round half away from zero (C's `roundf`), as ggml's legacy quantizers use.
#[inline(always)]
pub(crate) fn round_away(x: f32) -> f32 {
    x.round()
}

/// Round half to even (ggml's `nearest_int`), as the K-quant quantizers use.
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// The value with the largest magnitude (first one on ties) and that magnitude.
#[inline]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<B: Block>() {
        assert_eq!(size_of::<B>(), B::TYPE.block_bytes(), "{}", B::TYPE);
        assert_eq!(B::ELEMS, B::TYPE.block_size(), "{}", B::TYPE);
    }

    #[test]
    fn block_sizes_match_ggml() {
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
    }

    #[test]
    fn bad_lengths_are_errors() {
        let mut out = [0f32; 32];
        assert!(dequantize_row(GgmlType::Q8_0, &[0u8; 33], &mut out).is_err());
        assert!(dequantize_row(GgmlType::Q8_0, &[0u8; 34], &mut out[..31]).is_err());
        assert!(dequantize_row(GgmlType::I32, &[0u8; 128], &mut out).is_err());
        let mut bytes = [0u8; 34];
        assert!(quantize_row(GgmlType::Q8_0, &out[..16], &mut bytes).is_err());
        assert!(quantize_row(GgmlType::Q2_K, &out, &mut bytes).is_err());
        assert!(quantize_row(GgmlType::Q8_0, &out, &mut bytes).is_ok());
    }
}
