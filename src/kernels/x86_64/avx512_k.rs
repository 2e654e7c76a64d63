//! AVX-512 int8 kernels for the K-quants × Q8_K activations: the super-block sums of
//! `avx2_k.rs` on 512-bit registers, driven by its row loop ([`avx2_k::matmul`]) with four
//! weight rows per prepared activation super-block.
//!
//! Each 512-bit weight vector holds two runs of 32 values (or four of 16), laid out as they
//! come from the packed bytes; the activations are permuted once per super-block to match
//! ([`K512::prep`]), and the sub-block scales are spread over the matching i16 lanes with one
//! `vpermw`. The sums are `maddubs` (u8 × i8 pairs into i16, never saturating) and
//! `vpdpwssd` by the scales (i16 pairs into i32): exact, so with the shared f32 order
//! the results are bit-identical to the scalar table.

use core::arch::x86_64::*;
use core::marker::PhantomData;

use super::avx2_k::{
    self, dot16, k4_scales_mins, msum8, offset_sum, q3_scales16, KBlock, KDot, On256, Q2K, Q3K,
    Q4K, Q5K, Q6K,
};
use super::EvexOps;
use crate::quant::Q8Acts;

/// Word `i` of a `vpermw` index that spreads the scales `s[i / 8]` over 8 i16 lanes each.
const fn spread(s: [i16; 4]) -> [i16; 32] {
    let mut out = [0i16; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = s[i / 8];
        i += 1;
    }
    out
}

/// Q4_K / Q5_K: the sub-blocks in the lanes of the four weight vectors (low nibbles of bytes
/// 0..64, high of 0..64, low of 64..128, high of 64..128).
static IDX_K4: [[i16; 32]; 4] =
    [spread([0, 0, 2, 2]), spread([1, 1, 3, 3]), spread([4, 4, 6, 6]), spread([5, 5, 7, 7])];

/// Q6_K: vector `k` holds elements `64 k ..`, sub-blocks `4 k .. 4 k + 4`.
static IDX_Q6: [[i16; 32]; 4] =
    [spread([0, 1, 2, 3]), spread([4, 5, 6, 7]), spread([8, 9, 10, 11]), spread([12, 13, 14, 15])];

/// Q2_K / Q3_K: vector `g` holds elements `32 g ..` and `128 + 32 g ..`.
static IDX_Q2: [[i16; 32]; 4] =
    [spread([0, 1, 8, 9]), spread([2, 3, 10, 11]), spread([4, 5, 12, 13]), spread([6, 7, 14, 15])];

/// A K-quant super-block on 512-bit registers.
trait K512: KBlock {
    /// Prepared activations (four vectors laid out as this type's weight vectors).
    ///
    /// # Safety
    ///
    /// 256 readable values at `x`; AVX-512 F available.
    unsafe fn prep(x: *const i8) -> [__m512i; 4];

    /// As [`KBlock::isums`] against prepared activations.
    ///
    /// # Safety
    ///
    /// As [`KBlock::isums`]; AVX-512 F/BW/VL/VNNI available.
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32);
}

/// The 512-bit tier: [`K512::isums512`].
pub(super) struct On512<K>(PhantomData<K>);

impl<K: K512> KDot for On512<K> {
    type K = K;
    type X = [__m512i; 4];

    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { K::prep(x) }
    }

    #[inline(always)]
    unsafe fn isums(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: forwarded caller contract.
        unsafe { K::isums512(blk, x, bsums) }
    }
}

/// The 256 activations as four vectors, `x[64 k .. 64 k + 64]` in vector `k`.
///
/// # Safety
///
/// 256 readable values; AVX-512 F available.
#[inline(always)]
unsafe fn load4(x: *const i8) -> [__m512i; 4] {
    // SAFETY: 256 readable values (caller contract).
    unsafe { core::array::from_fn(|k| _mm512_loadu_si512(x.add(64 * k).cast())) }
}

/// The sum of the two 256-bit halves of `v`, lane by lane.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn fold256(v: __m512i) -> __m256i {
    // SAFETY: register-only intrinsics.
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

/// The 256-bit halves `[a.lo, b.lo]`, `[a.hi, b.hi]` of two vectors.
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn halves(a: __m512i, b: __m512i) -> (__m512i, __m512i) {
    // SAFETY: register-only intrinsics.
    unsafe { (_mm512_shuffle_i64x2::<0x44>(a, b), _mm512_shuffle_i64x2::<0xEE>(a, b)) }
}

/// `acc + Σ (u · x) · scale`, the i16 scales spread by `idx` from the i16 scales `sc`.
///
/// # Safety
///
/// AVX-512 F/BW/VNNI available.
#[inline(always)]
unsafe fn acc_scaled(
    acc: __m512i,
    u: __m512i,
    x: __m512i,
    sc: __m512i,
    idx: &[i16; 32],
) -> __m512i {
    // SAFETY: register-only intrinsics and a 64-byte read of `idx`.
    unsafe {
        let scale = _mm512_permutexvar_epi16(_mm512_loadu_si512(idx.as_ptr().cast()), sc);
        _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, x), scale)
    }
}

/// Bytes `1 << a` in the low 256 bits and `1 << b` in the high (a `vptestmb` operand).
///
/// # Safety
///
/// AVX-512 F available; `a, b < 8`.
#[inline(always)]
unsafe fn bits2(a: usize, b: usize) -> __m512i {
    // SAFETY: register-only intrinsics.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi8((1u8 << a) as i8)),
            _mm256_set1_epi8((1u8 << b) as i8),
        )
    }
}

/// The shared Q4_K/Q5_K sum (see `avx2_k.rs`): nibbles from the 128 bytes at `qs`, `16`
/// added in sub-block `j` where bit `j` of the 32 bytes at `qh` is set (Q5_K).
///
/// # Safety
///
/// 16 readable bytes at `sp - 4`, 128 at `qs`, 32 at `qh` when given, 16 sums at `bsums`;
/// AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn isums_k4(
    sp: *const u8,
    qs: *const u8,
    qh: Option<*const u8>,
    x: &[__m512i; 4],
    bsums: *const i32,
) -> (i32, i32) {
    // SAFETY: the reads stay inside the ranges of the caller contract.
    unsafe {
        let sm = k4_scales_mins(sp);
        let sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(sm));
        let m4 = _mm512_set1_epi8(0x0F);
        let sixteen = _mm512_set1_epi8(0x10);
        let hz = qh.map(|p| _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast())));
        let mut acc = _mm512_setzero_si512();
        for c in 0..2 {
            let q = _mm512_loadu_si512(qs.add(64 * c).cast());
            let lo = _mm512_and_si512(q, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            for (i, mut u) in [lo, hi].into_iter().enumerate() {
                let k = 2 * c + i;
                if let Some(hz) = hz {
                    // Sub-blocks 4c + i (low half) and 4c + i + 2 (high half).
                    let j = 4 * c + i;
                    let set = _mm512_test_epi8_mask(hz, bits2(j, j + 2));
                    u = _mm512_mask_add_epi8(u, set, u, sixteen);
                }
                acc = acc_scaled(acc, u, x[k], sc, &IDX_K4[k]);
            }
        }
        (_mm512_reduce_add_epi32(acc), msum8(_mm_srli_si128::<8>(sm), bsums))
    }
}

/// The Q4_K/Q5_K activations: `[x[0..32], x[64..96]]`, `[x[32..64], x[96..128]]` and the same
/// for `128..256`.
///
/// # Safety
///
/// 256 readable values; AVX-512 F available.
#[inline(always)]
unsafe fn prep_k4(x: *const i8) -> [__m512i; 4] {
    // SAFETY: forwarded caller contract.
    unsafe {
        let [a, b, c, d] = load4(x);
        let (lo0, hi0) = halves(a, b);
        let (lo1, hi1) = halves(c, d);
        [lo0, hi0, lo1, hi1]
    }
}

/// The Q2_K/Q3_K activations: vector `g` is `[x[32 g ..], x[128 + 32 g ..]]` (32 each).
///
/// # Safety
///
/// 256 readable values; AVX-512 F available.
#[inline(always)]
unsafe fn prep_q2(x: *const i8) -> [__m512i; 4] {
    // SAFETY: forwarded caller contract.
    unsafe {
        let [a, b, c, d] = load4(x);
        let (g0, g1) = halves(a, c);
        let (g2, g3) = halves(b, d);
        [g0, g1, g2, g3]
    }
}

/// The Q2_K/Q3_K sum: the 2-bit values of the 64 bytes at `qs` (vector `g`: bits `2 g` of
/// bytes 0..32 then 32..64, elements `32 g ..` and `128 + 32 g ..`), `high(g, u)` adding the
/// third bit (Q3_K), times the 16 i16 scales `sc`.
///
/// # Safety
///
/// 64 readable bytes at `qs`; AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn sum_q2(
    qs: *const u8,
    sc: __m512i,
    x: &[__m512i; 4],
    mut high: impl FnMut(usize, __m512i) -> __m512i,
) -> __m512i {
    // SAFETY: 64 bytes at `qs` (caller contract).
    unsafe {
        let q = _mm512_loadu_si512(qs.cast());
        let three = _mm512_set1_epi8(3);
        let mut acc = _mm512_setzero_si512();
        for g in 0..4 {
            let low = _mm512_and_si512(_mm512_srl_epi16(q, _mm_cvtsi32_si128(2 * g as i32)), three);
            acc = acc_scaled(acc, high(g, low), x[g], sc, &IDX_Q2[g]);
        }
        acc
    }
}

impl K512 for Q2K {
    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { prep_q2(x) }
    }

    #[inline(always)]
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: 84-byte super-block: scales at 0..16, values at 16..80 (caller contract).
        unsafe {
            let sb = _mm_loadu_si128(blk.cast());
            let m4 = _mm_set1_epi8(0x0F);
            let sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sb, m4)));
            let mins = _mm_and_si128(_mm_srli_epi16::<4>(sb), m4);
            let is = _mm512_reduce_add_epi32(sum_q2(blk.add(16), sc, x, |_, u| u));
            (is, dot16::<false>(mins, bsums))
        }
    }
}

impl K512 for Q3K {
    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { prep_q2(x) }
    }

    #[inline(always)]
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: 110-byte super-block: high bits at 0..32, low pairs at 32..96, scales at
        // 96..108 (caller contract).
        unsafe {
            let sc16 = q3_scales16(blk.add(96));
            let sc = _mm512_zextsi256_si512(sc16);
            let hz = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.cast()));
            let four = _mm512_set1_epi8(4);
            // Element 128 h + 32 g + l has its high bit at bit 4 h + g of hmask[l].
            let is = sum_q2(blk.add(32), sc, x, |g, u| {
                let set = _mm512_test_epi8_mask(hz, bits2(g, 4 + g));
                _mm512_mask_add_epi8(u, set, u, four)
            });
            (offset_sum::<2>(fold256(is), sc16, bsums), 0)
        }
    }
}

impl K512 for Q4K {
    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { prep_k4(x) }
    }

    #[inline(always)]
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: 144-byte super-block: scales at 4..16, values at 16..144 (caller contract).
        unsafe { isums_k4(blk.add(4), blk.add(16), None, x, bsums) }
    }
}

impl K512 for Q5K {
    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { prep_k4(x) }
    }

    #[inline(always)]
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: 176-byte super-block: scales at 4..16, fifth bits at 16..48, nibbles at
        // 48..176 (caller contract).
        unsafe { isums_k4(blk.add(4), blk.add(48), Some(blk.add(16)), x, bsums) }
    }
}

impl K512 for Q6K {
    #[inline(always)]
    unsafe fn prep(x: *const i8) -> [__m512i; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { load4(x) }
    }

    #[inline(always)]
    unsafe fn isums512(blk: *const u8, x: &[__m512i; 4], bsums: *const i32) -> (i32, i32) {
        // SAFETY: 210-byte super-block: low nibbles at 0..128, high pairs at 128..192, scales
        // at 192..208 (caller contract).
        unsafe {
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192).cast()));
            let sc = _mm512_zextsi256_si512(sc16);
            let (m4, m2) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(3));
            let mut acc = _mm512_setzero_si512();
            for h in 0..2 {
                let l = _mm512_loadu_si512(blk.add(64 * h).cast());
                let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(128 + 32 * h).cast()));
                // Vector 2h + i: elements 128 h + 64 i ..: nibble i of ql, bits 2 g of qh
                // with g = 2 i (low half), 2 i + 1 (high half).
                for i in 0..2 {
                    let lo = if i == 0 { l } else { _mm512_srli_epi16::<4>(l) };
                    let cnt = _mm512_inserti64x4::<1>(
                        _mm512_set1_epi16(4 * i as i16),
                        _mm256_set1_epi16(4 * i as i16 + 2),
                    );
                    let hb = _mm512_and_si512(_mm512_srlv_epi16(qh, cnt), m2);
                    let u = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi16::<4>(hb));
                    acc = acc_scaled(acc, u, x[2 * h + i], sc, &IDX_Q6[2 * h + i]);
                }
            }
            (offset_sum::<5>(fold256(acc), sc16, bsums), 0)
        }
    }
}

macro_rules! entries {
    ($($name:ident, $k:ty, $on512:expr;)*) => { $(
        /// AVX-512 table entry, activations in Q8_K.
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
            unsafe {
                if $on512 {
                    avx2_k::matmul::<On512<$k>, 4>(w, rb, rows, xq, n, y, ldy)
                } else {
                    avx2_k::matmul::<On256<$k, EvexOps>, 1>(w, rb, rows, xq, n, y, ldy)
                }
            }
        }
    )* };
}

// The body per type, measured on this tier's reference machine (Sapphire Rapids class): Q2_K's
// 512-bit body (two shift + mask steps per vector, four vectors) loses to the 256-bit one.
entries! {
    avx512_q2_k_q8k, Q2K, false;
    avx512_q3_k_q8k, Q3K, true;
    avx512_q4_k_q8k, Q4K, true;
    avx512_q5_k_q8k, Q5K, true;
    avx512_q6_k_q8k, Q6K, true;
}
