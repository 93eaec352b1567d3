//! Single-thread kernel throughput measured in *CPU time* of the calling
//! thread (from `/proc/thread-self/stat`), so the figures stay meaningful on a
//! shared, busy machine where wall-clock benchmarks are not. Linux only.
//!
//! `cargo run --release -p statelm-quant --example kernel_cputime`

use statelm_gguf::GgmlType;
use statelm_quant::{quantize_row, vec_dot_type, Kernels, QMatrix, QuantizedActs, ThreadPool};

/// CPU seconds (user + system) used by this thread so far.
fn thread_cpu_seconds() -> f64 {
    let stat =
        std::fs::read_to_string("/proc/thread-self/stat").expect("read /proc/thread-self/stat");
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

/// Runs `f` until it has used at least `secs` of CPU; returns CPU seconds per
/// call. Calls run in batches of ~10 ms so reading the clock (a /proc read)
/// does not count.
fn time_cpu(secs: f64, mut f: impl FnMut()) -> f64 {
    let t = std::time::Instant::now();
    f();
    let batch = (0.01 / t.elapsed().as_secs_f64().max(1e-7)).clamp(1.0, 1e6) as u64;
    let start = thread_cpu_seconds();
    let mut calls = 0u64;
    loop {
        for _ in 0..batch {
            f();
        }
        calls += batch;
        let used = thread_cpu_seconds() - start;
        if used >= secs {
            return used / calls as f64;
        }
    }
}

fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let row_bytes = ty.bytes_for(cols as u64).expect("whole blocks") as usize;
    let mut data = vec![0u8; row_bytes * rows];
    let mut seed = 0x9e37_79b9_u64;
    let mut x = vec![0f32; cols];
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

fn main() {
    let pool = ThreadPool::new(1);
    let shapes = [
        (GgmlType::Q5_0, 4864, 896),
        (GgmlType::Q6_K, 896, 4864),
        (GgmlType::Q4_K, 640, 1024),
        (GgmlType::Q8_0, 262_144, 640),
        (GgmlType::Q4_0, 4864, 896),
        (GgmlType::F16, 896, 896),
    ];
    println!(
        "{:<6} {:>14} {:>8} {:>12} {:>12} {:>14}",
        "type", "rows x cols", "isa", "matvec GB/s", "matmul64 x", "(vs 64 matvec)"
    );
    for (ty, rows, cols) in shapes {
        let data = weights(ty, rows, cols);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let n = 64;
        let x: Vec<f32> = (0..cols * n)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        for k in [Kernels::scalar(), Kernels::detected()] {
            let mut one = QuantizedActs::new();
            one.quantize_with(&k, vec_dot_type(ty), &x[..cols], 1, cols)
                .expect("acts");
            let mut many = QuantizedActs::new();
            many.quantize_with(&k, vec_dot_type(ty), &x, n, cols)
                .expect("acts");
            let mut y = vec![0f32; rows * n];
            let budget = if k.isa() == "scalar" { 0.5 } else { 1.0 };
            let t1 = time_cpu(budget, || {
                k.matvec(&pool, &w, &one, &mut y[..rows]).expect("matvec")
            });
            let tn = time_cpu(budget, || {
                k.matmul(&pool, &w, &many, &mut y).expect("matmul")
            });
            println!(
                "{:<6} {:>14} {:>8} {:>12.2} {:>12.2}",
                ty.name(),
                format!("{rows}x{cols}"),
                k.isa(),
                data.len() as f64 / t1 / 1e9,
                t1 * n as f64 / tn
            );
        }
    }
}
