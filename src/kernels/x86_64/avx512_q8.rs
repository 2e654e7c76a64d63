//! VNNI int8 kernels for the 32-element types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) ×
//! Q8 activations, for two tiers:
//!
//! - **AVX-512** (F/BW/VL + AVX512-VNNI): 512-bit `vpdpbusd` over two blocks at once (block
//!   `j` and `j + 4` of each group of eight), four weight rows per activation load, the eight
//!   block sums of a row reduced in three shuffle steps, and the f16 block scales picked out
//!   of the row with one or two `vpermt2w` instead of eight scalar inserts; or, per type and
//!   row length ([`matmul_avx512`]), the AVX-VNNI loop on EVEX 256-bit `vpdpbusd`. Q5_0/Q5_1
//!   add their fifth bits through a mask register (`kmov` of `qh`, one masked add) on both.
//! - **AVX-VNNI** (the VEX-encoded 256-bit `vpdpbusd`): the AVX2 kernel of `avx2_q8.rs` with
//!   `vpdpbusd` in place of `maddubs` + `madd` ([`super::VexOps`]).
//!
//! The integer block sums are exact (a quad is at most `4 · 255 · 127`, far inside i32), and
//! the f32 part is the oracle's order exactly ([`crate::kernels::scalar::accumulate8`]: block
//! `b`'s term into lane `b % 8`, separate multiply and add, then the fixed horizontal sum), so
//! every entry is bit-identical to the scalar table. Operands per dtype as in `avx2_q8.rs`
//! ([`QBlock`]): the signed types (Q8_0, IQ4_NL's codebook values) by the sign trick, the
//! unsigned nibbles (and Q5's fifth bits) directly, with `- OFFSET · Σ x` after (Q4_0, Q5_0).

use core::arch::x86_64::*;

use super::avx2_q8::{self, Iq4NlB, QBlock, Q4_0B, Q4_1B, Q5_0B, Q5_1B, Q8_0B};
use super::{hsum_ps, nibbles32, term, EvexOps, VexOps};
use crate::quant::{Q8Acts, QK};

/// A 32-element block as seen by the AVX-512 kernel (on top of its [`QBlock`] operands).
trait VBlock: QBlock {
    /// [`VBlock::operands2`] puts the two blocks in the 256-bit halves (else in alternate
    /// 128-bit lanes); see [`reduce_pairs`].
    const HALVES: bool;

    /// The operand pair of blocks `blk0` (low half) and `blk1` (high half) against `x`, the
    /// two blocks' activations as prepared by [`VBlock::prepare_x`].
    ///
    /// # Safety
    ///
    /// Both are whole blocks; AVX-512 F/BW/VL available.
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i);

    /// The activations of two blocks (`x0` the first, `x1` the second, 32 values each) laid
    /// out to match [`VBlock::operands2`]'s weight lanes.
    ///
    /// # Safety
    ///
    /// 32 readable values at each; AVX-512 F available.
    #[inline(always)]
    unsafe fn prepare_x(x0: *const i8, x1: *const i8) -> __m512i {
        // SAFETY: forwarded caller contract.
        unsafe {
            if Self::HALVES {
                let a = _mm256_loadu_si256(x0.cast());
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), _mm256_loadu_si256(x1.cast()))
            } else {
                prepare_x_q4(x0, x1)
            }
        }
    }

    /// The f16 scales (lanes 0..8) and, with [`QBlock::MIN`], minimums (lanes 8..16) of the
    /// eight blocks at `wb`, as 16-bit lanes of a 256-bit vector.
    ///
    /// # Safety
    ///
    /// Eight whole blocks at `wb`; AVX-512 F/BW available.
    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: forwarded caller contract.
        unsafe { scales8_split(wb, Self::BYTES, Self::MIN) }
    }
}

/// Two Q4 blocks' nibbles (16 bytes at `qs0` and at `qs1`) as 64 u8 lanes laid out
/// `[low nibbles of 0, low of 1, high of 0, high of 1]` (16 each).
///
/// # Safety
///
/// 16 readable bytes at each; AVX-512 F/BW available.
#[inline(always)]
unsafe fn nibbles64(qs0: *const u8, qs1: *const u8) -> __m512i {
    // SAFETY: 16 bytes readable at each (caller contract).
    unsafe {
        let v = _mm256_loadu2_m128i(qs1.cast(), qs0.cast());
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v), _mm256_srli_epi16::<4>(v));
        _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
    }
}

/// The f16 words at word offsets `stride * j` (`j < 4`, or `j < 8` when they fit) of the `len
/// <= 128` bytes at `wb`, as lanes `0..` (and, with `min`, the words one further as lanes
/// `8..`).
///
/// # Safety
///
/// `len` readable bytes at `wb` holding every word picked; AVX-512 F/BW available.
#[inline(always)]
unsafe fn pick_words(wb: *const u8, len: usize, stride: u16, min: bool) -> __m512i {
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

/// [`VBlock::scales8`] for eight blocks of `bytes` bytes (`bytes` even) at `wb`: the scales
/// (and minimums, at the next word) of blocks 0..4 and 4..8, each four picked from their own
/// `4 · bytes` bytes (or 128 when less), so nothing past the eight blocks is read.
///
/// # Safety
///
/// Eight whole blocks at `wb`; AVX-512 F/BW available.
#[inline(always)]
unsafe fn scales8_split(wb: *const u8, bytes: usize, min: bool) -> __m256i {
    // SAFETY: each pick reads inside its four blocks (caller contract).
    unsafe {
        let (len, stride) = ((4 * bytes).min(128), (bytes / 2) as u16);
        let lo = pick_words(wb, len, stride, min);
        let hi = pick_words(wb.add(4 * bytes), len, stride, min);
        let hi = _mm512_permutexvar_epi16(_mm512_loadu_si512(SPLIT_IDX.as_ptr().cast()), hi);
        _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xF0F0, lo, hi))
    }
}

/// Two blocks' activations ordered as [`nibbles64`]'s lanes: `[x0[0..16], x1[0..16],
/// x0[16..32], x1[16..32]]`.
///
/// # Safety
///
/// 32 readable values at each; AVX-512 F available.
#[inline(always)]
unsafe fn prepare_x_q4(x0: *const i8, x1: *const i8) -> __m512i {
    // SAFETY: 32 values at each (caller contract).
    unsafe {
        let a = _mm256_loadu_si256(x0.cast());
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), _mm256_loadu_si256(x1.cast()));
        // 128-bit lanes [a.lo, a.hi, b.lo, b.hi] -> [a.lo, b.lo, a.hi, b.hi].
        _mm512_shuffle_i64x2::<0b11_01_10_00>(z, z)
    }
}

/// The sign trick on 64 lanes: `|w|` and `x` negated where `w < 0`.
///
/// # Safety
///
/// AVX-512 F/BW available.
#[inline(always)]
unsafe fn signed_operands2(w: __m512i, x: __m512i) -> (__m512i, __m512i) {
    // SAFETY: register-only intrinsics.
    unsafe {
        let neg = _mm512_movepi8_mask(w);
        (_mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x))
    }
}

impl VBlock for Q8_0B {
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 32 bytes at `blk0 + 2` and `blk1 + 2` (caller contract).
        unsafe {
            let w0 = _mm256_loadu_si256(blk0.add(2).cast());
            let w1 = _mm256_loadu_si256(blk1.add(2).cast());
            signed_operands2(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0), w1), x)
        }
    }
}

impl VBlock for Q4_0B {
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 16 bytes at `blk0 + 2` and `blk1 + 2` (caller contract).
        unsafe { (nibbles64(blk0.add(2), blk1.add(2)), x) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 18-byte blocks = 144 readable bytes; the scales are words 0, 9, .., 63.
        unsafe { _mm512_castsi512_si256(pick_words(wb, 128, 9, false)) }
    }
}

impl VBlock for Iq4NlB {
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 16 bytes at `blk0 + 2` and `blk1 + 2` (caller contract); the codebook is 16
        // bytes.
        unsafe {
            let kv = _mm_loadu_si128(crate::quant::iq4_nl::KVALUES.as_ptr().cast());
            let w = _mm512_shuffle_epi8(
                _mm512_broadcast_i32x4(kv),
                nibbles64(blk0.add(2), blk1.add(2)),
            );
            signed_operands2(w, x)
        }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: as Q4_0's (the same 18-byte layout up to the codebook).
        unsafe { _mm512_castsi512_si256(pick_words(wb, 128, 9, false)) }
    }
}

impl VBlock for Q4_1B {
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 16 bytes at `blk0 + 4` and `blk1 + 4` (caller contract).
        unsafe { (nibbles64(blk0.add(4), blk1.add(4)), x) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 20-byte blocks = 160 readable bytes. Blocks 0..7 have their scale and
        // minimum (words 10 j, 10 j + 1) in the first 128 bytes; block 7's (words 70, 71) are
        // words 6, 7 of the 32 bytes at byte 128.
        unsafe {
            let t = pick_words(wb, 128, 10, true);
            let tail = _mm512_castsi256_si512(_mm256_loadu_si256(wb.add(128).cast()));
            let idx = _mm512_set_epi16(
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0,
                0, 0, 0, 0,
            );
            let t = _mm512_mask_permutexvar_epi16(t, 0x8080, idx, tail);
            _mm512_castsi512_si256(t)
        }
    }
}

/// Q5_0 on the AVX-512 tier: its 256-bit body (`avx2_q8.rs` with [`EvexOps`]) and its
/// 512-bit one both add the fifth bits through a mask register (`kmov` + masked add) instead
/// of spreading them over bytes with shuffles and compares.
pub(super) struct Q5_0E;
/// Q5_1 on the AVX-512 tier, as [`Q5_0E`].
pub(super) struct Q5_1E;

/// The 32 values of a Q5 block: [`nibbles32`] of the 16 bytes at `qs` with `16` added where the
/// fifth bit (the little-endian u32 at `qh`) is set.
///
/// # Safety
///
/// 16 readable bytes at `qs`, 4 at `qh`; AVX2 and AVX-512 BW/VL available.
#[inline(always)]
unsafe fn q5_values32(qs: *const u8, qh: *const u8) -> __m256i {
    // SAFETY: the reads are in bounds (caller contract); the rest is register-only.
    unsafe {
        let k: __mmask32 = qh.cast::<u32>().read_unaligned();
        let q = nibbles32(qs);
        _mm256_mask_add_epi8(q, k, q, _mm256_set1_epi8(0x10))
    }
}

/// `vpsrlvw` counts: 0 in 128-bit lanes 0 and 2, 4 in lanes 1 and 3.
static NIB_SHIFT: [i16; 32] = [
    0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4,
];

/// Two Q5 blocks' values in element order by 256-bit halves (`[block 0 | block 1]`, as
/// [`VBlock::HALVES`]): the 16 nibble bytes at `qs0` / `qs1`, `16` added where the fifth bit
/// (the little-endian u32 at `qh0` / `qh1`) is set, so the mask is simply `qh1:qh0`.
///
/// # Safety
///
/// 16 readable bytes at `qs0`, `qs1`, 4 at `qh0`, `qh1`; AVX-512 F/BW available.
#[inline(always)]
unsafe fn q5_values64(qs0: *const u8, qs1: *const u8, qh0: *const u8, qh1: *const u8) -> __m512i {
    // SAFETY: the reads are in bounds (caller contract); the rest is register-only.
    unsafe {
        let h0 = qh0.cast::<u32>().read_unaligned() as u64;
        let h1 = qh1.cast::<u32>().read_unaligned() as u64;
        let a = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs0.cast()));
        let b = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs1.cast()));
        // [q0, q0 >> 4, q1, q1 >> 4] by 128-bit lanes, masked to nibbles.
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        let z = _mm512_srlv_epi16(z, _mm512_loadu_si512(NIB_SHIFT.as_ptr().cast()));
        let q = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
        _mm512_mask_add_epi8(q, h0 | h1 << 32, q, _mm512_set1_epi8(0x10))
    }
}

impl QBlock for Q5_0E {
    const BYTES: usize = crate::quant::q5_0::BYTES;
    const OFFSET: i32 = 16;
    const MIN: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 4 bytes at `blk + 2`, 16 at `blk + 6` (caller contract).
        unsafe { (q5_values32(blk.add(6), blk.add(2)), x) }
    }
}

impl QBlock for Q5_1E {
    const BYTES: usize = crate::quant::q5_1::BYTES;
    const OFFSET: i32 = 0;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 4 bytes at `blk + 4`, 16 at `blk + 8` (caller contract).
        unsafe { (q5_values32(blk.add(8), blk.add(4)), x) }
    }
}

impl VBlock for Q5_0E {
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: qh at byte 2, 16 nibble bytes at 6 of each block (caller contract).
        unsafe { (q5_values64(blk0.add(6), blk1.add(6), blk0.add(2), blk1.add(2)), x) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 22-byte blocks = 176 readable bytes. The scales of blocks 0..6 are words
        // 0, 11, .., 55 of the first 128 bytes; blocks 6 and 7 (words 66, 77) are words 2 and
        // 13 of the 32 bytes at byte 128.
        unsafe {
            let t = pick_words(wb, 128, 11, false);
            let tail = _mm512_castsi256_si512(_mm256_loadu_si256(wb.add(128).cast()));
            let idx = _mm512_set_epi16(
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 13, 2, 0,
                0, 0, 0, 0, 0,
            );
            _mm512_castsi512_si256(_mm512_mask_permutexvar_epi16(t, 0x00C0, idx, tail))
        }
    }
}

impl VBlock for Q5_1E {
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: qh at byte 4, 16 nibble bytes at 8 of each block (caller contract).
        unsafe { (q5_values64(blk0.add(8), blk1.add(8), blk0.add(4), blk1.add(4)), x) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 24-byte blocks = 192 readable bytes. Blocks 0..6 have their scale and
        // minimum (words 12 j, 12 j + 1) in the first 128 bytes; blocks 6 and 7 (words 72, 73,
        // 84, 85) are words 8, 9, 20, 21 of the 64 bytes at byte 128.
        unsafe {
            let t = pick_words(wb, 128, 12, true);
            let tail = _mm512_loadu_si512(wb.add(128).cast());
            let idx = _mm512_set_epi16(
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 21, 9, 0, 0, 0, 0, 0, 0, 20, 8, 0,
                0, 0, 0, 0, 0,
            );
            _mm512_castsi512_si256(_mm512_mask_permutexvar_epi16(t, 0xC0C0, idx, tail))
        }
    }
}

/// AVX-512: `R` weight rows (row `i` at `w + i * rb`) · one activation row, into `out[0..R]`.
///
/// Per group of eight blocks, the activations of blocks `j` and `j + 4` are prepared once and
/// used by all `R` rows; each row's pair sums are reduced to eight block sums by
/// [`reduce_pairs`], and its scales come from [`VBlock::scales8`].
///
/// # Safety
///
/// `R` rows of `nb` blocks; `qs`, `d`, `s`, `sum` hold `nb * 32`, `nb`, `nb`, `nb` values;
/// AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_dot_512<Q: VBlock, const R: usize>(
    w: *const u8,
    rb: usize,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    sum: *const i32,
    out: &mut [f32; R],
) {
    // SAFETY: every block index below is `< nb` (caller contract).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut b = 0;
        while b + 8 <= nb {
            let xb = qs.add(b * QK);
            let mut p = [[_mm512_setzero_si512(); 4]; R];
            for j in 0..4 {
                let xv = Q::prepare_x(xb.add(j * QK), xb.add((j + 4) * QK));
                for (r, p) in p.iter_mut().enumerate() {
                    let wb = w.add(r * rb + b * Q::BYTES);
                    let (u, sg) =
                        Q::operands2(wb.add(j * Q::BYTES), wb.add((j + 4) * Q::BYTES), xv);
                    p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, sg);
                }
            }
            let dx = _mm256_loadu_ps(d.add(b));
            let sx = if Q::MIN { _mm256_loadu_ps(s.add(b)) } else { _mm256_setzero_ps() };
            let corr = if Q::OFFSET != 0 {
                let sx = _mm256_loadu_si256(sum.add(b).cast());
                _mm256_mullo_epi32(sx, _mm256_set1_epi32(Q::OFFSET))
            } else {
                _mm256_setzero_si256()
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                let wb = w.add(r * rb + b * Q::BYTES);
                let mut isum = reduce_pairs(p[r], Q::HALVES);
                if Q::OFFSET != 0 {
                    isum = _mm256_sub_epi32(isum, corr);
                }
                let sc = Q::scales8(wb);
                let dm = _mm512_cvtph_ps(sc);
                let dw = _mm512_castps512_ps256(dm);
                let ms = if Q::MIN {
                    let mw = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(dm)));
                    Some((mw, sx))
                } else {
                    None
                };
                *acc = term(*acc, isum, dw, dx, ms);
            }
            b += 8;
        }
        for (r, o) in out.iter_mut().enumerate() {
            let mut a = acc[r];
            if b < nb {
                a = avx2_q8::tail_blocks::<Q, EvexOps>(a, w.add(r * rb), b, nb, qs, d, s, sum);
            }
            *o = hsum_ps(a);
        }
    }
}

/// Eight block sums from four pair vectors: pair `j` holds blocks `j` and `j + 4`, four i32
/// lanes per 128-bit lane; block `j` owns 128-bit lanes 0 and 1 (`halves`, Q8_0's
/// `[block j | block j + 4]` by 256-bit halves) or 0 and 2 (the Q4 layout of
/// [`nibbles64`]). Returns block `j`'s total in lane `j`.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn reduce_pairs(p: [__m512i; 4], halves: bool) -> __m256i {
    // SAFETY: register-only intrinsics.
    unsafe {
        // Within each 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3].
        let pair =
            |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        let (p01, p23) = (pair(p[0], p[1]), pair(p[2], p[3]));
        // Within each 128-bit lane L: [Σ_L p0, Σ_L p1, Σ_L p2, Σ_L p3].
        let mut q =
            _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
        if halves {
            // [L0, L1, L2, L3] -> [L0, L2, L1, L3]: block j's lanes become 0 and 2.
            q = _mm512_shuffle_i64x2::<0b11_01_10_00>(q, q);
        }
        // Lanes 0 + 2 (blocks 0..4) and 1 + 3 (blocks 4..8).
        _mm256_add_epi32(_mm512_castsi512_si256(q), _mm512_extracti64x4_epi64::<1>(q))
    }
}

/// AVX-512: four rows at a time per activation row, the rest one by one.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn matmul_512<Q: VBlock>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let (qs, d, s, sum) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.s().as_ptr(), xq.sum().as_ptr());
    let mut r = 0;
    while r < rows {
        let four = rows - r >= 4;
        for t in 0..n {
            let o = t * nb;
            // SAFETY: rows `r .. r + 4 (or 1) <= rows` of `nb` blocks, activation row
            // `t < n <= xq.n()`, outputs `y[t * ldy + r ..]` writable (caller contract).
            unsafe {
                let (qs, d, s, sum) = (qs.add(o * QK), d.add(o), s.add(o), sum.add(o));
                let wr = w.add(r * rb);
                if four {
                    let mut out = [0f32; 4];
                    rows_dot_512::<Q, 4>(wr, rb, nb, qs, d, s, sum, &mut out);
                    for (i, v) in out.iter().enumerate() {
                        *y.add(t * ldy + r + i) = *v;
                    }
                } else {
                    let mut out = [0f32; 1];
                    rows_dot_512::<Q, 1>(wr, rb, nb, qs, d, s, sum, &mut out);
                    *y.add(t * ldy + r) = out[0];
                }
            }
        }
        r += if four { 4 } else { 1 };
    }
}

/// AVX-VNNI: the AVX2 kernel with the VEX `vpdpbusd`.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2, F16C and AVX-VNNI available.
#[inline(always)]
unsafe fn matmul_vnni<Q: QBlock>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe { avx2_q8::matmul::<Q, VexOps>(w, rb, rows, xq, n, y, ldy) }
}

/// The AVX-512 tier's 256-bit body: the AVX2 kernel with the EVEX `vpdpbusd`.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn matmul_evex<Q: QBlock>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe { avx2_q8::matmul::<Q, EvexOps>(w, rb, rows, xq, n, y, ldy) }
}

macro_rules! entry {
    ($name:ident, $body:ident, $q:ty, $feat:literal, $doc:literal) => {
        #[doc = $doc]
        ///
        /// # Safety
        ///
        /// As [`crate::kernels::MatmulQ8Fn`]; the CPU has the features enabled here.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn $name(
            w: *const u8,
            rb: usize,
            rows: usize,
            xq: &Q8Acts<'_>,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            // SAFETY: forwarded caller contract; the features are enabled here.
            unsafe { $body::<$q>(w, rb, rows, xq, n, y, ldy) }
        }
    };
}

entry!(vnni_q8_0_q8, matmul_vnni, Q8_0B, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");
entry!(vnni_q4_0_q8, matmul_vnni, Q4_0B, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");
entry!(vnni_q4_1_q8, matmul_vnni, Q4_1B, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");
entry!(vnni_q5_0_q8, matmul_vnni, Q5_0B, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");
entry!(vnni_q5_1_q8, matmul_vnni, Q5_1B, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");
entry!(vnni_iq4_nl_q8, matmul_vnni, Iq4NlB, "avx2,fma,f16c,avxvnni", "AVX-VNNI table entry.");

/// The AVX-512 tier's body choice: the 512-bit body for rows of at least `min_512` blocks, the
/// 256-bit EVEX one below (`usize::MAX`: always 256-bit). Both give the same bits.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_avx512<Q: VBlock>(
    min_512: usize,
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe {
        if xq.nb() >= min_512 {
            matmul_512::<Q>(w, rb, rows, xq, n, y, ldy)
        } else {
            matmul_evex::<Q>(w, rb, rows, xq, n, y, ldy)
        }
    }
}

/// The AVX-512 tier's entries, each with its [`matmul_avx512`] threshold (in 32-element
/// blocks per row), measured on this tier's reference machine (Sapphire Rapids class, where
/// 512-bit `vpdpbusd` runs no faster per byte than two 256-bit ones): the 512-bit body's four
/// rows per activation load pay off only on long rows, and its one-by-one tail blocks cost
/// most on short ones (K = 576 is 16 blocks + 2).
macro_rules! avx512_entries {
    ($($name:ident, $q:ty, $min_512:expr;)*) => { $(
        /// AVX-512 table entry.
        ///
        /// # Safety
        ///
        /// As [`crate::kernels::MatmulQ8Fn`]; the CPU has the features enabled here.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) unsafe fn $name(
            w: *const u8,
            rb: usize,
            rows: usize,
            xq: &Q8Acts<'_>,
            n: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            // SAFETY: forwarded caller contract; the features are enabled here.
            unsafe { matmul_avx512::<$q>($min_512, w, rb, rows, xq, n, y, ldy) }
        }
    )* };
}

avx512_entries! {
    avx512_q8_0_q8, Q8_0B, 128;
    avx512_q4_0_q8, Q4_0B, usize::MAX;
    avx512_q4_1_q8, Q4_1B, 128;
    avx512_q5_0_q8, Q5_0E, 32;
    avx512_q5_1_q8, Q5_1E, 32;
    avx512_iq4_nl_q8, Iq4NlB, usize::MAX;
}
