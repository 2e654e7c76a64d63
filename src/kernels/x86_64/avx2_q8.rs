//! AVX2 int8 kernels: quantized weights × Q8 activations ([`crate::quant::Q8Acts`]),
//! and the Q8 quantizer.
//!
//! Per block the exact i32 dot product comes from `maddubs` (u8 × i8 pairs into i16) and
//! `madd` (i16 pairs into i32):
//! - Q8_0: the sign trick — `|w|` as u8 (`|-128|` = 128 fits) times `x` with `w`'s sign
//!   (activations are never -128, so negating them cannot overflow); a pair is at most
//!   `2 · 128 · 127 = 32512`, so `maddubs` never saturates.
//! - Q4_0 / Q4_1: the nibbles (0..=15) are already unsigned: `Σ nibble · x` directly (a pair
//!   is at most `2 · 15 · 128`), and Q4_0 subtracts `8 · Σ x` afterwards.
//!
//! Eight blocks' i32 vectors are reduced together (unpack + add), and the f32 part follows the
//! oracle's order exactly ([`crate::kernels::scalar::accumulate8`]: block `b` into lane
//! `b % 8` with separate multiply and add, then the fixed horizontal sum), so the results
//! are bit-identical to the scalar table.

use core::arch::x86_64::*;

use super::{
    f16_at, fifth_bits, gather_f16, hsum_epi32, hsum_ps, iq4_values32, nibbles32, reduce8, term,
    Avx2Ops, Dot256,
};
use crate::quant::{Q8Acts, QK};

/// A 32-element quantized weight block as seen by the int8 kernels (this file's and the VNNI
/// tiers' of `avx512_q8.rs`).
pub(super) trait QBlock {
    /// Bytes per block.
    const BYTES: usize;
    /// The block sum needs `- OFFSET · Σ x` (8 for Q4_0, 16 for Q5_0, else 0).
    const OFFSET: i32;
    /// Q4_1 / Q5_1: the block term adds `m · s` (the f16 minimum at byte 2).
    const MIN: bool;

    /// The (unsigned, signed) operand pair whose `u8 × i8` dot is the block's dot product with
    /// the 32 activation values `x` (before the `OFFSET` correction).
    ///
    /// # Safety
    ///
    /// `blk` is a whole block, `x` holds values in -127..=127; AVX2 available.
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i);
}

pub(super) struct Q8_0B;
pub(super) struct Q4_0B;
pub(super) struct Q4_1B;
pub(super) struct Q5_0B;
pub(super) struct Q5_1B;
pub(super) struct Iq4NlB;

/// The sign trick for signed weights `w`: `|w|` as u8 (`|-128|` = 128 fits) and `x` with `w`'s
/// sign (activations are never -128, so negating them cannot overflow).
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
unsafe fn signed_operands(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: register-only AVX2 intrinsics.
    unsafe { (_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)) }
}

impl QBlock for Q8_0B {
    const BYTES: usize = crate::quant::q8_0::BYTES;
    const OFFSET: i32 = 0;
    const MIN: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 32 bytes at `blk + 2` (caller contract).
        unsafe { signed_operands(_mm256_loadu_si256(blk.add(2).cast()), x) }
    }
}

impl QBlock for Q4_0B {
    const BYTES: usize = crate::quant::q4_0::BYTES;
    const OFFSET: i32 = 8;
    const MIN: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `blk + 2` (caller contract).
        unsafe { (nibbles32(blk.add(2)), x) }
    }
}

impl QBlock for Q4_1B {
    const BYTES: usize = crate::quant::q4_1::BYTES;
    const OFFSET: i32 = 0;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `blk + 4` (caller contract).
        unsafe { (nibbles32(blk.add(4)), x) }
    }
}

impl QBlock for Q5_0B {
    const BYTES: usize = crate::quant::q5_0::BYTES;
    const OFFSET: i32 = 16;
    const MIN: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 4 bytes at `blk + 2`, 16 at `blk + 6` (caller contract).
        unsafe { (_mm256_or_si256(nibbles32(blk.add(6)), fifth_bits(blk.add(2))), x) }
    }
}

impl QBlock for Q5_1B {
    const BYTES: usize = crate::quant::q5_1::BYTES;
    const OFFSET: i32 = 0;
    const MIN: bool = true;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 4 bytes at `blk + 4`, 16 at `blk + 8` (caller contract).
        unsafe { (_mm256_or_si256(nibbles32(blk.add(8)), fifth_bits(blk.add(4))), x) }
    }
}

impl QBlock for Iq4NlB {
    const BYTES: usize = crate::quant::iq4_nl::BYTES;
    const OFFSET: i32 = 0;
    const MIN: bool = false;

    #[inline(always)]
    unsafe fn operands(blk: *const u8, x: __m256i) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `blk + 2` (caller contract). Codebook values are in
        // -127..=113: the sign trick of Q8_0.
        unsafe { signed_operands(iq4_values32(blk.add(2)), x) }
    }
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

/// The blocks `b..nb` (fewer than eight) of one row, one at a time, added to `acc` in the
/// oracle's order (block `b + j`'s term into lane `j`).
///
/// # Safety
///
/// As [`row_dot`]; `nb - b < 8`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tail_blocks<Q: QBlock, D: Dot256>(
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
            is[j] = hsum_epi32(isum::<Q, D>(blk, qs.add((b + j) * QK)));
            if Q::OFFSET != 0 {
                is[j] -= Q::OFFSET * *sum.add(b + j);
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

/// One weight row (`nb` blocks at `w`) · one activation row.
///
/// # Safety
///
/// `w` holds `nb` blocks; `qs`, `d`, `s`, `sum` hold `nb * 32`, `nb`, `nb`, `nb` values;
/// AVX2 + F16C and `D`'s features available.
#[inline(always)]
unsafe fn row_dot<Q: QBlock, D: Dot256>(
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
                *v = isum::<Q, D>(wb.add(j * Q::BYTES), xb.add(j * QK));
            }
            let mut isum = reduce8(v);
            if Q::OFFSET != 0 {
                let sx = _mm256_loadu_si256(sum.add(b).cast());
                isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(sx, _mm256_set1_epi32(Q::OFFSET)));
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
            acc = tail_blocks::<Q, D>(acc, w, b, nb, qs, d, s, sum);
        }
        hsum_ps(acc)
    }
}

/// Every (row, activation row) pair of the block, one row at a time (the row stays in L1
/// across the activation rows).
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`]; AVX2 + F16C and `D`'s features available.
#[inline(always)]
pub(super) unsafe fn matmul<Q: QBlock, D: Dot256>(
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
                *y.add(t * ldy + r) = row_dot::<Q, D>(
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

macro_rules! entry {
    ($name:ident, $q:ty) => {
        tier_fn! { Avx2;
            /// AVX2 table entry (see [`crate::kernels::MatmulQ8Fn`]).
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulQ8Fn`]; the CPU has AVX2, FMA and F16C.
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
                unsafe { matmul::<$q, Avx2Ops>(w, rb, rows, xq, n, y, ldy) }
            }
        }
    };
}

entry!(matmul_q8_0_q8, Q8_0B);
entry!(matmul_q4_0_q8, Q4_0B);
entry!(matmul_q4_1_q8, Q4_1B);
entry!(matmul_q5_0_q8, Q5_0B);
entry!(matmul_q5_1_q8, Q5_1B);
entry!(matmul_iq4_nl_q8, Iq4NlB);

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
