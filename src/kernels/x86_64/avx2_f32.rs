//! AVX2 + FMA + F16C bodies of the f32-activation product (the kernel frame's
//! `kernels/frame/f32.rs` runs the tiles): how f32, f16, bf16 weights widen and every
//! quantized type dequantizes to 8 f32 lanes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL by block;
//! the K-quants by runs of 32 inside their super-blocks), and the lanes themselves
//! ([`Avx2F32`]: one 8-lane accumulator per output, `_mm256_fmadd_ps` per chunk, the lanes
//! summed by [`hsum4`], four outputs at a time, each lane from its own accumulator).

use core::arch::x86_64::*;

use super::mask;
use crate::kernels::frame::f32::{
    f32_entries, Bf16Weights, F16Weights, F32Decode, F32Lanes, F32Weights, Scales,
};
use crate::quant::iq4_nl::BlockIq4Nl;
use crate::quant::q2_k::BlockQ2K;
use crate::quant::q3_k::BlockQ3K;
use crate::quant::q4_k::BlockQ4K;
use crate::quant::q5_k::BlockQ5K;
use crate::quant::q6_k::BlockQ6K;
use crate::quant::BlockLayout;
use crate::quant::BlockQ4_0;
use crate::quant::BlockQ4_1;
use crate::quant::BlockQ5_0;
use crate::quant::BlockQ5_1;
use crate::quant::BlockQ8_0;

/// Copies `len < 8` 16-bit values into a zero-filled 8-lane buffer.
///
/// # Safety
///
/// `p` points to `len` readable u16 (any alignment).
#[inline(always)]
unsafe fn load_u16_tail(p: *const u8, len: usize) -> __m128i {
    let mut buf = [0u16; 8];
    // SAFETY: `len * 2` readable bytes at `p` (caller contract), `buf` holds 16 bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(p, buf.as_mut_ptr().cast::<u8>(), len * 2);
        _mm_loadu_si128(buf.as_ptr().cast())
    }
}

impl F32Decode<F32Weights> for Avx2F32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 4;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: in bounds (caller contract); unaligned load.
        unsafe { _mm256_loadu_ps(row.add(b * 128 + c * 32).cast()) }
    }

    #[inline(always)]
    unsafe fn tail(row: *const u8, i: usize, len: usize) -> __m256 {
        // SAFETY: masked lanes are not read; `len` elements at `i` are in bounds.
        unsafe { _mm256_maskload_ps(row.add(i * 4).cast(), mask(len)) }
    }
}

impl F32Decode<F16Weights> for Avx2F32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 2;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: 16 bytes in bounds (caller contract); F16C available.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(row.add(b * 64 + c * 16).cast())) }
    }

    #[inline(always)]
    unsafe fn tail(row: *const u8, i: usize, len: usize) -> __m256 {
        // SAFETY: `len` halves at element `i` are in bounds (caller contract).
        unsafe { _mm256_cvtph_ps(load_u16_tail(row.add(i * 2), len)) }
    }
}

/// bf16 → f32 is a 16-bit shift of the bits.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn widen_bf16(v: __m128i) -> __m256 {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v))) }
}

impl F32Decode<Bf16Weights> for Avx2F32 {
    const TAIL: bool = true;
    const ELEM_BYTES: usize = 2;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: 16 bytes in bounds (caller contract).
        unsafe { widen_bf16(_mm_loadu_si128(row.add(b * 64 + c * 16).cast())) }
    }

    #[inline(always)]
    unsafe fn tail(row: *const u8, i: usize, len: usize) -> __m256 {
        // SAFETY: `len` values at element `i` are in bounds (caller contract).
        unsafe { widen_bf16(load_u16_tail(row.add(i * 2), len)) }
    }
}

/// The 32 nibbles of a Q4 block whose 16 nibble bytes start at `qs`, as four chunks of 8
/// f32 (chunk 0 = low nibbles of bytes 0..8, 1 = low of 8..16, 2 = high of 0..8, 3 = high of
/// 8..16): bytes 0..8 and 8..16 each zero-extended to 8 i32
/// straight from memory, then the low nibble masked out and the high one shifted down (no
/// shuffles of a loaded register: the widening loads do the lane moves).
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
unsafe fn nibbles_block(qs: *const u8) -> [__m256; 4] {
    // SAFETY: 16 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.cast()));
        let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(qs.add(8).cast()));
        let m = _mm256_set1_epi32(0x0F);
        let f = _mm256_cvtepi32_ps;
        [
            f(_mm256_and_si256(a, m)),
            f(_mm256_and_si256(b, m)),
            f(_mm256_srli_epi32::<4>(a)),
            f(_mm256_srli_epi32::<4>(b)),
        ]
    }
}

/// The scale of a 32-element block whose f16 `d` is at `p` (and its offset, `MIN`, the f16
/// `m` right after it) in every lane, as [`F32Decode::unit_scales`] gives them: the 4 bytes
/// at `p` broadcast, widened, then each half's lanes duplicated.
///
/// # Safety
///
/// 4 readable bytes at `p`; AVX2 and F16C available.
#[inline(always)]
unsafe fn block_scales<const MIN: bool>(p: *const u8) -> ([__m256; 2], [__m256; 2]) {
    // SAFETY: 4 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let v = _mm256_cvtph_ps(_mm_set1_epi32(p.cast::<i32>().read_unaligned()));
        let d = _mm256_moveldup_ps(v);
        let m = if MIN { _mm256_movehdup_ps(v) } else { _mm256_setzero_ps() };
        ([d; 2], [m; 2])
    }
}

impl F32Decode<BlockQ8_0> for Avx2F32 {
    const FACTORED: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract): the 32 i8.
        unsafe {
            let qs = row.add(b * BlockQ8_0::BYTES + BlockQ8_0::QS_OFFSET);
            let q = |c: usize| {
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(qs.add(8 * c).cast())))
            };
            [q(0), q(1), q(2), q(3)]
        }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockQ8_0::D_OFFSET == 0) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<false>(row.add(b * BlockQ8_0::BYTES)) }
    }
}

impl F32Decode<BlockQ4_0> for Avx2F32 {
    const FACTORED: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract): `q - 8` (exact).
        unsafe {
            nibbles_block(row.add(b * BlockQ4_0::BYTES + BlockQ4_0::QS_OFFSET))
                .map(|q| _mm256_sub_ps(q, _mm256_set1_ps(8.0)))
        }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockQ4_0::D_OFFSET == 0) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<false>(row.add(b * BlockQ4_0::BYTES)) }
    }
}

impl F32Decode<BlockQ4_1> for Avx2F32 {
    const FACTORED: bool = true;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract).
        unsafe { nibbles_block(row.add(b * BlockQ4_1::BYTES + BlockQ4_1::QS_OFFSET)) }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockQ4_1::D_OFFSET == 0 && BlockQ4_1::M_OFFSET == 2) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<true>(row.add(b * BlockQ4_1::BYTES)) }
    }
}

/// 32 bytes (element order) as four vectors of 8 f32, read as unsigned or signed.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn bytes_f32<const SIGNED: bool>(v: __m256i) -> [__m256; 4] {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let f = |q: __m128i| {
            let i = if SIGNED { _mm256_cvtepi8_epi32(q) } else { _mm256_cvtepu8_epi32(q) };
            _mm256_cvtepi32_ps(i)
        };
        [f(lo), f(_mm_srli_si128::<8>(lo)), f(hi), f(_mm_srli_si128::<8>(hi))]
    }
}

impl F32Decode<BlockQ5_0> for Avx2F32 {
    const FACTORED: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract): `q - 16`.
        unsafe {
            let blk = row.add(b * crate::quant::q5_0::BYTES);
            let q = _mm256_or_si256(
                super::nibbles32(blk.add(BlockQ5_0::QS_OFFSET)),
                super::fifth_bits(blk.add(BlockQ5_0::QH_OFFSET)),
            );
            bytes_f32::<true>(_mm256_sub_epi8(q, _mm256_set1_epi8(16)))
        }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockQ5_0::D_OFFSET == 0) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<false>(row.add(b * crate::quant::q5_0::BYTES)) }
    }
}

impl F32Decode<BlockQ5_1> for Avx2F32 {
    const FACTORED: bool = true;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract).
        unsafe {
            let blk = row.add(b * crate::quant::q5_1::BYTES);
            bytes_f32::<false>(_mm256_or_si256(
                super::nibbles32(blk.add(BlockQ5_1::QS_OFFSET)),
                super::fifth_bits(blk.add(BlockQ5_1::QH_OFFSET)),
            ))
        }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockQ5_1::D_OFFSET == 0 && BlockQ5_1::M_OFFSET == 2) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<true>(row.add(b * crate::quant::q5_1::BYTES)) }
    }
}

impl F32Decode<BlockIq4Nl> for Avx2F32 {
    const FACTORED: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract): the codebook values.
        unsafe {
            let blk = row.add(b * crate::quant::iq4_nl::BYTES);
            bytes_f32::<true>(super::iq4_values32(blk.add(BlockIq4Nl::QS_OFFSET)))
        }
    }

    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([__m256; 2], [__m256; 2]) {
        const { assert!(BlockIq4Nl::D_OFFSET == 0) };
        // SAFETY: block `b` is in bounds (caller contract); `d` (and `m`) come first.
        unsafe { block_scales::<false>(row.add(b * crate::quant::iq4_nl::BYTES)) }
    }
}

/// The super-block of unit `b` (8 units of 32 per super-block) and the unit's index in it.
#[inline(always)]
fn unit(b: usize) -> (usize, usize) {
    (b / 8, b % 8)
}

/// The f16 at `p` as f32 (scalar lane).
///
/// # Safety
///
/// 2 readable bytes; F16C available.
#[inline(always)]
unsafe fn f16_scalar(p: *const u8) -> f32 {
    // SAFETY: forwarded caller contract.
    unsafe { super::f16_at(p) }
}

/// `out[0..16] = f · v[0..16]` for 16 small integers `v` (i8 or u8 per `SIGNED`), each
/// product rounded once (the oracle's `d · sc`).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn scale16<const SIGNED: bool>(v: __m128i, f: f32, out: &mut [f32; 16]) {
    // SAFETY: register-only AVX2 intrinsics; `out` holds 16 floats.
    unsafe {
        let w = |q: __m128i| {
            let i = if SIGNED { _mm256_cvtepi8_epi32(q) } else { _mm256_cvtepu8_epi32(q) };
            _mm256_mul_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(f))
        };
        _mm256_storeu_ps(out.as_mut_ptr(), w(v));
        _mm256_storeu_ps(out.as_mut_ptr().add(8), w(_mm_srli_si128::<8>(v)));
    }
}

/// The 32 values `q` (0..=3) of unit `u` of a Q2_K/Q3_K super-block's 64 low-bit bytes at
/// `qs`: bits `2 (u % 4)` of bytes `32 (u / 4) ..`.
///
/// # Safety
///
/// 64 readable bytes at `qs`; AVX2 available.
#[inline(always)]
unsafe fn q2_unit(qs: *const u8, u: usize) -> __m256i {
    // SAFETY: 32 bytes at `qs + 32 (u / 4)` (caller contract).
    unsafe {
        let q = _mm256_loadu_si256(qs.add(32 * (u / 4)).cast());
        let sh = _mm_cvtsi32_si128(2 * (u % 4) as i32);
        _mm256_and_si256(_mm256_srl_epi16(q, sh), _mm256_set1_epi8(3))
    }
}

impl F32Decode<BlockQ2K> for Avx2F32 {
    const FACTORED: bool = true;
    const GROUP_SCALES: bool = true;
    const HALF_SCALES: bool = true;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract).
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q2_k::BYTES);
            bytes_f32::<false>(q2_unit(blk.add(BlockQ2K::QS_OFFSET), u))
        }
    }

    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
        // SAFETY: super-block `g` is in bounds (caller contract). Sub-block `j`: scale
        // `d · (sc_j & 15)`, offset `-(dmin · (sc_j >> 4))` (the oracle's products).
        unsafe {
            let blk = row.add(g * crate::quant::q2_k::BYTES);
            let (d, dmin) =
                (f16_scalar(blk.add(BlockQ2K::D_OFFSET)), f16_scalar(blk.add(BlockQ2K::M_OFFSET)));
            let sc = _mm_loadu_si128(blk.add(BlockQ2K::SCALES_OFFSET).cast());
            let low = _mm_and_si128(sc, _mm_set1_epi8(0x0F));
            let high = _mm_and_si128(_mm_srli_epi16::<4>(sc), _mm_set1_epi8(0x0F));
            scale16::<false>(low, d, &mut out.s);
            scale16::<false>(high, -dmin, &mut out.m);
        }
    }
}

impl F32Decode<BlockQ3K> for Avx2F32 {
    const FACTORED: bool = true;
    const GROUP_SCALES: bool = true;
    const HALF_SCALES: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract): `low + 4 high - 4`.
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q3_k::BYTES);
            let hm = _mm256_loadu_si256(blk.add(BlockQ3K::QH_OFFSET).cast());
            let bit = _mm256_set1_epi8((1u8 << u) as i8);
            let high = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
            let high = _mm256_and_si256(high, _mm256_set1_epi8(4));
            let q = _mm256_sub_epi8(
                _mm256_or_si256(q2_unit(blk.add(BlockQ3K::QS_OFFSET), u), high),
                _mm256_set1_epi8(4),
            );
            bytes_f32::<true>(q)
        }
    }

    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
        // SAFETY: super-block `g` is in bounds (caller contract): `d · sc_j`.
        unsafe {
            let blk = row.add(g * crate::quant::q3_k::BYTES);
            let sc = crate::quant::q3_k::scales_q3(core::slice::from_raw_parts(
                blk.add(BlockQ3K::SCALES_OFFSET),
                12,
            ));
            let d = f16_scalar(blk.add(BlockQ3K::D_OFFSET));
            scale16::<true>(_mm_loadu_si128(sc.as_ptr().cast()), d, &mut out.s);
        }
    }
}

/// The Q4_K/Q5_K values of unit `u` (sub-block `u`): nibbles of the 32 bytes `qs + 32 (u /
/// 2)` (low for even `u`, high for odd), `extra` or'ed in.
///
/// # Safety
///
/// 32 readable bytes at `qs + 32 (u / 2)`; AVX2 available.
#[inline(always)]
unsafe fn k4_values(qs: *const u8, u: usize, extra: __m256i) -> [__m256; 4] {
    // SAFETY: the reads are in bounds (caller contract).
    unsafe {
        let q = _mm256_loadu_si256(qs.add(32 * (u / 2)).cast());
        let q = if u % 2 == 0 { q } else { _mm256_srli_epi16::<4>(q) };
        bytes_f32::<false>(_mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0x0F)), extra))
    }
}

/// The scales of a Q4_K/Q5_K super-block `blk` (`d`, `dmin` at 0 and 2, the 12 packed bytes
/// at 4): unit `u`'s `d · sc_u` and `-(dmin · m_u)` (the oracle's products).
///
/// # Safety
///
/// `blk` is a whole super-block; AVX2 and F16C available.
#[inline(always)]
unsafe fn k4_scales(blk: *const u8, out: &mut Scales) {
    // SAFETY: the reads are in bounds (caller contract); `out` holds 16 + 16 floats.
    unsafe {
        let sm = crate::quant::q4_k::scales_mins_k4(core::slice::from_raw_parts(
            blk.add(BlockQ4K::SCALES_OFFSET),
            12,
        ));
        let (d, dmin) =
            (f16_scalar(blk.add(BlockQ4K::D_OFFSET)), f16_scalar(blk.add(BlockQ4K::M_OFFSET)));
        let v = _mm_loadu_si128(sm.as_ptr().cast());
        let w = |q: __m128i, f: f32| {
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), _mm256_set1_ps(f))
        };
        _mm256_storeu_ps(out.s.as_mut_ptr(), w(v, d));
        _mm256_storeu_ps(out.m.as_mut_ptr(), w(_mm_srli_si128::<8>(v), -dmin));
    }
}

impl F32Decode<BlockQ4K> for Avx2F32 {
    const FACTORED: bool = true;
    const GROUP_SCALES: bool = true;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract).
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q4_k::BYTES);
            k4_values(blk.add(BlockQ4K::QS_OFFSET), u, _mm256_setzero_si256())
        }
    }

    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
        // SAFETY: super-block `g` is in bounds (caller contract).
        unsafe { k4_scales(row.add(g * crate::quant::q4_k::BYTES), out) }
    }
}

impl F32Decode<BlockQ5K> for Avx2F32 {
    const FACTORED: bool = true;
    const GROUP_SCALES: bool = true;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract); sub-block `u` takes bit
        // `u` of the 32 bytes at 16.
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q5_k::BYTES);
            let qh = _mm256_loadu_si256(blk.add(BlockQ5K::QH_OFFSET).cast());
            let bit = _mm256_set1_epi8((1u8 << u) as i8);
            let high = _mm256_and_si256(
                _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                _mm256_set1_epi8(0x10),
            );
            k4_values(blk.add(BlockQ5K::QS_OFFSET), u, high)
        }
    }

    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
        // SAFETY: super-block `g` is in bounds (caller contract); Q5_K's `d`, `dmin` and
        // scales sit where Q4_K's do.
        unsafe { k4_scales(row.add(g * crate::quant::q5_k::BYTES), out) }
    }
}

impl F32Decode<BlockQ6K> for Avx2F32 {
    const FACTORED: bool = true;
    const GROUP_SCALES: bool = true;
    const HALF_SCALES: bool = true;

    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract). Unit u = 4 h + g:
        // nibble g / 2 of ql[64 h + 32 (g % 2) ..], bits 2 g of qh[32 h ..], minus 32.
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q6_k::BYTES);
            let (h, g) = (u / 4, u % 4);
            let l = _mm256_loadu_si256(blk.add(BlockQ6K::QS_OFFSET + 64 * h + 32 * (g % 2)).cast());
            let l = if g < 2 { l } else { _mm256_srli_epi16::<4>(l) };
            let qh = _mm256_loadu_si256(blk.add(BlockQ6K::QH_OFFSET + 32 * h).cast());
            let hb = _mm256_and_si256(
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g as i32)),
                _mm256_set1_epi8(3),
            );
            let q = _mm256_or_si256(
                _mm256_and_si256(l, _mm256_set1_epi8(0x0F)),
                _mm256_slli_epi16::<4>(hb),
            );
            bytes_f32::<true>(_mm256_sub_epi8(q, _mm256_set1_epi8(32)))
        }
    }

    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, _n: usize, out: &mut Scales) {
        // SAFETY: super-block `g` is in bounds (caller contract): `d · sc_j` (i8 scales).
        unsafe {
            let blk = row.add(g * crate::quant::q6_k::BYTES);
            let d = f16_scalar(blk.add(BlockQ6K::D_OFFSET));
            let sc = _mm_loadu_si128(blk.add(BlockQ6K::SCALES_OFFSET).cast());
            scale16::<true>(sc, d, &mut out.s);
        }
    }
}

/// The lane sums of four accumulators, `Σa = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))`
/// in lane 0 and likewise for `b`, `c`, `d`: each lane depends on its own accumulator only.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
pub(super) unsafe fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        let s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
        _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
    }
}

/// The AVX2 tier's f32 lanes and weight decoders ([`F32Lanes`], [`F32Decode`]; the AVX-512
/// tier keeps these for f32, f16 and bf16 weights).
pub(super) struct Avx2F32;

impl F32Lanes for Avx2F32 {
    type V = __m256;
    type Acc = __m256;
    type Prefetch = super::X86Prefetch;
    // 16 ymm registers: 4 accumulators, the 4 activation chunks and the decode's temporaries.
    const GEMV_ROWS: usize = 4;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: register-only AVX intrinsic (caller contract).
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: 8 readable floats (caller contract); unaligned load.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn load_tail(p: *const f32, len: usize) -> __m256 {
        // SAFETY: masked lanes are not read; `len` floats at `p` are (caller contract).
        unsafe { _mm256_maskload_ps(p, mask(len)) }
    }

    #[inline(always)]
    unsafe fn fma(acc: __m256, w: __m256, x: __m256) -> __m256 {
        // SAFETY: register-only FMA intrinsic (caller contract).
        unsafe { _mm256_fmadd_ps(w, x, acc) }
    }

    #[inline(always)]
    unsafe fn splat(v: f32) -> __m256 {
        // SAFETY: register-only AVX intrinsic (caller contract).
        unsafe { _mm256_set1_ps(v) }
    }

    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        // SAFETY: register-only AVX intrinsic (caller contract).
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: register-only AVX intrinsic (caller contract).
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: register-only FMA intrinsic (caller contract).
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    unsafe fn store<const R: usize, const N: usize>(
        acc: &[[__m256; N]; R],
        y: *mut f32,
        ldy: usize,
    ) {
        // SAFETY: writes only the `R × N` outputs of the caller contract.
        unsafe {
            for t in 0..N {
                let mut r = 0;
                while r < R {
                    let g = |i: usize| if r + i < R { acc[r + i][t] } else { _mm256_setzero_ps() };
                    let sums = hsum4(g(0), g(1), g(2), g(3));
                    let out = y.add(t * ldy + r);
                    if R - r >= 4 {
                        _mm_storeu_ps(out, sums);
                    } else {
                        let mut v = [0f32; 4];
                        _mm_storeu_ps(v.as_mut_ptr(), sums);
                        for (i, v) in v.iter().enumerate().take(R - r) {
                            *out.add(i) = *v;
                        }
                    }
                    r += 4;
                }
            }
        }
    }
}

f32_entries! { Avx2, Avx2F32, "AVX2 table entry (f32 activations).";
    matmul_f32, F32Weights;
    matmul_f16, F16Weights;
    matmul_bf16, Bf16Weights;
    matmul_q8_0, BlockQ8_0;
    matmul_q4_0, BlockQ4_0;
    matmul_q4_1, BlockQ4_1;
    matmul_q5_0, BlockQ5_0;
    matmul_q5_1, BlockQ5_1;
    matmul_iq4_nl, BlockIq4Nl;
    matmul_q2_k, BlockQ2K;
    matmul_q3_k, BlockQ3K;
    matmul_q4_k, BlockQ4K;
    matmul_q5_k, BlockQ5K;
    matmul_q6_k, BlockQ6K;
}
