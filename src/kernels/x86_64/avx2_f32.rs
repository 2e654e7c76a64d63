//! AVX2 + FMA matmul with f32 activations, for f32, f16, bf16 weights (widened on the fly)
//! and every quantized type (dequantized on the fly: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL by
//! block; the K-quants by runs of 32 inside their super-blocks).
//!
//! Both operands are contiguous along K (`W` is `rows × k` row-major, `X` is `n × k`), so
//! the micro-kernel is a register tile of `R` weight rows × `N` activation rows, each output
//! with one 8-lane accumulator: lane `j` accumulates the products of the elements
//! `i ≡ j (mod 8)` in order with FMA, a K tail shorter than 8 goes through zero-filled lanes,
//! and the lanes are summed by `hsum4` (four outputs at a time, each lane from its own
//! accumulator). Every output sees exactly that sequence of
//! operations whatever the tile shape, so a row's result does not depend on which rows share
//! its tile or chunk: results are bit-identical for every schedule and thread count.

use core::arch::x86_64::*;

use super::mask;
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

/// A weight encoding: how 8 consecutive elements of a row become 8 f32 lanes. Elements are
/// addressed in units of 32 (a quantization block, or a run of 32 inside a K-quant
/// super-block) and 8-element chunks inside them. An encoding implements [`Weights::chunk`]
/// or [`Weights::block`] (each defaults to the other).
trait Weights {
    /// Whether rows may end with a partial unit (f32/f16/bf16: any `k`; quantized: `k % 32
    /// == 0`).
    const TAIL: bool = false;
    /// Bytes per element for the unblocked encodings (tail addressing).
    const ELEM_BYTES: usize = 0;
    /// Decoding a unit costs more than its four chunks' loads (the K-quants' scales, Q5's
    /// fifth bits): tiles with several activation rows decode each unit once per weight row
    /// ([`Weights::block`]) instead of chunk by chunk. The FMAs per output are the same.
    const DECODE_ONCE: bool = false;

    /// Elements `32 b + 8 c .. + 8` of the row at `row` (`c < 4`).
    ///
    /// # Safety
    ///
    /// Those elements are in bounds; AVX2, FMA and F16C are available.
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: forwarded caller contract.
        unsafe { Self::block(row, b)[c] }
    }

    /// `len < 8` elements starting at element `i` (unblocked encodings only, called only
    /// when [`Weights::TAIL`]), the other lanes zero.
    ///
    /// # Safety
    ///
    /// As [`Weights::chunk`].
    #[inline(always)]
    unsafe fn tail(_row: *const u8, _i: usize, _len: usize) -> __m256 {
        // SAFETY: register-only.
        unsafe { _mm256_setzero_ps() }
    }

    /// The four chunks of unit `b` at once (the same values as [`Weights::chunk`]; the
    /// quantized encodings override it to decode the unit's bytes once).
    ///
    /// # Safety
    ///
    /// As [`Weights::chunk`].
    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: forwarded caller contract.
        unsafe {
            [
                Self::chunk(row, b, 0),
                Self::chunk(row, b, 1),
                Self::chunk(row, b, 2),
                Self::chunk(row, b, 3),
            ]
        }
    }
}

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

struct F32W;
struct F16W;
struct Bf16W;
struct Q8_0W;
struct Q4_0W;
struct Q4_1W;

impl Weights for F32W {
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

impl Weights for F16W {
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

impl Weights for Bf16W {
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

/// The f16 at `p` broadcast to 8 lanes as f32.
///
/// # Safety
///
/// 2 readable bytes at `p`; AVX2 + F16C available.
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    // SAFETY: 2 bytes readable (caller contract); register-only conversions.
    unsafe {
        let h = p.cast::<u16>().read_unaligned();
        _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
    }
}

/// Nibbles of chunk `c` of a Q4 block whose 16 nibble bytes start at `qs`: chunk 0 = low
/// nibbles of bytes 0..8, 1 = low of 8..16, 2 = high of 0..8, 3 = high of 8..16; as 8 i32.
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
unsafe fn nibbles(qs: *const u8, c: usize) -> __m256i {
    // SAFETY: 8 bytes at `qs + 8 * (c & 1)` are readable (caller contract).
    unsafe {
        let v = _mm_loadl_epi64(qs.add(8 * (c & 1)).cast());
        let v = if c >= 2 { _mm_srli_epi16::<4>(v) } else { v };
        _mm256_cvtepu8_epi32(_mm_and_si128(v, _mm_set1_epi8(0x0F)))
    }
}

/// All four chunks of [`nibbles`] from one 16-byte load.
///
/// # Safety
///
/// 16 readable bytes at `qs`; AVX2 available.
#[inline(always)]
unsafe fn nibbles_block(qs: *const u8) -> [__m256; 4] {
    // SAFETY: 16 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let v = _mm_loadu_si128(qs.cast());
        let m = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(v, m);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
        let f = |q| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
        [f(lo), f(_mm_unpackhi_epi64(lo, lo)), f(hi), f(_mm_unpackhi_epi64(hi, hi))]
    }
}

impl Weights for Q8_0W {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract). `d * q` is exact in f32 (11 + 8
        // significant bits), as in the oracle's dequantization.
        unsafe {
            let blk = row.add(b * BlockQ8_0::BYTES);
            let q =
                _mm256_cvtepi8_epi32(_mm_loadl_epi64(blk.add(BlockQ8_0::QS_OFFSET + 8 * c).cast()));
            _mm256_mul_ps(_mm256_cvtepi32_ps(q), f16_splat(blk.add(BlockQ8_0::D_OFFSET)))
        }
    }
}

impl Weights for Q4_0W {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract); `(q - 8) * d` is exact.
        unsafe {
            let blk = row.add(b * BlockQ4_0::BYTES);
            let q = _mm256_cvtepi32_ps(nibbles(blk.add(BlockQ4_0::QS_OFFSET), c));
            _mm256_mul_ps(
                _mm256_sub_ps(q, _mm256_set1_ps(8.0)),
                f16_splat(blk.add(BlockQ4_0::D_OFFSET)),
            )
        }
    }

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract); the same arithmetic as `chunk`.
        unsafe {
            let blk = row.add(b * BlockQ4_0::BYTES);
            let d = f16_splat(blk.add(BlockQ4_0::D_OFFSET));
            let q = nibbles_block(blk.add(BlockQ4_0::QS_OFFSET));
            let f = |q| _mm256_mul_ps(_mm256_sub_ps(q, _mm256_set1_ps(8.0)), d);
            [f(q[0]), f(q[1]), f(q[2]), f(q[3])]
        }
    }
}

impl Weights for Q4_1W {
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract). `d * q` is exact, so the fused
        // `d * q + m` rounds once, like the oracle's `d * q + m`.
        unsafe {
            let blk = row.add(b * BlockQ4_1::BYTES);
            let q = _mm256_cvtepi32_ps(nibbles(blk.add(BlockQ4_1::QS_OFFSET), c));
            _mm256_fmadd_ps(
                q,
                f16_splat(blk.add(BlockQ4_1::D_OFFSET)),
                f16_splat(blk.add(BlockQ4_1::M_OFFSET)),
            )
        }
    }

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract); the same arithmetic as `chunk`.
        unsafe {
            let blk = row.add(b * BlockQ4_1::BYTES);
            // Lane 0: d, lane 1: m.
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(
                blk.add(BlockQ4_1::D_OFFSET).cast::<i32>().read_unaligned(),
            ));
            let d = _mm256_broadcastss_ps(dm);
            let m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            let q = nibbles_block(blk.add(BlockQ4_1::QS_OFFSET));
            [
                _mm256_fmadd_ps(q[0], d, m),
                _mm256_fmadd_ps(q[1], d, m),
                _mm256_fmadd_ps(q[2], d, m),
                _mm256_fmadd_ps(q[3], d, m),
            ]
        }
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

/// `[v0 · s, v1 · s, v2 · s, v3 · s]`.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn scale4(v: [__m256; 4], s: [__m256; 2]) -> [__m256; 4] {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        [
            _mm256_mul_ps(v[0], s[0]),
            _mm256_mul_ps(v[1], s[0]),
            _mm256_mul_ps(v[2], s[1]),
            _mm256_mul_ps(v[3], s[1]),
        ]
    }
}

/// `v · dl - ml` per lane (fused: one rounding), chunks 0–1 with `(dl, ml)[0]`, 2–3 with
/// `[1]` (the two 16-element sub-blocks of a unit; the same pair twice for 32-element ones).
///
/// # Safety
///
/// FMA available.
#[inline(always)]
unsafe fn scale_min4(v: [__m256; 4], dl: [__m256; 2], ml: [__m256; 2]) -> [__m256; 4] {
    // SAFETY: register-only FMA intrinsics.
    unsafe {
        [
            _mm256_fmsub_ps(v[0], dl[0], ml[0]),
            _mm256_fmsub_ps(v[1], dl[0], ml[0]),
            _mm256_fmsub_ps(v[2], dl[1], ml[1]),
            _mm256_fmsub_ps(v[3], dl[1], ml[1]),
        ]
    }
}

struct Q5_0W;
struct Q5_1W;
struct Iq4NlW;
struct Q2KW;
struct Q3KW;
struct Q4KW;
struct Q5KW;
struct Q6KW;

impl Weights for Q5_0W {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract); `d · (q - 16)` as the oracle.
        unsafe {
            let blk = row.add(b * crate::quant::q5_0::BYTES);
            let q = _mm256_or_si256(
                super::nibbles32(blk.add(BlockQ5_0::QS_OFFSET)),
                super::fifth_bits(blk.add(BlockQ5_0::QH_OFFSET)),
            );
            let q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
            let d = f16_splat(blk.add(BlockQ5_0::D_OFFSET));
            scale4(bytes_f32::<true>(q), [d, d])
        }
    }
}

impl Weights for Q5_1W {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract). `d · q` is exact, so the fused
        // `d · q + m` rounds once, like the oracle's.
        unsafe {
            let blk = row.add(b * crate::quant::q5_1::BYTES);
            let q = _mm256_or_si256(
                super::nibbles32(blk.add(BlockQ5_1::QS_OFFSET)),
                super::fifth_bits(blk.add(BlockQ5_1::QH_OFFSET)),
            );
            let (d, m) =
                (f16_splat(blk.add(BlockQ5_1::D_OFFSET)), f16_splat(blk.add(BlockQ5_1::M_OFFSET)));
            bytes_f32::<false>(q).map(|v| _mm256_fmadd_ps(v, d, m))
        }
    }
}

impl Weights for Iq4NlW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: block `b` is in bounds (caller contract); `d · value` as the oracle.
        unsafe {
            let blk = row.add(b * crate::quant::iq4_nl::BYTES);
            let d = f16_splat(blk.add(BlockIq4Nl::D_OFFSET));
            scale4(bytes_f32::<true>(super::iq4_values32(blk.add(BlockIq4Nl::QS_OFFSET))), [d, d])
        }
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

impl Weights for Q2KW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract). Sub-blocks 2u, 2u + 1:
        // `(d · sc) · q - dmin · m` with the oracle's `d · sc`, `dmin · m`.
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q2_k::BYTES);
            let (d, dmin) =
                (f16_scalar(blk.add(BlockQ2K::D_OFFSET)), f16_scalar(blk.add(BlockQ2K::M_OFFSET)));
            let q = bytes_f32::<false>(q2_unit(blk.add(BlockQ2K::QS_OFFSET), u));
            let s = |j: usize| {
                let sc = *blk.add(BlockQ2K::SCALES_OFFSET + j);
                (_mm256_set1_ps(d * (sc & 0x0F) as f32), _mm256_set1_ps(dmin * (sc >> 4) as f32))
            };
            let (s0, s1) = (s(2 * u), s(2 * u + 1));
            scale_min4(q, [s0.0, s1.0], [s0.1, s1.1])
        }
    }
}

impl Weights for Q3KW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract). Value
        // `(d · sc) · (low + 4 high - 4)` with the oracle's `d · sc`.
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q3_k::BYTES);
            let sc = crate::quant::q3_k::scales_q3(core::slice::from_raw_parts(
                blk.add(BlockQ3K::SCALES_OFFSET),
                12,
            ));
            let d = f16_scalar(blk.add(BlockQ3K::D_OFFSET));
            let hm = _mm256_loadu_si256(blk.add(BlockQ3K::QH_OFFSET).cast());
            let bit = _mm256_set1_epi8((1u8 << u) as i8);
            let high = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
            let high = _mm256_and_si256(high, _mm256_set1_epi8(4));
            let q = _mm256_sub_epi8(
                _mm256_or_si256(q2_unit(blk.add(BlockQ3K::QS_OFFSET), u), high),
                _mm256_set1_epi8(4),
            );
            let dl = |j: usize| _mm256_set1_ps(d * sc[j] as f32);
            scale4(bytes_f32::<true>(q), [dl(2 * u), dl(2 * u + 1)])
        }
    }
}

/// The Q4_K/Q5_K unit `u` (sub-block `u`): nibbles of the 32 bytes `qs + 32 (u / 2)` (low for
/// even `u`, high for odd), `extra` or'ed in, then `(d · sc_u) · q - dmin · m_u`.
///
/// # Safety
///
/// `blk` is a whole super-block with `d`, `dmin` at 0, scales at 4..16; 32 readable bytes at
/// `qs + 32 (u / 2)`; AVX2, FMA and F16C available.
#[inline(always)]
unsafe fn k4_unit(blk: *const u8, qs: *const u8, u: usize, extra: __m256i) -> [__m256; 4] {
    // SAFETY: the reads are in bounds (caller contract).
    unsafe {
        let sm = crate::quant::q4_k::scales_mins_k4(core::slice::from_raw_parts(
            blk.add(BlockQ4K::SCALES_OFFSET),
            12,
        ));
        let (d, dmin) =
            (f16_scalar(blk.add(BlockQ4K::D_OFFSET)), f16_scalar(blk.add(BlockQ4K::M_OFFSET)));
        let q = _mm256_loadu_si256(qs.add(32 * (u / 2)).cast());
        let q = if u % 2 == 0 { q } else { _mm256_srli_epi16::<4>(q) };
        let q = _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0x0F)), extra);
        let dl = _mm256_set1_ps(d * sm[u] as f32);
        let ml = _mm256_set1_ps(dmin * sm[8 + u] as f32);
        scale_min4(bytes_f32::<false>(q), [dl, dl], [ml, ml])
    }
}

impl Weights for Q4KW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract).
        unsafe {
            let (sb, u) = unit(b);
            let blk = row.add(sb * crate::quant::q4_k::BYTES);
            k4_unit(blk, blk.add(BlockQ4K::QS_OFFSET), u, _mm256_setzero_si256())
        }
    }
}

impl Weights for Q5KW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
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
            k4_unit(blk, blk.add(BlockQ5K::QS_OFFSET), u, high)
        }
    }
}

impl Weights for Q6KW {
    const DECODE_ONCE: bool = true;

    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [__m256; 4] {
        // SAFETY: super-block `b / 8` is in bounds (caller contract). Unit u = 4 h + g:
        // nibble g / 2 of ql[64 h + 32 (g % 2) ..], bits 2 g of qh[32 h ..]; value
        // `(d · sc) · (q - 32)` with the oracle's `d · sc`.
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
            let q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
            let d = f16_scalar(blk.add(BlockQ6K::D_OFFSET));
            let dl =
                |j: usize| _mm256_set1_ps(d * (*blk.add(BlockQ6K::SCALES_OFFSET + j) as i8) as f32);
            scale4(bytes_f32::<true>(q), [dl(2 * u), dl(2 * u + 1)])
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
unsafe fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    // SAFETY: register-only AVX intrinsics.
    unsafe {
        let s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
        _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
    }
}

/// `R × N` accumulators, one 8-lane vector per output.
type Acc<const R: usize, const N: usize> = [[__m256; N]; R];

/// Adds the products of elements `k0..k1` into `acc` (`k0` a multiple of 32; `k1` either a
/// multiple of 32 or `k`, in which case the tail past the last whole block is included).
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats;
/// AVX2, FMA and F16C are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<W: Weights, const R: usize, const N: usize>(
    acc: &mut Acc<R, N>,
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    k0: usize,
    k1: usize,
) {
    // SAFETY: every pointer below stays inside the rows described by the caller contract:
    // blocks below `k1 / 32 <= k / 32`, 8-element steps below `k`, a masked tail of `k % 8`.
    unsafe {
        if N == 1 {
            // One activation row (GEMV): decode each weight block once, then the same FMAs
            // in the same order as below.
            for b in k0 / 32..k1 / 32 {
                let p = x.add(b * 32);
                let xv = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let wv = W::block(w.add(r * rb), b);
                    for c in 0..4 {
                        acc[0] = _mm256_fmadd_ps(wv[c], xv[c], acc[0]);
                    }
                }
            }
        }
        for b in (k0 / 32..k1 / 32).filter(|_| N != 1 && W::DECODE_ONCE) {
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = W::block(w.add(r * rb), b);
                for (c, wv) in wv.iter().enumerate() {
                    for (t, a) in acc.iter_mut().enumerate() {
                        let xv = _mm256_loadu_ps(x.add(t * k + b * 32 + c * 8));
                        *a = _mm256_fmadd_ps(*wv, xv, *a);
                    }
                }
            }
        }
        for b in (k0 / 32..k1 / 32).filter(|_| N != 1 && !W::DECODE_ONCE) {
            for c in 0..4 {
                let mut xv = [_mm256_setzero_ps(); N];
                for (t, xv) in xv.iter_mut().enumerate() {
                    *xv = _mm256_loadu_ps(x.add(t * k + b * 32 + c * 8));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let wv = W::chunk(w.add(r * rb), b, c);
                    for (a, xv) in acc.iter_mut().zip(&xv) {
                        *a = _mm256_fmadd_ps(wv, *xv, *a);
                    }
                }
            }
        }
        if W::TAIL && k1 == k {
            let mut i = k / 32 * 32;
            while i < k {
                let len = (k - i).min(8);
                let m = mask(len);
                let mut xv = [_mm256_setzero_ps(); N];
                for (t, xv) in xv.iter_mut().enumerate() {
                    *xv = _mm256_maskload_ps(x.add(t * k + i), m);
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = w.add(r * rb);
                    let wv = if len == 8 {
                        W::chunk(row.add(i * W::ELEM_BYTES), 0, 0)
                    } else {
                        W::tail(row, i, len)
                    };
                    for (a, xv) in acc.iter_mut().zip(&xv) {
                        *a = _mm256_fmadd_ps(wv, *xv, *a);
                    }
                }
                i += 8;
            }
        }
    }
}

/// Writes `y[t * ldy + r] = Σ lanes of acc[r][t]`, four rows at a time.
///
/// # Safety
///
/// Every `y[t * ldy + r]`, `r < R`, `t < N`, is writable; AVX available.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn finish<const R: usize, const N: usize>(acc: &Acc<R, N>, y: *mut f32, ldy: usize) {
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

/// One `R × N` tile over all of K: `y[t * ldy + r] = W[r] · x[t]` for `r < R`, `t < N`.
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats,
/// every `y[t * ldy + r]` is writable; AVX2, FMA and F16C are available.
#[inline(always)]
unsafe fn tile<W: Weights, const R: usize, const N: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract (AVX2, FMA and F16C available).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        accumulate::<W, R, N>(&mut acc, w, rb, k, x, 0, k);
        finish(&acc, y, ldy);
    }
}

/// K is cut into chunks of this many elements when it exceeds [`KC_MIN`] (a multiple of 32).
const KC: usize = 256;
/// Below this K the whole row fits L1 next to the activation rows: no K blocking.
const KC_MIN: usize = 768;
/// Activation tiles (of 3 rows) whose accumulators stay live across the K chunks.
const MACRO_TILES: usize = 16;

/// Accumulators of one tile, parked in `store` between K chunks (the values are stored and
/// reloaded unchanged, so the arithmetic is exactly [`tile`]'s).
///
/// # Safety
///
/// As [`accumulate`]; `store` holds at least `R * N` vectors.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate_parked<W: Weights, const R: usize, const N: usize>(
    store: &mut [__m256],
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    k0: usize,
    k1: usize,
) {
    let mut acc: Acc<R, N> = core::array::from_fn(|r| core::array::from_fn(|t| store[r * N + t]));
    // SAFETY: forwarded caller contract.
    unsafe { accumulate::<W, R, N>(&mut acc, w, rb, k, x, k0, k1) };
    for (r, acc) in acc.iter().enumerate() {
        store[r * N..r * N + N].copy_from_slice(acc);
    }
}

/// Four weight rows × `n` activation rows with K blocking: for each group of up to
/// `3 * MACRO_TILES` activation rows, K chunks of [`KC`] run over all the group's tiles, so
/// the 4 × `KC` weights stay in L1 while the activations stream from L2. Same per-output
/// arithmetic as [`tile`].
///
/// # Safety
///
/// As [`super::super::MatmulF32Fn`] for 4 rows; AVX2, FMA and F16C are available.
#[inline(always)]
unsafe fn rows4_kblocked<W: Weights>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: AVX is available (caller contract).
    let zero = unsafe { _mm256_setzero_ps() };
    let mut store = [zero; 12 * MACRO_TILES];
    let mut t0 = 0;
    while t0 < n {
        let tn = (n - t0).min(3 * MACRO_TILES);
        store.fill(zero);
        let mut k0 = 0;
        while k0 < k {
            let k1 = if k - k0 > KC { k0 + KC } else { k };
            let mut t = 0;
            while t < tn {
                // SAFETY: activation rows `t0 + t .. + 3 <= n` (caller contract).
                unsafe {
                    let xt = x.add((t0 + t) * k);
                    if tn - t >= 3 {
                        accumulate_parked::<W, 4, 3>(&mut store[t * 4..], w, rb, k, xt, k0, k1);
                    } else {
                        // The last one or two activation rows, each a 4 × 1 tile parked at
                        // `4 * (t + i)` (inside the 12 vectors a 4 × 3 tile would take).
                        for i in 0..tn - t {
                            let s = &mut store[(t + i) * 4..];
                            accumulate_parked::<W, 4, 1>(s, w, rb, k, xt.add(i * k), k0, k1);
                        }
                    }
                }
                t += 3;
            }
            k0 = k1;
        }
        let mut t = 0;
        while t < tn {
            // SAFETY: outputs of activation rows `t0 + t ..` (caller contract).
            unsafe {
                let yt = y.add((t0 + t) * ldy);
                if tn - t >= 3 {
                    let s = &store[t * 4..];
                    let acc = core::array::from_fn(|r| [s[3 * r], s[3 * r + 1], s[3 * r + 2]]);
                    finish::<4, 3>(&acc, yt, ldy);
                } else {
                    for i in 0..tn - t {
                        let s = &store[(t + i) * 4..];
                        finish::<4, 1>(&core::array::from_fn(|r| [s[r]]), yt.add(i * ldy), ldy);
                    }
                }
            }
            t += 3;
        }
        t0 += tn;
    }
}

/// Four weight rows against `n` activation rows: `4 × 3` micro-tiles, the last one or two
/// activation rows one at a time (`4 × 1`; the same per-output arithmetic).
///
/// # Safety
///
/// As [`super::super::MatmulF32Fn`] for 4 rows; AVX2, FMA and F16C are available.
#[inline(always)]
unsafe fn rows4<W: Weights>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: tiles stay inside 4 rows and `n` activation rows (caller contract).
    unsafe {
        let mut t = 0;
        while t + 3 <= n {
            tile::<W, 4, 3>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 3;
        }
        while t < n {
            tile::<W, 4, 1>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 1;
        }
    }
}

/// The whole block of rows: 8-row tiles for one activation row (GEMV), 4-row tiles with up
/// to 3 activation rows otherwise; rows left over go through `4 × 1` and `1 × 1` tiles with
/// the same per-output arithmetic (few tile shapes: each is inlined into all 14 entries).
///
/// # Safety
///
/// As [`super::super::MatmulF32Fn`]; AVX2, FMA and F16C are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn matmul<W: Weights>(
    w: *const u8,
    rb: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: each call covers rows `r..r + R < rows` (caller contract).
    unsafe {
        let mut r = 0;
        if n == 1 {
            while r + 8 <= rows {
                tile::<W, 8, 1>(w.add(r * rb), rb, k, x, y.add(r), ldy);
                r += 8;
            }
            if r + 4 <= rows {
                tile::<W, 4, 1>(w.add(r * rb), rb, k, x, y.add(r), ldy);
                r += 4;
            }
        } else {
            while r + 4 <= rows {
                if k > KC_MIN {
                    rows4_kblocked::<W>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                } else {
                    rows4::<W>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                }
                r += 4;
            }
        }
        // The last rows (at most 3), one weight row × one activation row at a time.
        while r < rows {
            for t in 0..n {
                tile::<W, 1, 1>(w.add(r * rb), rb, k, x.add(t * k), y.add(t * ldy + r), ldy);
            }
            r += 1;
        }
    }
}

macro_rules! entry {
    ($name:ident, $w:ty) => {
        tier_fn! { Avx2;
            /// AVX2 table entry (see [`super::super::MatmulF32Fn`]).
            ///
            /// # Safety
            ///
            /// As [`super::super::MatmulF32Fn`]; the CPU has AVX2, FMA and F16C.
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                w: *const u8,
                rb: usize,
                rows: usize,
                k: usize,
                x: *const f32,
                n: usize,
                y: *mut f32,
                ldy: usize,
            ) {
                // SAFETY: forwarded caller contract; the features are enabled here.
                unsafe { matmul::<$w>(w, rb, rows, k, x, n, y, ldy) }
            }
        }
    };
}

entry!(matmul_f32, F32W);
entry!(matmul_f16, F16W);
entry!(matmul_bf16, Bf16W);
entry!(matmul_q8_0, Q8_0W);
entry!(matmul_q4_0, Q4_0W);
entry!(matmul_q4_1, Q4_1W);
entry!(matmul_q5_0, Q5_0W);
entry!(matmul_q5_1, Q5_1W);
entry!(matmul_iq4_nl, Iq4NlW);
entry!(matmul_q2_k, Q2KW);
entry!(matmul_q3_k, Q3KW);
entry!(matmul_q4_k, Q4KW);
entry!(matmul_q5_k, Q5KW);
entry!(matmul_q6_k, Q6KW);
