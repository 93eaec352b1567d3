//! Differential tests: SIMD kernels against the scalar reference, scalar
//! kernels against f64 dots of the dequantized values, activation quantizers
//! across ISAs, and quantize→dequantize error bounds.

mod common;

use common::{elems, magnitude, random_row, Rng, DOT_TYPES};
use proptest::prelude::*;
use statelm_gguf::GgmlType;
use statelm_quant::kernels::scalar::hsum8;
use statelm_quant::{can_quantize, dequantize_row, quantize_row, vec_dot_type, Kernels};

/// Relative budget (to [`magnitude`]) for SIMD vs scalar: f32 summation order.
const SIMD_REL: f64 = 1e-5;

fn quantized_acts(k: &Kernels, ty: GgmlType, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let at = vec_dot_type(ty);
    let mut bytes = vec![0u8; at.bytes_for(x.len() as u64).unwrap() as usize];
    k.quantize_acts(at, x, &mut bytes).unwrap();
    let mut deq = vec![0f32; x.len()];
    dequantize_row(at, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

fn check_simd_vs_scalar(ty: GgmlType, blocks: usize, seed: u64) {
    let (scalar, simd) = (Kernels::scalar(), Kernels::detected());
    let mut rng = Rng(seed);
    let n = elems(ty, blocks);
    let w = random_row(&mut rng, ty, n);
    let x = rng.vec(n);
    let (a, a_deq) = quantized_acts(&scalar, ty, &x);
    let s = scalar.vec_dot(ty, n, &w, &a).unwrap();
    let v = simd.vec_dot(ty, n, &w, &a).unwrap();
    let m = magnitude(ty, &w, &a_deq);
    let diff = (f64::from(s) - f64::from(v)).abs();
    assert!(
        diff <= SIMD_REL * m + 1e-30,
        "{ty} n={n} seed={seed}: scalar {s} vs {} {v} (diff {diff}, magnitude {m})",
        simd.isa()
    );
    if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) {
        assert_eq!(
            s.to_bits(),
            v.to_bits(),
            "{ty}: K-quant kernels agree bit for bit"
        );
    }
}

/// Scalar kernel vs an f64 dot of the dequantized weights and activations.
fn check_scalar_vs_dequant(ty: GgmlType, blocks: usize, seed: u64) {
    let k = Kernels::scalar();
    let mut rng = Rng(seed);
    let n = elems(ty, blocks);
    let w = random_row(&mut rng, ty, n);
    let x = rng.vec(n);
    let (a, a_deq) = quantized_acts(&k, ty, &x);
    let mut w_deq = vec![0f32; n];
    dequantize_row(ty, &w, &mut w_deq).unwrap();
    let exact: f64 = w_deq
        .iter()
        .zip(&a_deq)
        .map(|(&p, &q)| f64::from(p) * f64::from(q))
        .sum();
    let got = f64::from(k.vec_dot(ty, n, &w, &a).unwrap());
    // Q4_1/Q5_1 use the f16-rounded `s = d * sum(q)` of Q8_1 (as ggml does).
    let rel = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
        2e-3
    } else {
        1e-5
    };
    let m = magnitude(ty, &w, &a_deq);
    assert!(
        (got - exact).abs() <= rel * m + 1e-30,
        "{ty} n={n} seed={seed}: kernel {got} vs dequantized {exact} (magnitude {m})"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn simd_dot_matches_scalar(t in 0..DOT_TYPES.len(), blocks in 1usize..12, seed in any::<u64>()) {
        check_simd_vs_scalar(DOT_TYPES[t], blocks, seed);
    }

    #[test]
    fn dot4_is_bit_identical_to_four_dots(t in 0..DOT_TYPES.len(), blocks in 1usize..9, seed in any::<u64>()) {
        let ty = DOT_TYPES[t];
        let mut rng = Rng(seed);
        let n = elems(ty, blocks);
        let w = random_row(&mut rng, ty, n);
        for k in [Kernels::scalar(), Kernels::detected()] {
            let quantized: Vec<_> = (0..4).map(|_| quantized_acts(&k, ty, &rng.vec(n))).collect();
            let a = [0, 1, 2, 3].map(|i| quantized[i].0.as_slice());
            let four = k.vec_dot4(ty, n, &w, a).unwrap();
            let one = a.map(|v| k.vec_dot(ty, n, &w, v).unwrap());
            if ty == GgmlType::Q4_K {
                // ggml's 4-row GEMM order: the scalar reference's bits, near the single dots.
                let reference = Kernels::scalar().vec_dot4(ty, n, &w, a).unwrap();
                prop_assert_eq!(four.map(f32::to_bits), reference.map(f32::to_bits), "{}", k.isa());
                for ((f, o), q) in four.iter().zip(&one).zip(&quantized) {
                    let m = magnitude(ty, &w, &q.1);
                    prop_assert!(f64::from((f - o).abs()) <= SIMD_REL * m + 1e-30, "{} vs {}", f, o);
                }
            } else {
                prop_assert_eq!(four.map(f32::to_bits), one.map(f32::to_bits), "{} {}", ty, k.isa());
            }
        }
    }

    #[test]
    fn tile_is_bit_identical_to_eight_dots(t in 0..DOT_TYPES.len(), blocks in 1usize..9, seed in any::<u64>()) {
        let ty = DOT_TYPES[t];
        let mut rng = Rng(seed);
        let n = elems(ty, blocks);
        let rows = [random_row(&mut rng, ty, n), random_row(&mut rng, ty, n)];
        let w = [rows[0].as_slice(), rows[1].as_slice()];
        for k in Kernels::available() {
            let acts: Vec<Vec<u8>> = (0..4).map(|_| quantized_acts(&k, ty, &rng.vec(n)).0).collect();
            let a = [0, 1, 2, 3].map(|i| acts[i].as_slice());
            let tile = k.vec_dot_tile(ty, n, w, a).unwrap();
            // Q4_K has no tile kernel: its tile is two dot4 calls (tested above).
            let one = if ty == GgmlType::Q4_K {
                w.map(|r| k.vec_dot4(ty, n, r, a).unwrap().map(f32::to_bits))
            } else {
                w.map(|r| a.map(|v| k.vec_dot(ty, n, r, v).unwrap().to_bits()))
            };
            prop_assert_eq!(tile.map(|r| r.map(f32::to_bits)), one, "{} {}", ty, k.isa());
        }
    }

    #[test]
    fn pair_tile_is_bit_identical_to_dots(t in 0..DOT_TYPES.len(), blocks in 1usize..9, vecs in 1usize..=8, seed in any::<u64>()) {
        let ty = DOT_TYPES[t];
        let mut rng = Rng(seed);
        let n = elems(ty, blocks);
        let rows = [random_row(&mut rng, ty, n), random_row(&mut rng, ty, n)];
        let w = [rows[0].as_slice(), rows[1].as_slice()];
        for k in Kernels::available() {
            let acts: Vec<Vec<u8>> = (0..vecs).map(|_| quantized_acts(&k, ty, &rng.vec(n)).0).collect();
            let a: Vec<&[u8]> = acts.iter().map(Vec::as_slice).collect();
            let Some(tile) = k.vec_dot_pair_tile(ty, n, w, &a).unwrap() else { continue };
            let one = w.map(|r| a.iter().map(|v| k.vec_dot(ty, n, r, v).unwrap().to_bits()).collect::<Vec<_>>());
            prop_assert_eq!(tile.map(|r| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>()), one, "{} {}", ty, k.isa());
        }
    }

    #[test]
    fn rows8x4_is_bit_identical_to_dots(t in 0..DOT_TYPES.len(), blocks in 1usize..5, vecs in 1usize..=4, seed in any::<u64>()) {
        let ty = DOT_TYPES[t];
        let mut rng = Rng(seed);
        let n = elems(ty, blocks);
        let rows: Vec<Vec<u8>> = (0..8).map(|_| random_row(&mut rng, ty, n)).collect();
        let w = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| rows[i].as_slice());
        for k in Kernels::available() {
            let acts: Vec<Vec<u8>> = (0..vecs).map(|_| quantized_acts(&k, ty, &rng.vec(n)).0).collect();
            let a: Vec<&[u8]> = acts.iter().map(Vec::as_slice).collect();
            let Some(many) = k.vec_dot_rows8x4(ty, n, w, &a).unwrap() else { continue };
            let one: Vec<[u32; 8]> = a.iter().map(|v| w.map(|r| k.vec_dot(ty, n, r, v).unwrap().to_bits())).collect();
            prop_assert_eq!(many.iter().map(|r| r.map(f32::to_bits)).collect::<Vec<_>>(), one, "{} {}", ty, k.isa());
        }
    }

    #[test]
    fn rows8_is_bit_identical_to_eight_dots(t in 0..DOT_TYPES.len(), blocks in 1usize..9, seed in any::<u64>()) {
        let ty = DOT_TYPES[t];
        let mut rng = Rng(seed);
        let n = elems(ty, blocks);
        let rows: Vec<Vec<u8>> = (0..8).map(|_| random_row(&mut rng, ty, n)).collect();
        let w = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| rows[i].as_slice());
        for k in Kernels::available() {
            let (acts, _) = quantized_acts(&k, ty, &rng.vec(n));
            let eight = k.vec_dot_rows8(ty, n, w, &acts).unwrap().map(f32::to_bits);
            let one = w.map(|r| k.vec_dot(ty, n, r, &acts).unwrap().to_bits());
            prop_assert_eq!(eight, one, "{} {}", ty, k.isa());
        }
    }

    #[test]
    fn float_vector_ops_match_scalar(n in 0usize..300, seed in any::<u64>(), alpha in -4f32..4.0) {
        let (scalar, simd) = (Kernels::scalar(), Kernels::detected());
        let mut rng = Rng(seed);
        let (a, b) = (rng.vec(n), rng.vec(n + 3));
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        let m: f64 = a.iter().zip(&b).map(|(x, y)| f64::from((x * y).abs())).sum();
        for k in [&scalar, &simd] {
            let d = f64::from(k.dot_f32(&a, &b));
            prop_assert!((d - exact).abs() <= SIMD_REL * m + 1e-30, "{} dot {} vs {}", k.isa(), d, exact);
        }
        // Both follow ggml's order lane by lane: bit-identical.
        prop_assert_eq!(scalar.dot_f32(&a, &b).to_bits(), simd.dot_f32(&a, &b).to_bits());
        let y0 = rng.vec(n);
        let (mut ys, mut yv) = (y0.clone(), y0.clone());
        scalar.axpy_f32(&mut ys, alpha, &b);
        simd.axpy_f32(&mut yv, alpha, &b);
        prop_assert_eq!(bits(&ys), bits(&yv), "axpy");
        // Halves widen exactly (subnormals and infinities included; NaNs left out, whose
        // signalling bit the hardware may quiet).
        let halves: Vec<half::f16> = (0..n)
            .map(|i| half::f16::from_bits((rng.next_u64() >> 16) as u16 ^ i as u16))
            .map(|h| if h.is_nan() { half::f16::ONE } else { h })
            .collect();
        let (mut ws, mut wv) = (vec![0f32; n], vec![0f32; n]);
        scalar.f16_to_f32(&halves, &mut ws);
        simd.f16_to_f32(&halves, &mut wv);
        let want: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
        prop_assert_eq!(bits(&ws), bits(&want), "f16_to_f32 scalar");
        prop_assert_eq!(bits(&wv), bits(&want), "f16_to_f32 simd");
        // Softmax over scores with masked (−∞) entries, and SwiGLU, also bit for bit.
        let mut xs: Vec<f32> = a.iter().map(|v| v * 30.0 * alpha).collect();
        if n > 2 {
            xs[1] = f32::NEG_INFINITY;
        }
        let (mut ss, mut sv) = (xs.clone(), xs.clone());
        scalar.softmax_f32(&mut ss);
        simd.softmax_f32(&mut sv);
        prop_assert_eq!(bits(&ss), bits(&sv), "softmax");
        if n > 0 {
            let total: f64 = ss.iter().map(|v| f64::from(*v)).sum();
            prop_assert!((total - 1.0).abs() < 1e-5, "softmax sums to {}", total);
        }
        let (mut gs, mut gv) = (xs.clone(), xs);
        scalar.silu_mul_f32(&mut gs, &b);
        simd.silu_mul_f32(&mut gv, &b);
        prop_assert_eq!(bits(&gs), bits(&gv), "silu_mul");
    }

    #[test]
    fn elementwise_ops_match_scalar(n in 0usize..300, seed in any::<u64>(), scale in 0.01f32..40.0) {
        let scalar = Kernels::scalar();
        let mut rng = Rng(seed);
        // GeGLU inputs on both sides of the ±10 cut-offs and around f16 rounding ties.
        let mut g: Vec<f32> = rng.vec(n).iter().map(|v| v * scale).collect();
        if n > 3 {
            g[0] = -10.0;
            g[1] = 10.0;
            g[2] = 2049.0 / 1024.0 + 1.0 / 4096.0;
        }
        let u = rng.vec(n);
        let w: Vec<f32> = rng.vec(n).iter().map(|v| 1.0 + v).collect();
        // Narrowing inputs: overflow, f16 subnormals and exact ties included.
        let wide: Vec<f32> = (0..n)
            .map(|i| match i % 5 {
                0 => g[i] * 3000.0,
                1 => g[i] * 1e-6,
                2 => half::f16::from_bits(rng.next_u64() as u16 & 0x7bff).to_f32() + f32::EPSILON * g[i],
                _ => g[i],
            })
            .collect();
        for k in Kernels::available() {
            let (mut gs, mut gv) = (g.clone(), g.clone());
            scalar.gelu_mul_f32(&mut gs, &u);
            k.gelu_mul_f32(&mut gv, &u);
            prop_assert_eq!(bits(&gs), bits(&gv), "gelu_mul {}", k.isa());
            let (mut hs, mut hv) = (vec![half::f16::ZERO; n], vec![half::f16::ZERO; n]);
            scalar.f32_to_f16(&wide, &mut hs);
            k.f32_to_f16(&wide, &mut hv);
            prop_assert_eq!(&hs, &hv, "f32_to_f16 {}", k.isa());
            let (mut ns, mut nv) = (vec![0f32; n], vec![0f32; n]);
            scalar.rms_norm(&mut ns, &g, &w, 1e-6);
            k.rms_norm(&mut nv, &g, &w, 1e-6);
            prop_assert_eq!(bits(&ns), bits(&nv), "rms_norm {}", k.isa());
            let mut iv = g.clone();
            k.rms_norm_in_place(&mut iv, &w, 1e-6);
            prop_assert_eq!(bits(&ns), bits(&iv), "rms_norm_in_place {}", k.isa());
        }
    }

    #[test]
    fn exp_is_accurate(x in -87f32..88.0) {
        // Normal results only (below −87 the result is subnormal and loses relative precision).
        let e = statelm_quant::kernels::scalar::exp_f32(x);
        let want = f64::from(x).exp();
        prop_assert!(((f64::from(e) - want) / want).abs() < 4e-7, "exp({}) = {} vs {}", x, e, want);
    }

    #[test]
    fn scalar_dot_matches_dequantized(t in 0..DOT_TYPES.len(), blocks in 1usize..8, seed in any::<u64>()) {
        check_scalar_vs_dequant(DOT_TYPES[t], blocks, seed);
    }

    #[test]
    fn act_quantizers_agree_across_isas(blocks in 1usize..6, seed in any::<u64>(), special in 0u8..4) {
        let mut rng = Rng(seed);
        let mut x = rng.vec(blocks * 256);
        match special {
            // Exact rounding ties for Q8_0: multiples of amax / 254.
            1 => x.iter_mut().enumerate().for_each(|(i, v)| *v = (i % 255) as f32 - 127.0),
            // Equal positive and negative extremes (the Q8_K tie rule).
            2 => { let len = x.len(); x[0] = -3.0; x[1] = 3.0; x[300 % len] = -3.0; }
            3 => x.iter_mut().take(64).for_each(|v| *v = 0.0),
            _ => {}
        }
        for at in [GgmlType::Q8_0, GgmlType::Q8_K] {
            let bytes = |k: Kernels| {
                let mut b = vec![0u8; at.bytes_for(x.len() as u64).unwrap() as usize];
                k.quantize_acts(at, &x, &mut b).unwrap();
                b
            };
            for k in Kernels::available() {
                prop_assert_eq!(bytes(Kernels::scalar()), bytes(k), "{} {}", at, k.isa());
            }
        }
    }
}

/// Per-format bound on |dequantize(quantize(x)) - x| relative to the amax of
/// x's block (super-block for K-quants).
fn quant_budget(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 1e-3,
        GgmlType::BF16 => 4e-3,
        GgmlType::Q8_0 | GgmlType::Q8_1 => 0.5 / 127.0 + 1e-3,
        GgmlType::Q8_K => 0.5 / 127.0 + 1e-6,
        GgmlType::Q4_0 => 1.0 / 8.0 + 1e-3,
        GgmlType::Q5_0 => 1.0 / 16.0 + 1e-3,
        GgmlType::Q4_1 => 2.0 / 30.0 + 2e-3,
        GgmlType::Q5_1 => 2.0 / 62.0 + 2e-3,
        GgmlType::Q4_K => 0.15,
        GgmlType::Q5_K => 0.08,
        GgmlType::Q6_K => 0.05,
        _ => unreachable!("no quantizer for {ty}"),
    }
}

const QUANT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn quantize_dequantize_within_budget(t in 0..QUANT_TYPES.len(), blocks in 1usize..4, seed in any::<u64>(), scale in -6i32..6) {
        let ty = QUANT_TYPES[t];
        prop_assert!(can_quantize(ty));
        let mut rng = Rng(seed);
        let n = if ty.is_quantized() { blocks * ty.block_size() } else { blocks * 33 };
        let x: Vec<f32> = rng.vec(n).iter().map(|v| v * 2f32.powi(scale)).collect();
        let mut bytes = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
        quantize_row(ty, &x, &mut bytes).unwrap();
        let mut back = vec![0f32; n];
        dequantize_row(ty, &bytes, &mut back).unwrap();
        let bs = ty.block_size().max(32);
        for (xb, yb) in x.chunks(bs).zip(back.chunks(bs)) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = xb.iter().zip(yb).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            prop_assert!(err <= quant_budget(ty) * amax, "{}: err {} amax {}", ty, err, amax);
        }
    }
}

#[test]
fn softmax_sums_to_one() {
    for k in [Kernels::scalar(), Kernels::detected()] {
        let mut v = vec![1.0, 2.0, 3.0, -1e9];
        k.softmax_f32(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(v[3], 0.0);
    }
}

/// The f32 order of the SIMD dots of Q8_0, Q5_0, Q4_1 and Q5_1 (ggml's x86 `vec_dot`s, which
/// the AVX2 and NEON kernels both follow): per block eight exact i32 lanes (lane `k` sums codes
/// `4k..4k+4`), one FMA each by `d_x·d_y` into eight f32 lanes, then [`hsum8`]; Q4_1 and Q5_1
/// add the running f32 sum of `m_x·s_y`.
fn simd_lane_order(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    use statelm_quant::formats::float::h2f;
    use statelm_quant::formats::{
        read_block, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1,
    };
    let (wb, ab) = (ty.block_bytes(), vec_dot_type(ty).block_bytes());
    let (mut lanes, mut summs) = ([0f32; 8], 0f32);
    for (x, y) in w.chunks_exact(wb).zip(a.chunks_exact(ab)) {
        let (codes, d, y_codes): ([i32; 32], f32, [i8; 32]) = match ty {
            GgmlType::Q8_0 | GgmlType::Q5_0 => {
                let yb: BlockQ8_0 = read_block(y);
                let (c, dx) = if ty == GgmlType::Q8_0 {
                    let xb: BlockQ8_0 = read_block(x);
                    (xb.qs.map(i32::from), xb.d)
                } else {
                    let xb: BlockQ5_0 = read_block(x);
                    (xb.unpack().map(i32::from), xb.d)
                };
                (c, h2f(dx) * h2f(yb.d), yb.qs)
            }
            _ => {
                let yb: BlockQ8_1 = read_block(y);
                let (c, dx, m) = if ty == GgmlType::Q4_1 {
                    let xb: BlockQ4_1 = read_block(x);
                    (xb.unpack().map(i32::from), xb.d, xb.m)
                } else {
                    let xb: BlockQ5_1 = read_block(x);
                    (xb.unpack().map(i32::from), xb.d, xb.m)
                };
                summs += h2f(m) * h2f(yb.s);
                (c, h2f(dx) * h2f(yb.d), yb.qs)
            }
        };
        for (k, lane) in lanes.iter_mut().enumerate() {
            let isum: i32 = (4 * k..4 * k + 4)
                .map(|i| codes[i] * i32::from(y_codes[i]))
                .sum();
            *lane = (isum as f32).mul_add(d, *lane);
        }
    }
    hsum8(&lanes) + summs
}

#[test]
fn simd_dots_sum_in_the_x86_lane_order() {
    let mut rng = Rng(7);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
    ] {
        for blocks in [1, 3, 17] {
            let n = elems(ty, blocks);
            let w = random_row(&mut rng, ty, n);
            let (a, _) = quantized_acts(&Kernels::scalar(), ty, &rng.vec(n));
            let want = simd_lane_order(ty, &w, &a).to_bits();
            for k in Kernels::available().into_iter().skip(1) {
                let got = k.vec_dot(ty, n, &w, &a).unwrap().to_bits();
                assert_eq!(got, want, "{ty} x{blocks} on {}", k.isa());
            }
        }
    }
}

/// The bit patterns of a slice (NaN-safe equality).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn both_dispatch_paths_exist() {
    let (s, d) = (Kernels::scalar(), Kernels::detected());
    assert_eq!(s.isa(), "scalar");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
    {
        assert!(d.isa().starts_with("avx2"), "{}", d.isa());
        let all = Kernels::available();
        assert_eq!(all[1].isa(), "avx2");
        assert_eq!(all.last().map(|k| k.isa()), Some(d.isa()));
    }
    #[cfg(target_arch = "aarch64")]
    {
        // NEON is part of every aarch64 CPU: the plain table always, the others as detected.
        let all = Kernels::available();
        assert_eq!(all[1].isa(), "neon");
        assert!(d.isa().starts_with("neon"), "{}", d.isa());
        let has = |f: &str| all.iter().any(|k| k.isa().contains(f));
        assert_eq!(
            has("dotprod"),
            std::arch::is_aarch64_feature_detected!("dotprod")
        );
        assert_eq!(
            has("i8mm"),
            std::arch::is_aarch64_feature_detected!("dotprod")
                && std::arch::is_aarch64_feature_detected!("i8mm")
        );
    }
    eprintln!(
        "detected ISA: {}; active ISA: {}",
        d.isa(),
        statelm_quant::active_isa()
    );
    for ty in DOT_TYPES {
        assert!(s.supports(ty) && d.supports(ty), "{ty}");
    }
    assert!(!s.supports(GgmlType::I32));
}

#[test]
fn vec_dot_rejects_bad_lengths() {
    let k = Kernels::detected();
    let w = vec![0u8; 34];
    let a = vec![0u8; 34];
    assert!(k.vec_dot(GgmlType::Q8_0, 32, &w, &a).is_ok());
    assert!(k.vec_dot(GgmlType::Q8_0, 32, &w[..33], &a).is_err());
    assert!(k.vec_dot(GgmlType::Q8_0, 32, &w, &a[..30]).is_err());
    assert!(k.vec_dot(GgmlType::Q8_0, 31, &w, &a).is_err());
    assert!(k.vec_dot(GgmlType::I8, 34, &w, &a).is_err());
}

#[test]
fn extreme_codes_do_not_saturate() {
    // All-max codes with the largest activations exercise maddubs limits.
    let (scalar, simd) = (Kernels::scalar(), Kernels::detected());
    let x = vec![-1.0f32; 512];
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        for fill in [0x00u8, 0xff, 0x80, 0x7f] {
            let mut w = vec![fill; ty.bytes_for(512).unwrap() as usize];
            for block in w.chunks_exact_mut(ty.block_bytes()) {
                for &(off, _) in common::f16_fields(ty) {
                    block[off..off + 2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
                }
            }
            let (a, _) = quantized_acts(&scalar, ty, &x);
            let s = scalar.vec_dot(ty, 512, &w, &a).unwrap();
            let v = simd.vec_dot(ty, 512, &w, &a).unwrap();
            assert!(
                (s - v).abs() <= 1e-5 * s.abs().max(1.0),
                "{ty} fill {fill:#x}: {s} vs {v}"
            );
            // The multi-vector kernels hold the same exact integers at the extremes.
            for k in Kernels::available() {
                let one = k.vec_dot(ty, 512, &w, &a).unwrap().to_bits();
                let tile = k.vec_dot_tile(ty, 512, [&w, &w], [&a, &a, &a, &a]).unwrap();
                let rows8 = k.vec_dot_rows8(ty, 512, [&w; 8], &a).unwrap();
                assert!(
                    tile.iter().flatten().all(|t| t.to_bits() == one),
                    "{ty} {}",
                    k.isa()
                );
                assert!(rows8.iter().all(|t| t.to_bits() == one), "{ty} {}", k.isa());
                if let Some(many) = k
                    .vec_dot_rows8x4(ty, 512, [&w; 8], &[a.as_slice(); 3])
                    .unwrap()
                {
                    assert!(
                        many.iter().flatten().all(|t| t.to_bits() == one),
                        "{ty} {}",
                        k.isa()
                    );
                }
                if let Some(pairs) = k
                    .vec_dot_pair_tile(ty, 512, [&w, &w], &[a.as_slice(); 5])
                    .unwrap()
                {
                    assert!(
                        pairs.iter().flatten().all(|t| t.to_bits() == one),
                        "{ty} {}",
                        k.isa()
                    );
                }
            }
        }
    }
}
