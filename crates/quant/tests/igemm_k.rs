//! The K-quant int8 GEMM path (`matmul_i8` with Q4_K/Q5_K/Q6_K weights against Q8_K): every
//! table's micro-kernel equals the scalar reference bit for bit at every thread count; Q4_K
//! and Q5_K equal their single-vector dots bit for bit (prefill = decode); Q6_K is
//! batch-invariant and within the f32 budget of an f64 reference; extreme codes and scales
//! (Q6_K's -128 scale, the largest codes) stay exact; ragged shapes (rows not a multiple of
//! the 16-row group, token counts not a multiple of the tile).

mod common;

use common::{bits, gemm_reference, random_row, Rng};
use proptest::prelude::*;
use statelm_gguf::GgmlType;
use statelm_quant::{Kernels, QMatrix, QuantizedActs, ThreadPool};

const TYPES: [GgmlType; 3] = [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

/// f32 summation budget relative to `Σ |w_k x_k|` (plus the min terms' magnitude).
const SUM_REL: f64 = 1e-5;

/// Every table × thread count against the scalar table on one thread: the same bits.
fn check_tables(w: &QMatrix<'_>, acts: &QuantizedActs) -> Result<Vec<f32>, TestCaseError> {
    let n = acts.n();
    let mut outs = Vec::new();
    for k in Kernels::available() {
        for threads in [1, 2, 3] {
            let mut y = vec![f32::NAN; n * w.rows()];
            k.matmul_i8(&ThreadPool::new(threads), w, acts, &mut y)
                .unwrap();
            outs.push((k.isa(), threads, y));
        }
    }
    for (isa, threads, y) in &outs[1..] {
        prop_assert_eq!(bits(y), bits(&outs[0].2), "{} x{} vs scalar", isa, threads);
    }
    Ok(outs.swap_remove(0).2)
}

/// Scalar single-vector dots of every (token, row).
fn single_dots(w: &QMatrix<'_>, acts: &QuantizedActs) -> Vec<f32> {
    let k = Kernels::scalar();
    let (rows, cols) = (w.rows(), w.cols());
    (0..acts.n())
        .flat_map(|t| (0..rows).map(move |r| (t, r)))
        .map(|(t, r)| k.vec_dot(w.ty(), cols, w.row(r), acts.vector(t)).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn k_int8_gemm_matches_scalar_dots_and_f64(
        t in 0..TYPES.len(),
        rows in 1usize..40,
        blocks in 1usize..4,
        n in 1usize..20,
        seed in any::<u64>(),
    ) {
        let (ty, cols) = (TYPES[t], 256 * blocks);
        let mut rng = Rng(seed);
        let data: Vec<u8> = (0..rows).flat_map(|_| random_row(&mut rng, ty, cols)).collect();
        let w = QMatrix::new(ty, rows, cols, &data).unwrap();
        let mut acts = QuantizedActs::new();
        acts.quantize(GgmlType::Q8_K, &rng.vec(n * cols), n, cols).unwrap();
        let y = check_tables(&w, &acts)?;
        if ty != GgmlType::Q6_K {
            prop_assert_eq!(bits(&y), bits(&single_dots(&w, &acts)), "{} vs single dots", ty);
        }
        // Batch invariance: each token alone gives its bits in the batch.
        let last = n - 1;
        let mut one = QuantizedActs::new();
        let xs = rng.vec(cols);
        let mut both = QuantizedActs::new();
        one.quantize(GgmlType::Q8_K, &xs, 1, cols).unwrap();
        let mut batch = rng.vec(last * cols);
        batch.extend_from_slice(&xs);
        both.quantize(GgmlType::Q8_K, &batch, n, cols).unwrap();
        let k = Kernels::detected();
        let (mut y1, mut yn) = (vec![0f32; rows], vec![0f32; n * rows]);
        k.matmul_i8(&ThreadPool::new(2), &w, &one, &mut y1).unwrap();
        k.matmul_i8(&ThreadPool::new(2), &w, &both, &mut yn).unwrap();
        prop_assert_eq!(bits(&y1), bits(&yn[last * rows..]));
        let mins = 0.01 * 127.0 * 63.0 * cols as f64;
        for (i, (got, (want, magnitude))) in y.iter().zip(gemm_reference(&w, &acts)).enumerate() {
            let tol = SUM_REL * (magnitude + mins) + 1e-30;
            prop_assert!((f64::from(*got) - want).abs() <= tol, "{ty} [{i}]: {got} vs {want}");
        }
    }
}

/// The largest codes, scales and mins (Q6_K: scales -128 and 127 too) against the activation
/// codes of largest magnitude: every table gives the scalar reference's bits, which equal the
/// single dots (Q4_K/Q5_K) and the f64 reference to its f32 budget.
#[test]
fn k_int8_gemm_extreme_codes_are_exact() {
    let cols = 512;
    for ty in TYPES {
        for scale_byte in [0xffu8, 0x80, 0x7f] {
            let mut block = vec![0xffu8; ty.block_bytes()];
            if ty == GgmlType::Q6_K {
                block[192..208].fill(scale_byte);
            }
            for &(off, _) in common::f16_fields(ty) {
                block[off..off + 2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
            }
            let data: Vec<u8> = (0..17 * 2).flat_map(|_| block.clone()).collect();
            let w = QMatrix::new(ty, 17, cols, &data).unwrap();
            for x in [-1.0, 1.0] {
                let mut acts = QuantizedActs::new();
                acts.quantize(GgmlType::Q8_K, &vec![x; 9 * cols], 9, cols)
                    .unwrap();
                let y = check_tables(&w, &acts).unwrap();
                if ty != GgmlType::Q6_K {
                    assert_eq!(bits(&y), bits(&single_dots(&w, &acts)), "{ty}");
                }
                for (got, (want, magnitude)) in y.iter().zip(gemm_reference(&w, &acts)) {
                    let tol = SUM_REL * magnitude;
                    assert!(
                        (f64::from(*got) - want).abs() <= tol,
                        "{ty}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
