//! Shared helpers for the integration tests: a tiny deterministic RNG and
//! random weight rows of every format.
#![allow(dead_code)]

use half::f16;
use statelm_gguf::GgmlType;

/// SplitMix64: small, fast, deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly bell-shaped values with occasional outliers, like activations.
    pub fn act(&mut self) -> f32 {
        let base = (self.f32() + self.f32() + self.f32()) * 0.7;
        if self.next_u64().is_multiple_of(64) {
            base * 20.0
        } else {
            base
        }
    }

    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.act()).collect()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Offsets of the f16 scale fields inside one block, and whether the field is
/// a "min" (an additive term).
pub fn f16_fields(ty: GgmlType) -> &'static [(usize, bool)] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[(0, false)],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, false), (2, true)],
        GgmlType::Q4_K | GgmlType::Q5_K => &[(0, false), (2, true)],
        GgmlType::Q2_K => &[(80, false), (82, true)],
        GgmlType::Q3_K => &[(108, false)],
        GgmlType::Q6_K => &[(208, false)],
        _ => &[],
    }
}

/// A random weight row of `n` elements: random code bytes with sane f16
/// scales (every bit pattern of the codes is exercised).
pub fn random_row(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n)
            .flat_map(|_| f16::from_f32(rng.f32()).to_le_bytes())
            .collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| ((rng.f32().to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        _ => {
            let bb = ty.block_bytes();
            let mut row = rng.bytes(n / ty.block_size() * bb);
            for block in row.chunks_exact_mut(bb) {
                for &(off, is_min) in f16_fields(ty) {
                    let mag = if is_min { 0.01 } else { 0.05 };
                    let v = f16::from_f32(rng.f32() * mag);
                    block[off..off + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            row
        }
    }
}

/// Sum of |w_i a_i| plus the magnitude of the additive "min" parts: the scale
/// against which f32 summation-order differences are budgeted.
pub fn magnitude(ty: GgmlType, row: &[u8], acts_f32: &[f32]) -> f64 {
    let n = acts_f32.len();
    let mut w = vec![0f32; n];
    statelm_quant::dequantize_row(ty, row, &mut w).unwrap();
    let mut no_min = row.to_vec();
    if ty.is_quantized() {
        for block in no_min.chunks_exact_mut(ty.block_bytes()) {
            for &(off, is_min) in f16_fields(ty) {
                if is_min {
                    block[off..off + 2].fill(0);
                }
            }
        }
    }
    let mut w0 = vec![0f32; n];
    statelm_quant::dequantize_row(ty, &no_min, &mut w0).unwrap();
    w.iter()
        .zip(&w0)
        .zip(acts_f32)
        .map(|((&a, &b), &x)| (f64::from(b).abs() + f64::from(a - b).abs()) * f64::from(x).abs())
        .sum()
}

/// Every weight type with a dot kernel.
pub const DOT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// A valid element count for `ty`: `blocks` blocks, or for float types an
/// arbitrary count derived from `blocks` (ragged tails).
pub fn elems(ty: GgmlType, blocks: usize) -> usize {
    if ty.is_quantized() {
        blocks * ty.block_size()
    } else {
        blocks * 37 + 3
    }
}

/// `(Σ_k x_k w_k, Σ_k |x_k w_k|)` in f64 over the dequantized weights and activations, per
/// output `t * rows + r` (the int8 GEMM tests' reference).
pub fn gemm_reference(
    w: &statelm_quant::QMatrix<'_>,
    acts: &statelm_quant::QuantizedActs,
) -> Vec<(f64, f64)> {
    let (rows, cols, n) = (w.rows(), w.cols(), acts.n());
    let mut x = vec![0f32; n * cols];
    acts.dequantize(&mut x).unwrap();
    let mut deq = vec![0f32; cols];
    let mut y = vec![(0f64, 0f64); n * rows];
    for r in 0..rows {
        statelm_quant::dequantize_row(w.ty(), w.row(r), &mut deq).unwrap();
        for t in 0..n {
            let terms = x[t * cols..][..cols]
                .iter()
                .zip(&deq)
                .map(|(a, b)| f64::from(*a) * f64::from(*b));
            y[t * rows + r] = terms.fold((0.0, 0.0), |(s, m), v| (s + v, m + v.abs()));
        }
    }
    y
}

/// The bit patterns of `y` (for exact comparisons with readable diffs).
pub fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}
