//! Matmul kernels: the scalar oracle ([`scalar`]; the per-format bodies live in
//! [`crate::quant`], re-exported here as [`quant`] for older paths) and the SIMD
//! paths (AVX2 + FMA + F16C on x86_64, NEON with or without SDOT on aarch64), gathered in a
//! [`Kernels`] table of function pointers and picked at run time.
//!
//! The table is complete in scalar; an ISA's table overrides every entry with its own body.
//! [`active`] picks the best table the CPU supports on first use (with `std`:
//! `is_x86_feature_detected!` / `is_aarch64_feature_detected!` and the `RML_KERNELS`
//! environment variable; without: the compile-time `target_feature`s, and CPUID on x86_64)
//! and caches the choice
//! in an atomic; [`force`] pins one (tests, benchmarks). Under Miri everything is scalar.
//!
//! Entries are `unsafe fn`s over pointers and lengths; the safe entry points that check
//! shapes are [`crate::ops::gemv`] / [`crate::ops::gemm`], [`quant::quantize_row_q8_0`] and
//! [`quant::Q8Acts::quantize`]. Every entry of every table is tested against the scalar oracle
//! (`tests/kernels_conformance.rs`); the int8 entries are bit-identical to it on every ISA, the
//! f32 ones agree within a rounding-error bound.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};
use crate::tensor::DType;

mod tier;

// The one declaration of every kernel tier: name, parent, build gate, detection rule, target
// features and table. `Isa`, `Isa::ALL`, the names, availability, the table lookup and the
// `tier_fn!` macro that compiles a kernel entry for a tier all come from it (see `tier.rs`),
// so a kernel's `#[target_feature]`s are exactly what the tier's detection checks.
tier::declare_tiers! { $
    /// Plain Rust, every target: the oracle.
    Scalar = "scalar", parent Scalar, build(all()), detect always, features [], table SCALAR;
    /// x86_64 AVX2 + FMA + F16C.
    Avx2 = "avx2",
        parent Scalar,
        build(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        detect x86,
        features ["avx2", "fma", "f16c"],
        table x86_64::AVX2;
    /// x86_64 AVX2 + FMA + F16C with AVX-VNNI (the 256-bit `vpdpbusd` of CPUs that have it
    /// without AVX-512, and of newer ones): the int8 kernels use it; the rest is AVX2's.
    AvxVnni = "avx-vnni",
        parent Avx2,
        build(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        detect x86,
        features ["avx2", "fma", "f16c", "avxvnni"],
        table x86_64::AVX_VNNI;
    /// x86_64 AVX-512 F/BW/VL with AVX512-VNNI (`vpdpbusd`) on top of AVX2 + FMA + F16C.
    Avx512 = "avx512",
        parent Avx2,
        build(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        detect x86,
        features ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni"],
        table x86_64::AVX512;
    /// [`Isa::Avx512`] with GFNI (Ice Lake, Zen 4 and later): the int8 kernels of the 4- and
    /// 5-bit types split their nibbles with one `vgf2p8affineqb`; the rest is AVX-512's.
    Avx512Gfni = "avx512-gfni",
        parent Avx512,
        build(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        detect x86,
        features ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "gfni"],
        table x86_64::AVX512_GFNI;
    /// aarch64 Advanced SIMD (NEON) without the dot-product extension.
    Neon = "neon",
        parent Scalar,
        build(all(target_arch = "aarch64", target_feature = "neon")),
        detect aarch64,
        features ["neon"],
        table aarch64::NEON;
    /// aarch64 NEON with `SDOT` (the `dotprod` extension) for the int8 kernels.
    NeonDotprod = "neon-dotprod",
        parent Neon,
        build(all(target_arch = "aarch64", target_feature = "neon")),
        detect aarch64,
        features ["neon", "dotprod"],
        table aarch64::NEON_DOTPROD;
    /// 32-bit Arm with the DSP extension (`SMLAD`; Cortex-M4/M7/M33/M55), feature `arm-dsp`.
    /// Opt-in: stable Rust cannot see the DSP extension at compile time (its Arm target
    /// features are unstable), so it has no feature string; firmware enables the Cargo
    /// feature.
    ArmDsp = "arm-dsp",
        parent Scalar,
        build(all(target_arch = "arm", feature = "arm-dsp")),
        detect opt_in,
        features [],
        table arm::ARM_DSP;
}

pub mod rows8;
pub mod scalar;

/// The block formats, now [`crate::quant`] (kept here so older paths resolve).
pub use crate::quant;

// The drivers the SIMD tiers share (only where a SIMD tier is compiled).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))),
    all(target_arch = "aarch64", target_feature = "neon")
))]
mod frame;

// Not in `cargo fuzz` builds (`cfg(fuzzing)`) nor in the loom model's (`cfg(loom)`): neither
// runs a kernel, and these modules were most of their build time (under coverage and
// AddressSanitizer instrumentation, over 12 of the fuzz build's ~18 minutes on 2 cores).
// Those builds use the scalar table.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
mod x86_64;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))))]
pub(crate) use x86_64::attention;

pub(crate) mod flash;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod aarch64;

// Each quantized type's SIMD bodies, for both architectures (only where a SIMD tier is
// compiled, as `frame`).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))),
    all(target_arch = "aarch64", target_feature = "neon")
))]
mod types;

#[cfg(all(target_arch = "arm", feature = "arm-dsp"))]
mod arm;

use crate::quant::Q8Acts;

/// A matmul over a block of weight rows with f32 activations:
/// `y[t * ldy + r] = Σ_i W[r][i] * x[t * k + i]` for `r < rows`, `t < n`.
///
/// Arguments: `(w, row_bytes, rows, k, x, n, y, ldy)`; `w` points to `rows` rows of
/// `row_bytes` bytes in the table entry's dtype (f32 rows 4-byte aligned).
///
/// # Safety
///
/// The table's ISA must be available (guaranteed for tables from [`table`] / [`active`]);
/// `w` holds `rows * row_bytes` readable bytes with `row_bytes` the dtype's size of `k`
/// elements, `x` holds `n * k` floats, every `y[t * ldy + r]` is writable and none of them
/// overlap.
pub type MatmulF32Fn = unsafe fn(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
);

/// A matmul over a block of quantized weight rows with int8 activations ([`Q8Acts`]):
/// `y[t * ldy + r] = dot(W[r], activation row t)` in the order of [`scalar::accumulate8`].
///
/// Arguments: `(w, row_bytes, rows, xq, n, y, ldy)`.
///
/// # Safety
///
/// As [`MatmulF32Fn`], except that only the first `xq.nb()` blocks of the entry's dtype of
/// each row are read (`row_bytes` may be larger: the outlier correction runs the kernels over
/// one column block of wider rows, see `ops::outliers`); `n <= xq.n()`.
pub type MatmulQ8Fn = unsafe fn(
    w: *const u8,
    row_bytes: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
);

/// Quantizes blocks of 32 floats to Q8 values with f32 scales, by
/// [`scalar::quantize_block_q8`]'s rule: `(x, nb, qs, qs_stride, d)` writes block `b`'s
/// values at `qs + b * qs_stride` and its scale at `d + b`. Returns `false` if a block holds
/// NaN or ±infinity (the output is then partly written).
///
/// # Safety
///
/// The table's ISA must be available; `x` holds `nb * 32` floats; the outputs are writable
/// and do not overlap the input.
pub type QuantizeQ8Fn =
    unsafe fn(x: *const f32, nb: usize, qs: *mut i8, qs_stride: usize, d: *mut f32) -> bool;

impl Isa {
    /// Parses a name of [`Isa::name`].
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for an unknown name (the message lists the known).
    pub fn from_name(name: &str) -> Result<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name() == name).ok_or_else(|| {
            /// The known names, comma-separated.
            struct Names;
            impl core::fmt::Display for Names {
                fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                    for (i, isa) in Isa::ALL.iter().enumerate() {
                        let sep = match i {
                            0 => "",
                            _ if i + 1 == Isa::ALL.len() => " or ",
                            _ => ", ",
                        };
                        write!(f, "{sep}{}", isa.name())?;
                    }
                    Ok(())
                }
            }
            Error::invalid_argument(format_args!("unknown kernel ISA {name:?}; expected {}", Names))
        })
    }

    /// Whether this is an x86_64 tier with AVX2 (AVX2 or a tier built on it: AVX-VNNI,
    /// AVX-512, AVX-512 + GFNI).
    pub const fn has_avx2(self) -> bool {
        let mut isa = self;
        loop {
            if matches!(isa, Isa::Avx2) {
                return true;
            }
            if matches!(isa, Isa::Scalar) {
                return false;
            }
            isa = isa.parent();
        }
    }
}

impl core::fmt::Display for Isa {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// One ISA's kernels: a function pointer for every operation, per weight dtype (arrays
/// indexed by [`DType`], as [`crate::quant::TYPES`]). Obtain one from [`table`] or [`active`]
/// (which check that the CPU runs it); the fields are private so that a table for an
/// unavailable ISA cannot be made.
///
/// An ISA's table starts from `SCALAR` (or its parent ISA's table) and overrides the
/// entries it has bodies for with `with_f32` / `with_q8`; a dtype
/// without a SIMD body keeps the scalar entry (correct, slower).
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    isa: Isa,
    f32: [Option<MatmulF32Fn>; DType::COUNT],
    q8: [Option<MatmulQ8Fn>; DType::COUNT],
    /// Whether `q8[i]` is a SIMD body (set by [`Kernels::with_q8`]), not the scalar oracle.
    simd_q8: [bool; DType::COUNT],
    /// The column-block kernels of the pair layouts ([`DType::Q5_0x2`]): entry `h` reads half
    /// `h` of the pair at each row, for one activation block of 32 per row (the outlier
    /// correction's reads, see [`Kernels::matmul_q8_halves`]).
    q8_halves: [Option<[MatmulQ8Fn; 2]>; DType::COUNT],
    /// The int8 kernels of the row-interleaved layout ([`rows8`]), where this table has them.
    q8_rows8: [Option<MatmulQ8Fn>; DType::COUNT],
    /// The dtypes whose f32-activation product is faster widened to Q8_0
    /// ([`Kernels::f32_via_q8_0`]).
    f32_via_q8_0: [bool; DType::COUNT],
    pub(crate) quantize_q8: QuantizeQ8Fn,
    /// The same rule over blocks of 256 ([`crate::quant::ActFormat::Q8K`]: one scale per
    /// 256 values; `x` holds `nb * 256` floats, each block's 256 values at `qs + b *
    /// qs_stride`).
    pub(crate) quantize_q8k: QuantizeQ8Fn,
    /// The grouped, tiled attention body ([`flash::run`] on this ISA's lanes).
    pub(crate) attention: AttentionFn,
    /// [`crate::ops::swiglu`]'s loop on this ISA's vectors.
    pub(crate) swiglu: GluFn,
    /// [`crate::ops::geglu_tanh`]'s loop on this ISA's vectors.
    pub(crate) geglu_tanh: GluFn,
    /// [`crate::ops::bias_gelu_erf`]'s loop on this ISA's vectors (`gate` the values,
    /// `up` the bias or empty).
    pub(crate) bias_gelu_erf: GluFn,
    /// The encoders' bidirectional attention of one (sequence, head) item, where this ISA has
    /// a body of its own ([`BidirFn`]); `None`: the per-query loops of
    /// [`crate::ops::attention_head`].
    pub(crate) bidir: Option<BidirFn>,
}

/// One (sequence, head) item of an encoder's bidirectional attention: query, key and value
/// row `j` of the head at `q`, `k`, `v` plus `j * stride` (`d` floats each), its output at
/// `out` plus `j * stride`, for `j < len`; `out = softmax(scale · q kᵀ) v` row by row.
#[derive(Clone, Copy, Debug)]
// Only the x86_64 tiers have a body (that reads the fields) so far.
#[cfg_attr(
    not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
    allow(dead_code)
)]
pub(crate) struct BidirHead {
    /// The head's first query row.
    pub q: *const f32,
    /// The head's first key row.
    pub k: *const f32,
    /// The head's first value row.
    pub v: *const f32,
    /// The head's first output row.
    pub out: *mut f32,
    /// Floats from one row to the next (in `q`, `k`, `v` and `out`).
    pub stride: usize,
    /// Rows (tokens of the sequence): `1..=BIDIR_MAX_LEN`.
    pub len: usize,
    /// Head width: a multiple of 16, at most [`BIDIR_MAX_D`].
    pub d: usize,
    /// Score scale (`1 / sqrt(d)`).
    pub scale: f32,
    /// Scratch of `d * len` floats (the keys transposed).
    pub kt: *mut f32,
}

/// The longest sequence a [`BidirFn`] takes (its score rows live on the stack).
pub(crate) const BIDIR_MAX_LEN: usize = 512;
/// The widest head a [`BidirFn`] takes.
pub(crate) const BIDIR_MAX_D: usize = 64;

/// An encoder attention body (see [`BidirHead`]). Each output row's arithmetic depends only
/// on the item's operands, never on how the caller splits items across threads.
///
/// # Safety
///
/// The table's ISA must be available; the item's rows readable (`q`, `k`, `v`) and writable
/// (`out`, not overlapping the inputs) as [`BidirHead`] describes, `kt` writable for
/// `d * len` floats and overlapping nothing else, `len` and `d` within their bounds.
pub(crate) type BidirFn = unsafe fn(b: &BidirHead);

/// A gated activation in place over `gate` (`up` at least as long), bit-identical to the
/// portable loop (see [`crate::ops::swiglu_on`]).
///
/// # Safety
///
/// The table's ISA must be available.
pub(crate) type GluFn = unsafe fn(gate: &mut [f32], up: &[f32]);

/// The portable [`GluFn`]s.
fn swiglu_portable(gate: &mut [f32], up: &[f32]) {
    crate::math::swiglu_body(gate, up)
}

/// See [`swiglu_portable`].
fn geglu_tanh_portable(gate: &mut [f32], up: &[f32]) {
    crate::math::geglu_tanh_body(gate, up)
}

/// See [`swiglu_portable`].
fn bias_gelu_erf_portable(y: &mut [f32], bias: &[f32]) {
    crate::math::bias_gelu_erf_body(y, bias)
}

/// The grouped, tiled attention body of a table (see `flash.rs`).
///
/// # Safety
///
/// The table's ISA must be available; the block's pointers as `flash::run` documents.
pub(crate) type AttentionFn = unsafe fn(b: &flash::Block);

/// The scalar table: every entry, the oracle's arithmetic (from [`crate::quant::TYPES`]).
pub(crate) const SCALAR: Kernels = {
    let mut k = Kernels {
        isa: Isa::Scalar,
        f32: scalar::F32_ENTRIES,
        q8: scalar::Q8_ENTRIES,
        simd_q8: [false; DType::COUNT],
        q8_halves: [None; DType::COUNT],
        q8_rows8: [None; DType::COUNT],
        f32_via_q8_0: [false; DType::COUNT],
        quantize_q8: scalar::quantize_q8,
        quantize_q8k: scalar::quantize_q8k,
        attention: flash::run_portable,
        swiglu: swiglu_portable,
        geglu_tanh: geglu_tanh_portable,
        bias_gelu_erf: bias_gelu_erf_portable,
        bidir: None,
    };
    k.q8_halves[DType::Q5_0x2 as usize] =
        Some([scalar::q5_0x2_col_q8::<0>, scalar::q5_0x2_col_q8::<1>]);
    k
};

// Only the SIMD tables use the builders.
#[cfg_attr(
    not(any(
        all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom))),
        all(target_arch = "aarch64", target_feature = "neon")
    )),
    allow(dead_code)
)]
impl Kernels {
    /// This table relabelled as `isa`'s (the start of an ISA table: `SCALAR.for_isa(..)`).
    pub(crate) const fn for_isa(mut self, isa: Isa) -> Self {
        self.isa = isa;
        self
    }

    /// This table with `f` as the attention body.
    // Only the x86_64 tiers have their own bodies so far.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_attention(mut self, f: AttentionFn) -> Self {
        self.attention = f;
        self
    }

    /// This table with `f` as the f32-activation matmul of `dtype`.
    pub(crate) const fn with_f32(mut self, dtype: DType, f: MatmulF32Fn) -> Self {
        self.f32[dtype as usize] = Some(f);
        self
    }

    /// This table with `f` as the int8-activation matmul of `dtype`.
    pub(crate) const fn with_q8(mut self, dtype: DType, f: MatmulQ8Fn) -> Self {
        self.q8[dtype as usize] = Some(f);
        self.simd_q8[dtype as usize] = true;
        self
    }

    /// This table with `halves` as the column-block kernels of the pair layout `dtype`.
    // Only the AVX-512 tiers have pair bodies so far.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_q8_halves(mut self, dtype: DType, halves: [MatmulQ8Fn; 2]) -> Self {
        self.q8_halves[dtype as usize] = Some(halves);
        self
    }

    /// This table with `f` as the int8 kernel of `dtype`'s row-interleaved layout ([`rows8`]).
    // Only the AVX2 tiers have interleaved bodies so far.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_q8_rows8(mut self, dtype: DType, f: MatmulQ8Fn) -> Self {
        self.q8_rows8[dtype as usize] = Some(f);
        self
    }

    /// This table with `dtype`'s f32-activation product run on matrices widened to Q8_0
    /// ([`Kernels::f32_via_q8_0`]).
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_f32_via_q8_0(mut self, dtype: DType) -> Self {
        self.f32_via_q8_0[dtype as usize] = true;
        self
    }

    /// This table without widening to Q8_0 for f32 activations (a tier whose own bodies of
    /// those types are faster).
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn without_f32_via_q8_0(mut self) -> Self {
        self.f32_via_q8_0 = [false; DType::COUNT];
        self
    }

    /// This table without row-interleaved kernels (a tier whose plain kernels are faster).
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn without_q8_rows8(mut self) -> Self {
        self.q8_rows8 = [None; DType::COUNT];
        self
    }

    /// This table with `swiglu` and `geglu_tanh` as the gated activations.
    // Only the x86_64 tiers have their own bodies so far.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_glu(mut self, swiglu: GluFn, geglu_tanh: GluFn) -> Self {
        self.swiglu = swiglu;
        self.geglu_tanh = geglu_tanh;
        self
    }

    /// This table with `f` as the encoder's bias + GELU (erf) loop.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_bias_gelu_erf(mut self, f: GluFn) -> Self {
        self.bias_gelu_erf = f;
        self
    }

    /// This table with `f` as the encoders' bidirectional attention body.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_bidir(mut self, f: BidirFn) -> Self {
        self.bidir = Some(f);
        self
    }

    /// This table with `f` as the Q8 activation quantizer.
    pub(crate) const fn with_quantize_q8(mut self, f: QuantizeQ8Fn) -> Self {
        self.quantize_q8 = f;
        self
    }

    /// This table with `f` as the Q8_K (256-value block) activation quantizer.
    // Only the x86_64 tiers have their own bodies so far.
    #[cfg_attr(
        not(all(target_arch = "x86_64", target_feature = "sse2", not(any(fuzzing, loom)))),
        allow(dead_code)
    )]
    pub(crate) const fn with_quantize_q8k(mut self, f: QuantizeQ8Fn) -> Self {
        self.quantize_q8k = f;
        self
    }
}

impl Kernels {
    /// The ISA whose kernels these are.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The f32-activation matmul for weights of `dtype` (every float and quantized weight
    /// type of [`crate::quant::TYPES`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] for other dtypes.
    pub fn matmul_f32(&self, dtype: DType) -> Result<MatmulF32Fn> {
        self.f32[dtype as usize].ok_or_else(|| {
            Error::unimplemented(format_args!("{dtype} is not a supported weight dtype"))
        })
    }

    /// The int8-activation matmul for quantized weights of `dtype` (the types with an
    /// [`crate::quant::ActFormat`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] for other dtypes.
    pub fn matmul_q8(&self, dtype: DType) -> Result<MatmulQ8Fn> {
        self.q8[dtype as usize].ok_or_else(|| {
            Error::unimplemented(format_args!(
                "int8 activations need quantized weights, not {dtype}"
            ))
        })
    }

    /// Whether the int8-activation matmul of `dtype` is a SIMD body of this table (not the
    /// scalar oracle). The loader repacks Q5_0 matrices into [`DType::Q5_0x2`] only where it
    /// is ([`crate::model::DecoderOptions::repack_weights`]).
    pub fn has_simd_q8(&self, dtype: DType) -> bool {
        self.simd_q8[dtype as usize]
    }

    /// The column-block kernels of a pair layout ([`DType::Q5_0x2`]): `[even, odd]`, each a
    /// [`MatmulQ8Fn`] for one activation block of 32 per row whose weight rows are the pairs
    /// at `w + r * row_bytes`, entry `h` reading half `h` of each (column block `2 j + h` of
    /// the row, in pair `j`). `None` for the other dtypes, whose column block `b` is at `b *`
    /// bytes per 32 elements and is read by [`Kernels::matmul_q8`] itself.
    pub fn matmul_q8_halves(&self, dtype: DType) -> Option<[MatmulQ8Fn; 2]> {
        self.q8_halves[dtype as usize]
    }

    /// The int8 kernel of `dtype`'s row-interleaved layout ([`rows8`]), where this table has
    /// one (then the loader may repack `dtype` matrices into it, see
    /// [`crate::model::DecoderOptions::repack_weights`]). It is a [`MatmulQ8Fn`] whose
    /// `rows` is a multiple of [`rows8::ROWS`] and whose weights are `rows / 8` interleaved
    /// groups, group `j` at `w + 8 j · row_bytes` (with one activation block per row and `w`
    /// advanced by `8 b` blocks, it reads column block `b`); each output has the bits of
    /// [`Kernels::matmul_q8`] on the plain rows.
    pub fn matmul_q8_rows8(&self, dtype: DType) -> Option<MatmulQ8Fn> {
        self.q8_rows8[dtype as usize]
    }

    /// Whether this table's f32-activation product runs `dtype` matrices faster once widened
    /// to Q8_0 by [`quant::q8_0::widen_to_q8_0`] (exact: the same values; with the factored
    /// order of both bodies, the same bits). A decoder built with repacking and f32
    /// activations widens them at load ([`crate::model::DecoderOptions::repack_weights`]).
    /// Today the AVX2 and AVX-VNNI tables, for Q5_0 and IQ4_NL, whose f32 bodies spend most
    /// of their time decoding: a 576 × 1536 GEMV from L2 took 0.064 ns per weight (Q5_0) and
    /// 0.055 (IQ4_NL) against Q8_0's 0.034 on an AMD EPYC Zen 5 (`KT_ACTS=f32 kernels_timing`),
    /// for 34 bytes per 32 weights instead of 22 and 18.
    pub fn f32_via_q8_0(&self, dtype: DType) -> bool {
        self.f32_via_q8_0[dtype as usize]
    }

    /// Whether [`Kernels::f32_via_q8_0`] holds for any dtype.
    pub(crate) fn widens_any_for_f32(&self) -> bool {
        self.f32_via_q8_0.contains(&true)
    }

    /// Quantizes a row to Q8_0 blocks with this table's kernel; see
    /// [`quant::quantize_row_q8_0`] for the rule and errors.
    ///
    /// # Errors
    ///
    /// As [`quant::quantize_row_q8_0`].
    pub fn quantize_row_q8_0(&self, x: &[f32], out: &mut [u8]) -> Result<()> {
        const BB: usize = quant::q8_0::BYTES;
        let nb = quant::row_blocks(DType::Q8_0, x.len())?;
        quant::check_bytes(DType::Q8_0, nb, out.len(), "output")?;
        const CHUNK: usize = 64;
        let mut d = [0f32; CHUNK];
        for (c, (xs, os)) in x.chunks(CHUNK * quant::QK).zip(out.chunks_mut(CHUNK * BB)).enumerate()
        {
            let m = xs.len() / quant::QK;
            // SAFETY: `xs` holds `m` blocks, `os` `m` blocks of `BB` bytes whose values start
            // at byte 2 (stride `BB`), `d` has room for `m <= 64` scales; the table is
            // available.
            let ok = unsafe {
                (self.quantize_q8)(
                    xs.as_ptr(),
                    m,
                    os.as_mut_ptr().add(2).cast(),
                    BB,
                    d.as_mut_ptr(),
                )
            };
            if !ok {
                return Err(quant::non_finite(DType::Q8_0, x));
            }
            quant::q8_0::store_q8_0_scales(&d[..m], os, c * CHUNK)?;
        }
        Ok(())
    }
}

impl crate::quant::BlockQuantizer for Kernels {
    unsafe fn quantize_blocks(
        &self,
        fmt: quant::ActFormat,
        x: *const f32,
        nb: usize,
        qs: *mut i8,
        qs_stride: usize,
        d: *mut f32,
    ) -> bool {
        let f = match fmt {
            quant::ActFormat::Q8 => self.quantize_q8,
            quant::ActFormat::Q8K => self.quantize_q8k,
        };
        // SAFETY: forwarded caller contract (blocks of `fmt`'s size); a `Kernels` value exists
        // only for an ISA this CPU runs (see `table`).
        unsafe { f(x, nb, qs, qs_stride, d) }
    }
}

/// The kernels of `isa`.
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] if this build or CPU cannot run `isa`.
pub fn table(isa: Isa) -> Result<&'static Kernels> {
    if !isa.is_available() {
        return Err(Error::unimplemented(format_args!(
            "kernel ISA {isa} is not available on this CPU/build (best: {})",
            best()
        )));
    }
    Ok(table_of(isa))
}

/// The best ISA this build and CPU support (ignoring `RML_KERNELS` and [`force`]).
pub fn best() -> Isa {
    Isa::ALL.into_iter().rev().find(|isa| isa.is_available()).unwrap_or(Isa::Scalar)
}

/// 0 = not chosen yet, otherwise `1 +` the index of the ISA in [`Isa::ALL`].
static ACTIVE: AtomicU8 = AtomicU8::new(0);

fn encode(isa: Isa) -> u8 {
    Isa::ALL.iter().position(|&i| i == isa).unwrap_or(0) as u8 + 1
}

/// The ISA asked for by `RML_KERNELS` (std), or [`best`].
fn initial() -> Result<Isa> {
    #[cfg(feature = "std")]
    if let Some(v) = std::env::var_os("RML_KERNELS") {
        let name = v.to_string_lossy();
        let name = name.trim();
        if !name.is_empty() && name != "auto" {
            let isa = Isa::from_name(name).map_err(|e| e.context("RML_KERNELS"))?;
            table(isa).map_err(|e| e.context("RML_KERNELS"))?;
            return Ok(isa);
        }
    }
    Ok(best())
}

/// The kernels in use: chosen on the first call (`RML_KERNELS` with `std`, else [`best`]),
/// then cached; [`force`] changes the choice.
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if `RML_KERNELS` names no ISA, or
/// [`crate::Code::Unimplemented`] if it names one this CPU lacks (nothing is cached then, so
/// every call reports it).
pub fn active() -> Result<&'static Kernels> {
    let v = ACTIVE.load(Ordering::Relaxed);
    if v != 0 {
        return Ok(table_of(Isa::ALL[v as usize - 1]));
    }
    let code = encode(initial()?);
    let v = match ACTIVE.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => code,
        Err(other) => other,
    };
    Ok(table_of(Isa::ALL[v as usize - 1]))
}

/// Pins the kernels of `isa` for the whole process (tests, benchmarks, `RML_KERNELS`-style
/// overrides from a command line).
///
/// # Errors
///
/// [`crate::Code::Unimplemented`] if this CPU or build cannot run `isa`; the choice is then
/// unchanged.
pub fn force(isa: Isa) -> Result<()> {
    table(isa)?;
    ACTIVE.store(encode(isa), Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()).unwrap(), isa);
        }
        assert_eq!(Isa::from_name("sse9").unwrap_err().code(), crate::Code::InvalidArgument);
    }

    #[test]
    fn scalar_is_always_there_and_best_is_available() {
        assert!(Isa::Scalar.is_available());
        assert!(best().is_available());
        assert_eq!(table(Isa::Scalar).unwrap().isa(), Isa::Scalar);
    }

    #[test]
    fn unavailable_isa_is_an_error() {
        for isa in Isa::ALL.into_iter().filter(|i| !i.is_available()) {
            assert_eq!(table(isa).unwrap_err().code(), crate::Code::Unimplemented);
            assert_eq!(force(isa).unwrap_err().code(), crate::Code::Unimplemented);
        }
    }
}
