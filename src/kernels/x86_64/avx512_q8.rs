//! VNNI int8 kernels: quantized weights × Q8 activations with `vpdpbusd` (u8 × i8 quads summed
//! into i32 lanes in one instruction), for two tiers:
//!
//! - **AVX-512** (F/BW/VL + AVX512-VNNI): 512-bit `vpdpbusd` over two blocks at once (block
//!   `j` and `j + 4` of each group of eight), four weight rows per activation load, the eight
//!   block sums of a row reduced in three shuffle steps, and the f16 block scales picked out
//!   of the row with one or two `vpermt2w` instead of eight scalar inserts.
//! - **AVX-VNNI** (the VEX-encoded 256-bit `vpdpbusd`): the AVX2 kernel's structure with
//!   `vpdpbusd` in place of `maddubs` + `madd`.
//!
//! The integer block sums are exact (a quad is at most `4 · 255 · 127`, far inside i32), and
//! the f32 part is the oracle's order exactly ([`crate::kernels::scalar::accumulate8`]: block
//! `b`'s term into lane `b % 8`, separate multiply and add, then the fixed horizontal sum), so
//! every entry is bit-identical to the scalar table. Operands per dtype as in `avx2_q8.rs`:
//! Q8_0 by the sign trick (`|w|` as u8 times `x` with `w`'s sign; activations are never -128),
//! Q4_0 / Q4_1 with the nibbles as the unsigned operand (Q4_0 subtracts `8 · Σ x` after).

use core::arch::x86_64::*;

use super::hsum_ps;
use crate::quant::{Q8Acts, QK};

/// A quantized weight block as seen by the VNNI kernels.
trait VBlock {
    /// Bytes per block.
    const BYTES: usize;
    /// Q4_0: the block sum needs `- 8 · Σ x`.
    const MINUS_8_SUM: bool;
    /// Q4_1: the block term adds `m · s`.
    const MIN: bool;
    /// [`VBlock::operands2`] puts the two blocks in the 256-bit halves (else in alternate
    /// 128-bit lanes); see [`reduce_pairs`].
    const HALVES: bool;

    /// The (unsigned, signed) operand pair of one block and the 32 activation values `x`
    /// (256-bit).
    ///
    /// # Safety
    ///
    /// `blk` is a whole block; AVX2 available.
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i);

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
    unsafe fn prepare_x(x0: *const i8, x1: *const i8) -> __m512i;

    /// The f16 scales (lanes 0..8) and, for Q4_1, minimums (lanes 8..16) of the eight blocks
    /// at `wb`, as 16-bit lanes of a 256-bit vector.
    ///
    /// # Safety
    ///
    /// Eight whole blocks at `wb`; AVX-512 F/BW available.
    unsafe fn scales8(wb: *const u8) -> __m256i;
}

struct Q8_0B;
struct Q4_0B;
struct Q4_1B;

/// The 32 nibbles of a Q4 block's 16 bytes at `qs` as u8 lanes in element order.
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
unsafe fn nibbles32(qs: *const u8) -> __m256i {
    // SAFETY: 16 bytes readable (caller contract).
    unsafe {
        let v = _mm_loadu_si128(qs.cast());
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(v), v);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
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

/// The f16 words at word offsets `stride * j` (`j < 8`) of the 128 bytes at `wb`, as lanes
/// `0..8` (and, with `min`, the words one further as lanes `8..16`).
///
/// # Safety
///
/// 128 readable bytes at `wb`, every offset below 64 words; AVX-512 F/BW available.
#[inline(always)]
unsafe fn pick_words(wb: *const u8, stride: u16, min: bool) -> __m512i {
    // SAFETY: two 64-byte loads inside the 128 readable bytes (caller contract).
    unsafe {
        let (z0, z1) = (_mm512_loadu_si512(wb.cast()), _mm512_loadu_si512(wb.add(64).cast()));
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

impl VBlock for Q8_0B {
    const BYTES: usize = 34;
    const MINUS_8_SUM: bool = false;
    const MIN: bool = false;
    const HALVES: bool = true;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 32 bytes at `blk + 2` (caller contract).
        unsafe {
            let w = _mm256_loadu_si256(blk.add(2).cast());
            (_mm256_abs_epi8(w), _mm256_sign_epi8(x, w))
        }
    }

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 32 bytes at `blk0 + 2` and `blk1 + 2` (caller contract).
        unsafe {
            let w0 = _mm256_loadu_si256(blk0.add(2).cast());
            let w1 = _mm256_loadu_si256(blk1.add(2).cast());
            let w = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(w0), w1);
            let neg = _mm512_movepi8_mask(w);
            (_mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x))
        }
    }

    #[inline(always)]
    unsafe fn prepare_x(x0: *const i8, x1: *const i8) -> __m512i {
        // SAFETY: 32 values at each (caller contract).
        unsafe {
            let a = _mm256_loadu_si256(x0.cast());
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), _mm256_loadu_si256(x1.cast()))
        }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 34-byte blocks = 272 readable bytes: blocks 0..4 are inside the first
        // 128, blocks 4..8 inside the 128 from byte 136.
        unsafe {
            let lo = pick_words(wb, 17, false);
            let hi = pick_words(wb.add(136), 17, false);
            // Lanes 4..8 of `hi` hold blocks 0..4 of the second half: move them to 4..8.
            let hi = _mm512_permutexvar_epi16(
                _mm512_set_epi16(
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 2,
                    1, 0, 0, 0, 0, 0,
                ),
                hi,
            );
            _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xF0, lo, hi))
        }
    }
}

impl VBlock for Q4_0B {
    const BYTES: usize = 18;
    const MINUS_8_SUM: bool = true;
    const MIN: bool = false;
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `blk + 2` (caller contract).
        unsafe { (nibbles32(blk.add(2)), x) }
    }

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 16 bytes at `blk0 + 2` and `blk1 + 2` (caller contract).
        unsafe { (nibbles64(blk0.add(2), blk1.add(2)), x) }
    }

    #[inline(always)]
    unsafe fn prepare_x(x0: *const i8, x1: *const i8) -> __m512i {
        // SAFETY: forwarded caller contract.
        unsafe { prepare_x_q4(x0, x1) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 18-byte blocks = 144 readable bytes; the scales are words 0, 9, .., 63.
        unsafe { _mm512_castsi512_si256(pick_words(wb, 9, false)) }
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

impl VBlock for Q4_1B {
    const BYTES: usize = 20;
    const MINUS_8_SUM: bool = false;
    const MIN: bool = true;
    const HALVES: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `blk + 4` (caller contract).
        unsafe { (nibbles32(blk.add(4)), x) }
    }

    #[inline(always)]
    unsafe fn operands2(blk0: *const u8, blk1: *const u8, x: __m512i) -> (__m512i, __m512i) {
        // SAFETY: 16 bytes at `blk0 + 4` and `blk1 + 4` (caller contract).
        unsafe { (nibbles64(blk0.add(4), blk1.add(4)), x) }
    }

    #[inline(always)]
    unsafe fn prepare_x(x0: *const i8, x1: *const i8) -> __m512i {
        // SAFETY: forwarded caller contract.
        unsafe { prepare_x_q4(x0, x1) }
    }

    #[inline(always)]
    unsafe fn scales8(wb: *const u8) -> __m256i {
        // SAFETY: eight 20-byte blocks = 160 readable bytes. Blocks 0..7 have their scale and
        // minimum (words 10 j, 10 j + 1) in the first 128 bytes; block 7's (words 70, 71) are
        // words 6, 7 of the 32 bytes at byte 128.
        unsafe {
            let t = pick_words(wb, 10, true);
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

/// The f16 at `p` as f32.
///
/// # Safety
///
/// 2 readable bytes; F16C available.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: 2 bytes readable (caller contract).
    unsafe {
        let h = p.cast::<u16>().read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }
}

/// The total of one vector's 8 i32 lanes.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn hsum_epi32(v: __m256i) -> i32 {
    // SAFETY: register-only intrinsics.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
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

/// The blocks `b..nb` (fewer than eight) of one row, one at a time with 256-bit `vpdpbusd`
/// (`vex`: the AVX-VNNI encoding, else AVX512-VNNI's), added to `acc` in the oracle's order.
///
/// # Safety
///
/// As [`row_dot_vnni`]; `nb - b < 8`; the CPU has the chosen VNNI encoding.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tail_blocks<Q: VBlock, const VEX: bool>(
    acc: __m256,
    w: *const u8,
    b: usize,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    sum: *const i32,
) -> __m256 {
    // SAFETY: blocks `b..nb` are in bounds (caller contract).
    unsafe {
        let (mut is, mut dw, mut dx) = ([0i32; 8], [0f32; 8], [0f32; 8]);
        let (mut mw, mut sx) = ([0f32; 8], [0f32; 8]);
        for j in 0..nb - b {
            let blk = w.add((b + j) * Q::BYTES);
            let xv = _mm256_loadu_si256(qs.add((b + j) * QK).cast());
            let (u, sg) = Q::operands(blk, xv);
            is[j] = hsum_epi32(dpbusd256::<VEX>(u, sg));
            if Q::MINUS_8_SUM {
                is[j] -= 8 * *sum.add(b + j);
            }
            dw[j] = f16_at(blk);
            dx[j] = *d.add(b + j);
            if Q::MIN {
                mw[j] = f16_at(blk.add(2));
                sx[j] = *s.add(b + j);
            }
        }
        let ms = if Q::MIN {
            Some((_mm256_loadu_ps(mw.as_ptr()), _mm256_loadu_ps(sx.as_ptr())))
        } else {
            None
        };
        let isum = _mm256_loadu_si256(is.as_ptr().cast());
        term(acc, isum, _mm256_loadu_ps(dw.as_ptr()), _mm256_loadu_ps(dx.as_ptr()), ms)
    }
}

/// `Σ` over quads of `u · s` as 8 i32 lanes, by the VEX (AVX-VNNI) or EVEX (AVX512-VNNI)
/// `vpdpbusd`.
///
/// # Safety
///
/// The chosen encoding's features are available.
#[inline(always)]
unsafe fn dpbusd256<const VEX: bool>(u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: register-only VNNI intrinsics (feature availability: caller contract).
    unsafe {
        if VEX {
            _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
        } else {
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
        }
    }
}

/// The eight lane totals of `v[0..8]`, in order, as one vector (as `avx2_q8.rs`).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn reduce8(v: [__m256i; 8]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let pair =
            |a, b| _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        let (p01, p23, p45, p67) =
            (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
        let quad =
            |a, b| _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
        let (q0, q1) = (quad(p01, p23), quad(p45, p67));
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(q0, q1),
            _mm256_permute2x128_si256::<0x31>(q0, q1),
        )
    }
}

/// AVX-VNNI: one weight row (`nb` blocks at `w`) · one activation row.
///
/// # Safety
///
/// `w` holds `nb` blocks; `qs`, `d`, `s`, `sum` hold `nb * 32`, `nb`, `nb`, `nb` values;
/// AVX2, F16C and AVX-VNNI available.
#[inline(always)]
unsafe fn row_dot_vnni<Q: VBlock>(
    w: *const u8,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    s: *const f32,
    sum: *const i32,
) -> f32 {
    // SAFETY: every block index below is `< nb` (caller contract).
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut b = 0;
        while b + 8 <= nb {
            let wb = w.add(b * Q::BYTES);
            let xb = qs.add(b * QK);
            let mut v = [_mm256_setzero_si256(); 8];
            for (j, v) in v.iter_mut().enumerate() {
                let xv = _mm256_loadu_si256(xb.add(j * QK).cast());
                let (u, sg) = Q::operands(wb.add(j * Q::BYTES), xv);
                *v = dpbusd256::<true>(u, sg);
            }
            let mut isum = reduce8(v);
            if Q::MINUS_8_SUM {
                let sx = _mm256_loadu_si256(sum.add(b).cast());
                isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<3>(sx));
            }
            let ms = if Q::MIN {
                Some((gather_f16(wb.add(2), Q::BYTES), _mm256_loadu_ps(s.add(b))))
            } else {
                None
            };
            acc = term(acc, isum, gather_f16(wb, Q::BYTES), _mm256_loadu_ps(d.add(b)), ms);
            b += 8;
        }
        if b < nb {
            acc = tail_blocks::<Q, true>(acc, w, b, nb, qs, d, s, sum);
        }
        hsum_ps(acc)
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
            let corr = if Q::MINUS_8_SUM {
                _mm256_slli_epi32::<3>(_mm256_loadu_si256(sum.add(b).cast()))
            } else {
                _mm256_setzero_si256()
            };
            for (r, acc) in acc.iter_mut().enumerate() {
                let wb = w.add(r * rb + b * Q::BYTES);
                let mut isum = reduce_pairs(p[r], Q::HALVES);
                if Q::MINUS_8_SUM {
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
                a = tail_blocks::<Q, false>(a, w.add(r * rb), b, nb, qs, d, s, sum);
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

/// AVX-VNNI: every (row, activation row) pair, one row at a time.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2, F16C and AVX-VNNI available.
#[inline(always)]
unsafe fn matmul_vnni<Q: VBlock>(
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
    for r in 0..rows {
        for t in 0..n {
            let o = t * nb;
            // SAFETY: row `r < rows` of `nb` blocks, activation row `t < n <= xq.n()`, and
            // `y[t * ldy + r]` writable (caller contract).
            unsafe {
                *y.add(t * ldy + r) = row_dot_vnni::<Q>(
                    w.add(r * rb),
                    nb,
                    qs.add(o * QK),
                    d.add(o),
                    s.add(o),
                    sum.add(o),
                );
            }
        }
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
entry!(
    avx512_q8_0_q8,
    matmul_512,
    Q8_0B,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    "AVX-512 table entry."
);
entry!(
    avx512_q4_0_q8,
    matmul_512,
    Q4_0B,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    "AVX-512 table entry."
);
entry!(
    avx512_q4_1_q8,
    matmul_512,
    Q4_1B,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    "AVX-512 table entry."
);
