//! x86_64 kernels: the tiers' shared machinery, per tier file, and the tables. AVX2 + FMA +
//! F16C (`avx2_f32.rs`: the f32-activation lanes and the float weights' decoders;
//! `avx2_q8.rs`: the 32-element types' int8 tier ([`avx2_q8::QBlock`]) and the Q8 / Q8_K
//! quantizers; `avx2_k.rs`: the K-quants' int8 tier on 256-bit registers ([`avx2_k::K256`])
//! and the K-quant row loop of every tier), and the tiers built on AVX2's table: AVX-VNNI
//! (`avx2_q8.rs` / `avx2_k.rs` with [`VexOps`]) and AVX-512 (`avx512_q8.rs`: the 32-element
//! types on 512-bit `vpdpbusd` ([`avx512_q8::VBlock`]); `avx512_k.rs`: the K-quants on 512-bit
//! `vpdpwssd` ([`avx512_k::K512`]); `avx512_f32.rs`: f32 activations for every quantized type,
//! 16 lanes, block scales factored out of the inner sums ([`avx512_f32::W512`]));
//! `avx2_rows.rs`: the row-interleaved layout's int8 kernels ([`avx2_rows::RowsType`], AVX2
//! and AVX-VNNI tables only); `attention.rs`: the AVX2 loops of [`crate::ops::attention_head`] and the lanes of the
//! grouped, tiled attention (`flash.rs`) for the AVX2 and AVX-512 tables.
//!
//! Each quantized type's own bodies (its impls of those traits, its entries) are in
//! `kernels/types/<type>.rs`; the tables below take them through `kernels/types/mod.rs`'s
//! type list (`types::avx2`, ...) and add the entries every type shares.
//!
//! Compiled only where SSE2 is a target feature (not on the soft-float
//! `x86_64-unknown-none`); the entry points are `#[target_feature]` wrappers around
//! `#[inline(always)]` bodies and are reachable only through [`super::table`] after detection.

use super::types::x86 as types;
use super::{Isa, Kernels, SCALAR};
use crate::tensor::DType;

pub(crate) mod attention;
pub(crate) mod avx2_f32;
pub(crate) mod avx2_k;
pub(crate) mod avx2_q8;
pub(crate) mod avx2_rows;
pub(crate) mod avx512_f32;
pub(crate) mod avx512_k;
pub(crate) mod avx512_q8;

/// The AVX2 table: every entry with an AVX2 body overridden, the rest scalar.
pub(crate) const AVX2: Kernels = types::avx2(
    SCALAR
        .for_isa(Isa::Avx2)
        .with_attention(attention::flash_avx2)
        .with_glu(swiglu_avx2, geglu_tanh_avx2)
        .with_bias_gelu_erf(bias_gelu_erf_avx2)
        .with_f32(DType::F32, avx2_f32::matmul_f32)
        .with_f32(DType::F16, avx2_f32::matmul_f16)
        .with_f32(DType::BF16, avx2_f32::matmul_bf16)
        .with_quantize_q8(avx2_q8::quantize_q8)
        .with_quantize_q8k(avx2_q8::quantize_q8k),
);

/// The AVX-VNNI table: AVX2's, with the int8 kernels on the 256-bit `vpdpbusd` (32-element
/// types) and `vpdpwssd` (K-quants).
pub(crate) const AVX_VNNI: Kernels = types::avx_vnni(AVX2.for_isa(Isa::AvxVnni));

/// The AVX-512 table: AVX2's, with the int8 kernels on 512-bit `vpdpbusd` (32-element types)
/// and `vpdpwssd` (K-quants), four weight rows per activation load.
pub(crate) const AVX512: Kernels = types::avx512(
    AVX2.for_isa(Isa::Avx512)
        .without_q8_rows8()
        .without_f32_via_q8_0()
        .with_attention(attention::flash_avx512)
        .with_glu(swiglu_avx512, geglu_tanh_avx512)
        .with_bias_gelu_erf(bias_gelu_erf_avx512)
        .with_bidir(attention::bidir_avx512)
        .with_f32(DType::F32, avx512_f32::avx512_f32_f32),
);

/// The AVX-512 + GFNI table: AVX-512's, with the int8 kernels of the 4- and 5-bit types
/// (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q5_0x2) splitting their nibbles by
/// `vgf2p8affineqb` ([`Nibbles`]).
pub(crate) const AVX512_GFNI: Kernels = types::avx512_gfni(AVX512.for_isa(Isa::Avx512Gfni));

/// Defines a [`super::GluFn`] that compiles a portable loop of [`crate::ops`] under target
/// features (the autovectoriser widens it; Rust never fuses a multiply and an add, so each
/// lane computes the portable loop's bits).
macro_rules! glu {
    ($name:ident, $body:path, $tier:ident, $what:literal) => {
        tier_fn! { $tier;
            #[doc = $what]
            ///
            /// # Safety
            ///
            /// The CPU has the features this function is compiled with.
            unsafe fn $name(gate: &mut [f32], up: &[f32]) {
                $body(gate, up)
            }
        }
    };
}
glu!(swiglu_avx2, crate::math::swiglu_body, Avx2, "SwiGLU, 8 lanes.");
glu!(geglu_tanh_avx2, crate::math::geglu_tanh_body, Avx2, "GeGLU (tanh), 8 lanes.");
glu!(swiglu_avx512, crate::math::swiglu_body, Avx512, "SwiGLU, 16 lanes.");
glu!(geglu_tanh_avx512, crate::math::geglu_tanh_body, Avx512, "GeGLU (tanh), 16 lanes.");
glu!(bias_gelu_erf_avx2, crate::math::bias_gelu_erf_body, Avx2, "Bias + GELU (erf), f64 lanes.");
glu!(
    bias_gelu_erf_avx512,
    crate::math::bias_gelu_erf_body,
    Avx512,
    "Bias + GELU (erf), f64 lanes."
);

use core::arch::x86_64::*;

/// The fixed horizontal sum `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, the same
/// tree as [`super::scalar::hsum8`].
///
/// # Safety
///
/// AVX must be available (callers are `#[target_feature(enable = "avx2,...")]`).
#[inline(always)]
unsafe fn hsum_ps(v: __m256) -> f32 {
    // SAFETY: register-only AVX/SSE3 intrinsics; AVX is available (caller contract).
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// `v` as it is, hidden from the optimizer (an empty `asm!`, no instruction): the Q5 types'
/// fifth-bit adds (`vpaddb` of `16` to the nibbles under a mask) keep their one µop, where
/// LLVM, seeing bit 4 clear, would make an OR of every byte then a masked `vmovdqu8` (two).
///
/// # Safety
///
/// AVX-512 F available.
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn opaque512(mut v: __m512i) -> __m512i {
    // SAFETY: an empty template with `v` in and out of one register: nothing runs.
    unsafe {
        core::arch::asm!(
            "/* {v} */",
            v = inout(zmm_reg) v,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    v
}

/// How an AVX-512 table splits packed 4-bit weights into bytes: [`ShiftNibbles`] (AVX-512 BW:
/// a masked 16-bit shift and an AND, two µops) or [`GfniNibbles`] (GFNI: one
/// `vgf2p8affineqb`, an 8 × 8 bit matrix per 64-bit lane). In the int8 GEMV of the 4- and
/// 5-bit types (the 32-element ones and Q4_K/Q5_K) the AVX-512 ALU ports (0 and 5) are the
/// bottleneck, so the µop saved per 64 weights is time saved (measured:
/// `docs/perf/notes-kernels.md`). Both give the same bytes.
pub(super) trait Nibbles {
    /// Each byte of `z` replaced by its low nibble in the 64-bit lanes `i` whose bit `i` of
    /// `HI` is clear, by its high nibble where it is set (values `0..16`).
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW available, and GFNI for [`GfniNibbles`].
    unsafe fn split<const HI: u8>(z: __m512i) -> __m512i;
}

/// [`Nibbles`] by `vpsrlw` (under a mask of the high lanes) and `vpandq`.
pub(super) struct ShiftNibbles;

/// [`Nibbles`] by GFNI's `vgf2p8affineqb`.
pub(super) struct GfniNibbles;

/// The 16-bit lanes of the 64-bit lanes set in `hi`.
const fn word_lanes(hi: u8) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < 8 {
        if hi & (1 << i) != 0 {
            m |= 0xF << (4 * i);
        }
        i += 1;
    }
    m
}

impl Nibbles for ShiftNibbles {
    #[inline(always)]
    unsafe fn split<const HI: u8>(z: __m512i) -> __m512i {
        // SAFETY: register-only AVX-512 F/BW intrinsics (caller contract).
        unsafe {
            let z = _mm512_mask_srli_epi16::<4>(z, const { word_lanes(HI) }, z);
            _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
        }
    }
}

/// `vgf2p8affineqb`'s matrix (bit `i` of a result byte is the parity of byte `7 - i` of the
/// matrix AND the source byte) that keeps the low nibble, and the one that moves the high
/// nibble down: Intel SDM, GF2P8AFFINEQB.
const GF_LOW: i64 = 0x0102_0408_0000_0000;
const GF_HIGH: i64 = 0x1020_4080_0000_0000;

impl Nibbles for GfniNibbles {
    #[inline(always)]
    unsafe fn split<const HI: u8>(z: __m512i) -> __m512i {
        // SAFETY: register-only AVX-512 F and GFNI intrinsics (caller contract).
        unsafe {
            let m = |i: u8| if HI & (1 << i) != 0 { GF_HIGH } else { GF_LOW };
            let a = _mm512_setr_epi64(m(0), m(1), m(2), m(3), m(4), m(5), m(6), m(7));
            _mm512_gf2p8affine_epi64_epi8::<0>(z, a)
        }
    }
}

/// `acc + Σ` of the i16 pair products of `a` and `b` per i32 lane (`vpdpwssd`), kept one
/// instruction: LLVM's generic tuning splits an accumulating `vpdpwssd` into `vpmaddwd` +
/// `vpaddd` (two µops, the add on a port the decode needs too).
///
/// # Safety
///
/// AVX-512 F and AVX512-VNNI available.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd512(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: one register-only instruction of an available extension (caller contract).
    unsafe {
        core::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

pub(super) use super::frame::{GEMV_STREAM_MIN_ROWS, PREFETCH_AHEAD, PREFETCH_MIN_BYTES};

/// The x86 [`super::frame::Prefetch`]: `prefetcht0`.
pub(crate) struct X86Prefetch;

impl super::frame::Prefetch for X86Prefetch {
    #[inline(always)]
    unsafe fn line(p: *const u8) {
        // SAFETY: `prefetcht0` reads nothing architecturally and never faults; SSE is
        // available (this module's build gate).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
}

/// [`super::frame::prefetch_ahead`] by `prefetcht0`.
///
/// # Safety
///
/// SSE available.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn prefetch_ahead(
    w: *const u8,
    rb: usize,
    i: usize,
    r: usize,
    at: usize,
    ahead: usize,
    len: usize,
    span: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe { super::frame::prefetch_ahead::<X86Prefetch>(w, rb, i, r, at, ahead, len, span) }
}

/// [`super::frame::prefetch_next_tile`] by `prefetcht0`.
///
/// # Safety
///
/// SSE available.
#[inline(always)]
unsafe fn prefetch_next_tile(w: *const u8, span: usize, part: usize, parts: usize) {
    // SAFETY: forwarded caller contract.
    unsafe { super::frame::prefetch_next_tile::<X86Prefetch>(w, span, part, parts) }
}

/// `-1` × 8 then `0` × 8: loading 8 lanes at `8 - len` gives a mask of `len` lanes.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// A lane mask selecting the first `len <= 8` lanes.
///
/// # Safety
///
/// AVX must be available; `len <= 8`.
#[inline(always)]
unsafe fn mask(len: usize) -> __m256i {
    // SAFETY: `8 - len <= 8`, so 8 lanes from there stay inside `MASKS`.
    unsafe { _mm256_loadu_si256(MASKS.as_ptr().add(8 - len).cast()) }
}

/// The int8 multiply-accumulate instructions of a 256-bit x86 tier: AVX2's `maddubs` +
/// `madd`, or VNNI's `vpdpbusd` / `vpdpwssd` (VEX-encoded on AVX-VNNI, EVEX on AVX-512).
/// Every sum is exact in i32, so every tier gives the same integers.
pub(super) trait Dot256 {
    /// Whether [`Dot256::dot`] is `maddubs` then `madd` (AVX2), so that a kernel may take the
    /// `maddubs` pairs and reduce them itself.
    const MADDUBS: bool = false;

    /// `Σ` over groups of `u · s` (u8 × i8) as 8 i32 lanes, lane `i` summing bytes
    /// `4 i .. 4 i + 4`; the pair sums must not saturate i16 (`|u · s| <= 128 · 127`).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i;

    /// `acc + madd(p, scale)`: i16 pairs times i16 scales, summed into i32 lanes.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn madd_acc(acc: __m256i, p: __m256i, scale: __m256i) -> __m256i;
}

/// AVX2: `maddubs` then `madd`.
pub(super) struct Avx2Ops;
/// AVX-VNNI: VEX `vpdpbusd` / `vpdpwssd`.
pub(super) struct VexOps;

impl Dot256 for Avx2Ops {
    const MADDUBS: bool = true;

    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }

    #[inline(always)]
    unsafe fn madd_acc(acc: __m256i, p: __m256i, scale: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale)) }
    }
}

impl Dot256 for VexOps {
    #[inline(always)]
    unsafe fn dot(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: register-only AVX-VNNI intrinsic (caller contract: available).
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s) }
    }

    #[inline(always)]
    unsafe fn madd_acc(acc: __m256i, p: __m256i, scale: __m256i) -> __m256i {
        // SAFETY: as above.
        unsafe { _mm256_dpwssd_avx_epi32(acc, p, scale) }
    }
}

/// The eight lane totals of `v[0..8]`, in order, as one vector.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce8(v: [__m256i; 8]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        // Pairs: [a0+a2, b0+b2, a1+a3, b1+b3 | a4+a6, b4+b6, a5+a7, b5+b7].
        let pair =
            |a, b| _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        let (p01, p23, p45, p67) =
            (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
        // Quads: [v0, v1, v2, v3 (low-lane halves) | v0, v1, v2, v3 (high-lane halves)].
        let quad =
            |a, b| _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
        let (q0, q1) = (quad(p01, p23), quad(p45, p67));
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(q0, q1),
            _mm256_permute2x128_si256::<0x31>(q0, q1),
        )
    }
}

/// The f16 values at `p + j * stride` for `j < 8` as 8 f32 lanes.
///
/// # Safety
///
/// The 8 locations are readable; AVX2 + F16C available.
#[inline(always)]
unsafe fn gather_f16(p: *const u8, stride: usize) -> __m256 {
    // SAFETY: the 8 2-byte reads are in bounds (caller contract).
    unsafe {
        let h = |j: usize| p.add(j * stride).cast::<u16>().read_unaligned() as i16;
        _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)))
    }
}

/// The f16 pairs `(d, m)` at `p + j * stride` for `j < 8` (each `m` the two bytes right after
/// its `d`, as in Q4_1 / Q5_1 blocks) as two sets of 8 f32 lanes: one u32 load per block
/// instead of two separate [`gather_f16`] calls (16 word inserts), then one byte shuffle and
/// one lane permute split the halves. `f16 -> f32` is exact, so the values equal
/// [`gather_f16`]'s at `p` and `p + 2`.
///
/// # Safety
///
/// The 8 four-byte locations are readable; AVX2 + F16C available.
#[inline(always)]
unsafe fn gather_f16_pairs(p: *const u8, stride: usize) -> (__m256, __m256) {
    // SAFETY: the 8 4-byte reads are in bounds (caller contract); the rest is register-only.
    unsafe {
        let w = |j: usize| p.add(j * stride).cast::<i32>().read_unaligned();
        split_f16_pairs(_mm256_setr_epi32(w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7)))
    }
}

/// The f16 pairs `(d, m)` of eight u32 lanes (`d` the low half) as two sets of 8 f32 lanes.
///
/// # Safety
///
/// AVX2 + F16C available.
#[inline(always)]
unsafe fn split_f16_pairs(v: __m256i) -> (__m256, __m256) {
    // SAFETY: register-only intrinsics.
    unsafe {
        // Per 128-bit lane (blocks 4k..4k+4, little-endian `d | m << 16`): the four `d`s into
        // the low 8 bytes, the four `m`s into the high 8 bytes.
        let split = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, //
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
        );
        // 64-bit quarters [d0..4, m0..4, d4..8, m4..8] -> [d0..8 | m0..8].
        let dm = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(v, split));
        (
            _mm256_cvtph_ps(_mm256_castsi256_si128(dm)),
            _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(dm)),
        )
    }
}

/// The f16 at `p` as f32.
///
/// # Safety
///
/// 2 readable bytes; F16C available.
#[inline(always)]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: 2 bytes readable (caller contract).
    unsafe {
        let h = p.cast::<u16>().read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }
}

/// `acc + (dw · dx) · isum [+ mw · s]`, lane by lane, unfused (the oracle's order).
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn term(
    acc: __m256,
    isum: __m256i,
    dw: __m256,
    dx: __m256,
    ms: Option<(__m256, __m256)>,
) -> __m256 {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        let mut c = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum));
        if let Some((mw, s)) = ms {
            c = _mm256_add_ps(c, _mm256_mul_ps(mw, s));
        }
        _mm256_add_ps(acc, c)
    }
}

/// The 32 nibbles of a 32-element block's 16 bytes at `qs` as u8 lanes in element order (low
/// nibbles are elements 0..16, high nibbles 16..32).
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn nibbles32(qs: *const u8) -> __m256i {
    // SAFETY: 16 bytes readable (caller contract).
    unsafe {
        let v = _mm_loadu_si128(qs.cast());
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    }
}

/// The fifth bits of a Q5 block (the little-endian u32 at `qh`) as bytes: `0x10` where
/// element `i`'s bit is set, else 0, in element order.
///
/// # Safety
///
/// 4 readable bytes at `qh`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn fifth_bits(qh: *const u8) -> __m256i {
    // SAFETY: forwarded caller contract; the rest is register-only.
    unsafe { _mm256_and_si256(fifth_mask(qh), _mm256_set1_epi8(0x10)) }
}

/// The fifth bits of a Q5 block (the little-endian u32 at `qh`) as byte masks: `0xFF` where
/// element `i`'s bit is set, else 0, in element order.
///
/// # Safety
///
/// 4 readable bytes at `qh`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn fifth_mask(qh: *const u8) -> __m256i {
    // SAFETY: 4 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let h = qh.cast::<u32>().read_unaligned() as i32;
        let v = _mm256_set1_epi32(h);
        // Byte i takes byte i / 8 of `h`, then tests bit i % 8.
        let spread = _mm256_shuffle_epi8(
            v,
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            ),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
    }
}

/// The 32 IQ4_NL codebook values of a block's 16 index bytes at `qs`, as i8 lanes in element
/// order.
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn iq4_values32(qs: *const u8) -> __m256i {
    // SAFETY: 16 bytes at `qs` (caller contract); the codebook is 16 bytes.
    unsafe {
        let kv = _mm_loadu_si128(crate::quant::iq4_nl::KVALUES.as_ptr().cast());
        _mm256_shuffle_epi8(_mm256_set_m128i(kv, kv), nibbles32(qs))
    }
}
