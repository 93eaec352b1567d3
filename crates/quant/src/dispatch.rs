//! Run-time kernel selection.
//!
//! A [`Kernels`] table holds one dot kernel per weight type and one quantizer
//! per activation type. [`Kernels::detected`] picks the best table this CPU
//! runs: on x86_64 AVX2+FMA+F16C (with AVX-VNNI or AVX512-VNNI int8 GEMMs)
//! when `is_x86_feature_detected!` says so; on aarch64 NEON, with `sdot`
//! (FEAT_DotProd) and `usdot` (FEAT_I8MM) when `is_aarch64_feature_detected!`
//! says so; elsewhere the scalar table. [`Kernels::global`] builds the table
//! the crate-level functions use once, honouring `STATELM_FORCE_SCALAR=1` and
//! `STATELM_ISA`.

use crate::error::{bytes_for, check_len, QuantError};
use crate::kernels::{
    scalar, AxpyFn, Dot4Fn, DotFn, GatedFn, I8TileFn, InterleaveFn, KTileFn, NarrowFn, NormFn,
    PairTileFn, PanelFn, QuantFn, Rows8Fn, Rows8x4Fn, SoftmaxFn, TileFn, VecDotFn, WidenFn,
};
use crate::matvec::BatchOrder;
use statelm_gguf::GgmlType;
use std::sync::OnceLock;

/// Environment variable that forces the scalar kernels when set to `1`
/// (read once, when [`Kernels::global`] is first built).
pub const FORCE_SCALAR_ENV: &str = "STATELM_FORCE_SCALAR";

/// Environment variable that selects a kernel table by its [`Kernels::isa`]
/// name (read once, when [`Kernels::global`] is first built).
pub const ISA_ENV: &str = "STATELM_ISA";

#[derive(Clone, Copy)]
struct DotTable {
    f32: DotFn,
    f16: DotFn,
    bf16: DotFn,
    q4_0: DotFn,
    q4_1: DotFn,
    q5_0: DotFn,
    q5_1: DotFn,
    q8_0: DotFn,
    q2_k: DotFn,
    q3_k: DotFn,
    q4_k: DotFn,
    q5_k: DotFn,
    q6_k: DotFn,
}

/// Four-vector kernels (matmul); `None` falls back to four single dots.
#[derive(Clone, Copy, Default)]
struct Dot4Table {
    q4_0: Option<Dot4Fn>,
    q5_0: Option<Dot4Fn>,
    q8_0: Option<Dot4Fn>,
    q4_k: Option<Dot4Fn>,
    q5_k: Option<Dot4Fn>,
    q6_k: Option<Dot4Fn>,
}

/// Two-row × four-vector tile kernels (matmul); `None` falls back to [`Dot4Table`].
#[derive(Clone, Copy, Default)]
struct TileTable {
    q4_0: Option<TileFn>,
    q5_0: Option<TileFn>,
    q8_0: Option<TileFn>,
}

/// Pair tile kernels (small-batch matmul over prepared vector pairs); `None` falls back to
/// [`TileTable`].
#[derive(Clone, Copy, Default)]
struct PairTable {
    q5_0: Option<PairTileFn>,
    q8_0: Option<PairTileFn>,
}

/// Eight-row × 1..=4-vector kernels (small-batch matmul of the K-quants); `None` falls back
/// to [`Rows8Table`] vector by vector.
#[derive(Clone, Copy, Default)]
struct Rows8x4Table {
    q4_k: Option<Rows8x4Fn>,
    q6_k: Option<Rows8x4Fn>,
}

/// Eight-row × one-vector kernels (matvec); `None` falls back to single dots.
#[derive(Clone, Copy, Default)]
struct Rows8Table {
    q4_0: Option<Rows8Fn>,
    q5_0: Option<Rows8Fn>,
    q8_0: Option<Rows8Fn>,
    q4_k: Option<Rows8Fn>,
    q6_k: Option<Rows8Fn>,
}

#[derive(Clone, Copy)]
struct QuantTable {
    f32: QuantFn,
    q8_0: QuantFn,
    q8_1: QuantFn,
    q8_k: QuantFn,
}

/// A table of kernels for one instruction set.
///
/// Invariant: every function pointer in the table is safe to call on this CPU
/// (the fields are private and the only constructors check the CPU), so the
/// safe methods here and in [`crate::matvec()`] may call them.
#[derive(Clone, Copy)]
pub struct Kernels {
    isa: &'static str,
    dot: DotTable,
    dot4: Dot4Table,
    tile: TileTable,
    pairs: PairTable,
    rows8: Rows8Table,
    rows8x4: Rows8x4Table,
    quant: QuantTable,
    vec_dot_f32: VecDotFn,
    axpy_f32: AxpyFn,
    f16_to_f32: WidenFn,
    softmax_f32: SoftmaxFn,
    silu_mul_f32: GatedFn,
    gelu_mul_f32: GatedFn,
    f32_to_f16: NarrowFn,
    rms_norm: NormFn,
    panel_f32: PanelFn,
    interleave_panel: InterleaveFn,
    i8_tile: I8TileFn,
    /// The largest code offset (see [`crate::igemm::code_offset`]) whose codes `i8_tile` sums
    /// fast and exactly; 0 when it is the scalar reference.
    i8_fast_offset: u8,
    /// The K-quant int8 GEMM micro-kernel (see [`crate::igemm_k`]) and whether it is a SIMD one.
    k_tile: (KTileFn, bool),
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels").field("isa", &self.isa).finish()
    }
}

impl Kernels {
    /// The portable scalar reference kernels (available everywhere).
    pub fn scalar() -> Kernels {
        Kernels {
            isa: "scalar",
            dot: DotTable {
                f32: scalar::dot_f32_f32,
                f16: scalar::dot_f16_f32,
                bf16: scalar::dot_bf16_f32,
                q4_0: scalar::dot_q4_0_q8_0,
                q4_1: scalar::dot_q4_1_q8_1,
                q5_0: scalar::dot_q5_0_q8_0,
                q5_1: scalar::dot_q5_1_q8_1,
                q8_0: scalar::dot_q8_0_q8_0,
                q2_k: scalar::dot_q2_k_q8_k,
                q3_k: scalar::dot_q3_k_q8_k,
                q4_k: scalar::dot_q4_k_q8_k,
                q5_k: scalar::dot_q5_k_q8_k,
                q6_k: scalar::dot_q6_k_q8_k,
            },
            dot4: Dot4Table {
                q4_k: Some(scalar::dot4_q4_k_q8_k),
                ..Dot4Table::default()
            },
            tile: TileTable::default(),
            pairs: PairTable::default(),
            rows8: Rows8Table::default(),
            rows8x4: Rows8x4Table::default(),
            vec_dot_f32: scalar::dot_f32,
            axpy_f32: scalar::axpy_f32,
            f16_to_f32: scalar::f16_to_f32,
            softmax_f32: scalar::softmax_f32,
            silu_mul_f32: scalar::silu_mul_f32,
            gelu_mul_f32: scalar::gelu_mul_f32,
            f32_to_f16: scalar::f32_to_f16,
            rms_norm: scalar::rms_norm,
            panel_f32: scalar::panel_f32,
            interleave_panel: scalar::interleave_panel,
            i8_tile: scalar::tile_i8,
            i8_fast_offset: 0,
            k_tile: (scalar::tile_i8_k, false),
            quant: QuantTable {
                f32: scalar::quantize_f32,
                q8_0: scalar::quantize_q8_0,
                q8_1: scalar::quantize_q8_1,
                q8_k: scalar::quantize_q8_k,
            },
        }
    }

    /// The best kernels this CPU supports (ignores `STATELM_FORCE_SCALAR`).
    pub fn detected() -> Kernels {
        Self::available().pop().unwrap_or_else(Self::scalar)
    }

    /// Every table this CPU can run, from the scalar reference to the best
    /// (for differential tests and benchmarks; [`Kernels::detected`] is the last).
    pub fn available() -> Vec<Kernels> {
        let mut tables = vec![Self::scalar()];
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            if !(has!("avx2") && has!("fma") && has!("f16c")) {
                return tables;
            }
            let avx2 = Self::avx2_checked();
            tables.push(avx2);
            if has!("avxvnni") {
                tables.push(Kernels {
                    isa: "avx2+avxvnni",
                    i8_tile: crate::kernels::avx2::tile_i8_avxvnni,
                    i8_fast_offset: 128,
                    k_tile: (crate::kernels::avx2::tile_i8_k_avxvnni, true),
                    pairs: PairTable {
                        q5_0: Some(crate::kernels::avx2::pairs_q5_0_avxvnni),
                        q8_0: Some(crate::kernels::avx2::pairs_q8_0_avxvnni),
                    },
                    ..avx2
                });
            }
            if has!("avx512f") && has!("avx512vnni") && has!("avx512bw") && has!("avx512vl") {
                tables.push(Kernels {
                    isa: "avx2+avx512vnni",
                    i8_tile: crate::kernels::avx2::tile_i8_avx512vnni,
                    i8_fast_offset: 128,
                    k_tile: (crate::kernels::avx2::tile_i8_k_avx512vnni, true),
                    rows8: Rows8Table {
                        q4_0: Some(crate::kernels::avx2::rows8_q4_0_q8_0_avx512vnni),
                        q5_0: Some(crate::kernels::avx2::rows8_q5_0_q8_0_avx512vnni),
                        q4_k: Some(crate::kernels::avx2::rows8_q4_k_q8_k_avx512vnni),
                        q6_k: Some(crate::kernels::avx2::rows8_q6_k_q8_k_avx512vnni),
                        ..avx2.rows8
                    },
                    rows8x4: Rows8x4Table {
                        q4_k: Some(crate::kernels::avx2::rows8x4_q4_k_q8_k_avx512vnni),
                        q6_k: Some(crate::kernels::avx2::rows8x4_q6_k_q8_k_avx512vnni),
                    },
                    pairs: PairTable {
                        q5_0: Some(crate::kernels::avx2::pairs_q5_0_avx512vnni),
                        q8_0: Some(crate::kernels::avx2::pairs_q8_0_avx512vnni),
                    },
                    ..avx2
                });
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            use std::arch::is_aarch64_feature_detected as has;
            let neon = Self::neon();
            tables.push(neon);
            if has!("dotprod") {
                let dotprod = Self::neon_dotprod_checked(neon);
                tables.push(dotprod);
                if has!("i8mm") {
                    tables.push(Kernels {
                        isa: "neon+dotprod+i8mm",
                        i8_tile: crate::kernels::neon::tile_i8_i8mm,
                        i8_fast_offset: 128,
                        ..dotprod
                    });
                }
            }
        }
        tables
    }

    /// The plain NEON table (every aarch64 CPU has NEON).
    #[cfg(target_arch = "aarch64")]
    fn neon() -> Kernels {
        use crate::kernels::neon as n;
        let mut k = Self::scalar();
        k.isa = "neon";
        k.dot.q4_0 = n::dot_q4_0_q8_0;
        k.dot.q4_1 = n::dot_q4_1_q8_1;
        k.dot.q5_0 = n::dot_q5_0_q8_0;
        k.dot.q5_1 = n::dot_q5_1_q8_1;
        k.dot.q8_0 = n::dot_q8_0_q8_0;
        k.dot.q4_k = n::dot_q4_k_q8_k;
        k.dot.q5_k = n::dot_q5_k_q8_k;
        k.dot.q6_k = n::dot_q6_k_q8_k;
        k.dot4 = Dot4Table {
            q4_0: Some(n::dot4_q4_0_q8_0),
            q5_0: Some(n::dot4_q5_0_q8_0),
            q8_0: Some(n::dot4_q8_0_q8_0),
            q4_k: Some(n::dot4_q4_k_q8_k),
            q5_k: Some(n::dot4_q5_k_q8_k),
            q6_k: Some(n::dot4_q6_k_q8_k),
        };
        k.tile = TileTable {
            q4_0: Some(n::tile_q4_0_q8_0),
            q5_0: Some(n::tile_q5_0_q8_0),
            q8_0: Some(n::tile_q8_0_q8_0),
        };
        k.rows8 = Rows8Table {
            q4_0: Some(n::rows8_q4_0_q8_0),
            q5_0: Some(n::rows8_q5_0_q8_0),
            q8_0: Some(n::rows8_q8_0_q8_0),
            ..Rows8Table::default()
        };
        k.vec_dot_f32 = n::dot_f32;
        k.axpy_f32 = n::axpy_f32;
        k.f16_to_f32 = n::f16_to_f32;
        k.softmax_f32 = n::softmax_f32;
        k.silu_mul_f32 = n::silu_mul_f32;
        k.gelu_mul_f32 = n::gelu_mul_f32;
        k.f32_to_f16 = n::f32_to_f16;
        k.rms_norm = n::rms_norm;
        k.panel_f32 = n::panel_f32;
        k.interleave_panel = n::interleave_panel;
        k.i8_tile = n::tile_i8_neon;
        k.i8_fast_offset = 16;
        k.k_tile = (n::tile_i8_k_neon, true);
        k.quant.q8_0 = n::quantize_q8_0;
        k.quant.q8_k = n::quantize_q8_k;
        k
    }

    /// The NEON table with `sdot` block dots; only called after the CPU check above.
    #[cfg(target_arch = "aarch64")]
    fn neon_dotprod_checked(neon: Kernels) -> Kernels {
        use crate::kernels::neon as n;
        let mut k = neon;
        k.isa = "neon+dotprod";
        k.dot.q4_0 = n::dot_q4_0_q8_0_dotprod;
        k.dot.q4_1 = n::dot_q4_1_q8_1_dotprod;
        k.dot.q5_0 = n::dot_q5_0_q8_0_dotprod;
        k.dot.q5_1 = n::dot_q5_1_q8_1_dotprod;
        k.dot.q8_0 = n::dot_q8_0_q8_0_dotprod;
        k.dot.q4_k = n::dot_q4_k_q8_k_dotprod;
        k.dot.q5_k = n::dot_q5_k_q8_k_dotprod;
        k.dot.q6_k = n::dot_q6_k_q8_k_dotprod;
        k.dot4 = Dot4Table {
            q4_0: Some(n::dot4_q4_0_q8_0_dotprod),
            q5_0: Some(n::dot4_q5_0_q8_0_dotprod),
            q8_0: Some(n::dot4_q8_0_q8_0_dotprod),
            q4_k: Some(n::dot4_q4_k_q8_k_dotprod),
            q5_k: Some(n::dot4_q5_k_q8_k_dotprod),
            q6_k: Some(n::dot4_q6_k_q8_k_dotprod),
        };
        k.tile = TileTable {
            q4_0: Some(n::tile_q4_0_q8_0_dotprod),
            q5_0: Some(n::tile_q5_0_q8_0_dotprod),
            q8_0: Some(n::tile_q8_0_q8_0_dotprod),
        };
        k.rows8x4 = Rows8x4Table {
            q4_k: Some(n::rows8x4_q4_k_q8_k_dotprod),
            q6_k: Some(n::rows8x4_q6_k_q8_k_dotprod),
        };
        k.rows8 = Rows8Table {
            q4_0: Some(n::rows8_q4_0_q8_0_dotprod),
            q5_0: Some(n::rows8_q5_0_q8_0_dotprod),
            q8_0: Some(n::rows8_q8_0_q8_0_dotprod),
            q4_k: Some(n::rows8_q4_k_q8_k_dotprod),
            q6_k: Some(n::rows8_q6_k_q8_k_dotprod),
        };
        k.i8_tile = n::tile_i8_dotprod;
        k.k_tile = (n::tile_i8_k_dotprod, true);
        k
    }

    /// The AVX2 table; only called after the CPU check above.
    #[cfg(target_arch = "x86_64")]
    fn avx2_checked() -> Kernels {
        use crate::kernels::avx2;
        let mut k = Self::scalar();
        k.isa = "avx2";
        k.dot.f32 = avx2::dot_f32_f32;
        k.dot.f16 = avx2::dot_f16_f32;
        k.dot.bf16 = avx2::dot_bf16_f32;
        k.dot.q4_0 = avx2::dot_q4_0_q8_0;
        k.dot.q4_1 = avx2::dot_q4_1_q8_1;
        k.dot.q5_0 = avx2::dot_q5_0_q8_0;
        k.dot.q5_1 = avx2::dot_q5_1_q8_1;
        k.dot.q8_0 = avx2::dot_q8_0_q8_0;
        k.dot.q4_k = avx2::dot_q4_k_q8_k;
        k.dot.q5_k = avx2::dot_q5_k_q8_k;
        k.dot.q6_k = avx2::dot_q6_k_q8_k;
        k.dot4 = Dot4Table {
            q4_0: Some(avx2::dot4_q4_0_q8_0),
            q5_0: Some(avx2::dot4_q5_0_q8_0),
            q8_0: Some(avx2::dot4_q8_0_q8_0),
            q4_k: Some(avx2::dot4_q4_k_q8_k),
            q5_k: Some(avx2::dot4_q5_k_q8_k),
            q6_k: Some(avx2::dot4_q6_k_q8_k),
        };
        k.tile = TileTable {
            q4_0: Some(avx2::tile_q4_0_q8_0),
            q5_0: Some(avx2::tile_q5_0_q8_0),
            q8_0: Some(avx2::tile_q8_0_q8_0),
        };
        // K-quant decode takes the single dots here, one weight stream per thread: on a 2-core
        // AVX2 host (2026-12-07) the eight-row walk's eight streams per thread decoded the
        // qwen3 1.7B Q4_K_M file ~20% slower (9.9/8.8/10.4 against 11.0/12.6/12.0 tok/s,
        // interleaved runs). The two give the same bits; the AVX-512 table keeps its own.
        k.rows8 = Rows8Table {
            q4_0: Some(avx2::rows8_q4_0_q8_0),
            q5_0: Some(avx2::rows8_q5_0_q8_0),
            q8_0: None,
            q4_k: None,
            q6_k: None,
        };
        k.rows8x4 = Rows8x4Table {
            q4_k: Some(avx2::rows8x4_q4_k_q8_k),
            q6_k: Some(avx2::rows8x4_q6_k_q8_k),
        };
        k.vec_dot_f32 = avx2::dot_f32;
        k.axpy_f32 = avx2::axpy_f32;
        k.f16_to_f32 = avx2::f16_to_f32;
        k.softmax_f32 = avx2::softmax_f32;
        k.silu_mul_f32 = avx2::silu_mul_f32;
        k.panel_f32 = avx2::panel_f32;
        k.i8_tile = avx2::tile_i8_avx2;
        k.i8_fast_offset = 16;
        k.k_tile = (avx2::tile_i8_k_avx2, true);
        k.interleave_panel = avx2::interleave_panel;
        k.quant.q8_0 = avx2::quantize_q8_0;
        k.quant.q8_k = avx2::quantize_q8_k;
        k
    }

    /// The process-wide table: [`Kernels::detected`]; [`Kernels::scalar`]
    /// when `STATELM_FORCE_SCALAR=1`; or, when `STATELM_ISA` names a table of
    /// [`Kernels::available`] (e.g. `avx2`, to compare with a build of another
    /// runtime that has no AVX-512), that table. A name this CPU cannot run is
    /// ignored. Built once, on first use.
    pub fn global() -> &'static Kernels {
        static GLOBAL: OnceLock<Kernels> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            if std::env::var(FORCE_SCALAR_ENV).is_ok_and(|v| v.trim() == "1") {
                return Kernels::scalar();
            }
            let wanted = std::env::var(ISA_ENV).unwrap_or_default();
            Kernels::available()
                .into_iter()
                .find(|k| k.isa() == wanted.trim())
                .unwrap_or_else(Kernels::detected)
        })
    }

    /// The instruction set of this table: `"scalar"`, `"avx2"`, or `"avx2+avx512vnni"` /
    /// `"avx2+avxvnni"` (AVX2 plus that int8 GEMM micro-kernel, see [`crate::igemm`]) on
    /// x86_64; `"neon"`, `"neon+dotprod"` or `"neon+dotprod+i8mm"` on aarch64.
    pub fn isa(&self) -> &'static str {
        self.isa
    }

    /// The dot kernel for weights of type `w`, if there is one.
    pub(crate) fn dot_fn(&self, w: GgmlType) -> Option<DotFn> {
        let d = &self.dot;
        Some(match w {
            GgmlType::F32 => d.f32,
            GgmlType::F16 => d.f16,
            GgmlType::BF16 => d.bf16,
            GgmlType::Q4_0 => d.q4_0,
            GgmlType::Q4_1 => d.q4_1,
            GgmlType::Q5_0 => d.q5_0,
            GgmlType::Q5_1 => d.q5_1,
            GgmlType::Q8_0 => d.q8_0,
            GgmlType::Q2_K => d.q2_k,
            GgmlType::Q3_K => d.q3_k,
            GgmlType::Q4_K => d.q4_k,
            GgmlType::Q5_K => d.q5_k,
            GgmlType::Q6_K => d.q6_k,
            _ => return None,
        })
    }

    /// The four-vector kernel for weights of type `w`, if this ISA has one.
    pub(crate) fn dot4_fn(&self, w: GgmlType) -> Option<Dot4Fn> {
        let d = &self.dot4;
        match w {
            GgmlType::Q4_0 => d.q4_0,
            GgmlType::Q5_0 => d.q5_0,
            GgmlType::Q8_0 => d.q8_0,
            GgmlType::Q4_K => d.q4_k,
            GgmlType::Q5_K => d.q5_k,
            GgmlType::Q6_K => d.q6_k,
            _ => None,
        }
    }

    /// The four-vector kernel a batch summing in `order` may use: Q4_K's follows ggml's 4-row
    /// GEMM, which sums in another order than its single dot (ggml's GEMV), so a batch-invariant
    /// product does without it; the other formats' four-vector kernels equal their dots.
    pub(crate) fn batch_dot4_fn(&self, w: GgmlType, order: BatchOrder) -> Option<Dot4Fn> {
        match (w, order) {
            (GgmlType::Q4_K, BatchOrder::Invariant) => None,
            _ => self.dot4_fn(w),
        }
    }

    /// The two-row × four-vector tile kernel for weights of type `w`, if this ISA has one.
    pub(crate) fn tile_fn(&self, w: GgmlType) -> Option<TileFn> {
        let t = &self.tile;
        match w {
            GgmlType::Q4_0 => t.q4_0,
            GgmlType::Q5_0 => t.q5_0,
            GgmlType::Q8_0 => t.q8_0,
            _ => None,
        }
    }

    /// The pair tile kernel for weights of type `w` and the offset of their unsigned codes
    /// (what [`crate::pairs::prepare`] corrects for), if this ISA has one.
    pub(crate) fn pair_tile_fn(&self, w: GgmlType) -> Option<(PairTileFn, i32)> {
        match w {
            GgmlType::Q5_0 => self.pairs.q5_0.map(|f| (f, 16)),
            GgmlType::Q8_0 => self.pairs.q8_0.map(|f| (f, 128)),
            _ => None,
        }
    }

    /// The eight-row matvec kernel for weights of type `w`, if this ISA has one.
    pub(crate) fn rows8_fn(&self, w: GgmlType) -> Option<Rows8Fn> {
        match w {
            GgmlType::Q4_0 => self.rows8.q4_0,
            GgmlType::Q5_0 => self.rows8.q5_0,
            GgmlType::Q8_0 => self.rows8.q8_0,
            GgmlType::Q4_K => self.rows8.q4_k,
            GgmlType::Q6_K => self.rows8.q6_k,
            _ => None,
        }
    }

    /// The eight-row × 1..=4-vector kernel for weights of type `w`, if this ISA has one.
    pub(crate) fn rows8x4_fn(&self, w: GgmlType) -> Option<Rows8x4Fn> {
        match w {
            GgmlType::Q4_K => self.rows8x4.q4_k,
            GgmlType::Q6_K => self.rows8x4.q6_k,
            _ => None,
        }
    }

    /// The activation quantizer for activation type `a`, if there is one.
    pub(crate) fn quant_fn(&self, a: GgmlType) -> Option<QuantFn> {
        let q = &self.quant;
        Some(match a {
            GgmlType::F32 => q.f32,
            GgmlType::Q8_0 => q.q8_0,
            GgmlType::Q8_1 => q.q8_1,
            GgmlType::Q8_K => q.q8_k,
            _ => return None,
        })
    }

    /// Whether weights of type `w` have a dot kernel (any ISA).
    pub fn supports(&self, w: GgmlType) -> bool {
        self.dot_fn(w).is_some()
    }

    /// `Σ a_i b_i` over the common length of two f32 slices (attention scores).
    pub fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.vec_dot_f32)(a, b) }
    }

    /// `y_i += alpha * x_i` over the common length (attention's weighted sum of values).
    pub fn axpy_f32(&self, y: &mut [f32], alpha: f32, x: &[f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.axpy_f32)(y, alpha, x) }
    }

    /// Widens IEEE halves to f32 over the common length (exact).
    pub fn f16_to_f32(&self, src: &[half::f16], dst: &mut [f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.f16_to_f32)(src, dst) }
    }

    /// `x = softmax(x)` in place, in ggml's order (see [`crate::kernels::scalar::softmax_f32`]).
    pub fn softmax_f32(&self, x: &mut [f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slice.
        unsafe { (self.softmax_f32)(x) }
    }

    /// `g = silu(g) · u` over the common length, as ggml computes SwiGLU.
    pub fn silu_mul_f32(&self, g: &mut [f32], u: &[f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.silu_mul_f32)(g, u) }
    }

    /// `g = gelu(g) · u` over the common length, as ggml's CPU backend computes GeGLU (the
    /// input rounded to f16, a table of f16 results; see
    /// [`crate::kernels::scalar::gelu_tanh_f16`]).
    pub fn gelu_mul_f32(&self, g: &mut [f32], u: &[f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.gelu_mul_f32)(g, u) }
    }

    /// Narrows f32 to IEEE halves over the common length (to nearest, ties to even).
    pub fn f32_to_f16(&self, src: &[f32], dst: &mut [half::f16]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.f32_to_f16)(src, dst) }
    }

    /// `out = x / sqrt(mean(x²) + eps) · w` over the common length, the sum of squares as
    /// ggml's (see [`crate::kernels::scalar::rms_scale`]).
    pub fn rms_norm(&self, out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.rms_norm)(out, Some(x), w, eps) }
    }

    /// In-place [`Kernels::rms_norm`].
    pub fn rms_norm_in_place(&self, x: &mut [f32], w: &[f32], eps: f32) {
        // SAFETY: table invariant (the kernel runs on this CPU); it bounds-checks its slices.
        unsafe { (self.rms_norm)(x, None, w, eps) }
    }

    /// Whether batches of at least [`crate::GEMM_MIN_VECS`] vectors should take
    /// [`Kernels::matmul_f32`] (SIMD tables) rather than [`Kernels::matmul`]:
    /// the scalar micro-kernel is a reference, not a fast path.
    pub fn prefers_f32_gemm(&self) -> bool {
        self.isa != "scalar"
    }

    /// The f32 GEMM micro-kernel of this ISA (see [`crate::gemm`]).
    pub(crate) fn panel_fn(&self) -> PanelFn {
        self.panel_f32
    }

    /// The int8 GEMM micro-kernel of this table (see [`crate::igemm`]).
    pub(crate) fn i8_tile_fn(&self) -> I8TileFn {
        self.i8_tile
    }

    /// The K-quant int8 GEMM micro-kernel of this table (see [`crate::igemm_k`]).
    pub(crate) fn k_tile_fn(&self) -> KTileFn {
        self.k_tile.0
    }

    /// Whether [`Kernels::k_tile_fn`] is a SIMD micro-kernel (not the scalar reference).
    pub(crate) fn k_tile_is_fast(&self) -> bool {
        self.k_tile.1
    }

    /// The largest code offset the int8 GEMM micro-kernel sums fast (0: none).
    pub(crate) fn i8_fast_offset(&self) -> u8 {
        self.i8_fast_offset
    }

    /// Interleaves [`crate::kernels::PANEL_ROWS`] rows (stride `ld`) into a GEMM panel:
    /// `panel[k * PANEL_ROWS + j] = rows[j * ld + k]` for `k < kc`.
    pub fn interleave_panel(&self, rows: &[f32], ld: usize, kc: usize, panel: &mut [f32]) {
        // SAFETY: table invariant (the kernel runs on this CPU); it checks its slices.
        unsafe { (self.interleave_panel)(rows, ld, kc, panel) }
    }

    /// Quantizes `x` to activation type `ty` (Q8_0, Q8_1, Q8_K or F32) into `out`.
    pub fn quantize_acts(&self, ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
        let f = self.quant_fn(ty).ok_or(QuantError::Unsupported {
            ty,
            op: "quantize activations",
        })?;
        check_len("activation bytes", bytes_for(ty, x.len())?, out.len())?;
        // SAFETY: table invariant (the kernel runs on this CPU); lengths checked above.
        unsafe { f(x, out) };
        Ok(())
    }
}

/// The instruction set the crate-level kernels use (see [`Kernels::isa`]).
pub fn active_isa() -> &'static str {
    Kernels::global().isa()
}

/// The activation type weights of type `w` dot against: Q8_0 for
/// Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F32 for
/// F32/F16/BF16. Types without a dot kernel (I8.., Q8_1, Q8_K) also map to
/// F32; [`crate::matvec()`] reports them as unsupported.
pub fn vec_dot_type(w: GgmlType) -> GgmlType {
    match w {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => GgmlType::Q8_0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => {
            GgmlType::Q8_K
        }
        _ => GgmlType::F32,
    }
}
