//! matvec / matmul against row-by-row reference dots, across pool sizes, odd
//! row counts and both dispatch paths; matmul against n matvecs.

mod common;

use common::{random_row, Rng};
use statelm_gguf::GgmlType;
use statelm_quant::{
    matmul, matvec, matvec_f32, vec_dot_type, Kernels, MatvecJob, QMatrix, QuantError,
    QuantizedActs, ThreadPool,
};

const TYPES: [GgmlType; 9] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F16,
    GgmlType::F32,
];

fn random_matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    (0..rows).flat_map(|_| random_row(rng, ty, cols)).collect()
}

fn cols_for(ty: GgmlType) -> usize {
    if ty.block_size() == 256 {
        512
    } else {
        96
    }
}

#[test]
fn matvec_matches_row_by_row_reference() {
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    let mut rng = Rng(7);
    for ty in TYPES {
        let cols = cols_for(ty);
        for rows in [1usize, 7, 33, 100, 257] {
            let data = random_matrix(&mut rng, ty, rows, cols);
            let w = QMatrix::new(ty, rows, cols, &data).unwrap();
            let x = rng.vec(cols);
            for k in [Kernels::scalar(), Kernels::detected()] {
                let mut acts = QuantizedActs::new();
                acts.quantize_with(&k, vec_dot_type(ty), &x, 1, cols)
                    .unwrap();
                let want: Vec<f32> = (0..rows)
                    .map(|r| k.vec_dot(ty, cols, w.row(r), acts.vector(0)).unwrap())
                    .collect();
                for pool in &pools {
                    let mut y = vec![f32::NAN; rows];
                    k.matvec(pool, &w, &acts, &mut y).unwrap();
                    assert_eq!(
                        bits(&y),
                        bits(&want),
                        "{ty} rows={rows} isa={} threads={}",
                        k.isa(),
                        pool.n_threads()
                    );
                }
                // Against the scalar reference, row by row, within f32 summation order.
                let scalar = Kernels::scalar();
                let mut a_deq = vec![0f32; cols];
                statelm_quant::dequantize_row(acts.ty(), acts.vector(0), &mut a_deq).unwrap();
                for (r, &got) in want.iter().enumerate() {
                    let reference = scalar.vec_dot(ty, cols, w.row(r), acts.vector(0)).unwrap();
                    let m = common::magnitude(ty, w.row(r), &a_deq);
                    let diff = f64::from((got - reference).abs());
                    assert!(
                        diff <= 1e-5 * m + 1e-30,
                        "{ty} row {r} isa={}: {got} vs scalar {reference}",
                        k.isa()
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_equals_n_matvecs() {
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    let mut rng = Rng(11);
    for ty in TYPES {
        let cols = cols_for(ty);
        for (rows, n) in [(1usize, 1usize), (19, 3), (67, 9), (130, 17)] {
            let data = random_matrix(&mut rng, ty, rows, cols);
            let w = QMatrix::new(ty, rows, cols, &data).unwrap();
            let x = rng.vec(cols * n);
            for k in Kernels::available() {
                let mut acts = QuantizedActs::new();
                acts.quantize_with(&k, vec_dot_type(ty), &x, n, cols)
                    .unwrap();
                let mut want = Vec::new();
                let mut one = QuantizedActs::new();
                for i in 0..n {
                    one.quantize_with(&k, vec_dot_type(ty), &x[i * cols..(i + 1) * cols], 1, cols)
                        .unwrap();
                    let mut y = vec![0f32; rows];
                    k.matvec(&pools[0], &w, &one, &mut y).unwrap();
                    want.extend(y);
                }
                for pool in &pools {
                    let mut y = vec![f32::NAN; rows * n];
                    k.matmul(pool, &w, &acts, &mut y).unwrap();
                    assert_eq!(
                        bits(&y),
                        bits(&want),
                        "{ty} rows={rows} n={n} isa={}",
                        k.isa()
                    );
                }
            }
        }
    }
}

#[test]
fn global_entry_points_work() {
    let pool = ThreadPool::new(2);
    let mut rng = Rng(3);
    let (rows, cols) = (45, 64);
    let data = random_matrix(&mut rng, GgmlType::Q8_0, rows, cols);
    let w = QMatrix::new(GgmlType::Q8_0, rows, cols, &data).unwrap();
    let x = rng.vec(cols);
    let mut y1 = vec![0f32; rows];
    matvec_f32(&pool, &w, &x, &mut y1).unwrap();
    let mut acts = QuantizedActs::new();
    acts.quantize(GgmlType::Q8_0, &x, 1, cols).unwrap();
    let mut y2 = vec![0f32; rows];
    matvec(&pool, &w, &acts, &mut y2).unwrap();
    let mut y3 = vec![0f32; rows];
    matmul(&pool, &w, &acts, &mut y3).unwrap();
    assert_eq!(bits(&y1), bits(&y2));
    assert_eq!(bits(&y1), bits(&y3));
    // Dequantized reference, within Q8 rounding of the activations.
    let mut row = vec![0f32; cols];
    for (r, &got) in y1.iter().enumerate() {
        w.dequantize_row(r, &mut row).unwrap();
        let exact: f32 = row.iter().zip(&x).map(|(a, b)| a * b).sum();
        let mag: f32 = row.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
        assert!(
            (exact - got).abs() <= 0.02 * mag + 1e-6,
            "row {r}: {exact} vs {got}"
        );
    }
}

#[test]
fn bad_shapes_are_typed_errors() {
    let pool = ThreadPool::new(1);
    let data = vec![0u8; 34 * 4];
    assert!(QMatrix::new(GgmlType::Q8_0, 4, 32, &data[..100]).is_err());
    assert!(matches!(
        QMatrix::new(GgmlType::Q8_0, 4, 33, &data),
        Err(QuantError::NotBlockMultiple { .. })
    ));
    let w = QMatrix::new(GgmlType::Q8_0, 4, 32, &data).unwrap();
    let mut acts = QuantizedActs::new();
    acts.quantize(GgmlType::Q8_K, &[0.0; 256], 1, 256).unwrap();
    let mut y = vec![0f32; 4];
    assert!(matches!(
        matvec(&pool, &w, &acts, &mut y),
        Err(QuantError::ActsType { .. })
    ));
    acts.quantize(GgmlType::Q8_0, &[0.0; 64], 2, 32).unwrap();
    assert!(
        matvec(&pool, &w, &acts, &mut y).is_err(),
        "matvec needs one vector"
    );
    assert!(
        matmul(&pool, &w, &acts, &mut y).is_err(),
        "output must be n * rows"
    );
    acts.quantize(GgmlType::Q8_0, &[0.0; 32], 1, 32).unwrap();
    assert!(matvec(&pool, &w, &acts, &mut y[..3]).is_err());
    assert!(acts.quantize(GgmlType::Q8_0, &[0.0; 31], 1, 31).is_err());
    assert!(acts.quantize(GgmlType::Q4_0, &[0.0; 32], 1, 32).is_err());
    let ints = vec![0u8; 16];
    let wi = QMatrix::new(GgmlType::I32, 1, 4, &ints).unwrap();
    acts.quantize(GgmlType::F32, &[0.0; 4], 1, 4).unwrap();
    assert!(matches!(
        matvec(&pool, &wi, &acts, &mut y[..1]),
        Err(QuantError::Unsupported { .. })
    ));
    let mut out = vec![0f32; 32];
    assert!(w.dequantize_row(4, &mut out).is_err());
    assert!(w.dequantize_row(0, &mut out[..31]).is_err());
}

#[test]
fn acts_buffer_is_reused() {
    let mut acts = QuantizedActs::new();
    let x = vec![0.5f32; 4 * 512];
    acts.quantize(GgmlType::Q8_K, &x, 4, 512).unwrap();
    let cap = acts.capacity();
    acts.quantize(GgmlType::Q8_0, &x[..512], 1, 512).unwrap();
    acts.quantize(GgmlType::Q8_K, &x, 4, 512).unwrap();
    assert_eq!(acts.capacity(), cap);
    assert_eq!((acts.n(), acts.cols(), acts.ty()), (4, 512, GgmlType::Q8_K));
}

#[test]
fn bandwidth_probe_reports_a_rate() {
    let pool = ThreadPool::new(2);
    let bw = statelm_quant::measure_read_bandwidth(&pool, 8 << 20);
    assert!(bw.is_finite() && bw > 0.0);
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// One dispatch over several matrices (q/k/v of a decode step) writes what separate matvecs
/// write, bit for bit, across pool sizes and mixed types; a bad job is a typed error.
#[test]
fn matvec_many_equals_separate_matvecs() {
    let pools: Vec<ThreadPool> = (1..=3).map(ThreadPool::new).collect();
    let mut rng = Rng(21);
    let k = Kernels::detected();
    let cols = 512;
    let shapes = [
        (GgmlType::Q5_0, 70),
        (GgmlType::Q4_K, 17),
        (GgmlType::Q8_0, 129),
    ];
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, rows)| random_matrix(&mut rng, ty, rows, cols))
        .collect();
    let ws: Vec<QMatrix<'_>> = shapes
        .iter()
        .zip(&data)
        .map(|(&(ty, rows), d)| QMatrix::new(ty, rows, cols, d).unwrap())
        .collect();
    let x = rng.vec(cols);
    let acts: Vec<QuantizedActs> = ws
        .iter()
        .map(|w| {
            let mut a = QuantizedActs::new();
            a.quantize_with(&k, vec_dot_type(w.ty()), &x, 1, cols)
                .unwrap();
            a
        })
        .collect();
    for pool in &pools {
        let want: Vec<Vec<f32>> = ws
            .iter()
            .zip(&acts)
            .map(|(w, a)| {
                let mut y = vec![0f32; w.rows()];
                k.matvec(pool, w, a, &mut y).unwrap();
                y
            })
            .collect();
        let (mut y0, mut y1, mut y2) =
            (vec![f32::NAN; 70], vec![f32::NAN; 17], vec![f32::NAN; 129]);
        k.matvec_many(
            pool,
            [
                MatvecJob {
                    w: &ws[0],
                    acts: &acts[0],
                    y: &mut y0,
                },
                MatvecJob {
                    w: &ws[1],
                    acts: &acts[1],
                    y: &mut y1,
                },
                MatvecJob {
                    w: &ws[2],
                    acts: &acts[2],
                    y: &mut y2,
                },
            ],
        )
        .unwrap();
        for (got, want) in [y0, y1, y2].iter().zip(&want) {
            assert_eq!(bits(got), bits(want), "threads={}", pool.n_threads());
        }
    }
    let mut short = vec![0f32; 3];
    let bad = k.matvec_many(
        &pools[0],
        [MatvecJob {
            w: &ws[0],
            acts: &acts[0],
            y: &mut short,
        }],
    );
    assert!(matches!(bad, Err(QuantError::BadLength { .. })), "{bad:?}");
}
