//! The int8 GEMM path (`matmul_i8`, Q4_0/Q5_0/Q8_0 against Q8_0): the scalar
//! and SIMD micro-kernels bit for bit, results independent of the thread count,
//! agreement with an f64 reference over the dequantized operands, ragged shapes
//! (rows not a multiple of the eight-row group, token counts not a multiple of
//! the tile), every code byte (random bytes, so Q8_0's -128 too), and typed
//! errors for bad input.

mod common;

use common::{bits, gemm_reference, random_row, Rng};
use proptest::prelude::*;
use statelm_gguf::GgmlType;
use statelm_quant::{Kernels, QMatrix, QuantError, QuantizedActs, ThreadPool};

const TYPES: [GgmlType; 3] = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0];

/// f32 summation budget relative to `Σ |w_k x_k|`.
const SUM_REL: f64 = 1e-5;

/// The kernel tables to compare: every table of this CPU (the scalar reference first; the AVX2
/// table's micro-kernel takes Q4_0/Q5_0 and leaves Q8_0 to the reference).
fn tables() -> Vec<Kernels> {
    Kernels::available()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn int8_gemm_is_exact_to_f64_and_identical_across_isas_and_pools(
        t in 0..TYPES.len(),
        rows in 1usize..70,
        blocks in 1usize..7,
        n in 1usize..20,
        seed in any::<u64>(),
    ) {
        let (ty, cols) = (TYPES[t], 32 * blocks);
        let mut rng = Rng(seed);
        let data: Vec<u8> = (0..rows).flat_map(|_| random_row(&mut rng, ty, cols)).collect();
        let w = QMatrix::new(ty, rows, cols, &data).unwrap();
        let mut acts = QuantizedActs::new();
        acts.quantize(GgmlType::Q8_0, &rng.vec(n * cols), n, cols).unwrap();
        let mut outs = Vec::new();
        for k in tables() {
            for threads in [1, 3] {
                let mut y = vec![f32::NAN; n * rows];
                k.matmul_i8(&ThreadPool::new(threads), &w, &acts, &mut y).unwrap();
                outs.push((k.isa(), y));
            }
        }
        for (isa, y) in &outs[1..] {
            prop_assert_eq!(bits(y), bits(&outs[0].1), "{} vs scalar", isa);
        }
        for (i, (got, (want, magnitude))) in outs[0].1.iter().zip(gemm_reference(&w, &acts)).enumerate() {
            let tol = SUM_REL * magnitude + 1e-30;
            prop_assert!((f64::from(*got) - want).abs() <= tol, "{ty} [{i}]: {got} vs {want}");
        }
    }
}

/// The largest codes of each type (Q8_0's -128, valid bytes the quantizer never writes; Q5_0's
/// 31) against the activation codes of largest magnitude: the integer sums stay exact.
#[test]
fn int8_gemm_extreme_codes_are_exact() {
    let cols = 64;
    for ty in TYPES {
        let mut block = vec![0xffu8; ty.block_bytes()];
        if ty == GgmlType::Q8_0 {
            block.fill(0x80);
        }
        block[..2].copy_from_slice(&half::f16::from_f32(1.0).to_le_bytes());
        let data: Vec<u8> = (0..9 * 2).flat_map(|_| block.clone()).collect();
        let w = QMatrix::new(ty, 9, cols, &data).unwrap();
        for x in [-1.0, 1.0] {
            let mut acts = QuantizedActs::new();
            acts.quantize(GgmlType::Q8_0, &vec![x; 5 * cols], 5, cols)
                .unwrap();
            for k in tables() {
                let mut y = vec![0f32; 5 * 9];
                k.matmul_i8(&ThreadPool::new(2), &w, &acts, &mut y).unwrap();
                for (got, (want, _)) in y.iter().zip(gemm_reference(&w, &acts)) {
                    assert_eq!(f64::from(*got), want, "{ty} {}", k.isa());
                }
            }
        }
    }
}

#[test]
fn int8_gemm_bad_input_is_a_typed_error() {
    let mut rng = Rng(5);
    let pool = ThreadPool::new(2);
    let k = Kernels::detected();
    let q3k: Vec<u8> = (0..2)
        .flat_map(|_| random_row(&mut rng, GgmlType::Q3_K, 256))
        .collect();
    let w = QMatrix::new(GgmlType::Q3_K, 2, 256, &q3k).unwrap();
    let mut acts = QuantizedActs::new();
    acts.quantize(GgmlType::Q8_K, &rng.vec(256), 1, 256)
        .unwrap();
    let mut y = vec![0f32; 2];
    assert!(matches!(
        k.matmul_i8(&pool, &w, &acts, &mut y),
        Err(QuantError::Unsupported { .. })
    ));
    let data: Vec<u8> = (0..2)
        .flat_map(|_| random_row(&mut rng, GgmlType::Q8_0, 64))
        .collect();
    let w = QMatrix::new(GgmlType::Q8_0, 2, 64, &data).unwrap();
    let mut wrong = QuantizedActs::new();
    wrong.quantize(GgmlType::F32, &rng.vec(64), 1, 64).unwrap();
    assert!(matches!(
        k.matmul_i8(&pool, &w, &wrong, &mut y),
        Err(QuantError::ActsType { .. })
    ));
    let mut narrow = QuantizedActs::new();
    narrow
        .quantize(GgmlType::Q8_0, &rng.vec(32), 1, 32)
        .unwrap();
    assert!(matches!(
        k.matmul_i8(&pool, &w, &narrow, &mut y),
        Err(QuantError::BadLength { .. })
    ));
    acts.quantize(GgmlType::Q8_0, &rng.vec(128), 2, 64).unwrap();
    let mut y4 = vec![0f32; 4];
    assert!(matches!(
        k.matmul_i8(&pool, &w, &acts, &mut y4[..3]),
        Err(QuantError::BadLength { .. })
    ));
    k.matmul_i8(&pool, &w, &acts, &mut y4).unwrap();
}
