//! The f32 GEMM path (`matmul_f32`): scalar and AVX2 micro-kernels bit for bit,
//! results independent of the thread count, agreement with an f64 reference over
//! the dequantized weights, ragged shapes (rows not a multiple of the panel,
//! columns not a multiple of the slice, token counts not a multiple of the tile),
//! and typed errors for bad shapes.

mod common;

use common::{random_row, Rng};
use proptest::prelude::*;
use statelm_gguf::GgmlType;
use statelm_quant::{dequantize_row, BMatrix, Kernels, QMatrix, QuantError, ThreadPool};

const TYPES: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::F32,
];

/// f32 summation budget relative to `Σ |a_k b_k|` (the magnitude of the terms, so
/// cancellation cannot make it vanish).
const SUM_REL: f64 = 1e-5;

/// `(Σ_k x_k w_k, Σ_k |x_k w_k|)` in f64 for every output, over the dequantized weights.
fn reference(
    ty: GgmlType,
    data: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    n: usize,
) -> Vec<(f64, f64)> {
    let w = QMatrix::new(ty, rows, cols, data).unwrap();
    let mut deq = vec![0f32; cols];
    let mut y = vec![(0f64, 0f64); n * rows];
    for r in 0..rows {
        dequantize_row(ty, w.row(r), &mut deq).unwrap();
        for t in 0..n {
            let xs = &x[t * cols..(t + 1) * cols];
            let terms = xs
                .iter()
                .zip(&deq)
                .map(|(a, b)| f64::from(*a) * f64::from(*b));
            y[t * rows + r] = terms.fold((0.0, 0.0), |(s, m), v| (s + v, m + v.abs()));
        }
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn panel_interleave_is_identical_across_isas(kc in 0usize..40, pad in 0usize..5, seed in any::<u64>()) {
        let ld = kc + pad;
        let mut rng = Rng(seed);
        let rows = rng.vec(16 * ld);
        let mut want = vec![-1f32; 16 * kc + 3];
        for k in 0..kc {
            for j in 0..16 {
                want[k * 16 + j] = rows[j * ld + k];
            }
        }
        for k in [Kernels::scalar(), Kernels::detected()] {
            let mut panel = vec![-1f32; 16 * kc + 3];
            k.interleave_panel(&rows, ld, kc, &mut panel);
            prop_assert_eq!(&panel, &want, "{}", k.isa());
        }
    }

    #[test]
    fn gemm_is_exact_to_f64_and_identical_across_isas_and_pools(
        t in 0..TYPES.len(),
        rows in 1usize..70,
        blocks in 1usize..4,
        n in 1usize..20,
        seed in any::<u64>(),
    ) {
        let ty = TYPES[t];
        // 256-element blocks: up to 768 columns (3 slices); 32-element blocks: 32..=96 plus
        // one 288-column case that crosses a slice boundary.
        let cols = if ty.block_size() == 256 { 256 * blocks } else if blocks == 3 { 288 } else { 32 * blocks };
        let mut rng = Rng(seed);
        let data: Vec<u8> = (0..rows).flat_map(|_| random_row(&mut rng, ty, cols)).collect();
        let w = QMatrix::new(ty, rows, cols, &data).unwrap();
        let x = rng.vec(n * cols);
        let want = reference(ty, &data, rows, cols, &x, n);
        let mut outs = Vec::new();
        for k in [Kernels::scalar(), Kernels::detected()] {
            for threads in [1, 3] {
                let mut y = vec![f32::NAN; n * rows];
                k.matmul_f32(&ThreadPool::new(threads), &w, &x, n, &mut y).unwrap();
                outs.push(y);
            }
        }
        for y in &outs[1..] {
            prop_assert_eq!(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                outs[0].iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        for (i, (got, (want, magnitude))) in outs[0].iter().zip(&want).enumerate() {
            let tol = SUM_REL * magnitude + 1e-30;
            prop_assert!((f64::from(*got) - want).abs() <= tol, "{ty} [{i}]: {got} vs {want} (Σ|terms| {magnitude})");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn strided_gemm_matches_f64_in_both_layouts(
        m in 1usize..14, n in 1usize..40, kd in 0usize..300, pad in 0usize..5, seed in any::<u64>(),
    ) {
        let mut rng = Rng(seed);
        let (lda, ldc, ldb) = (kd + pad, n + pad, kd.max(n) + pad);
        let a = rng.vec(m * lda);
        let rows = rng.vec(n * ldb); // B(j, k) = rows[j * ldb + k]
        let cols = rng.vec(kd.max(1) * ldb); // B(j, k) = cols[k * ldb + j]
        for (name, b, get) in [
            ("rows", BMatrix::Rows { data: &rows, stride: ldb }, &(|j: usize, k: usize| rows[j * ldb + k]) as &dyn Fn(usize, usize) -> f32),
            ("cols", BMatrix::Cols { data: &cols, stride: ldb }, &|j: usize, k: usize| cols[k * ldb + j]),
        ] {
            let mut outs = Vec::new();
            for k in [Kernels::scalar(), Kernels::detected()] {
                let mut c = vec![f32::NAN; m * ldc];
                k.gemm_f32(m, n, kd, &a, lda, b, &mut c, ldc).unwrap();
                outs.push(c);
            }
            for t in 0..m {
                for j in 0..n {
                    let terms = (0..kd).map(|k| f64::from(a[t * lda + k]) * f64::from(get(j, k)));
                    let (want, magnitude) = terms.fold((0.0, 0.0), |(s, m), v| (s + v, m + f64::abs(v)));
                    let got = outs[0][t * ldc + j];
                    prop_assert_eq!(got.to_bits(), outs[1][t * ldc + j].to_bits());
                    let tol = SUM_REL * magnitude + 1e-30;
                    prop_assert!((f64::from(got) - want).abs() <= tol, "{name} [{t},{j}]: {got} vs {want}");
                }
            }
        }
    }
}

#[test]
fn strided_gemm_short_slices_are_typed_errors() {
    let k = Kernels::detected();
    let (a, b) = (vec![0f32; 2 * 8], vec![0f32; 3 * 8]);
    let mut c = vec![0f32; 2 * 3];
    let rows = BMatrix::Rows {
        data: &b,
        stride: 8,
    };
    k.gemm_f32(2, 3, 8, &a, 8, rows, &mut c, 3).unwrap();
    assert!(matches!(
        k.gemm_f32(2, 3, 8, &a[..15], 8, rows, &mut c, 3),
        Err(QuantError::BadLength { .. })
    ));
    assert!(matches!(
        k.gemm_f32(2, 3, 8, &a, 8, rows, &mut c[..5], 3),
        Err(QuantError::BadLength { .. })
    ));
    let short = BMatrix::Cols {
        data: &b[..20],
        stride: 3,
    };
    assert!(matches!(
        k.gemm_f32(2, 3, 8, &a, 8, short, &mut c, 3),
        Err(QuantError::BadLength { .. })
    ));
}

#[test]
fn gemm_bad_shapes_are_typed_errors() {
    let ty = GgmlType::Q8_0;
    let mut rng = Rng(3);
    let data: Vec<u8> = (0..4).flat_map(|_| random_row(&mut rng, ty, 64)).collect();
    let w = QMatrix::new(ty, 4, 64, &data).unwrap();
    let pool = ThreadPool::new(2);
    let k = Kernels::detected();
    let mut y = vec![0f32; 8];
    let short_x = vec![0f32; 64];
    assert!(matches!(
        k.matmul_f32(&pool, &w, &short_x, 2, &mut y),
        Err(QuantError::BadLength { .. })
    ));
    let x = vec![0f32; 128];
    let mut short_y = vec![0f32; 7];
    assert!(matches!(
        k.matmul_f32(&pool, &w, &x, 2, &mut short_y),
        Err(QuantError::BadLength { .. })
    ));
    k.matmul_f32(&pool, &w, &x[..0], 0, &mut y[..0]).unwrap();
}

/// A panel buffer reused across calls of other shapes (stale values in its padding) gives the
/// same bits as a fresh one.
#[test]
fn reused_panel_buffer_gives_the_same_bits() {
    let mut rng = Rng(11);
    let mut panels = Vec::new();
    for (m, n, kd) in [
        (7, 300, 64),
        (3, 5, 520),
        (1, 17, 256),
        (40, 33, 9),
        (2, 256, 300),
    ] {
        let (a, b) = (rng.vec(m * kd), rng.vec(n * kd));
        for kernels in [&Kernels::scalar(), Kernels::global()] {
            let rows = BMatrix::Rows {
                data: &b,
                stride: kd,
            };
            let (mut fresh, mut reused) = (vec![0f32; m * n], vec![0f32; m * n]);
            kernels
                .gemm_f32(m, n, kd, &a, kd, rows, &mut fresh, n)
                .unwrap();
            kernels
                .gemm_f32_with(m, n, kd, &a, kd, rows, &mut reused, n, &mut panels)
                .unwrap();
            assert_eq!(fresh, reused, "{m}x{n}x{kd}");
        }
    }
}
