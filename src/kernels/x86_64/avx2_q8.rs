//! AVX2 int8 kernels: quantized weights × Q8 activations ([`crate::quant::Q8Acts`]) as the
//! AVX2 and AVX-VNNI tiers' [`Q8Tier`] (the tiles, their schedule and prefetches are the
//! kernel frame's, `kernels/frame/q8.rs`), and the Q8 quantizer.
//!
//! Per block the exact i32 dot product comes from `maddubs` (u8 × i8 pairs into i16) and
//! `madd` (i16 pairs into i32), or AVX-VNNI's `vpdpbusd` ([`Dot256`]):
//! - Q8_0: the sign trick — `|w|` as u8 (`|-128|` = 128 fits) times `x` with `w`'s sign
//!   (activations are never -128, so negating them cannot overflow); a pair is at most
//!   `2 · 128 · 127 = 32512`, so `maddubs` never saturates.
//! - Q4_0 / Q4_1: the nibbles (0..=15) are already unsigned: `Σ nibble · x` directly (a pair
//!   is at most `2 · 15 · 128`), and Q4_0 subtracts `8 · Σ x` afterwards.
//!
//! Eight blocks' i32 vectors are reduced together (unpack + add; on plain AVX2 the 4-bit
//! types reduce their `maddubs` pairs in i16 instead, with no `madd` per block, as eight of
//! them cannot overflow); the last one to seven blocks of a row go the same way on fewer
//! vectors, blended into their lanes (no per-block horizontal sums). The plain-AVX2 GEMV of
//! the nibble types takes a group's blocks `p` and `p + 4` in one register
//! ([`group8_pairs`]: one 256-bit shift and two ANDs split 64 weights, the activations are
//! rearranged to match once per group for the tile's rows, and the four pair vectors reduce
//! without a cross-lane step). The f32 part follows the
//! oracle's order exactly ([`crate::kernels::scalar::accumulate8`]: block `b` into lane
//! `b % 8` with separate multiply and add, then the fixed horizontal sum), so the results
//! are bit-identical to the scalar table.

use core::arch::x86_64::*;

use core::marker::PhantomData;

use super::{
    gather_f16, gather_f16_pairs, hsum_ps, mask, reduce8, split_f16_pairs, term, Dot256,
    X86Prefetch,
};
use crate::kernels::frame::q8::{Q8Tier, TileX};
use crate::quant::{BlockLayout, QK};

/// A 32-element quantized weight block as seen by the int8 kernels (this file's and the VNNI
/// tiers' of `avx512_q8.rs`).
pub(crate) trait QBlock {
    /// The block's byte layout (field offsets by name).
    type L: BlockLayout;
    /// Bytes per block.
    const BYTES: usize = <Self::L as BlockLayout>::BYTES;
    /// The block sum needs `- OFFSET · Σ x` (8 for Q4_0, 16 for Q5_0, else 0).
    const OFFSET: i32;
    /// Q4_1 / Q5_1: the block term adds `m · s` (the f16 minimum).
    const MIN: bool = <Self::L as BlockLayout>::HAS_M;
    /// Byte offset of the f16 scale.
    const D: usize = <Self::L as BlockLayout>::D_OFFSET;
    /// Byte offset of the f16 minimum (with [`QBlock::MIN`]).
    const M: usize = <Self::L as BlockLayout>::M_OFFSET;
    /// Byte offset of the fifth bits (the Q5 types).
    const QH: usize = <Self::L as BlockLayout>::QH_OFFSET;
    /// Byte offset of the quants.
    const QS: usize = <Self::L as BlockLayout>::QS_OFFSET;
    /// The unsigned operand is at most 15 (the 4-bit types' nibbles): a `maddubs` lane is
    /// then at most `2 · 15 · 127 = 3810`, and eight of them add up in i16 without overflow
    /// ([`reduce8_i16`]).
    const NIBBLES: bool = false;

    /// The (unsigned, signed) operand pair whose `u8 × i8` dot is the block's dot product with
    /// the 32 activation values `x` (before the `OFFSET` correction).
    ///
    /// # Safety
    ///
    /// `blk` is a whole block, `x` holds values in -127..=127; AVX2 available.
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i);

    /// The quants are 16 bytes of nibbles (every type but Q8_0): plain AVX2's GEMV takes
    /// eight blocks as four pairs ([`group8_pairs`]).
    const PAIRS: bool = false;
    /// With [`QBlock::PAIRS`]: a `maddubs` lane of [`QBlock::pair_operands`] is at most
    /// `2 · 31 · 127 = 7874` in magnitude (unsigned operands of at most 31), so the low and
    /// high halves' lanes add up in i16 before the one `madd`.
    const PAIR_I16: bool = false;
    /// With [`QBlock::PAIRS`]: a block's first 8 bytes hold its f16 scale (at 0), with
    /// [`QBlock::MIN`] its f16 minimum (at 2), and its 4 bytes of fifth bits (Q5_0, Q5_1):
    /// the pair path reads them with one load per two blocks ([`heads`]) and takes the
    /// group's scales from those loads ([`head_scales`]).
    const HEADS: bool = false;

    /// With [`QBlock::PAIRS`], blocks `p` (low 128-bit lane) and `q` (high lane) at once:
    /// the (unsigned, signed) operand pairs of their elements `0..16` against `xl` and of
    /// their elements `16..32` against `xh` (the activations laid out alike, [`x_pairs`]);
    /// `h` is the two blocks' [`heads`] with [`QBlock::HEADS`] (else unused). Only called
    /// where [`QBlock::PAIRS`] holds; the default, the blocks' own operands against `xl` and
    /// `xh`, is not that product.
    ///
    /// # Safety
    ///
    /// `bp` and `bq` are whole blocks, the activations in -127..=127; AVX2 available.
    #[inline(always)]
    unsafe fn pair_operands(
        bp: *const u8,
        bq: *const u8,
        h: __m256i,
        xl: __m256i,
        xh: __m256i,
    ) -> [(__m256i, __m256i); 2] {
        let _ = h;
        // SAFETY: forwarded caller contract.
        unsafe { [Self::operands(bp, xl), Self::operands(bq, xh)] }
    }
}

/// The first 8 bytes of two blocks (at `bp` into the low 128-bit lane, at `bq` into the high
/// one; the upper 8 bytes of each lane zero).
///
/// # Safety
///
/// 8 readable bytes at `bp` and at `bq`; AVX2 available.
#[inline(always)]
unsafe fn heads(bp: *const u8, bq: *const u8) -> __m256i {
    // SAFETY: 8 bytes at each (caller contract); the rest is register-only.
    unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadl_epi64(bp.cast())),
            _mm_loadl_epi64(bq.cast()),
        )
    }
}

/// The f16 scales (and with [`QBlock::MIN`] minimums) of a group's eight blocks as f32 lanes
/// (block `j` in lane `j`, the same values as [`scales8`]) from its four pairs' [`heads`]
/// `h[p]` (blocks `p` and `p + 4`): an unpack tree instead of eight inserts.
///
/// # Safety
///
/// [`QBlock::HEADS`]; AVX2 + F16C available.
#[inline(always)]
unsafe fn head_scales<Q: QBlock>(h: &[__m256i; 4]) -> (__m256, __m256) {
    // SAFETY: register-only intrinsics.
    unsafe {
        if Q::MIN {
            // Per lane: [dm_p, dm_q, ..] (u32 `d | m << 16`), then [dm0..dm4 | dm4..dm8].
            let a = _mm256_unpacklo_epi32(h[0], h[1]);
            let b = _mm256_unpacklo_epi32(h[2], h[3]);
            split_f16_pairs(_mm256_unpacklo_epi64(a, b))
        } else {
            // Per lane: [d_p, d_q, ..] (u16), then [d0..d4, ..| d4..d8, ..], then the two
            // low quarters together.
            let a = _mm256_unpacklo_epi16(h[0], h[1]);
            let b = _mm256_unpacklo_epi16(h[2], h[3]);
            let d = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_unpacklo_epi32(a, b));
            (_mm256_cvtph_ps(_mm256_castsi256_si128(d)), _mm256_setzero_ps())
        }
    }
}

/// The 16 quant bytes of two blocks (at `qp` into the low 128-bit lane, at `qq` into the
/// high one) as their low nibbles (elements `0..16` of each block) and high nibbles
/// (elements `16..32`), u8 lanes: one shift and two ANDs for 64 weights.
///
/// # Safety
///
/// 16 readable bytes at `qp` and at `qq`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn nibble_pairs(qp: *const u8, qq: *const u8) -> (__m256i, __m256i) {
    // SAFETY: 16 bytes at each (caller contract); the rest is register-only.
    unsafe {
        let v = _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(qp.cast())),
            _mm_loadu_si128(qq.cast()),
        );
        let m = _mm256_set1_epi8(0x0F);
        (_mm256_and_si256(v, m), _mm256_and_si256(_mm256_srli_epi16::<4>(v), m))
    }
}

/// The fifth bits of two Q5 blocks (the little-endian u32 at byte `at` of each 128-bit lane
/// of `v`: block `p`'s in the low lane, block `q`'s in the high one) as bytes `0x10` (bit
/// set) or 0, laid out as [`nibble_pairs`]: elements `0..16` of each block, then elements
/// `16..32`.
///
/// # Safety
///
/// `at + 4 <= 16`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn fifth_bit_pairs(v: __m256i, at: usize) -> (__m256i, __m256i) {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let at = _mm256_set1_epi8(at as i8);
        // Byte i of a half takes byte i / 8 (elements 0..16) or 2 + i / 8 (16..32) of its
        // block's bits, then tests bit i % 8.
        let (lo, hi) = (
            _mm256_shuffle_epi8(
                v,
                _mm256_add_epi8(
                    at,
                    _mm256_setr_epi8(
                        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                        1, 1, 1, 1, 1, 1, 1,
                    ),
                ),
            ),
            _mm256_shuffle_epi8(
                v,
                _mm256_add_epi8(
                    at,
                    _mm256_setr_epi8(
                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                        3, 3, 3, 3, 3, 3, 3,
                    ),
                ),
            ),
        );
        (bit_bytes(lo), bit_bytes(hi))
    }
}

/// `0x10` in the bytes `i` of `s` whose bit `i % 8` is set, else 0.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn bit_bytes(s: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(s, bit), bit), _mm256_set1_epi8(0x10))
    }
}

/// The sign trick for signed weights `w`: `|w|` as u8 (`|-128|` = 128 fits) and `x` with `w`'s
/// sign (activations are never -128, so negating them cannot overflow).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
pub(crate) unsafe fn signed_operands(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { (_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)) }
}

/// The block's i32 lanes against the 32 activations at `x`.
///
/// # Safety
///
/// As [`QBlock::operands`], 32 readable values at `x`; `D`'s features available.
#[inline(always)]
unsafe fn isum<Q: QBlock, D: Dot256>(blk: *const u8, x: *const i8) -> __m256i {
    // SAFETY: forwarded caller contract.
    unsafe {
        let (u, s) = Q::operands(blk, _mm256_loadu_si256(x.cast()));
        D::dot(u, s)
    }
}

/// The totals of the 16 i16 lanes of each of `v[0..8]` as eight i32 lanes, in order. Exact
/// when every lane is at most 3810 in magnitude ([`QBlock::NIBBLES`]): each i16 sum below
/// adds at most eight lanes.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce8_i16(v: [__m256i; 8]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        // Per 128-bit half: [a0+a4, b0+b4, a1+a5, b1+b5, a2+a6, b2+b6, a3+a7, b3+b7].
        let pair =
            |a, b| _mm256_add_epi16(_mm256_unpacklo_epi16(a, b), _mm256_unpackhi_epi16(a, b));
        let (p01, p23, p45, p67) =
            (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
        // Per half: [v0, v1, v2, v3, v0, v1, v2, v3] (sums of four lanes).
        let quad =
            |a, b| _mm256_add_epi16(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        let (q0, q1) = (quad(p01, p23), quad(p45, p67));
        // Per half: [v0 .. v8] (sums of eight lanes).
        let o = _mm256_add_epi16(_mm256_unpacklo_epi64(q0, q1), _mm256_unpackhi_epi64(q0, q1));
        _mm256_add_epi32(
            _mm256_cvtepi16_epi32(_mm256_castsi256_si128(o)),
            _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(o)),
        )
    }
}

/// The i32 lane totals of `v0` and `v1` in lanes 0 and 1 (lanes 2 and 3 hold partial sums,
/// the others zero).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce2(v0: __m256i, v1: __m256i) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        // [a0+a2, b0+b2, a1+a3, b1+b3 | a4+a6, b4+b6, a5+a7, b5+b7].
        let p = _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
        let q = _mm256_add_epi32(p, _mm256_shuffle_epi32::<0b01_00_11_10>(p));
        let r = _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        _mm256_zextsi128_si256(r)
    }
}

/// The i32 lane totals of `v[0..4]` in lanes 0 to 3 (the other lanes zero).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce4(v: [__m256i; 4]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let pair =
            |a, b| _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        let (p01, p23) = (pair(v[0], v[1]), pair(v[2], v[3]));
        // [v0, v1, v2, v3 (low-lane halves) | v0, v1, v2, v3 (high-lane halves)].
        let q = _mm256_add_epi32(_mm256_unpacklo_epi64(p01, p23), _mm256_unpackhi_epi64(p01, p23));
        let r = _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        _mm256_zextsi128_si256(r)
    }
}

/// The last `m < 8` blocks `b .. b + m` of one weight row (at `w`, their [`scales_part`]
/// `dm`) · one activation row, added to lanes `0 .. m` of `acc` in the oracle's order (block
/// `b + j`'s term into lane `j`); the other lanes of `acc` are kept (blended), so nothing past
/// block `b + m` is read: the activations by masked loads, the weights block by block.
///
/// # Safety
///
/// As [`group8`] for blocks `b .. b + m`, `1 <= m < 8`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn group_part<Q: QBlock, D: Dot256>(
    acc: __m256,
    w: *const u8,
    dm: (__m256, __m256),
    b: usize,
    m: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    sum: *const i32,
) -> __m256 {
    // SAFETY: blocks `b .. b + m` are in bounds (caller contract); masked loads read only
    // lanes `< m`.
    unsafe {
        let wb = w.add(b * Q::BYTES);
        let xb = qs.add(b * QK);
        // Not through a closure: a closure is compiled without this function's target
        // features, and where LLVM declined to inline it (Q5_0's larger block) every
        // intrinsic in it became a call (AVX2 Q4_K_M decode 4x slower).
        let mut dots = [_mm256_setzero_si256(); 8];
        let k = if m <= 2 {
            2
        } else if m <= 4 {
            4
        } else {
            8
        };
        for (j, v) in dots.iter_mut().enumerate().take(k) {
            *v = isum_or_zero::<Q, D>(wb, xb, j, m);
        }
        let mut isum = if m <= 2 {
            reduce2(dots[0], dots[1])
        } else if m <= 4 {
            reduce4([dots[0], dots[1], dots[2], dots[3]])
        } else {
            reduce8(dots)
        };
        let lanes = mask(m);
        if Q::OFFSET != 0 {
            let sx = _mm256_maskload_epi32(sum.add(b), lanes);
            isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(sx, _mm256_set1_epi32(Q::OFFSET)));
        }
        let ms = if Q::MIN { Some((dm.1, _mm256_maskload_ps(s.add(b), lanes))) } else { None };
        let t = term(acc, isum, dm.0, _mm256_maskload_ps(d.add(b), lanes), ms);
        _mm256_blendv_ps(acc, t, _mm256_castsi256_ps(lanes))
    }
}

/// `isum` of block `j` at `wb` / `xb` when `j < m`, else zero.
///
/// # Safety
///
/// As [`isum`] for block `j` when `j < m`.
#[inline(always)]
unsafe fn isum_or_zero<Q: QBlock, D: Dot256>(
    wb: *const u8,
    xb: *const i8,
    j: usize,
    m: usize,
) -> __m256i {
    // SAFETY: block `j < m` is in bounds (caller contract).
    unsafe {
        if j < m {
            isum::<Q, D>(wb.add(j * Q::BYTES), xb.add(j * QK))
        } else {
            _mm256_setzero_si256()
        }
    }
}

/// The f16 scales (and with [`QBlock::MIN`] the minimums) of the `m < 8` blocks at `wb` as
/// f32 lanes (block `j` in lane `j`; lanes from `m` on repeat block `m - 1`'s or are zero,
/// and are never used): only the `m` blocks are read.
///
/// # Safety
///
/// `m >= 1` whole blocks at `wb`; AVX2 + F16C available.
#[inline(always)]
unsafe fn scales_part<Q: QBlock>(wb: *const u8, m: usize) -> (__m256, __m256) {
    // SAFETY: lanes up to 2, 4 or 8 read block `min(j, m - 1) < m` (caller contract).
    unsafe {
        let k = if m <= 2 {
            2
        } else if m <= 4 {
            4
        } else {
            8
        };
        let at = |j: usize| wb.add(j.min(m - 1) * Q::BYTES);
        if Q::MIN && Q::M == Q::D + 2 {
            let w =
                |j: usize| if j < k { at(j).add(Q::D).cast::<i32>().read_unaligned() } else { 0 };
            split_f16_pairs(_mm256_setr_epi32(w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7)))
        } else {
            let h = |o: usize, j: usize| {
                if j < k {
                    at(j).add(o).cast::<u16>().read_unaligned() as i16
                } else {
                    0
                }
            };
            let f = |o: usize| {
                _mm256_cvtph_ps(_mm_setr_epi16(
                    h(o, 0),
                    h(o, 1),
                    h(o, 2),
                    h(o, 3),
                    h(o, 4),
                    h(o, 5),
                    h(o, 6),
                    h(o, 7),
                ))
            };
            (f(Q::D), if Q::MIN { f(Q::M) } else { _mm256_setzero_ps() })
        }
    }
}

/// The f16 scales (and with [`QBlock::MIN`] the minimums) of the eight blocks at `wb` as f32
/// lanes (block `j` in lane `j`).
///
/// # Safety
///
/// Eight whole blocks at `wb`; AVX2 + F16C available.
#[inline(always)]
unsafe fn scales8<Q: QBlock>(wb: *const u8) -> (__m256, __m256) {
    // SAFETY: the eight blocks are in bounds (caller contract).
    unsafe {
        if Q::MIN && Q::M == Q::D + 2 {
            // Q4_1 / Q5_1: `d` and `m` adjacent, one u32 per block (the same f32 values).
            gather_f16_pairs(wb.add(Q::D), Q::BYTES)
        } else if Q::MIN {
            (gather_f16(wb.add(Q::D), Q::BYTES), gather_f16(wb.add(Q::M), Q::BYTES))
        } else {
            (gather_f16(wb.add(Q::D), Q::BYTES), _mm256_setzero_ps())
        }
    }
}

/// Eight whole blocks `b .. b + 8` of one weight row (at `w`, their [`scales8`] `dm`) · one
/// activation row, added to `acc` in the oracle's order (block `b + j`'s term into lane `j`).
///
/// # Safety
///
/// Blocks `b .. b + 8` of the row at `w`; `qs`, `d`, `s`, `sum` the activation row's arrays
/// (blocks `b .. b + 8` in them); AVX2 + F16C and `D`'s features available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn group8<Q: QBlock, D: Dot256>(
    acc: __m256,
    w: *const u8,
    dm: (__m256, __m256),
    b: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    sum: *const i32,
) -> __m256 {
    // SAFETY: blocks `b .. b + 8` are in bounds (caller contract).
    unsafe {
        let wb = w.add(b * Q::BYTES);
        let xb = qs.add(b * QK);
        let mut v = [_mm256_setzero_si256(); 8];
        let mut isum = if Q::NIBBLES && D::MADDUBS {
            // The `maddubs` lanes reduced in i16 (no `madd` per block).
            for (j, v) in v.iter_mut().enumerate() {
                let (u, s) =
                    Q::operands(wb.add(j * Q::BYTES), _mm256_loadu_si256(xb.add(j * QK).cast()));
                *v = _mm256_maddubs_epi16(u, s);
            }
            reduce8_i16(v)
        } else {
            for (j, v) in v.iter_mut().enumerate() {
                *v = isum::<Q, D>(wb.add(j * Q::BYTES), xb.add(j * QK));
            }
            reduce8(v)
        };
        if Q::OFFSET != 0 {
            let sx = _mm256_loadu_si256(sum.add(b).cast());
            isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(sx, _mm256_set1_epi32(Q::OFFSET)));
        }
        let ms = if Q::MIN { Some((dm.1, _mm256_loadu_ps(s.add(b)))) } else { None };
        term(acc, isum, dm.0, _mm256_loadu_ps(d.add(b)), ms)
    }
}

/// The activations of blocks `b .. b + 8` (at `xb`) laid out for [`group8_pairs`]: pair `p`
/// is `[x_p[0..16] | x_{p+4}[0..16]]` and `[x_p[16..32] | x_{p+4}[16..32]]` (block `p` in
/// the low 128-bit lane, block `p + 4` in the high one), as [`nibble_pairs`] lays out the
/// weights.
///
/// # Safety
///
/// 256 readable values at `xb`; AVX2 available.
#[inline(always)]
unsafe fn x_pairs(xb: *const i8) -> [[__m256i; 2]; 4] {
    // SAFETY: blocks `p` and `p + 4 < 8` at `xb` (caller contract).
    unsafe {
        let mut xp = [[_mm256_setzero_si256(); 2]; 4];
        for (p, xp) in xp.iter_mut().enumerate() {
            for (h, v) in xp.iter_mut().enumerate() {
                let (a, c) = (xb.add(p * QK + 16 * h), xb.add((p + 4) * QK + 16 * h));
                *v = _mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_loadu_si128(a.cast())),
                    _mm_loadu_si128(c.cast()),
                );
            }
        }
        xp
    }
}

/// The i32 lane totals of `v[0..4]` per 128-bit lane, `v[p]` holding block `p` in its low
/// lane and block `p + 4` in its high one, as the eight block sums in order.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce_pairs(v: [__m256i; 4]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] (a = v[0], b = v[1]), likewise c, d.
        let p01 =
            _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
        let p23 =
            _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
        // Per 128-bit lane: [a, b, c, d]: blocks 0..4, then 4..8.
        _mm256_add_epi32(_mm256_unpacklo_epi64(p01, p23), _mm256_unpackhi_epi64(p01, p23))
    }
}

/// [`group8`] for a [`QBlock::PAIRS`] type on plain AVX2, blocks `p` and `p + 4` of the group
/// together ([`QBlock::pair_operands`] against the activations' [`x_pairs`] `xp`): per two
/// blocks one weight load, shift and two ANDs split the nibbles, the halves' `maddubs` lanes
/// add in i16 ([`QBlock::PAIR_I16`]) and one `madd` makes i32 lanes, and four vectors reduce
/// to the eight block sums (no cross-lane step). The same integer sums, so the same bits.
///
/// # Safety
///
/// As [`group8`] (the scales read here); `xp` the activation row's [`x_pairs`] of blocks
/// `b .. b + 8`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn group8_pairs<Q: QBlock>(
    acc: __m256,
    w: *const u8,
    b: usize,
    xp: &[[__m256i; 2]; 4],
    d: *const f32,
    s: *const f32,
    sum: *const i32,
) -> __m256 {
    // SAFETY: blocks `b .. b + 8` are in bounds (caller contract).
    unsafe {
        const {
            assert!(!Q::HEADS || (Q::D == 0 && Q::QH + 4 <= 8 && (!Q::MIN || Q::M == 2)));
        }
        let wb = w.add(b * Q::BYTES);
        let mut h = [_mm256_setzero_si256(); 4];
        if Q::HEADS {
            for (p, h) in h.iter_mut().enumerate() {
                *h = heads(wb.add(p * Q::BYTES), wb.add((p + 4) * Q::BYTES));
            }
        }
        let dm = if Q::HEADS { head_scales::<Q>(&h) } else { scales8::<Q>(wb) };
        let ones = _mm256_set1_epi16(1);
        let mut v = [_mm256_setzero_si256(); 4];
        for (p, v) in v.iter_mut().enumerate() {
            let [(ul, sl), (uh, sh)] = Q::pair_operands(
                wb.add(p * Q::BYTES),
                wb.add((p + 4) * Q::BYTES),
                h[p],
                xp[p][0],
                xp[p][1],
            );
            let (ml, mh) = (_mm256_maddubs_epi16(ul, sl), _mm256_maddubs_epi16(uh, sh));
            *v = if Q::PAIR_I16 {
                _mm256_madd_epi16(_mm256_add_epi16(ml, mh), ones)
            } else {
                _mm256_add_epi32(_mm256_madd_epi16(ml, ones), _mm256_madd_epi16(mh, ones))
            };
        }
        let mut isum = reduce_pairs(v);
        if Q::OFFSET != 0 {
            let sx = _mm256_loadu_si256(sum.add(b).cast());
            isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(sx, _mm256_set1_epi32(Q::OFFSET)));
        }
        let ms = if Q::MIN { Some((dm.1, _mm256_loadu_ps(s.add(b)))) } else { None };
        term(acc, isum, dm.0, _mm256_loadu_ps(d.add(b)), ms)
    }
}

/// The AVX2 and AVX-VNNI tiers' [`Q8Tier`] ([`Avx2Ops`] / [`super::VexOps`] for `D`): one
/// output per 8-lane accumulator, each output's groups of eight blocks ([`group8`]) and last
/// blocks ([`group_part`]) one after the other.
pub(crate) struct Avx2Tier<D>(PhantomData<D>);

impl<Q: QBlock, D: Dot256> Q8Tier<Q> for Avx2Tier<D> {
    const BYTES: usize = Q::BYTES;
    type Prefetch = X86Prefetch;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        // SAFETY: register-only AVX intrinsic (caller contract).
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    unsafe fn group<const R: usize, const N: usize, const P: usize>(
        w: *const u8,
        rb: usize,
        x: TileX,
        b: usize,
        m: usize,
        acc: &mut [__m256; P],
    ) {
        // SAFETY: blocks `b .. b + m <= nb` of rows `r < R` and activation rows `t < N`
        // (caller contract).
        unsafe {
            if Q::PAIRS && D::MADDUBS && N == 1 && m == 8 {
                // The GEMV on plain AVX2: the activations laid out in pairs once for the
                // tile's rows.
                let xp = x_pairs(x.qs.add(b * QK));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = group8_pairs::<Q>(*a, w.add(r * rb), b, &xp, x.d, x.s, x.sum);
                }
                return;
            }
            for r in 0..R {
                let wr = w.add(r * rb);
                // The row's scales once for all `N` activation rows.
                let wb = wr.add(b * Q::BYTES);
                let dm = if m == 8 { scales8::<Q>(wb) } else { scales_part::<Q>(wb, m) };
                for t in 0..N {
                    let xt = x.rows_from(t);
                    let a = &mut acc[r * N + t];
                    *a = if m == 8 {
                        group8::<Q, D>(*a, wr, dm, b, xt.qs, xt.d, xt.s, xt.sum)
                    } else {
                        group_part::<Q, D>(*a, wr, dm, b, m, xt.qs, xt.d, xt.s, xt.sum)
                    };
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn output<const P: usize>(acc: &[__m256; P], o: usize) -> f32 {
        // SAFETY: register-only AVX intrinsics (caller contract).
        unsafe { hsum_ps(acc[o]) }
    }
}

/// Rounds to nearest, ties away from zero, exactly as `roundf` for finite lanes:
/// `trunc(v) ± 1` where `|v - trunc(v)| >= 0.5` (the subtraction is exact).
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn round_away(v: __m256) -> __m256 {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let sign = _mm256_set1_ps(-0.0);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
        let ge = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
        let one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0));
        _mm256_add_ps(t, _mm256_and_ps(ge, one))
    }
}

tier_fn! { Avx2;
    /// AVX2 table entry: the Q8 quantizer (see [`crate::kernels::QuantizeQ8Fn`]), byte for byte
    /// [`crate::kernels::scalar::quantize_block_q8`].
    ///
    /// # Safety
    ///
    /// As [`crate::kernels::QuantizeQ8Fn`]; the CPU has AVX2, FMA and F16C.
    pub(super) unsafe fn quantize_q8(
        x: *const f32,
        nb: usize,
        qs: *mut i8,
        qs_stride: usize,
        d: *mut f32,
    ) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { quantize_blocks::<QK>(x, nb, qs, qs_stride, d) }
    }
}

tier_fn! { Avx2;
    /// AVX2 table entry: the Q8_K quantizer (blocks of 256, see
    /// [`crate::kernels::Kernels`]' `quantize_q8k`), byte for byte the scalar one.
    ///
    /// # Safety
    ///
    /// As `quantize_q8k`; the CPU has AVX2, FMA and F16C.
    pub(super) unsafe fn quantize_q8k(
        x: *const f32,
        nb: usize,
        qs: *mut i8,
        qs_stride: usize,
        d: *mut f32,
    ) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { quantize_blocks::<{ crate::quant::QK_K }>(x, nb, qs, qs_stride, d) }
    }
}

/// The Q8 rule over `nb` blocks of `N` (a multiple of 32) values: the block's largest
/// magnitude (as bits), `d = amax / 127`, `q = round(x / d)` ties away, clamped.
///
/// # Safety
///
/// `x` holds `nb * N` floats, `qs + b * qs_stride` `N` writable bytes for each `b < nb`,
/// `d` `nb` writable floats; AVX2 available.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn quantize_blocks<const N: usize>(
    x: *const f32,
    nb: usize,
    qs: *mut i8,
    qs_stride: usize,
    d: *mut f32,
) -> bool {
    let abs = _mm256_set1_epi32(0x7FFF_FFFF);
    for b in 0..nb {
        // SAFETY: block `b` of input and outputs is in bounds (caller contract).
        unsafe {
            let p = x.add(b * N);
            let bits = |i: usize| {
                _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(p.add(8 * i))), abs)
            };
            let mut m = [bits(0), bits(1), bits(2), bits(3)];
            let mut i = 4;
            while i < N / 8 {
                for (j, m) in m.iter_mut().enumerate() {
                    *m = _mm256_max_epi32(*m, bits(i + j));
                }
                i += 4;
            }
            let m = _mm256_max_epi32(_mm256_max_epi32(m[0], m[1]), _mm256_max_epi32(m[2], m[3]));
            let m = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
            let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
            let m = _mm_max_epi32(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
            let amax_bits = _mm_cvtsi128_si32(m) as u32;
            if amax_bits >= 0x7F80_0000 {
                return false;
            }
            let dd = f32::from_bits(amax_bits) / 127.0;
            *d.add(b) = dd;
            let out = qs.add(b * qs_stride);
            if dd == 0.0 {
                for c in 0..N / 32 {
                    _mm256_storeu_si256(out.add(32 * c).cast(), _mm256_setzero_si256());
                }
                continue;
            }
            let dv = _mm256_set1_ps(dd);
            let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
            let q = |v: __m256| {
                let r = round_away(_mm256_div_ps(v, dv));
                _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
            };
            for c in 0..N / 32 {
                let v = |i: usize| _mm256_loadu_ps(p.add(32 * c + 8 * i));
                let p01 = _mm256_packs_epi32(q(v(0)), q(v(1)));
                let p23 = _mm256_packs_epi32(q(v(2)), q(v(3)));
                let bytes = _mm256_packs_epi16(p01, p23);
                let bytes =
                    _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(out.add(32 * c).cast(), bytes);
            }
        }
    }
    true
}
