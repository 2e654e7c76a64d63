//! int8 kernels for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) × Q8_K activations
//! ([`crate::quant::ActFormat::Q8K`]): the AVX2 and AVX-VNNI tiers' [`KTier`] (their tiles
//! and schedule are the kernel frame's, [`crate::kernels::frame::k`]), the 128-bit scale
//! unpackers the AVX-512 kernels share, and the one-row loop the AVX-512 GEMV takes for its
//! last rows ([`matmul`]).
//!
//! Each super-block is decoded into element order ([`K256::decode`]: 32 unsigned values per
//! vector with each i16 lane's sub-block scale beside them, and the i16 weights of the
//! activations' per-16 sums). Per super-block the exact integer sums of the scalar oracle
//! (`crate::quant::q4_k` etc.) come from `maddubs` (unsigned weight values × signed
//! activations into i16 pairs, never saturating: at most `2 · 63 · 127`) and a
//! multiply-accumulate of those pairs by the sub-block scale in i16 ([`Dot256::madd_acc`]:
//! `madd` + add, or VNNI's `vpdpwssd`). Signed values are made unsigned by an offset (Q3_K
//! `+ 4`, Q6_K `+ 32`) taken back with the activations' per-16 sums, which also give the mins
//! of Q2_K/Q4_K/Q5_K. The f32 part is the frame's, the oracle's term for term: super-block
//! `b` into lane `b % 8` ([`crate::kernels::scalar::accumulate8`]'s order), then [`hsum8`]'s
//! tree, so the results are bit-identical to the scalar table.

use core::arch::x86_64::*;
use core::marker::PhantomData;

use super::{reduce8, Dot256, X86Prefetch};
use crate::kernels::frame::k::KTier;
use crate::kernels::scalar::hsum8;
use crate::quant::{Q8Acts, QK_K};

/// A K-quant super-block as the int8 kernels see it.
pub(crate) trait KBlock {
    /// Bytes per super-block.
    const BYTES: usize;
    /// Byte offset of the f16 `d` (followed by the f16 `dmin` when [`KBlock::MINS`]).
    const D_AT: usize;
    /// Whether the term subtracts `(dmin · dx) · msum`.
    const MINS: bool;
}

macro_rules! k_block {
    ($($k:ident, $b:ident;)*) => { $(
        impl KBlock for $k {
            const BYTES: usize = $b::BYTES;
            const D_AT: usize = $b::D_OFFSET;
            const MINS: bool = $b::HAS_M;
        }
    )* };
}
pub(crate) use k_block;

/// The 16 per-16 activation sums at `bsums` as i16 lanes in order (each is at most
/// `16 · 127` in magnitude, so the saturating narrowing is exact).
///
/// # Safety
///
/// 16 readable sums at `bsums`; AVX2 available.
#[inline(always)]
pub(super) unsafe fn bsums16(bsums: *const i32) -> __m256i {
    // SAFETY: 16 sums readable (caller contract); the rest is register-only.
    unsafe {
        let b0 = _mm256_loadu_si256(bsums.cast());
        let b1 = _mm256_loadu_si256(bsums.add(8).cast());
        // packs: 64-bit quarters [0..4, 8..12, 4..8, 12..16]: swap the middle two.
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(b0, b1))
    }
}

/// The 16 Q3_K sub-block scales (`crate::quant::q3_k::scales_q3`, each `-32..=31`) of the 12
/// packed bytes at `sp` as i16 lanes in order, unpacked in registers.
///
/// # Safety
///
/// The 16 bytes at `sp - 4 .. sp + 12` are readable (the scales sit at 96..108 of the
/// 110-byte super-block); AVX2 available.
#[inline(always)]
pub(crate) unsafe fn q3_scales16(sp: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes at `sp - 4` (caller contract); the rest is register-only.
    unsafe {
        // Bytes 0..8: a0..a7 (low nibbles: scales 0..8, high nibbles: 8..16), 8..12: c0..c3.
        let t = _mm_srli_si128::<4>(_mm_loadu_si128(sp.sub(4).cast()));
        let lo = _mm_unpacklo_epi64(t, _mm_srli_epi16::<4>(t));
        let lo = _mm_and_si128(lo, _mm_set1_epi8(0x0F));
        // Scale j takes bits 2 (j / 4), +1 of c[j % 4] as its bits 4, 5.
        let c = _mm_shuffle_epi8(
            t,
            _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11),
        );
        let hi = _mm_slli_epi32::<4>(_mm_srlv_epi32(c, _mm_setr_epi32(0, 2, 4, 6)));
        let hi = _mm_and_si128(hi, _mm_set1_epi8(0x30));
        let s8 = _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
        _mm256_cvtepi8_epi16(s8)
    }
}

/// The 8 scales then 8 mins of a Q4_K/Q5_K super-block (`scales_mins_k4`, each `0..=63`)
/// from the 12 packed bytes at `sp`, as u8 lanes, unpacked in registers.
///
/// # Safety
///
/// The 16 bytes at `sp - 4 .. sp + 12` are readable (the scales sit at 4..16 of the
/// super-block); AVX2 available.
#[inline(always)]
pub(super) unsafe fn k4_scales_mins(sp: *const u8) -> __m128i {
    // SAFETY: 16 readable bytes at `sp - 4` (caller contract); the rest is register-only.
    unsafe {
        // Packed byte i is lane i + 4 of `v`.
        let v = _mm_loadu_si128(sp.sub(4).cast());
        // Low parts: s[0..4] & 63, s[8..12] & 15, s[4..8] & 63, s[8..12] >> 4.
        let a = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15),
        );
        let a = _mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4));
        let a =
            _mm_and_si128(a, _mm_setr_epi32(0x3F3F_3F3F, 0x0F0F_0F0F, 0x3F3F_3F3F, 0x0F0F_0F0F));
        // High parts of entries 4..8 and 12..16: bits 6, 7 of s[0..4] and s[4..8] as bits 4, 5.
        let m = -128i8;
        let b =
            _mm_shuffle_epi8(v, _mm_setr_epi8(m, m, m, m, 4, 5, 6, 7, m, m, m, m, 8, 9, 10, 11));
        let b = _mm_and_si128(_mm_srli_epi16::<2>(b), _mm_set1_epi8(0x30));
        _mm_or_si128(a, b)
    }
}

/// `v` with bit `i` of every byte moved to bit `to` and the other bits cleared.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
pub(crate) unsafe fn bit_to(v: __m256i, i: i32, to: i32) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics. 16-bit shifts by less than 8 keep each byte's
    // bit `i` inside its byte at `to`; the mask drops what crossed from the neighbour.
    unsafe {
        let moved = if i >= to {
            _mm256_srl_epi16(v, _mm_cvtsi32_si128(i - to))
        } else {
            _mm256_sll_epi16(v, _mm_cvtsi32_si128(to - i))
        };
        _mm256_and_si256(moved, _mm256_set1_epi8((1 << to) as i8))
    }
}

/// The `pshufb` control word that picks i16 lane `j < 8` (bytes `2 j`, `2 j + 1`).
const fn word_ctl(j: usize) -> i16 {
    (((2 * j + 1) << 8) | (2 * j)) as i16
}

/// The i16 scale vector of the 32 elements `128 h + 32 g ..` of a 16-element-sub-block type:
/// sub-block `8 h + 2 g` in the low 128-bit lane, `8 h + 2 g + 1` in the high one, from the
/// 16 i16 scales `sc` (sub-blocks 0..8 in the low lane, 8..16 in the high).
///
/// # Safety
///
/// AVX2 available; `h < 2`, `g < 4`.
#[inline(always)]
unsafe fn scale_pair(sc: __m256i, h: usize, g: usize) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let bc = if h == 0 {
            _mm256_permute2x128_si256::<0x00>(sc, sc)
        } else {
            _mm256_permute2x128_si256::<0x11>(sc, sc)
        };
        let ctl =
            _mm256_set_m128i(_mm_set1_epi16(word_ctl(2 * g + 1)), _mm_set1_epi16(word_ctl(2 * g)));
        _mm256_shuffle_epi8(bc, ctl)
    }
}

/// The i16 scale `j < 8` of the 8 i16 scales in the low lane of `sc`, in every lane.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn scale_one(sc: __m256i, j: usize) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let ctl = _mm256_set1_epi16(word_ctl(j));
        _mm256_shuffle_epi8(_mm256_permute2x128_si256::<0x00>(sc, sc), ctl)
    }
}

/// One super-block decoded for the 256-bit dot: `u[k]` the unsigned values of elements
/// `32 k .. 32 k + 32`, `sc[k]` each i16 lane's sub-block scale for them, `c` the i16 weight
/// of each per-16 activation sum (lane `i` for sum `i`): the mins (Q2_K, Q4_K, Q5_K: the
/// `msum`), or the offset correction `-offset · sc_i` folded into the `isum` (Q3_K `- 4 ·`,
/// Q6_K `- 32 ·`, each within i16).
#[derive(Clone, Copy)]
pub(crate) struct KW {
    u: [__m256i; 8],
    sc: [__m256i; 8],
    c: __m256i,
}

/// A K-quant super-block on 256-bit registers.
pub(crate) trait K256: KBlock {
    /// The super-block at `blk` in element order ([`KW`]).
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; AVX2 available.
    unsafe fn decode(blk: *const u8) -> KW;
}

/// The [`KW`] of a 16-element-sub-block type from its 16 i16 scales `sc`, per-16 weights `c`
/// and `values(h, g)`, the 32 unsigned values of elements `128 h + 32 g ..`.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
pub(crate) unsafe fn kw16(
    sc: __m256i,
    c: __m256i,
    mut values: impl FnMut(usize, usize) -> __m256i,
) -> KW {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe {
        let mut kw = KW { u: [_mm256_setzero_si256(); 8], sc: [_mm256_setzero_si256(); 8], c };
        for h in 0..2 {
            for g in 0..4 {
                kw.u[4 * h + g] = values(h, g);
                kw.sc[4 * h + g] = scale_pair(sc, h, g);
            }
        }
        kw
    }
}

/// The shared Q4_K/Q5_K decode: 4-bit values from `qs` (128 bytes), with `fifth(j)` (0 or 16
/// per byte) or'ed into sub-block `j`, scales and mins from the 12 packed bytes at `sp`.
///
/// # Safety
///
/// 128 readable bytes at `qs`, 16 at `sp - 4`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn decode_k4(
    sp: *const u8,
    qs: *const u8,
    mut fifth: impl FnMut(usize) -> Option<__m256i>,
) -> KW {
    // SAFETY: the reads stay inside the ranges of the caller contract.
    unsafe {
        let sm = k4_scales_mins(sp);
        let sc = _mm256_cvtepu8_epi16(sm);
        // Per-16 weight `i`: the min of 32-element sub-block `i / 2`.
        let m = _mm_srli_si128::<8>(sm);
        let mut kw = KW {
            u: [_mm256_setzero_si256(); 8],
            sc: [_mm256_setzero_si256(); 8],
            c: _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m)),
        };
        let m4 = _mm256_set1_epi8(0x0F);
        for c in 0..4 {
            let q = _mm256_loadu_si256(qs.add(32 * c).cast());
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            if let Some(h) = fifth(2 * c) {
                lo = _mm256_or_si256(lo, h);
            }
            if let Some(h) = fifth(2 * c + 1) {
                hi = _mm256_or_si256(hi, h);
            }
            kw.u[2 * c] = lo;
            kw.u[2 * c + 1] = hi;
            kw.sc[2 * c] = scale_one(sc, 2 * c);
            kw.sc[2 * c + 1] = scale_one(sc, 2 * c + 1);
        }
        kw
    }
}

/// The AVX2 and AVX-VNNI tiers' [`KTier`] ([`Avx2Ops`] / [`VexOps`] for `D`): [`K256::decode`],
/// the dot by `maddubs` and `D`'s multiply-accumulate by the scales, the per-16 sums by one
/// `madd`, up to eight outputs' sums reduced together ([`reduce8`]).
pub(crate) struct Avx2K<D>(PhantomData<D>);

impl<K: K256, D: Dot256> KTier<K> for Avx2K<D> {
    const BYTES: usize = K::BYTES;
    const D_AT: usize = K::D_AT;
    const MINS: bool = K::MINS;
    type Prefetch = X86Prefetch;
    type W = KW;
    /// `(isum, msum)` lane vectors.
    type S = (__m256i, __m256i);
    type F = __m256;

    #[inline(always)]
    unsafe fn decode(blk: *const u8) -> KW {
        // SAFETY: forwarded caller contract.
        unsafe { K::decode(blk) }
    }

    #[inline(always)]
    unsafe fn dot(w: &KW, x: *const i8, bsums: *const i32) -> (__m256i, __m256i) {
        // SAFETY: the reads stay inside the 256 values and 16 sums (caller contract); the
        // pair sums of `maddubs` never saturate (at most `2 · 63 · 127`).
        unsafe {
            let mut acc = _mm256_setzero_si256();
            for k in 0..8 {
                let xv = _mm256_loadu_si256(x.add(32 * k).cast());
                acc = D::madd_acc(acc, _mm256_maddubs_epi16(w.u[k], xv), w.sc[k]);
            }
            let c = _mm256_madd_epi16(w.c, bsums16(bsums));
            if K::MINS {
                (acc, c)
            } else {
                (_mm256_add_epi32(acc, c), _mm256_setzero_si256())
            }
        }
    }

    #[inline(always)]
    unsafe fn totals<const P: usize>(s: &[(__m256i, __m256i); P]) -> (__m256, __m256) {
        // SAFETY: register-only AVX2 intrinsics.
        unsafe {
            let z = _mm256_setzero_si256();
            if K::MINS && P <= 4 {
                // One reduction: lanes 0..4 the `isum`s, 4..8 the `msum`s.
                let mut v = [z; 8];
                for (o, s) in s.iter().enumerate() {
                    (v[o], v[4 + o]) = *s;
                }
                let r = reduce8(v);
                (_mm256_cvtepi32_ps(r), _mm256_cvtepi32_ps(_mm256_permute2x128_si256::<0x01>(r, r)))
            } else {
                let (mut is, mut ms) = ([z; 8], [z; 8]);
                for (o, s) in s.iter().enumerate() {
                    (is[o], ms[o]) = *s;
                }
                let ms =
                    if K::MINS { _mm256_cvtepi32_ps(reduce8(ms)) } else { _mm256_setzero_ps() };
                (_mm256_cvtepi32_ps(reduce8(is)), ms)
            }
        }
    }

    #[inline(always)]
    unsafe fn f16(h: [u16; 8]) -> __m256 {
        // SAFETY: register-only F16C/AVX intrinsics (F16C is part of every x86 SIMD tier).
        unsafe {
            let h = _mm_setr_epi16(
                h[0] as i16,
                h[1] as i16,
                h[2] as i16,
                h[3] as i16,
                h[4] as i16,
                h[5] as i16,
                h[6] as i16,
                h[7] as i16,
            );
            _mm256_cvtph_ps(h)
        }
    }

    #[inline(always)]
    unsafe fn lanes(v: [f32; 8]) -> __m256 {
        // SAFETY: register-only AVX intrinsic.
        unsafe { _mm256_setr_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]) }
    }

    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        // SAFETY: register-only AVX intrinsic.
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        // SAFETY: register-only AVX intrinsic.
        unsafe { _mm256_sub_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        // SAFETY: register-only AVX intrinsic.
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    unsafe fn array(a: __m256) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: an 8-lane store into a local array.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), a) };
        out
    }
}

/// A tier's way of getting one super-block's `(isum, msum)`: the activations of a super-block
/// prepared once ([`KDot::prep`]) for every weight row that uses them.
pub(crate) trait KDot {
    /// The super-block type.
    type K: KBlock;
    /// Prepared activations of one super-block.
    type X: Copy;

    /// Prepares the 256 activations at `x`.
    ///
    /// # Safety
    ///
    /// 256 readable values at `x`; the tier's features available.
    unsafe fn prep(x: *const i8) -> Self::X;

    /// As [`KBlock::isums`] against prepared activations.
    ///
    /// # Safety
    ///
    /// As [`KBlock::isums`].
    unsafe fn isums(blk: *const u8, x: &Self::X, bsums: *const i32) -> (i32, i32);
}

/// `(d, dmin)` of the super-block at `blk` (`dmin` 0 without mins).
///
/// # Safety
///
/// `blk` is a whole super-block; F16C available.
#[inline(always)]
pub(super) unsafe fn scales<K: KBlock>(blk: *const u8) -> (f32, f32) {
    // SAFETY: `d` (and `dmin`) are inside the super-block (caller contract).
    unsafe {
        let p = blk.add(K::D_AT);
        if K::MINS {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()));
            (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
        } else {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<u16>().read_unaligned() as i32));
            (_mm_cvtss_f32(v), 0.0)
        }
    }
}

/// `R` weight rows (row `i` at `w + i * rb`) · activation row `t`, into `y[t * ldy + i]`:
/// per super-block the activations are prepared once for all `R` rows, and each row's term
/// is the oracle's, into lane `b % 8`.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] for `R` rows; `t < xq.n()`; the tier's features available.
#[inline(always)]
unsafe fn rows_dot<T: KDot, const R: usize>(
    w: *const u8,
    rb: usize,
    xq: &Q8Acts<'_>,
    t: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let (qs, d, sums) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.sum().as_ptr());
    let mut acc = [[0f32; 8]; R];
    for b in 0..nb {
        let i = t * nb + b;
        // SAFETY: super-block `b < nb` of rows `< R`, activation block `i` of row `t < xq.n()`
        // (caller contract).
        unsafe {
            let xp = T::prep(qs.add(i * QK_K));
            let dx = *d.add(i);
            for (r, acc) in acc.iter_mut().enumerate() {
                let blk = w.add(r * rb + b * T::K::BYTES);
                let (is, ms) = T::isums(blk, &xp, sums.add(i * 16));
                let (dw, dmin) = scales::<T::K>(blk);
                let term = if T::K::MINS {
                    (dw * dx) * is as f32 - (dmin * dx) * ms as f32
                } else {
                    (dw * dx) * is as f32
                };
                acc[b % 8] += term;
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: `y[t * ldy + r]` is writable (caller contract).
        unsafe { *y.add(t * ldy + r) = hsum8(acc) };
    }
}

/// The AVX-512 GEMV's loop for its last rows: groups of `R` rows per activation row (the tier's
/// prepared activations shared by them), the remaining rows one by one.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] with `xq` in the Q8_K format; the tier's features
/// available.
#[inline(always)]
pub(crate) unsafe fn matmul<T: KDot, const R: usize>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let mut r = 0;
    while r < rows {
        let group = rows - r >= R;
        for t in 0..n {
            // SAFETY: rows `r .. r + R (or 1) <= rows` and their outputs (caller contract).
            unsafe {
                if group {
                    rows_dot::<T, R>(w.add(r * rb), rb, xq, t, y.add(r), ldy);
                } else {
                    rows_dot::<T, 1>(w.add(r * rb), rb, xq, t, y.add(r), ldy);
                }
            }
        }
        r += if group { R } else { 1 };
    }
}
