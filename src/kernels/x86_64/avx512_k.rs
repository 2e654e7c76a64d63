//! AVX-512 int8 kernels for the K-quants × Q8_K activations.
//!
//! Two tables use them: AVX-512's, and AVX-512 + GFNI's, whose Q4_K / Q5_K split their
//! nibbles by one `vgf2p8affineqb` ([`super::Nibbles`]; the other types are the same code).
//!
//! Each super-block is decoded once into element order ([`K512::decode`]: vector `k` holds
//! the unsigned values of elements `64 k .. 64 k + 64`, its i16 lanes' sub-block scales spread
//! by one `vpermw`, plus the weights of the activations' per-16 sums), so the activations are
//! plain 64-byte loads. The sums are `maddubs` (u8 × i8 pairs into i16, never saturating) and
//! `vpdpwssd` by the scales (i16 pairs into i32), the per-16 sums entering by one more
//! `vpdpwssd` (their i32 lanes read as i16 pairs whose high half meets a zero weight): exact,
//! so with the shared f32 order the results are bit-identical to the scalar table.
//!
//! Two drivers: the GEMV (`n = 1`) goes in groups of four weight rows (eight for types
//! without mins) whose sums are reduced together ([`gemv_rows`]), the remaining rows through
//! the shared row loop of `avx2_k.rs` ([`avx2_k::matmul`]); prefill goes in tiles of one weight row × up to eight
//! activation rows ([`tile`]): the super-block decoded once for all of them, their sums reduced
//! together ([`reduce8x16`]) and their f32 terms one 8-lane vector (lane = activation row).
//!
//! Why one file of over 1,000 lines: the six K-quant decoders share one decoded form
//! ([`K512`]), the same scale spreading and the same two drivers; a file per type would repeat
//! the drivers or import them back from one another.

use core::arch::x86_64::*;
use core::marker::PhantomData;

use super::avx2_k::{self, k4_scales_mins, scales, KBlock, KDot};
use super::avx512_q8::quad;
use super::{
    dpwssd512, opaque512, prefetch_ahead, prefetch_next_tile, Nibbles, GEMV_STREAM_MIN_ROWS,
    PREFETCH_AHEAD, PREFETCH_MIN_BYTES,
};
use crate::quant::{Q8Acts, QK_K};

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

/// 32-element sub-blocks (Q4_K / Q5_K): vector `k` holds sub-blocks `2 k`, `2 k + 1`.
static IDX_32: [[i16; 32]; 4] = IDX_32_0;

/// 16-element sub-blocks (Q2_K, Q3_K, Q6_K): vector `k` holds sub-blocks `4 k .. 4 k + 4`.
pub(crate) static IDX_16: [[i16; 32]; 4] = IDX_16_0;

/// i16 lane `2 i` takes word `8 + i / 2` (the min of the 32-element sub-block holding the
/// per-16 sum `i`), lane `2 i + 1` is zeroed by the caller's mask.
static IDX_MINS: [i16; 32] = IDX_MINS_0;

/// `t` with `o` added to every word (the index of the same lanes one row further in a
/// two-row scale vector: row 1's words are 16..32).
const fn offset(t: [i16; 32], o: i16) -> [i16; 32] {
    let mut out = t;
    let mut i = 0;
    while i < 32 {
        out[i] += o;
        i += 1;
    }
    out
}

/// [`IDX_32`] for rows 0 and 1 of a two-row scale vector ([`K512::scales4`]).
static IDX_32_2: [[[i16; 32]; 4]; 2] = [
    [IDX_32_0[0], IDX_32_0[1], IDX_32_0[2], IDX_32_0[3]],
    [
        offset(IDX_32_0[0], 16),
        offset(IDX_32_0[1], 16),
        offset(IDX_32_0[2], 16),
        offset(IDX_32_0[3], 16),
    ],
];
const IDX_32_0: [[i16; 32]; 4] =
    [spread([0, 0, 1, 1]), spread([2, 2, 3, 3]), spread([4, 4, 5, 5]), spread([6, 6, 7, 7])];

/// [`IDX_16`] for rows 0 and 1 of a two-row scale vector.
static IDX_16_2: [[[i16; 32]; 4]; 2] = [
    [IDX_16_0[0], IDX_16_0[1], IDX_16_0[2], IDX_16_0[3]],
    [
        offset(IDX_16_0[0], 16),
        offset(IDX_16_0[1], 16),
        offset(IDX_16_0[2], 16),
        offset(IDX_16_0[3], 16),
    ],
];
const IDX_16_0: [[i16; 32]; 4] =
    [spread([0, 1, 2, 3]), spread([4, 5, 6, 7]), spread([8, 9, 10, 11]), spread([12, 13, 14, 15])];

/// i16 lane `2 i` takes word `i` (lane `2 i + 1` is zeroed by the caller's mask): 16 words as
/// the low halves of 16 i32 lanes; for rows 0 and 1 of a two-row vector.
static IDX_C_2: [[i16; 32]; 2] = {
    let mut t = [[0i16; 32]; 2];
    let mut i = 0;
    while i < 16 {
        t[0][2 * i] = i as i16;
        t[1][2 * i] = 16 + i as i16;
        i += 1;
    }
    t
};

/// [`IDX_MINS`] for rows 0 and 1 of a two-row vector.
static IDX_MINS_2: [[i16; 32]; 2] = [IDX_MINS_0, offset(IDX_MINS_0, 16)];
const IDX_MINS_0: [i16; 32] = {
    let mut t = [0i16; 32];
    let mut i = 0;
    while i < 16 {
        t[2 * i] = 8 + (i / 2) as i16;
        i += 1;
    }
    t
};

/// The 16 bytes at each of `p[0..4]` as the four 128-bit lanes of one vector.
///
/// # Safety
///
/// 16 readable bytes at each; AVX-512 F available.
#[inline(always)]
pub(crate) unsafe fn load4(p: [*const u8; 4]) -> __m512i {
    // SAFETY: 16 bytes at each (caller contract).
    unsafe {
        let z = _mm512_castsi128_si512(_mm_loadu_si128(p[0].cast()));
        let z = _mm512_inserti32x4::<1>(z, _mm_loadu_si128(p[1].cast()));
        let z = _mm512_inserti32x4::<2>(z, _mm_loadu_si128(p[2].cast()));
        _mm512_inserti32x4::<3>(z, _mm_loadu_si128(p[3].cast()))
    }
}

/// The 16 bytes of each 128-bit lane of `v` as i16 words (signed or not): lanes 0, 1 in the
/// first vector (words 0..16, 16..32), lanes 2, 3 in the second.
///
/// # Safety
///
/// AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn widen_pairs<const SIGNED: bool>(v: __m512i) -> [__m512i; 2] {
    // SAFETY: register-only intrinsics.
    unsafe {
        let (lo, hi) = (_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
        if SIGNED {
            [_mm512_cvtepi8_epi16(lo), _mm512_cvtepi8_epi16(hi)]
        } else {
            [_mm512_cvtepu8_epi16(lo), _mm512_cvtepu8_epi16(hi)]
        }
    }
}

/// The scales of four super-blocks, two rows per vector: `sc[p]` holds row `2 p`'s 16 i16
/// words then row `2 p + 1`'s; `aux[p]` likewise the words of the per-16 weights (Q2_K's
/// mins, Q3_K's / Q6_K's corrections `-off · sc`; Q4_K / Q5_K read their mins at words 8..16
/// of `sc`).
#[derive(Clone, Copy)]
pub(crate) struct Scales4 {
    pub(crate) sc: [__m512i; 2],
    pub(crate) aux: [__m512i; 2],
}

/// One super-block's weights decoded for the int8 dot.
#[derive(Clone, Copy)]
pub(crate) struct KW {
    /// Vector `k`: the unsigned values of elements `64 k .. 64 k + 64`.
    pub(crate) u: [__m512i; 4],
    /// Vector `k`: each i16 lane's sub-block scale.
    pub(crate) sc: [__m512i; 4],
    /// The weight of each per-16 activation sum, in the low 16 bits of i32 lane `j` (the high
    /// 16 bits 0): the mins (Q2_K, Q4_K, Q5_K: the `msum`), or the offset correction
    /// `-offset · sc_j` folded into the `isum` (Q3_K `- 4 ·`, Q6_K `- 32 ·`).
    pub(crate) c: __m512i,
}

/// A K-quant super-block on 512-bit registers.
pub(crate) trait K512: KBlock {
    /// The super-block at `blk` in element order.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; AVX-512 F/BW/VL available.
    unsafe fn decode<Nb: Nibbles>(blk: *const u8) -> KW;

    /// [`Scales4`] of the super-blocks at `blk[0..4]`, decoded together (one 512-bit pass for
    /// four rows instead of one 128-bit pass each).
    ///
    /// # Safety
    ///
    /// Each is a whole super-block; AVX-512 F/BW/VL available.
    unsafe fn scales4(blk: [*const u8; 4]) -> Scales4;

    /// The unsigned values of the super-block at `blk` ([`KW::u`]).
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; AVX-512 F/BW/VL available.
    unsafe fn values<Nb: Nibbles>(blk: *const u8) -> [__m512i; 4];

    /// Sub-blocks of 32 elements (Q4_K, Q5_K: mins at words 8..16 of [`Scales4::sc`]), else 16.
    const SUB32: bool;

    /// The super-block at `blk`, row `j < 4` of the [`Scales4`] `s`: [`K512::decode`]'s
    /// result with the scales taken from `s`.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; AVX-512 F/BW/VL available.
    #[inline(always)]
    unsafe fn decode_with<Nb: Nibbles>(blk: *const u8, s: &Scales4, j: usize) -> KW {
        // SAFETY: forwarded caller contract; 64-byte reads of the index statics.
        unsafe {
            let (p, o) = (j / 2, j % 2);
            let ld = |t: &[i16; 32]| _mm512_loadu_si512(t.as_ptr().cast());
            let idx = if Self::SUB32 { &IDX_32_2[o] } else { &IDX_16_2[o] };
            let mut sc = [_mm512_setzero_si512(); 4];
            for (sc, idx) in sc.iter_mut().zip(idx) {
                *sc = _mm512_permutexvar_epi16(ld(idx), s.sc[p]);
            }
            let c = if Self::SUB32 {
                _mm512_maskz_permutexvar_epi16(0x5555_5555, ld(&IDX_MINS_2[o]), s.sc[p])
            } else {
                _mm512_maskz_permutexvar_epi16(0x5555_5555, ld(&IDX_C_2[o]), s.aux[p])
            };
            KW { u: Self::values::<Nb>(blk), sc, c }
        }
    }
}

/// `(isum, msum)` lane vectors of decoded weights against the 256 activations at `x` with
/// per-16 sums `bsums`: their lane totals are [`KBlock::isums`]' pair (`msum` zero without
/// [`KBlock::MINS`]).
///
/// # Safety
///
/// 256 readable values at `x`, 16 sums at `bsums`; AVX-512 F/BW/VNNI available.
#[inline(always)]
unsafe fn dot_k<K: K512>(kw: &KW, x: *const i8, bsums: *const i32) -> (__m512i, __m512i) {
    // SAFETY: the reads stay inside the 256 values and 16 sums (caller contract).
    unsafe {
        let mut acc = _mm512_setzero_si512();
        for k in 0..4 {
            let xv = _mm512_loadu_si512(x.add(64 * k).cast());
            acc = dpwssd512(acc, _mm512_maddubs_epi16(kw.u[k], xv), kw.sc[k]);
        }
        let b = _mm512_loadu_si512(bsums.cast());
        if K::MINS {
            (acc, _mm512_dpwssd_epi32(_mm512_setzero_si512(), b, kw.c))
        } else {
            (_mm512_dpwssd_epi32(acc, b, kw.c), _mm512_setzero_si512())
        }
    }
}

/// The 512-bit tier of the shared row loop: [`K512::decode`] then [`dot_k`] per row.
pub(super) struct On512<K, Nb>(PhantomData<(K, Nb)>);

impl<K: K512, Nb: Nibbles> KDot for On512<K, Nb> {
    type K = K;
    type X = *const i8;

    #[inline(always)]
    unsafe fn prep(x: *const i8) -> *const i8 {
        x
    }

    #[inline(always)]
    unsafe fn isums(blk: *const u8, x: &*const i8, bsums: *const i32) -> (i32, i32) {
        // SAFETY: forwarded caller contract.
        unsafe {
            let (is, ms) = dot_k::<K>(&K::decode::<Nb>(blk), *x, bsums);
            let ms = if K::MINS { _mm512_reduce_add_epi32(ms) } else { 0 };
            (_mm512_reduce_add_epi32(is), ms)
        }
    }
}

/// The 32 bytes at `p` in both 256-bit halves, the high half shifted right by `shift` bits
/// per 16-bit lane (so a half's low bits are the wanted field).
///
/// # Safety
///
/// 32 readable bytes at `p`; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn both_halves(p: *const u8, lo_shift: u16, hi_shift: u16) -> __m512i {
    // SAFETY: 32 bytes at `p` (caller contract).
    unsafe {
        let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()));
        let cnt = _mm512_inserti64x4::<1>(
            _mm512_set1_epi16(lo_shift as i16),
            _mm256_set1_epi16(hi_shift as i16),
        );
        _mm512_srlv_epi16(v, cnt)
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

/// The scales of four vectors spread by `idx` from the i16 scales `sc`.
///
/// # Safety
///
/// AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn spread4(sc: __m512i, idx: &[[i16; 32]; 4]) -> [__m512i; 4] {
    // SAFETY: register-only intrinsics and 64-byte reads of `idx`.
    unsafe {
        let mut out = [_mm512_setzero_si512(); 4];
        for (o, idx) in out.iter_mut().zip(idx) {
            *o = _mm512_permutexvar_epi16(_mm512_loadu_si512(idx.as_ptr().cast()), sc);
        }
        out
    }
}

/// The correction weights `-off · sc_j` of 16 signed i16 scales (lanes 0..16 of `sc`), each in
/// the low half of an i32 lane.
///
/// # Safety
///
/// AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn correction(sc: __m512i, off: i16) -> __m512i {
    // SAFETY: register-only intrinsics. `|off · sc_j| <= 32 · 128` fits i16.
    unsafe {
        let c = _mm512_mullo_epi16(sc, _mm512_set1_epi16(-off));
        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(c))
    }
}

/// The shared Q4_K/Q5_K decode: nibbles from the 128 bytes at `qs` (bytes `32 k ..` give
/// elements `64 k ..` low nibbles first), `16` added in sub-block `j` where bit `j` of the 32
/// bytes at `qh` is set (Q5_K); scales and mins from the 12 packed bytes at `sp`.
///
/// # Safety
///
/// 16 readable bytes at `sp - 4`, 128 at `qs`, 32 at `qh` when given; AVX-512 F/BW/VL
/// available.
#[inline(always)]
pub(crate) unsafe fn decode_k4<Nb: Nibbles>(
    sp: *const u8,
    qs: *const u8,
    qh: Option<*const u8>,
) -> KW {
    // SAFETY: the reads stay inside the ranges of the caller contract.
    unsafe {
        let sm = k4_scales_mins(sp);
        let sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(sm));
        let u = values_k4::<Nb>(qs, qh);
        let mins = _mm512_loadu_si512(IDX_MINS.as_ptr().cast());
        KW { u, sc: spread4(sc, &IDX_32), c: _mm512_maskz_permutexvar_epi16(0x5555_5555, mins, sc) }
    }
}

/// The Q4_K/Q5_K values of [`decode_k4`].
///
/// # Safety
///
/// 128 readable bytes at `qs`, 32 at `qh` when given; AVX-512 F/BW/VL available.
#[inline(always)]
pub(crate) unsafe fn values_k4<Nb: Nibbles>(qs: *const u8, qh: Option<*const u8>) -> [__m512i; 4] {
    // SAFETY: the reads stay inside the ranges of the caller contract.
    unsafe {
        let mut u = [_mm512_setzero_si512(); 4];
        for (k, u) in u.iter_mut().enumerate() {
            // The high 256 bits (64-bit lanes 4..8) take the high nibbles.
            *u = Nb::split::<0xF0>(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                qs.add(32 * k).cast(),
            )));
            if let Some(p) = qh {
                let hz = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()));
                let set = _mm512_test_epi8_mask(hz, bits2(2 * k, 2 * k + 1));
                *u = _mm512_mask_add_epi8(*u, set, *u, opaque512(_mm512_set1_epi8(0x10)));
            }
        }
        u
    }
}

/// [`k4_scales_mins`] of the four super-blocks at `blk[0..4]` in one 512-bit pass: per
/// 128-bit lane the 8 scales then 8 mins (u8), widened to the two-row [`Scales4::sc`].
///
/// # Safety
///
/// Whole Q4_K/Q5_K super-blocks; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn k4_scales4(blk: [*const u8; 4]) -> Scales4 {
    // SAFETY: bytes 0..16 of each super-block (caller contract); register-only after.
    unsafe {
        // Packed byte i of each super-block is byte i + 4 of its lane (as in k4_scales_mins).
        let v = load4(blk);
        let bc = |x: __m128i| _mm512_broadcast_i32x4(x);
        let a = _mm512_shuffle_epi8(
            v,
            bc(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)),
        );
        let a = _mm512_srlv_epi32(a, bc(_mm_setr_epi32(0, 0, 0, 4)));
        let a = _mm512_and_si512(
            a,
            bc(_mm_setr_epi32(0x3F3F_3F3F, 0x0F0F_0F0F, 0x3F3F_3F3F, 0x0F0F_0F0F)),
        );
        let m = -128i8;
        let b = _mm512_shuffle_epi8(
            v,
            bc(_mm_setr_epi8(m, m, m, m, 4, 5, 6, 7, m, m, m, m, 8, 9, 10, 11)),
        );
        let b = _mm512_and_si512(_mm512_srli_epi16::<2>(b), _mm512_set1_epi8(0x30));
        let sc = widen_pairs::<false>(_mm512_or_si512(a, b));
        Scales4 { sc, aux: sc }
    }
}

/// The Q2_K/Q3_K values: 2-bit fields of the 64 bytes at `qs` (element `128 h + 32 g + l` at
/// bits `2 g` of byte `32 h + l`), with Q3_K's third bit from the 32 bytes at `hm` (element
/// `128 h + 32 g + l` at bit `4 h + g` of byte `l`) added as `+ 4`.
///
/// # Safety
///
/// 64 readable bytes at `qs`, 32 at `hm` when given; AVX-512 F/BW available.
#[inline(always)]
pub(crate) unsafe fn values_q2(qs: *const u8, hm: Option<*const u8>) -> [__m512i; 4] {
    // SAFETY: 64 bytes at `qs`, 32 at `hm` (caller contract).
    unsafe {
        let mut out = [_mm512_setzero_si512(); 4];
        for (k, o) in out.iter_mut().enumerate() {
            let (h, g) = (k / 2, 2 * (k % 2));
            let v = both_halves(qs.add(32 * h), 2 * g as u16, 2 * g as u16 + 2);
            *o = _mm512_and_si512(v, _mm512_set1_epi8(3));
            if let Some(p) = hm {
                let hz = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()));
                let set = _mm512_test_epi8_mask(hz, bits2(4 * h + g, 4 * h + g + 1));
                *o = _mm512_mask_add_epi8(*o, set, *o, _mm512_set1_epi8(4));
            }
        }
        out
    }
}

/// Lane `t` of the result is the total of `v[t]`'s 16 lanes (lanes in order, exact in i32).
///
/// # Safety
///
/// AVX-512 F available.
#[inline(always)]
unsafe fn reduce8x16(v: [__m512i; 8]) -> __m256i {
    // SAFETY: register-only intrinsics.
    unsafe {
        // Within each 128-bit lane L: [Σ_L v0, Σ_L v1, Σ_L v2, Σ_L v3] (and v4..v8).
        let q0 = quad([v[0], v[1], v[2], v[3]]);
        let q1 = quad([v[4], v[5], v[6], v[7]]);
        // 128-bit lanes [q0.L0 + q0.L2, q0.L1 + q0.L3, q1.L0 + q1.L2, q1.L1 + q1.L3].
        let s = _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b01_00_01_00>(q0, q1),
            _mm512_shuffle_i64x2::<0b11_10_11_10>(q0, q1),
        );
        // 128-bit lanes [s.L0 + s.L1, s.L2 + s.L3, ..].
        let t = _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b10_00_10_00>(s, s),
            _mm512_shuffle_i64x2::<0b11_01_11_01>(s, s),
        );
        _mm512_castsi512_si256(t)
    }
}

/// [`crate::kernels::scalar::hsum8`]'s fixed order over eight accumulators, lane by lane.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn hsum8_lanes(a: [__m256; 8]) -> [f32; 8] {
    // SAFETY: register-only intrinsics and a store into a local array.
    unsafe {
        let s = _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
            _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])),
        );
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        out
    }
}

/// One weight row (`nb` super-blocks at `w`) × `N <= 8` activation rows (row `t` of the tile's
/// block `i` at `qs + (t * nb + i) * 256`, `d` at `t * nb + i`, sums at `16 (t * nb + i)`),
/// into `y[t * ldy]`.
///
/// Per super-block `b`: the weights decoded once, [`dot_k`] for each activation row, the
/// sums reduced together ([`reduce8x16`]), the oracle's term `(d · dx) · isum [- (dmin · dx) ·
/// msum]` for all rows as one vector (lane `t`) into accumulator `b % 8`; at the end the
/// fixed sum of [`crate::kernels::scalar::hsum8`] over the eight accumulators, lane by lane.
/// With `ahead` (the row is whole, the next rows follow it) each super-block's step also
/// prefetches part of the next row's bytes ([`prefetch_next_tile`]): a decode batch's tiles
/// would otherwise wait on the weights' demand misses.
///
/// # Safety
///
/// `nb` super-blocks at `w`, `N` activation rows of `nb` blocks, `y[t * ldy]` writable for
/// `t < N`; AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<K: K512, Nb: Nibbles, const N: usize>(
    w: *const u8,
    nb: usize,
    ahead: bool,
    qs: *const i8,
    d: *const f32,
    sums: *const i32,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: every super-block and activation block read is in the tile (caller contract);
    // the gather reads `d[t * nb + b]` for `t < N` only.
    unsafe {
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let offs = _mm256_mullo_epi32(lane, _mm256_set1_epi32(nb as i32));
        let live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(N as i32), lane));
        let mut acc = [_mm256_setzero_ps(); 8];
        for b in 0..nb {
            let blk = w.add(b * K::BYTES);
            if ahead {
                prefetch_next_tile(w, nb * K::BYTES, b, nb);
            }
            let kw = K::decode::<Nb>(blk);
            let (mut is, mut ms) = ([_mm512_setzero_si512(); 8], [_mm512_setzero_si512(); 8]);
            for t in 0..N {
                let i = t * nb + b;
                (is[t], ms[t]) = dot_k::<K>(&kw, qs.add(i * QK_K), sums.add(i * 16));
            }
            let (dw, dmin) = scales::<K>(blk);
            let dx = _mm256_mask_i32gather_ps::<4>(_mm256_setzero_ps(), d.add(b), offs, live);
            let isv = _mm256_cvtepi32_ps(reduce8x16(is));
            let mut term = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dw), dx), isv);
            if K::MINS {
                let msv = _mm256_cvtepi32_ps(reduce8x16(ms));
                let m = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), dx), msv);
                term = _mm256_sub_ps(term, m);
            }
            acc[b % 8] = _mm256_add_ps(acc[b % 8], term);
        }
        let out = hsum8_lanes(acc);
        for (t, v) in out.iter().enumerate().take(N) {
            *y.add(t * ldy) = *v;
        }
    }
}

/// GEMV of `R` weight rows (row `i` at `w + i * rb`, `R = 4` for types with mins, `R = 8`
/// without) against activation row 0, into `y[i * ys]`.
///
/// Per super-block `b`: each row's super-block decoded and dotted with the same 256
/// activations ([`dot_k`]), every row's `isum` (and `msum`) reduced in one [`reduce8x16`]
/// (lanes `0..R` the `isum`s, lanes `4..8` the `msum`s with mins), then the oracle's term
/// `(d · dx) · isum [- (dmin · dx) · msum]` for all rows at once (lane = row) into
/// accumulator `b % 8`, and at the end [`crate::kernels::scalar::hsum8`]'s order lane by lane:
/// the scalar table's bits, with one joint reduction per super-block instead of two
/// horizontal sums per row.
///
/// # Safety
///
/// `R` rows of `xq.nb()` super-blocks at `w + i * rb`, `xq` at least one activation row,
/// `y[i * ys]` writable for `i < R`; AVX2, F16C and AVX-512 F/BW/VL/VNNI available.
#[inline(always)]
unsafe fn gemv_rows<K: K512, Nb: Nibbles, const R: usize>(
    w: *const u8,
    rb: usize,
    xq: &Q8Acts<'_>,
    y: *mut f32,
    ys: usize,
    prefetch: RowPrefetch,
) {
    let nb = xq.nb();
    let (qs, d, sums) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.sum().as_ptr());
    // SAFETY: super-blocks `b < nb` of rows `< R`, activation blocks `b < nb` of row 0, outputs
    // `y[i * ys]` (caller contract).
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 8];
        // Prefetch distance: whole super-blocks, at most one row (then the next group's).
        // Matrices under PREFETCH_MIN_BYTES prefetch the next group's rows instead; streams
        // go on into their next rows (`len` unbounded).
        let (ahead, len) = match prefetch {
            RowPrefetch::NextTile => (0, 0),
            RowPrefetch::Ahead => {
                (PREFETCH_AHEAD.div_ceil(K::BYTES).min(nb) * K::BYTES, nb * K::BYTES)
            }
            RowPrefetch::Stream => (PREFETCH_AHEAD, usize::MAX),
        };
        for b in 0..nb {
            let x = qs.add(b * QK_K);
            let bs = sums.add(b * 16);
            let mut v = [_mm512_setzero_si512(); 8];
            if ahead != 0 {
                for i in 0..R {
                    prefetch_ahead(w, rb, i, R, b * K::BYTES, ahead, len, K::BYTES);
                }
            } else {
                prefetch_next_tile(w, R * rb, b, nb);
            }
            let blk = |i: usize| w.add(i * rb + b * K::BYTES);
            // Four rows at a time, unrolled (constant row indices keep the scale vectors and
            // index tables in registers).
            macro_rules! row {
                ($s4:expr, $q:literal, $j:literal) => {
                    let i = 4 * $q + $j;
                    let (is, ms) = dot_k::<K>(&K::decode_with::<Nb>(blk(i), &$s4, $j), x, bs);
                    v[i] = is;
                    if K::MINS && i < 4 {
                        v[(4 + i) % 8] = ms;
                    }
                };
            }
            macro_rules! quad {
                ($q:literal) => {
                    let s4 = K::scales4([
                        blk(4 * $q),
                        blk(4 * $q + 1),
                        blk(4 * $q + 2),
                        blk(4 * $q + 3),
                    ]);
                    row!(s4, $q, 0);
                    row!(s4, $q, 1);
                    row!(s4, $q, 2);
                    row!(s4, $q, 3);
                };
            }
            quad!(0);
            if R == 8 {
                quad!(1);
            }
            let red = _mm256_cvtepi32_ps(reduce8x16(v));
            let dx = _mm256_set1_ps(*d.add(b));
            // The rows' f16 scales, read straight into one vector: with mins the `(d, dmin)`
            // pairs of rows 0..4 (f16 lanes `[d0, m0, d1, m1, ..]`), else `d` of rows 0..8.
            let at = |i: usize| w.add(i * rb + b * K::BYTES + K::D_AT);
            let term = if K::MINS {
                let pair = |i: usize| at(i).cast::<i32>().read_unaligned();
                let h = _mm_setr_epi32(pair(0), pair(1), pair(2), pair(3));
                let dm = _mm256_permutevar8x32_ps(
                    _mm256_cvtph_ps(h),
                    _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7),
                );
                // Lanes 0..4 `(d · dx) · isum`, lanes 4..8 `(dmin · dx) · msum`; their
                // difference in lanes 0..4.
                let t = _mm256_mul_ps(_mm256_mul_ps(dm, dx), red);
                _mm256_sub_ps(t, _mm256_permute2f128_ps::<0x01>(t, t))
            } else {
                let one = |i: usize| at(i).cast::<i16>().read_unaligned();
                let h =
                    _mm_setr_epi16(one(0), one(1), one(2), one(3), one(4), one(5), one(6), one(7));
                _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(h), dx), red)
            };
            acc[b % 8] = _mm256_add_ps(acc[b % 8], term);
        }
        let out = hsum8_lanes(acc);
        for (i, o) in out.iter().enumerate().take(R) {
            *y.add(i * ys) = *o;
        }
    }
}

/// How [`gemv_rows`] prefetches its weights.
#[derive(Clone, Copy)]
enum RowPrefetch {
    /// The next group's rows ([`prefetch_next_tile`]): matrices under [`PREFETCH_MIN_BYTES`].
    NextTile,
    /// [`PREFETCH_AHEAD`] bytes ahead in each row, then in the next group's row.
    Ahead,
    /// [`PREFETCH_AHEAD`] bytes ahead in each row's stream (the rows `rb` apart, each
    /// followed by its own next rows; see [`crate::kernels::frame::GEMV_STREAMS`]).
    Stream,
}

/// AVX-512 K-quant matmul: the GEMV in groups of rows with one joint reduction per
/// super-block ([`gemv_rows`]), the remaining rows through the shared row loop; more
/// activation rows in [`tile`]s of one weight row × eight activation rows (the last one to
/// seven in one more), the tile's activations staying in L1 across the weight rows.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] with `xq` in the Q8_K format; AVX2, F16C and AVX-512
/// F/BW/VL/VNNI available.
#[inline(always)]
pub(crate) unsafe fn matmul_512<K: K512, Nb: Nibbles>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    if n == 1 {
        // Groups of 4 rows (types with mins: their 4 `isum` and 4 `msum` vectors fill one
        // joint reduction) or 8 rows (no mins); the remaining rows by the shared row loop.
        let g = if K::MINS { 4 } else { 8 };
        let full = rows / g * g;
        // From GEMV_STREAM_MIN_ROWS rows as streams (`frame::GEMV_STREAMS`, here one per row
        // of a group): group `j` takes rows `j + i q` (`i < g`, `q = rows / g`), the `g`
        // parts of the rows read side by side, each prefetched ahead. Below it group `j`
        // takes rows `g j ..`, prefetching as the matrix size says.
        let q = rows / g;
        let (step, rs, ys, prefetch) = if rows >= GEMV_STREAM_MIN_ROWS {
            (1, q * rb, q, RowPrefetch::Stream)
        } else if rows * rb >= PREFETCH_MIN_BYTES {
            (g, rb, 1, RowPrefetch::Ahead)
        } else {
            (g, rb, 1, RowPrefetch::NextTile)
        };
        for j in 0..q {
            let r = j * step;
            // SAFETY: group `j`'s rows `r + i * rs / rb` (`i < g`) are below `g q = full <=
            // rows`, and so are their outputs `y[r + i * ys]` (caller contract).
            unsafe {
                if K::MINS {
                    gemv_rows::<K, Nb, 4>(w.add(r * rb), rs, xq, y.add(r), ys, prefetch);
                } else {
                    gemv_rows::<K, Nb, 8>(w.add(r * rb), rs, xq, y.add(r), ys, prefetch);
                }
            }
        }
        if full < rows {
            // SAFETY: the last `rows - full` rows and their outputs (caller contract).
            unsafe {
                avx2_k::matmul::<On512<K, Nb>, 1>(
                    w.add(full * rb),
                    rb,
                    rows - full,
                    xq,
                    n,
                    y.add(full),
                    ldy,
                )
            };
        }
        return;
    }
    let nb = xq.nb();
    let (qs, d, sums) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.sum().as_ptr());
    // Whole rows (not a column block, the outlier correction's) prefetch the next rows.
    let ahead = rb == nb * K::BYTES;
    let mut t = 0;
    while t < n {
        // Up to eight activation rows in one pass over the weights (a decode batch of 3, 5, 6
        // or 7 sequences would otherwise read them two or three times).
        let step = (n - t).min(8);
        let o = t * nb;
        for r in 0..rows {
            // SAFETY: row `r < rows` of `nb` super-blocks, activation rows `t .. t + step <=
            // n <= xq.n()` from block `o`, outputs `y[(t + i) * ldy + r]` (caller contract).
            unsafe {
                let (wr, yr) = (w.add(r * rb), y.add(t * ldy + r));
                let (q, dd, s) = (qs.add(o * QK_K), d.add(o), sums.add(o * 16));
                match step {
                    8 => tile::<K, Nb, 8>(wr, nb, ahead, q, dd, s, yr, ldy),
                    7 => tile::<K, Nb, 7>(wr, nb, ahead, q, dd, s, yr, ldy),
                    6 => tile::<K, Nb, 6>(wr, nb, ahead, q, dd, s, yr, ldy),
                    5 => tile::<K, Nb, 5>(wr, nb, ahead, q, dd, s, yr, ldy),
                    4 => tile::<K, Nb, 4>(wr, nb, ahead, q, dd, s, yr, ldy),
                    3 => tile::<K, Nb, 3>(wr, nb, ahead, q, dd, s, yr, ldy),
                    2 => tile::<K, Nb, 2>(wr, nb, ahead, q, dd, s, yr, ldy),
                    _ => tile::<K, Nb, 1>(wr, nb, ahead, q, dd, s, yr, ldy),
                }
            }
        }
        t += step;
    }
}

macro_rules! entry {
    ($name:ident, $k:ty, $nb:ty, $tier:ident, $doc:literal) => {
        tier_fn! { $tier;
            #[doc = $doc]
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulQ8Fn`]; the CPU has the features enabled here.
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
                unsafe { matmul_512::<$k, $nb>(w, rb, rows, xq, n, y, ldy) }
            }
        }
    };
}
pub(crate) use entry;

/// The AVX-512 entries (nibbles by shift and AND), then the AVX-512 + GFNI ones.
macro_rules! entries {
    (avx512 { $($name:ident, $k:ty;)* } gfni { $($gname:ident, $gk:ty;)* }) => {
        $(entry!(
            $name,
            $k,
            ShiftNibbles,
            Avx512,
            "AVX-512 table entry, activations in Q8_K."
        );)*
        $(entry!(
            $gname,
            $gk,
            GfniNibbles,
            Avx512Gfni,
            "AVX-512 + GFNI table entry, activations in Q8_K."
        );)*
    };
}
pub(crate) use entries;
