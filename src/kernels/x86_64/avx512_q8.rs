//! VNNI int8 kernels for the 32-element types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) ×
//! Q8 activations, for three tiers:
//!
//! - **AVX-512** (F/BW/VL + AVX512-VNNI), [`Avx512Tier`]: the kernel frame's tiles
//!   (`kernels/frame/q8.rs`) of `R` weight rows × `N` activation rows (`1 × 8`, `1 × 4`,
//!   `1 × 2` for prefill, `4 × 1` for the GEMV), their schedule and prefetches. Per group of
//!   eight blocks each weight row is decoded once ([`VBlock::decode2`]: blocks `2 j`, `2 j + 1`
//!   in element order in one 512-bit vector, unsigned) and dotted by 512-bit `vpdpbusd` with
//!   every activation row of the tile, read as plain 64-byte loads; two outputs' block sums are
//!   reduced together ([`reduce2`]) and their f32 terms share one vector, the f16 block scales
//!   picked out of the row with one or two `vpermt2w`. From 2 activation rows, whole groups
//!   of 16 weight rows take [`tile16`] instead (`16 × 32`, `16 × 16`, `16 × 2` to `16 × 8`;
//!   with at most eight rows it prefetches the next 16 rows): each block of the 16 rows is
//!   transposed in registers ([`transpose16`], lane = row), so that eight `vpdpbusd` of
//!   broadcast activation dwords give the 16 rows' block sums with no horizontal reduction.
//! - **AVX-512 + GFNI**: the same kernels with the 4-bit weights split into bytes by one
//!   `vgf2p8affineqb` instead of a shift and an AND ([`super::Nibbles`]); Q8_0 keeps the
//!   AVX-512 entry (no nibbles).
//! - **AVX-VNNI** (the VEX-encoded 256-bit `vpdpbusd`): the AVX2 tier of `avx2_q8.rs` with
//!   `vpdpbusd` in place of `maddubs` + `madd` ([`super::VexOps`]); only its entries are here.
//! - **Q5_0x2** ([`crate::quant::q5_0x2`], Q5_0 repacked at load, both AVX-512 tiers): the
//!   same tiles over pairs of blocks ([`Q5_0x2B`]: one 256-bit broadcast, one nibble split,
//!   one 64-bit mask load per 64 weights, where Q5_0 needs a `vinserti64x4` and a mask built
//!   in a general register, both on port 5), and the outlier correction's column-block
//!   kernels that read one half of each row's pair ([`Q5_0x2H`]).
//!
//! The integer block sums are exact (a quad is at most `4 · 255 · 127`, far inside i32), and
//! the f32 part is the oracle's order exactly ([`crate::kernels::scalar::accumulate8`]: block
//! `b`'s term into lane `b % 8`, separate multiply and add, then the fixed horizontal sum), so
//! every entry is bit-identical to the scalar table. The AVX-512 operands depend on the weights
//! only: the unsigned nibbles (and Q5's fifth bits) as they are, the signed values (Q8_0,
//! IQ4_NL's codebook) offset by `+ 128`; each takes `- OFF · Σ x` after ([`VBlock::OFF`]).
//!
//! The block decoders read their fields at [`crate::quant::BlockLayout`]'s offsets (the pair
//! layout's at [`crate::quant::q5_0x2`]'s).
//!
//! Why one file of over 1,000 lines: the three tiers' entries, the 16-row tile and the
//! Q5_0x2 pair and half kernels all run on the same block decoders ([`VBlock`]) and reductions
//! ([`reduce2`], [`transpose16`]); split by tier or by tile, every part would import most of
//! the others' private items. The drivers themselves are in the kernel frame.

use core::arch::x86_64::*;

use core::marker::PhantomData;

use super::avx2_q8::QBlock;
use super::{hsum_ps, opaque512, Nibbles, X86Prefetch};
use crate::kernels::frame::q8::{Q8Tier, TileX, ROWS16};
use crate::kernels::frame::{Prefetch, NEXT_TILE_LEAD};
use crate::quant::QK;

/// A 32-element block as seen by the AVX-512 tiles ([`tile`], [`tile16`]).
pub(crate) trait VBlock {
    /// Bytes per 32 elements: block `b` of a row starts at `b * BYTES` (for the pair layout,
    /// [`Q5_0x2B`], pair `j` at `2 j * BYTES`).
    const BYTES: usize;
    /// The block term adds `m · s` (Q4_1 / Q5_1: the f16 minimum after the scale).
    const MIN: bool;
    /// Rows are whole pairs of blocks stored together ([`Q5_0x2B`]).
    const PAIRS: bool = false;
    /// The block's dot with `x` is `Σ u · x - OFF · Σ x` for the unsigned operand `u` of
    /// [`VBlock::decode2`]: the nibbles of Q4_0 (`+ 8`) and Q5_0 (`+ 16`), Q8_0's and IQ4_NL's
    /// values `+ 128` (the offset form of the signed types: the operand depends on the weights
    /// only, so one decode serves every activation row), 0 for Q4_1 / Q5_1.
    const OFF: i32;

    /// The unsigned operands of blocks `blk0` (bytes 0..32, element order) and `blk1` (bytes
    /// 32..64), so that two consecutive blocks' activations are one plain 64-byte load.
    ///
    /// # Safety
    ///
    /// Both are whole blocks; AVX-512 F/BW/VL available, and what `Nb` needs.
    unsafe fn decode2<Nb: Nibbles>(blk0: *const u8, blk1: *const u8) -> __m512i;

    /// The f16 scales (lanes 0..8) and, with [`QBlock::MIN`], minimums (lanes 8..16) of the
    /// eight blocks at `wb`, as 16-bit lanes of a 256-bit vector.
    ///
    /// # Safety
    ///
    /// Eight whole blocks at `wb`; AVX-512 F/BW available.
    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: forwarded caller contract.
        unsafe { scales8_split(wb, Self::BYTES, Self::MIN, 8) }
    }

    /// [`VBlock::scales8`] for the first `m < 8` of eight blocks (lanes past them 0), reading
    /// nothing past the `m` blocks.
    ///
    /// # Safety
    ///
    /// `m` whole blocks at `wb`; AVX-512 F/BW available.
    #[inline(always)]
    unsafe fn scales_m(wb: *const u8, m: usize) -> __m256i {
        // SAFETY: forwarded caller contract.
        unsafe { scales8_split(wb, Self::BYTES, Self::MIN, m) }
    }

    /// [`transpose16`]'s decode: block `b` of two rows, at `p0` and `p1` (each its row's
    /// start `+ b * BYTES`), as the low and high halves ([`VBlock::decode2`] by default).
    ///
    /// # Safety
    ///
    /// Block `b` whole in both rows; AVX-512 F/BW/VL available, and what `Nb` needs.
    #[inline(always)]
    unsafe fn decode_col2<Nb: Nibbles>(p0: *const u8, p1: *const u8, b: usize) -> __m512i {
        let _ = b;
        // SAFETY: forwarded caller contract.
        unsafe { Self::decode2::<Nb>(p0, p1) }
    }

    /// `Some(qs)` where the block's quants are 16 packed bytes at byte `qs`, elements `0..16`
    /// their low nibbles and `16..32` their high ones, the operand a function of the nibble
    /// alone ([`VBlock::map4`]): [`tile16`] then transposes the packed bytes and splits them
    /// after ([`transpose16_nib`]), a third of the shuffles of [`transpose16`].
    const NIB16: Option<usize> = None;

    /// The unsigned operands of nibble values `0..16` (lanes of bytes): the nibbles
    /// themselves by default.
    ///
    /// # Safety
    ///
    /// AVX-512 F/BW available.
    #[inline(always)]
    unsafe fn map4(v: __m512i) -> __m512i {
        v
    }

    /// Where block `b` (at `p`, its row's start `+ b * BYTES`) keeps its f16 scale (and, with
    /// [`VBlock::MIN`], its minimum in the next word): `p` by default.
    ///
    /// # Safety
    ///
    /// Block `b` is whole at `p`'s row.
    #[inline(always)]
    unsafe fn scale_ptr(p: *const u8, b: usize) -> *const u8 {
        let _ = b;
        p
    }
}

/// The [`VBlock`] constants of a [`QBlock`] type.
macro_rules! vblock_consts {
    ($q:ty) => {
        const BYTES: usize = <$q as QBlock>::BYTES;
        const MIN: bool = <$q as QBlock>::MIN;
    };
}
pub(crate) use vblock_consts;

/// Whether `Q`'s f16 scale is at byte 0 and its minimum (if any) at byte 2, as the scale
/// picks ([`VBlock::scales8`], [`pick_words`], [`scale_dwords`]) take them.
pub(crate) const fn scales_first<Q: QBlock>() -> bool {
    Q::D == 0 && (!Q::MIN || Q::M == 2)
}

/// Two Q4 blocks' nibbles (16 bytes at `qs0` and at `qs1`) as 64 u8 lanes in element order:
/// `[low nibbles of 0, high of 0, low of 1, high of 1]` (16 each).
///
/// # Safety
///
/// 16 readable bytes at each; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn nibbles2<Nb: Nibbles>(qs0: *const u8, qs1: *const u8) -> __m512i {
    // SAFETY: 16 bytes at each (caller contract).
    unsafe {
        let a = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs0.cast()));
        let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs1.cast()));
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        // 128-bit lanes 1 and 3 (64-bit lanes 2, 3, 6, 7) take the high nibbles.
        Nb::split::<0b1100_1100>(z)
    }
}

/// Two Q5 blocks' values: [`nibbles2`] of the 16 bytes at `qs0` / `qs1` with `16` added
/// where the fifth bit (the little-endian u32 at `qh0` / `qh1`) is set, in the same lanes.
///
/// # Safety
///
/// 16 readable bytes at `qs0`, `qs1`, 4 at `qh0`, `qh1`; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn q5_values2<Nb: Nibbles>(
    qs0: *const u8,
    qs1: *const u8,
    qh0: *const u8,
    qh1: *const u8,
) -> __m512i {
    // SAFETY: the reads are in bounds (caller contract); the rest is register-only.
    unsafe {
        let h0 = qh0.cast::<u32>().read_unaligned() as u64;
        let h1 = qh1.cast::<u32>().read_unaligned() as u64;
        let q = nibbles2::<Nb>(qs0, qs1);
        _mm512_mask_add_epi8(q, h0 | h1 << 32, q, opaque512(_mm512_set1_epi8(0x10)))
    }
}

/// The f16 words at word offsets `stride * j` (`j < 4`, or `j < 8` when they fit) of the `len
/// <= 128` bytes at `wb`, as lanes `0..` (and, with `min`, the words one further as lanes
/// `8..`); words past `len` read as 0.
///
/// # Safety
///
/// `len` readable bytes at `wb`; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn pick_words(wb: *const u8, len: usize, stride: u16, min: bool) -> __m512i {
    // SAFETY: masked loads touch only the `len` readable bytes (caller contract).
    unsafe {
        let lo = if len >= 64 { u64::MAX } else { (1u64 << len) - 1 };
        let hi = if len >= 128 {
            u64::MAX
        } else if len > 64 {
            (1u64 << (len - 64)) - 1
        } else {
            0
        };
        let z0 = _mm512_maskz_loadu_epi8(lo, wb.cast());
        let z1 = _mm512_maskz_loadu_epi8(hi, wb.add(64).cast());
        let s = stride as i16;
        let m = if min { 1 } else { 0 };
        let idx = _mm512_set_epi16(
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            7 * s + m,
            6 * s + m,
            5 * s + m,
            4 * s + m,
            3 * s + m,
            2 * s + m,
            s + m,
            m,
            7 * s,
            6 * s,
            5 * s,
            4 * s,
            3 * s,
            2 * s,
            s,
            0,
        );
        _mm512_permutex2var_epi16(z0, idx, z1)
    }
}

/// Lane moves for [`scales8_split`]: lanes 4..8 and 12..16 take lanes 0..4 and 8..12.
static SPLIT_IDX: [i16; 32] = [
    0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0,
];

/// [`VBlock::scales8`] for the first `m <= 8` of eight blocks of `bytes` bytes (`bytes` even)
/// at `wb`: the scales (and minimums, at the next word) of blocks 0..4 and 4..8, each four
/// picked from their own `4 · bytes` bytes (or 128 when less), so nothing past the `m` blocks
/// is read; the lanes of blocks `m..8` are 0.
///
/// # Safety
///
/// `m` whole blocks at `wb`; AVX-512 F/BW available.
#[inline(always)]
unsafe fn scales8_split(wb: *const u8, bytes: usize, min: bool, m: usize) -> __m256i {
    // SAFETY: each pick reads inside its blocks (caller contract).
    unsafe {
        let stride = (bytes / 2) as u16;
        let lo = pick_words(wb, (m.min(4) * bytes).min(128), stride, min);
        let hi = if m > 4 {
            pick_words(wb.add(4 * bytes), ((m - 4) * bytes).min(128), stride, min)
        } else {
            _mm512_setzero_si512()
        };
        let hi = _mm512_permutexvar_epi16(_mm512_loadu_si512(SPLIT_IDX.as_ptr().cast()), hi);
        _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xF0F0, lo, hi))
    }
}

/// The index and lane mask of [`scales8_tail`] for blocks of `2 s` bytes (scale of block `j`
/// at word `s j`, with `min` its minimum at the next word) and the tail at byte `t`: lane `j`
/// (`8 + j`) takes tail word `s j - t / 2` (`+ 1`) where that word is past the first 64.
const fn tail_pick(s: usize, min: bool, t: usize) -> ([i16; 32], u32) {
    let (mut idx, mut mask) = ([0i16; 32], 0u32);
    let mut j = 0;
    while j < 8 {
        let w = s * j;
        if w >= 64 {
            idx[j] = (w - t / 2) as i16;
            mask |= 1 << j;
        }
        if min && w + 1 >= 64 {
            idx[8 + j] = (w + 1 - t / 2) as i16;
            mask |= 1 << (8 + j);
        }
        j += 1;
    }
    (idx, mask)
}

/// [`VBlock::scales8`] of eight whole blocks of `2 S` bytes at `wb` (`16 S >= T + 32`), for
/// block sizes whose scale words past the first 128 bytes all lie in the 32 bytes at byte `T`:
/// one [`pick_words`] of the first 128 bytes, then those lanes from the tail (one load, one
/// masked `vpermw`), instead of two picks, a move and a blend ([`scales8_split`]).
///
/// # Safety
///
/// Eight whole blocks at `wb`; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn scales8_tail<const S: usize, const MIN: bool, const T: usize>(
    wb: *const u8,
) -> __m256i {
    let (idx, mask) = const { tail_pick(S, MIN, T) };
    // SAFETY: 128 bytes, then 32 at `T` with `T + 32 <= 16 S` (caller contract).
    unsafe {
        let t = pick_words(wb, 128, S as u16, MIN);
        let tail = _mm512_castsi256_si512(_mm256_loadu_si256(wb.add(T).cast()));
        let idx = _mm512_loadu_si512(idx.as_ptr().cast());
        _mm512_castsi512_si256(_mm512_mask_permutexvar_epi16(t, mask, idx, tail))
    }
}

/// The 0x80 byte: `w ^ 0x80 = w + 128` turns an i8 into its offset u8.
pub(crate) const SIGN: i8 = -128;

/// The IQ4_NL codebook plus 128, as bytes (the offset form of [`Iq4NlB`]'s values).
pub(crate) static KVALUES_128: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (crate::quant::iq4_nl::KVALUES[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// Within each 128-bit lane: `[a0 + a2, b0 + b2, a1 + a3, b1 + b3]`.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
pub(super) unsafe fn pair(a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: register-only intrinsics.
    unsafe { _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b)) }
}

/// Within each 128-bit lane `L`: `[Σ_L p0, Σ_L p1, Σ_L p2, Σ_L p3]`.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
pub(super) unsafe fn quad(p: [__m512i; 4]) -> __m512i {
    // SAFETY: register-only intrinsics.
    unsafe {
        let (p01, p23) = (pair(p[0], p[1]), pair(p[2], p[3]));
        _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23))
    }
}

/// [`reduce2`]'s picks: output lane `i < 8` is block `i` of the first output (`+ 16`: of the
/// second), from 128-bit lanes 0 / 2 ([`REDUCE_LO`]) and 1 / 3 ([`REDUCE_HI`]).
static REDUCE_LO: [i32; 16] = [0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27];
/// See [`REDUCE_LO`].
static REDUCE_HI: [i32; 16] = [4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31];

/// The eight block sums of two outputs from their four pair vectors each: pair `j` holds
/// blocks `2 j` (256-bit half 0) and `2 j + 1` (half 1) as eight i32 partial sums each.
/// Returns output `a`'s block `i` total in lane `i`, output `b`'s in lane `8 + i`.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn reduce2(a: [__m512i; 4], b: [__m512i; 4]) -> __m512i {
    // SAFETY: register-only intrinsics and two 64-byte reads of statics.
    unsafe {
        let (qa, qb) = (quad(a), quad(b));
        let lo = _mm512_loadu_si512(REDUCE_LO.as_ptr().cast());
        let hi = _mm512_loadu_si512(REDUCE_HI.as_ptr().cast());
        _mm512_add_epi32(
            _mm512_permutex2var_epi32(qa, lo, qb),
            _mm512_permutex2var_epi32(qa, hi, qb),
        )
    }
}

/// The 256-bit halves `lo`, `hi` as one vector.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn join_ps(lo: __m256, hi: __m256) -> __m512 {
    // SAFETY: register-only intrinsics.
    unsafe {
        let z = _mm512_castps_pd(_mm512_castps256_ps512(lo));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(z, _mm256_castps_pd(hi)))
    }
}

/// Activation row `t`'s scales, scaled sums (with [`QBlock::MIN`]) and sums (with
/// [`VBlock::OFF`]) of the `lm` blocks from `b` (zero past them).
///
/// # Safety
///
/// The blocks are in `x`; AVX-512 F/VL available.
#[inline(always)]
unsafe fn acts<Q: VBlock>(x: TileX, t: usize, b: usize, lm: __mmask8) -> (__m256, __m256, __m256i) {
    // SAFETY: masked loads of blocks inside row `t` (caller contract).
    unsafe {
        let i = t * x.nb + b;
        let dx = _mm256_maskz_loadu_ps(lm, x.d.add(i));
        let sx = if Q::MIN { _mm256_maskz_loadu_ps(lm, x.s.add(i)) } else { dx };
        let sum = if Q::OFF != 0 {
            _mm256_maskz_loadu_epi32(lm, x.sum.add(i))
        } else {
            _mm256_setzero_si256()
        };
        (dx, sx, sum)
    }
}

/// The pair vectors of one weight row's decoded blocks `u` (pairs `j < ⌈m / 2⌉`; the rest 0)
/// against activation row `t`'s blocks `b .. b + m`.
///
/// # Safety
///
/// The blocks are in `x` (the lone last block of an odd `m` is read with a mask);
/// AVX-512 F/BW/VNNI available.
#[inline(always)]
unsafe fn dot4(u: &[__m512i; 4], x: TileX, t: usize, b: usize, m: usize) -> [__m512i; 4] {
    // SAFETY: reads inside the row's blocks `b .. b + m` (caller contract).
    unsafe {
        let xb = x.qs.add((t * x.nb + b) * QK);
        let mut p = [_mm512_setzero_si512(); 4];
        for (j, p) in p.iter_mut().enumerate().take(m.div_ceil(2)) {
            let xv = if 2 * j + 1 < m {
                _mm512_loadu_si512(xb.add(64 * j).cast())
            } else {
                _mm512_maskz_loadu_epi8(0xFFFF_FFFF, xb.add(64 * j).cast())
            };
            *p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[j], xv);
        }
        p
    }
}

/// One group of `m <= 8` blocks starting at block `b` of an `R` × `N` tile (weight row `r` at
/// `w + r * rb`, activation row `t` of `x`), added to the pair accumulators `acc`.
///
/// Each weight row's blocks are decoded once ([`VBlock::decode2`], pairs `2 j`, `2 j + 1`)
/// and dotted with every activation row (plain 64-byte loads); outputs `o = r · N + t` go in
/// pairs `(2 p, 2 p + 1)` (the last alone when `R · N` is odd) whose sums are reduced together
/// ([`reduce2`]) and whose f32 terms share one 512-bit vector: lanes `0..8` output `2 p`,
/// `8..16` output `2 p + 1`, block `b + i` into lane `i` (the oracle's lane `(b + i) % 8`, `b`
/// being a multiple of 8), `acc + (dw · dx) · isum [+ mw · s]` unfused, lanes of blocks past
/// `m` left as they are.
///
/// # Safety
///
/// `R` rows of `x.nb` blocks, `N` activation rows of `x.nb` blocks, `b + m <= x.nb`;
/// AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn group<Q: VBlock, Nb: Nibbles, const R: usize, const N: usize, const P: usize>(
    w: *const u8,
    rb: usize,
    x: TileX,
    b: usize,
    m: usize,
    acc: &mut [__m512; P],
) {
    // SAFETY: every block read is `< b + m <= nb` of a tile row (caller contract); the
    // activation and scale reads past block `m` are masked off.
    unsafe {
        let np = m.div_ceil(2);
        let mut u = [[_mm512_setzero_si512(); 4]; R];
        let mut dm = [_mm512_setzero_ps(); R];
        for r in 0..R {
            let wb = w.add(r * rb + b * Q::BYTES);
            for (j, u) in u[r].iter_mut().enumerate().take(np) {
                let b0 = wb.add(2 * j * Q::BYTES);
                // A lone last block pairs with itself; its lanes are masked off below.
                let b1 = if 2 * j + 1 < m { b0.add(Q::BYTES) } else { b0 };
                *u = Q::decode2::<Nb>(b0, b1);
            }
            let sc = if m == 8 { Q::scales8(wb) } else { Q::scales_m(wb, m) };
            dm[r] = _mm512_cvtph_ps(sc);
        }
        let lm: __mmask8 = ((1u16 << m) - 1) as u8;
        // Two outputs per accumulator: only the first `⌈R · N / 2⌉` of the `R · N` are used.
        for (p, acc) in acc.iter_mut().enumerate().take((R * N).div_ceil(2)) {
            let (oa, ob) = (2 * p, (2 * p + 1).min(R * N - 1));
            let (ra, ta, rb_, tb) = (oa / N, oa % N, ob / N, ob % N);
            let pa = dot4(&u[ra], x, ta, b, m);
            let pb = if ob != oa { dot4(&u[rb_], x, tb, b, m) } else { pa };
            let mut isum = reduce2(pa, pb);
            let (dxa, sxa, suma) = acts::<Q>(x, ta, b, lm);
            let (dxb, sxb, sumb) =
                if tb != ta { acts::<Q>(x, tb, b, lm) } else { (dxa, sxa, suma) };
            if Q::OFF != 0 {
                let s = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(suma), sumb);
                let sh = _mm_cvtsi32_si128(Q::OFF.trailing_zeros() as i32);
                isum = _mm512_sub_epi32(isum, _mm512_sll_epi32(s, sh));
            }
            // [dw of row ra | dw of row rb], [mw of ra | mw of rb].
            let dw = _mm512_shuffle_f32x4::<0x44>(dm[ra], dm[rb_]);
            let mut c =
                _mm512_mul_ps(_mm512_mul_ps(dw, join_ps(dxa, dxb)), _mm512_cvtepi32_ps(isum));
            if Q::MIN {
                let mw = _mm512_shuffle_f32x4::<0xEE>(dm[ra], dm[rb_]);
                c = _mm512_add_ps(c, _mm512_mul_ps(mw, join_ps(sxa, sxb)));
            }
            *acc = if m == 8 {
                _mm512_add_ps(*acc, c)
            } else {
                _mm512_mask_add_ps(*acc, lm as u16 | (lm as u16) << 8, *acc, c)
            };
        }
    }
}

/// The dword transpose of [`transpose16`]: `z[i]` holds row `i`'s eight dwords in its low
/// 256 bits and row `i + 8`'s in its high 256 bits; returns `t[k]` whose dword lane `r` is
/// dword `k` of row `r` (`r < 16`). Per 256-bit half an 8 × 8 transpose: `unpack{lo,hi}_epi32`,
/// `unpack{lo,hi}_epi64`, then one `vpermt2q` per output joining rows 0..4 and 4..8.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn transpose8x2(z: [__m512i; 8]) -> [__m512i; 8] {
    // SAFETY: register-only intrinsics.
    unsafe {
        // a[2 p] / a[2 p + 1]: per 128-bit lane `[z2p.k0, z2p+1.k0, z2p.k1, z2p+1.k1]` / k2, k3.
        let mut a = [_mm512_setzero_si512(); 8];
        for p in 0..4 {
            a[2 * p] = _mm512_unpacklo_epi32(z[2 * p], z[2 * p + 1]);
            a[2 * p + 1] = _mm512_unpackhi_epi32(z[2 * p], z[2 * p + 1]);
        }
        // lo[k] / hi[k]: per 128-bit lane `L` rows 0..4 / 4..8 (of the half), dword `4 L' + k`
        // (`L'` the lane within its half).
        let lo = [
            _mm512_unpacklo_epi64(a[0], a[2]),
            _mm512_unpackhi_epi64(a[0], a[2]),
            _mm512_unpacklo_epi64(a[1], a[3]),
            _mm512_unpackhi_epi64(a[1], a[3]),
        ];
        let hi = [
            _mm512_unpacklo_epi64(a[4], a[6]),
            _mm512_unpackhi_epi64(a[4], a[6]),
            _mm512_unpacklo_epi64(a[5], a[7]),
            _mm512_unpackhi_epi64(a[5], a[7]),
        ];
        // 128-bit lanes [lo.L0, hi.L0, lo.L2, hi.L2] (dwords 0..4), [.L1, .L1, .L3, .L3] (4..8).
        let i0 = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let i1 = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        let mut t = [_mm512_setzero_si512(); 8];
        for k in 0..4 {
            t[k] = _mm512_permutex2var_epi64(lo[k], i0, hi[k]);
            t[4 + k] = _mm512_permutex2var_epi64(lo[k], i1, hi[k]);
        }
        t
    }
}

/// The unsigned operands ([`VBlock::decode_col2`]) of block `b` at `wb + r * rb` for the 16
/// rows `r`, transposed: dword lane `r` of `t[k]` is bytes `4 k .. 4 k + 4` of row `r`'s block.
///
/// # Safety
///
/// Block `b` whole at `wb + r * rb` for `r < 16`; AVX-512 F/BW/VL available.
#[inline(always)]
unsafe fn transpose16<Q: VBlock, Nb: Nibbles>(wb: *const u8, rb: usize, b: usize) -> [__m512i; 8] {
    // SAFETY: the 16 blocks are whole (caller contract).
    unsafe {
        let mut z = [_mm512_setzero_si512(); 8];
        for (i, z) in z.iter_mut().enumerate() {
            *z = Q::decode_col2::<Nb>(wb.add(i * rb), wb.add((i + 8) * rb), b);
        }
        transpose8x2(z)
    }
}

/// [`transpose16`] for the packed-nibble blocks ([`VBlock::NIB16`], quants at byte `qs`):
/// the 16 bytes of row `i + 4 L` in 128-bit lane `L` of vector `i` (`i`, `L < 4`), a 4 × 4
/// dword transpose inside each 128-bit lane (dword lane `4 L + i` = row `i + 4 L`), then
/// each packed dword `k` split into its low nibbles (elements `4 k ..`, `t[k]`) and high
/// ones (elements `16 + 4 k ..`, `t[4 + k]`).
///
/// # Safety
///
/// 16 bytes at `wb + r * rb + qs` for `r < 16`; AVX-512 F/BW/VL available, and what `Nb`
/// needs.
#[inline(always)]
unsafe fn transpose16_nib<Q: VBlock, Nb: Nibbles>(
    wb: *const u8,
    rb: usize,
    qs: usize,
) -> [__m512i; 8] {
    // SAFETY: 16 bytes of each of the 16 rows (caller contract); the rest is register-only.
    unsafe {
        let row = |r: usize| _mm_loadu_si128(wb.add(r * rb + qs).cast());
        let mut a = [_mm512_setzero_si512(); 4];
        for (i, a) in a.iter_mut().enumerate() {
            let z = _mm512_castsi128_si512(row(i));
            let z = _mm512_inserti32x4::<1>(z, row(i + 4));
            let z = _mm512_inserti32x4::<2>(z, row(i + 8));
            *a = _mm512_inserti32x4::<3>(z, row(i + 12));
        }
        let (t0, t1) = (_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
        let (t2, t3) = (_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
        let k = [
            _mm512_unpacklo_epi64(t0, t2),
            _mm512_unpackhi_epi64(t0, t2),
            _mm512_unpacklo_epi64(t1, t3),
            _mm512_unpackhi_epi64(t1, t3),
        ];
        let mut t = [_mm512_setzero_si512(); 8];
        for (i, k) in k.into_iter().enumerate() {
            t[i] = Q::map4(Nb::split::<0>(k));
            t[4 + i] = Q::map4(Nb::split::<0xFF>(k));
        }
        t
    }
}

/// The scale dwords of block `b` (at `wb + r * rb`) of 16 rows, lane `r` the 4 bytes at
/// [`VBlock::scale_ptr`]: four rows per 128-bit lane by scalar loads and inserts (a 16-lane
/// gather is microcoded, and was a sixth of the `16 × 4` Q4_1 tile's time on Zen 5).
///
/// # Safety
///
/// Block `b` whole at `wb + r * rb` for `r < 16`; AVX-512 F available.
#[inline(always)]
unsafe fn scale_dwords<Q: VBlock>(wb: *const u8, rb: usize, b: usize) -> __m512i {
    // SAFETY: 4 bytes at each block's scale (every block has at least 18 bytes).
    unsafe {
        let d = |r: usize| Q::scale_ptr(wb.add(r * rb), b).cast::<i32>().read_unaligned();
        let q = |r: usize| _mm_setr_epi32(d(r), d(r + 1), d(r + 2), d(r + 3));
        let z = _mm512_castsi128_si512(q(0));
        let z = _mm512_inserti32x4::<1>(z, q(4));
        let z = _mm512_inserti32x4::<2>(z, q(8));
        _mm512_inserti32x4::<3>(z, q(12))
    }
}

/// The most activation rows for which [`tile16`] prefetches the next 16 rows' weights.
const TILE16_PREFETCH_MAX_N: usize = 8;

/// AVX-512: a `16 × N` tile of weight rows at `w + r * rb` times activation rows `x`, into
/// `y[t * ldy + r]`, with the weights transposed in registers so that no horizontal sum is
/// needed: lane `r` of every vector is weight row `r`.
///
/// The blocks `b` in order (the rows' streams sequential): block `b` of the 16 rows is
/// decoded and transposed once ([`transpose16`], or for packed nibbles [`transpose16_nib`])
/// and dotted with each activation row `t` by eight `vpdpbusd` of broadcast activation dwords
/// (from `- OFF · Σ x`, [`VBlock::OFF`]); its term `(dw · dx) · isum [+ mw · s]`, unfused,
/// the f16 scales of the 16 rows read one block ahead ([`scale_dwords`]), goes into
/// `part[t][b % 8] = part[t][b % 8] + term` (the oracle's lane `b % 8`,
/// [`crate::kernels::scalar::accumulate8`]). The eight lanes' vectors end in
/// [`crate::kernels::scalar::hsum8`]'s tree, taken vertically: every output is the oracle's
/// bits. (Visiting lane by lane instead, blocks `j, j + 8, ..`, so that `part[t][j]` could
/// stay in a register, was 20% slower at `N = 16`: the strided weight reads.)
///
/// # Safety
///
/// 16 rows of `x.nb` blocks at `w + r * rb` (`16 · rb <= i32::MAX`), `N` activation rows of
/// `x.nb` blocks in `x`, `y[t * ldy + r]` writable for `r < 16`, `t < N`; AVX2, F16C and
/// AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn tile16<Q: VBlock, Nb: Nibbles, const N: usize>(
    w: *const u8,
    rb: usize,
    x: TileX,
    y: *mut f32,
    ldy: usize,
) {
    debug_assert!(ROWS16 * rb <= i32::MAX as usize);
    // SAFETY: blocks `b < nb` of the 16 rows and `N` activation rows (caller contract); the
    // scale reads take 4 bytes at such blocks' scales ([`scale_dwords`]).
    unsafe {
        let nb = x.nb;
        // Decode batches (up to eight activation rows) over whole rows prefetch the next 16
        // rows: past the caches the tile is otherwise bound by its demand misses (a column
        // block, the outlier correction's, would prefetch bytes it never reads).
        let ahead = N <= TILE16_PREFETCH_MAX_N && rb == nb * Q::BYTES;
        // [`prefetch_next_tile`]'s lines, its division taken once per tile.
        let span = ROWS16 * rb;
        let per = span.div_ceil(nb.max(1)).next_multiple_of(64);
        let next = w.wrapping_add(span + NEXT_TILE_LEAD);
        // part[t][j]: lane `j`'s accumulator of activation row `t`.
        let mut part = [[_mm512_setzero_ps(); 8]; N];
        // Each row's scale dword of block `b` (the f16 scale, then with a minimum the minimum),
        // read one block ahead of its use.
        macro_rules! scales {
            ($b:expr) => {{
                let b: usize = $b;
                scale_dwords::<Q>(w.add(b * Q::BYTES), rb, b)
            }};
        }
        // Block `b`'s contribution, its scale dwords `g` (a macro, so that each use below is
        // its own copy).
        macro_rules! block {
            ($b:expr, $g:expr) => {{
                let b: usize = $b;
                let j = b % 8;
                let wb = w.add(b * Q::BYTES);
                if ahead {
                    let (mut o, end) = (b * per, ((b + 1) * per).min(span));
                    while o < end {
                        X86Prefetch::line(next.wrapping_add(o));
                        o += 64;
                    }
                }
                let tw = match Q::NIB16 {
                    Some(qs) => transpose16_nib::<Q, Nb>(wb, rb, qs),
                    None => transpose16::<Q, Nb>(wb, rb, b),
                };
                let g = $g;
                let dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
                let mw = if Q::MIN {
                    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(g)))
                } else {
                    dw
                };
                for (t, p) in part.iter_mut().enumerate() {
                    let i = t * nb + b;
                    let xb = x.qs.add(i * QK).cast::<i32>();
                    // Two chains of four `vpdpbusd` (dwords 0..4, 4..8): half the latency.
                    let mut is = [_mm512_setzero_si512(); 2];
                    if Q::OFF != 0 {
                        is[0] =
                            _mm512_set1_epi32(Q::OFF.wrapping_mul(*x.sum.add(i)).wrapping_neg());
                    }
                    for (k, tw) in tw.iter().enumerate() {
                        let xk = _mm512_set1_epi32(xb.add(k).read_unaligned());
                        is[k / 4] = _mm512_dpbusd_epi32(is[k / 4], *tw, xk);
                    }
                    let isum = _mm512_add_epi32(is[0], is[1]);
                    let dx = _mm512_set1_ps(*x.d.add(i));
                    let mut c = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum));
                    if Q::MIN {
                        c = _mm512_add_ps(c, _mm512_mul_ps(mw, _mm512_set1_ps(*x.s.add(i))));
                    }
                    p[j] = _mm512_add_ps(p[j], c);
                }
            }};
        }
        if nb > 0 {
            let mut g = scales!(0);
            if Q::PAIRS {
                // In pairs (rows are whole pairs), so that the half of each copy (`b % 2`,
                // [`VBlock::decode_col2`]) is a constant: 1.5% of the Q4_K_M prefill.
                for p in 0..nb / 2 {
                    let g1 = scales!(2 * p + 1);
                    block!(2 * p, g);
                    g = if 2 * p + 2 < nb { scales!(2 * p + 2) } else { g1 };
                    block!(2 * p + 1, g1);
                }
            } else {
                for b in 0..nb {
                    let gn = if b + 1 < nb { scales!(b + 1) } else { g };
                    block!(b, g);
                    g = gn;
                }
            }
        }
        for (t, p) in part.iter().enumerate() {
            let v = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(p[0], p[4]), _mm512_add_ps(p[2], p[6])),
                _mm512_add_ps(_mm512_add_ps(p[1], p[5]), _mm512_add_ps(p[3], p[7])),
            );
            _mm512_storeu_ps(y.add(t * ldy), v);
        }
    }
}

/// The AVX-512 tiers' [`Q8Tier`] (nibbles split by `Nb`): two outputs per 512-bit
/// accumulator ([`group`]), the transposed `16 × N` tile ([`tile16`]) from
/// [`Q8Tier::TILE16_MIN_N`] activation rows.
pub(crate) struct Avx512Tier<Nb>(PhantomData<Nb>);

impl<Q: VBlock, Nb: Nibbles> Q8Tier<Q> for Avx512Tier<Nb> {
    const BYTES: usize = Q::BYTES;
    // The fewest activation rows that take [`tile16`] for whole groups of 16 weight rows.
    // (`16 × 2` too is faster than the `1 × 2` tiles, see `docs/perf/notes-kernels.md`.)
    const TILE16_MIN_N: usize = 2;
    type Prefetch = X86Prefetch;
    type Acc = __m512;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        // SAFETY: register-only AVX-512 F intrinsic (caller contract).
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn group<const R: usize, const N: usize, const P: usize>(
        w: *const u8,
        rb: usize,
        x: TileX,
        b: usize,
        m: usize,
        acc: &mut [__m512; P],
    ) {
        // SAFETY: forwarded caller contract.
        unsafe { group::<Q, Nb, R, N, P>(w, rb, x, b, m, acc) }
    }

    #[inline(always)]
    unsafe fn output<const P: usize>(acc: &[__m512; P], o: usize) -> f32 {
        // SAFETY: register-only AVX-512 F intrinsics (caller contract).
        unsafe {
            let v = acc[o / 2];
            if o % 2 == 0 {
                hsum_ps(_mm512_castps512_ps256(v))
            } else {
                hsum_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))))
            }
        }
    }

    #[inline(always)]
    unsafe fn tile16<const N: usize>(w: *const u8, rb: usize, x: TileX, y: *mut f32, ldy: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { tile16::<Q, Nb, N>(w, rb, x, y, ldy) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::types::q8_0::Q8_0B;
    use crate::kernels::x86_64::ShiftNibbles;
    use crate::kernels::Isa;

    /// [`transpose16`] of Q8_0 blocks (`rb` apart) into `[k][r]` dwords.
    ///
    /// # Safety
    ///
    /// 16 whole blocks at `w + r * rb`; AVX-512 F/BW/VL available.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn transposed(w: *const u8, rb: usize) -> [[u32; 16]; 8] {
        let mut out = [[0u32; 16]; 8];
        // SAFETY: forwarded caller contract; each store writes one 64-byte row of `out`.
        unsafe {
            let t = transpose16::<Q8_0B, ShiftNibbles>(w, rb, 0);
            for (o, t) in out.iter_mut().zip(t) {
                _mm512_storeu_si512(o.as_mut_ptr().cast(), t);
            }
        }
        out
    }

    /// Lane `r` of `t[k]` is bytes `4 k .. 4 k + 4` of row `r`'s decoded block, as a scalar
    /// transpose says.
    #[test]
    fn transpose16_matches_scalar() {
        if !Isa::Avx512.is_available() {
            // The conformance suite's RML_EXPECT_ISAS makes a missing tier fail in CI.
            #[cfg(feature = "std")]
            std::eprintln!("transpose16_matches_scalar: skipped, this CPU has no AVX-512");
            return;
        }
        let rb = 3 * crate::quant::q8_0::BYTES + 5;
        let mut w = alloc::vec![0u8; 16 * rb];
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for b in w.iter_mut() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            *b = (s >> 56) as u8;
        }
        // SAFETY: 16 rows of `rb >= 34` bytes; AVX-512 available (checked above).
        let got = unsafe { transposed(w.as_ptr(), rb) };
        for (k, got) in got.iter().enumerate() {
            for (r, &got) in got.iter().enumerate() {
                let q = &w[r * rb + 2 + 4 * k..][..4];
                let want = u32::from_le_bytes([q[0], q[1], q[2], q[3]]) ^ 0x8080_8080;
                assert_eq!(got, want, "k={k} r={r}");
            }
        }
    }
}
