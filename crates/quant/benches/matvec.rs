//! Decode-shaped matvec throughput on real model shapes, 1 and 2 threads,
//! reported as weight bytes per second (criterion `Throughput::Bytes`), next
//! to the machine's read bandwidth from `measure_read_bandwidth`.
// criterion's macros generate undocumented public items.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use statelm_gguf::GgmlType;
use statelm_quant::{
    active_isa, measure_read_bandwidth, quantize_row, vec_dot_type, Kernels, QMatrix,
    QuantizedActs, ThreadPool,
};

/// (label, type, rows, cols)
/// The last two are the K-quant matrices of a 1.5B (Qwen2.5-1.5B-shaped) Q4_K_M file.
const SHAPES: [(&str, GgmlType, usize, usize); 6] = [
    ("ffn_up 896->4864", GgmlType::Q5_0, 4864, 896),
    ("ffn_down 4864->896", GgmlType::Q6_K, 896, 4864),
    ("attn_out 1024->640", GgmlType::Q4_K, 640, 1024),
    ("lm_head 640->262144", GgmlType::Q8_0, 262_144, 640),
    ("ffn_up 1536->8960", GgmlType::Q4_K, 8960, 1536),
    ("ffn_down 8960->1536", GgmlType::Q6_K, 1536, 8960),
];

/// Random-looking weights, quantized row by row (real scales and codes).
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let row_bytes = ty.bytes_for(cols as u64).expect("whole blocks") as usize;
    let mut data = vec![0u8; row_bytes * rows];
    let mut seed = 0x1234_5678_u64;
    let mut x = vec![0f32; cols];
    // Quantize a handful of distinct rows and tile them (quantizing 262144
    // K-rows would dominate the bench's setup time).
    let distinct = rows.min(64);
    for r in 0..distinct {
        for v in x.iter_mut() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *v = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
        }
        quantize_row(ty, &x, &mut data[r * row_bytes..(r + 1) * row_bytes]).expect("quantize");
    }
    for r in distinct..rows {
        data.copy_within(
            (r % distinct) * row_bytes..(r % distinct + 1) * row_bytes,
            r * row_bytes,
        );
    }
    data
}

fn bench_matvec(c: &mut Criterion) {
    let kernels = Kernels::global();
    for threads in [1usize, 2] {
        let pool = ThreadPool::new(threads);
        let bw = measure_read_bandwidth(&pool, 512 << 20);
        eprintln!(
            "read bandwidth, {threads} thread(s): {:.2} GB/s (isa {})",
            bw / 1e9,
            active_isa()
        );
    }
    let mut group = c.benchmark_group("matvec");
    for (label, ty, rows, cols) in SHAPES {
        let data = weights(ty, rows, cols);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut acts = QuantizedActs::new();
        acts.quantize(vec_dot_type(ty), &x, 1, cols).expect("acts");
        let mut y = vec![0f32; rows];
        group.throughput(Throughput::Bytes(data.len() as u64));
        for threads in [1usize, 2] {
            let pool = ThreadPool::new(threads);
            let id = BenchmarkId::new(format!("{ty} {label}"), format!("{threads}t"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    kernels
                        .matvec(&pool, &w, black_box(&acts), &mut y)
                        .expect("matvec")
                })
            });
        }
    }
    group.finish();
}

/// Fork-join latency: an empty two-task job (decode runs 100-200 of these per token).
fn bench_pool(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    c.bench_function("pool/run 2 empty tasks", |b| {
        b.iter(|| {
            pool.run(2, &|i| {
                black_box(i);
            })
        })
    });
}

/// Prefill-shaped matmul (64 activation vectors, or `STATELM_BENCH_VECS`), as
/// multiply-accumulates per second.
fn bench_matmul(c: &mut Criterion) {
    let kernels = Kernels::global();
    let n: usize = std::env::var("STATELM_BENCH_VECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut group = c.benchmark_group(format!("matmul{n}"));
    for (label, ty, rows, cols) in &SHAPES[..3] {
        let data = weights(*ty, *rows, *cols);
        let w = QMatrix::new(*ty, *rows, *cols, &data).expect("matrix");
        let x: Vec<f32> = (0..cols * n)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut acts = QuantizedActs::new();
        acts.quantize(vec_dot_type(*ty), &x, n, *cols)
            .expect("acts");
        let mut y = vec![0f32; rows * n];
        group.throughput(Throughput::Elements((rows * cols * n) as u64));
        for threads in [1usize, 2] {
            let pool = ThreadPool::new(threads);
            let id = BenchmarkId::new(format!("{ty} {label}"), format!("{threads}t"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    kernels
                        .matmul(&pool, &w, black_box(&acts), &mut y)
                        .expect("matmul")
                })
            });
            let id = BenchmarkId::new(format!("{ty} {label} f32 gemm"), format!("{threads}t"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    kernels
                        .matmul_f32(&pool, &w, black_box(&x), n, &mut y)
                        .expect("matmul_f32")
                })
            });
            // The int8 GEMM under every table of this CPU that has a SIMD one.
            for k in Kernels::available() {
                if !k.prefers_i8_gemm(*ty) {
                    continue;
                }
                let id = BenchmarkId::new(
                    format!("{ty} {label} i8 gemm {}", k.isa()),
                    format!("{threads}t"),
                );
                group.bench_function(id, |b| {
                    b.iter(|| {
                        k.matmul_i8(&pool, &w, black_box(&acts), &mut y)
                            .expect("matmul_i8")
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench_pool, bench_matvec, bench_matmul);
criterion_main!(benches);
