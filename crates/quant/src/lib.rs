//! statelm-quant: ggml block formats and the quantized kernels that multiply them.
//!
//! * [`formats`]: one `#[repr(C)]` block struct per ggml format, scalar
//!   [`dequantize_row`] for every format and [`quantize_row`] for the formats
//!   in [`can_quantize`].
//! * [`kernels`]: dot products of a weight row with an activation vector, as a
//!   scalar reference ([`kernels::scalar`]), AVX2+FMA+F16C versions (`kernels::avx2`,
//!   x86_64) and NEON versions (`kernels::neon`, aarch64: plain, `dotprod`, `i8mm`);
//!   [`Kernels`] selects them at run time (`STATELM_FORCE_SCALAR=1` forces scalar,
//!   `STATELM_ISA` picks a table by name).
//! * [`QMatrix`], [`QuantizedActs`], [`matvec()`], [`matmul()`]: the decode and
//!   small-batch products, split across a persistent [`ThreadPool`]; matmul
//!   runs two-row × four-vector register tiles for Q4_0/Q5_0/Q8_0, matvec
//!   eight-row kernels for Q4_0/Q5_0 and (AVX2) Q4_K/Q6_K, each row
//!   bit-identical to its single dot.
//! * [`gemm`]: the prefill product for batches of [`GEMM_MIN_VECS`] or more:
//!   weights dequantized once into packed panels, then an f32 GEMM with a
//!   6 × 16 register tile (scalar and AVX2 micro-kernels agree bit for bit).
//! * [`igemm`]: the prefill product for Q4_0/Q5_0/Q8_0 weights on CPUs with
//!   an int8 dot instruction (AVX512-VNNI, AVX-VNNI), and for Q4_0/Q5_0 on
//!   plain AVX2 (`vpmaddubsw`): rows packed once as unsigned codes
//!   interleaved by four, then tiles of 16 rows × 8 tokens with exact integer
//!   block sums (scalar reference bit for bit).
//! * [`igemm_k`]: the same design for Q4_K, Q5_K and Q6_K weights against Q8_K
//!   (scalar reference, AVX2 `vpmaddubsw`, AVX-VNNI and AVX512-VNNI micro-kernels,
//!   bit for bit): exact integer sub-block sums times the integer scales, the
//!   mins via the activations' bsums, then per super-block the f32 steps of the
//!   single dots — so Q4_K/Q5_K prefill equals decode bit for bit (Q6_K: one FMA
//!   per super-block, batch-invariant).
//! * [`Kernels::dot_f32`] / [`Kernels::axpy_f32`]: the float vector operations
//!   of attention.
//!
//! Weights dot against activations quantized as in ggml ([`vec_dot_type`]):
//! Q4_0/Q5_0/Q8_0 against Q8_0, Q4_1/Q5_1 against Q8_1, K-quants against Q8_K,
//! F32/F16/BF16 against f32. Each block's dot is exact in integers, then scaled
//! in f32; scalar and SIMD differ only in f32 summation order (for K-quants
//! they agree bit for bit).
//!
//! # ISA coverage
//!
//! | weights | activations | scalar | AVX2 | AVX2 four-vector (matmul) | NEON (all three tables) |
//! |---------|-------------|--------|------|---------------------------|-------------------------|
//! | F32     | f32         | yes    | yes  | no (4 single dots) | scalar dot |
//! | F16     | f32         | yes    | yes (F16C) | no | scalar dot |
//! | BF16    | f32         | yes    | yes  | no | scalar dot |
//! | Q8_0    | Q8_0        | yes    | yes  | yes (+ 2 × 4 tile) | dot, 4-vector, 2 × 4 tile, 8-row |
//! | Q4_0    | Q8_0        | yes    | yes  | yes (+ 2 × 4 tile) | dot, 4-vector, 2 × 4 tile, 8-row |
//! | Q5_0    | Q8_0        | yes    | yes  | yes (+ 2 × 4 tile) | dot, 4-vector, 2 × 4 tile, 8-row |
//! | Q4_1    | Q8_1        | yes    | yes  | no | dot |
//! | Q5_1    | Q8_1        | yes    | yes  | no | dot |
//! | Q2_K    | Q8_K        | yes    | scalar only | no | scalar only |
//! | Q3_K    | Q8_K        | yes    | scalar only | no | scalar only |
//! | Q4_K    | Q8_K        | yes    | yes  | yes | dot, 4-vector |
//! | Q5_K    | Q8_K        | yes    | yes  | yes | dot, 4-vector |
//! | Q6_K    | Q8_K        | yes    | yes  | yes | dot, 4-vector |
//!
//! NEON also has the float vector kernels (dot, axpy, f16 widening, softmax, SwiGLU), the f32
//! GEMM micro-kernel and panel transposes, and the int8 GEMM micro-kernel (`smull`, `sdot`,
//! or `usdot` with i8mm, which also takes Q8_0's codes); its activation quantizers are the
//! scalar ones. Every NEON kernel sums in the order of its AVX2 counterpart, so both give the
//! same bits.
//!
//! | activation quantizer | scalar | AVX2 |
//! |----------------------|--------|------|
//! | Q8_0                 | yes    | yes (same bytes) |
//! | Q8_K                 | yes    | yes (same bytes) |
//! | Q8_1                 | yes    | scalar only |
//! | F32 (copy)           | yes    | n/a  |
//!
//! Other architectures use the scalar kernels, written so the compiler can
//! vectorize them.
//!
//! # Quantizers and error budgets (tested)
//!
//! * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_1: ggml's reference round-to-nearest rules,
//!   bit for bit (requantizing llama.cpp's stored rows reproduces their bytes).
//! * Q4_K, Q5_K, Q6_K: per sub-block grid search over the inverse scale with a
//!   weighted least-squares refit (weights `rms + |x|` for Q4_K/Q5_K, `x²` for
//!   Q6_K), 6-/8-bit scale quantization, then codes recomputed against the
//!   quantized scales. Budget on random data: max error ≤ 0.15 / 0.08 / 0.05 of
//!   the super-block's max |x|; requantizing llama.cpp's rows is lossless on all
//!   reference rows (budget 0.02 / 0.01 / 0.005).
//! * Q8_K: `d = max / -127` on the signed extreme (ties: the positive one), codes
//!   rounded half to even; F16/BF16 round to nearest even.
//! * Q2_K, Q3_K: dequantization and dot kernels only.
//!
//! Differential budget for kernels: |SIMD − scalar| ≤ 1e-5 · Σ|wᵢ·aᵢ| (plus the
//! magnitude of the additive min terms); scalar kernels match an f64 dot of the
//! dequantized operands to the same budget (2e-3 for Q4_1/Q5_1, whose Q8_1 `s`
//! is rounded to f16 by design).

pub mod bandwidth;
mod checked;
pub mod dispatch;
pub mod error;
pub mod formats;
pub mod gemm;
pub mod igemm;
pub mod igemm_k;
pub mod kernels;
pub mod matrix;
pub mod matvec;
pub mod pairs;
pub mod pool;
pub mod project;

pub use bandwidth::measure_read_bandwidth;
pub use dispatch::{active_isa, vec_dot_type, Kernels, FORCE_SCALAR_ENV, ISA_ENV};
pub use error::QuantError;
pub use formats::{can_quantize, dequantize_row, quantize_row};
pub use gemm::{matmul_f32, BMatrix, GEMM_MIN_VECS, KC as GEMM_KC};
pub use igemm::I8_K_GEMM_MIN_VECS;
pub use matrix::{QMatrix, QuantizedActs};
pub use matvec::{matmul, matvec, matvec_f32, BatchOrder, MatvecJob};
pub use pool::ThreadPool;
pub use project::{Projector, Summation};

/// ggml's f32 reductions, for callers that must sum in the order llama.cpp's x86 backend does
/// outside the matmuls (attention's value sums).
pub mod sums {
    pub use crate::kernels::scalar::{hsum8, reduce_dot_partials};
}
