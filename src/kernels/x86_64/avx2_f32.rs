//! AVX2 + FMA + F16C bodies of the f32-activation product (the kernel frame's
//! `kernels/frame/f32.rs` runs the tiles): how f32, f16, bf16 weights widen, the helpers the
//! quantized types' bodies (`kernels/types/<type>.rs`) read their integers and scales with
//! (every quantized type is read in the frame's factored form: integers as f32 plus the
//! scales and offsets of each group of 8 units, a K-quant super-block or 8 blocks' heads
//! gathered by [`block_group_scales`]), and the lanes
//! themselves ([`Avx2F32`]: one 8-lane accumulator per output, `_mm256_fmadd_ps` per chunk,
//! the lanes summed by [`hsum4`], four outputs at a time, each lane from its own
//! accumulator).

use core::arch::x86_64::*;

use super::mask;
use crate::kernels::frame::f32::{
    f32_entries, Bf16Weights, F16Weights, F32Decode, F32Lanes, F32Weights, Scales,
};
use crate::quant::q4_k::BlockQ4K;
use crate::quant::BlockLayout;

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

/// The scale of a 32-element block whose f16 `d` is at `p` (and its offset, `MIN`, the f16
/// `m` right after it: `M_OFFSET == D_OFFSET + 2`) in every lane, as [`F32Decode::unit_scales`] gives them: the 4 bytes
/// at `p` broadcast, widened, then each half's lanes duplicated.
///
/// # Safety
///
/// 4 readable bytes at `p`; AVX2 and F16C available.
#[inline(always)]
pub(crate) unsafe fn block_scales<const MIN: bool>(p: *const u8) -> ([__m256; 2], [__m256; 2]) {
    // SAFETY: 4 bytes readable (caller contract); the rest is register-only.
    unsafe {
        let v = _mm256_cvtph_ps(_mm_set1_epi32(p.cast::<i32>().read_unaligned()));
        let d = _mm256_moveldup_ps(v);
        let m = if MIN { _mm256_movehdup_ps(v) } else { _mm256_setzero_ps() };
        ([d; 2], [m; 2])
    }
}

/// The [`Scales`] of units `8 g .. 8 g + n` (`1 <= n <= 8`) of a row of 32-element blocks
/// of `bytes` bytes, each with its f16 `d` at `d_offset` (and with `MIN` its f16 `m` right
/// after it, `M_OFFSET == D_OFFSET + 2`), as [`F32Decode::scales`] gives them (`s` = `d`,
/// `m` = `m`; entries past `n` untouched). The heads are read into general registers (two units'
/// 4 bytes, or four units' 2 bytes, per u64), moved to one vector and widened by one or two
/// `vcvtph2ps`: per unit a fraction of a vector instruction instead of a broadcast, a
/// widening and a lane duplication (the values are the same: the f16 → f32 widening is
/// exact).
///
/// # Safety
///
/// Blocks `8 g .. 8 g + n` of the row at `row` are in bounds, `d_offset + 2` (with `MIN`
/// `d_offset + 4`) `<= bytes`; AVX2 and F16C available.
#[inline(always)]
pub(crate) unsafe fn block_group_scales<const MIN: bool>(
    row: *const u8,
    bytes: usize,
    d_offset: usize,
    g: usize,
    n: usize,
    out: &mut Scales,
) {
    // SAFETY: forwarded caller contract (a whole group without the bounds tests).
    unsafe {
        let p = row.add(8 * g * bytes + d_offset);
        if n == 8 {
            group_heads::<MIN>(p, bytes, out);
        } else {
            // A row's last, partial group: unit by unit.
            for u in 0..n {
                out.s[u] = f16_scalar(p.add(u * bytes));
                if MIN {
                    out.m[u] = f16_scalar(p.add(u * bytes + 2));
                }
            }
        }
    }
}

/// [`block_group_scales`] of a whole group (`n == 8`) from the first head `p`.
///
/// # Safety
///
/// As [`block_group_scales`], `p` at unit `8 g`'s `d`.
#[inline(always)]
unsafe fn group_heads<const MIN: bool>(p: *const u8, bytes: usize, out: &mut Scales) {
    // SAFETY: units `0..8` are read, each inside its block (caller contract); the rest is
    // register-only and writes `out`'s first 8 scales and offsets.
    unsafe {
        if MIN {
            let rd = |u: usize| u64::from(p.add(u * bytes).cast::<u32>().read_unaligned());
            let w: [u64; 4] = core::array::from_fn(|i| rd(2 * i) | rd(2 * i + 1) << 32);
            let (a, b) = (
                _mm_set_epi64x(w[1] as i64, w[0] as i64),
                _mm_set_epi64x(w[3] as i64, w[2] as i64),
            );
            // Halves [d0 m0 d1 m1 d2 m2 d3 m3] → [d0 d1 d2 d3 m0 m1 m2 m3].
            let sh = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
            let (a, b) = (_mm_shuffle_epi8(a, sh), _mm_shuffle_epi8(b, sh));
            _mm256_storeu_ps(out.s.as_mut_ptr(), _mm256_cvtph_ps(_mm_unpacklo_epi64(a, b)));
            _mm256_storeu_ps(out.m.as_mut_ptr(), _mm256_cvtph_ps(_mm_unpackhi_epi64(a, b)));
        } else {
            let rd = |u: usize| u64::from(p.add(u * bytes).cast::<u16>().read_unaligned());
            let w: [u64; 2] = core::array::from_fn(|i| {
                rd(4 * i) | rd(4 * i + 1) << 16 | rd(4 * i + 2) << 32 | rd(4 * i + 3) << 48
            });
            let v = _mm_set_epi64x(w[1] as i64, w[0] as i64);
            _mm256_storeu_ps(out.s.as_mut_ptr(), _mm256_cvtph_ps(v));
        }
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
pub(crate) unsafe fn nibbles_block(qs: *const u8) -> [__m256; 4] {
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

/// 32 bytes (element order) as four vectors of 8 f32, read as unsigned or signed.
///
/// # Safety
///
/// AVX2 available.
#[inline(always)]
pub(crate) unsafe fn bytes_f32<const SIGNED: bool>(v: __m256i) -> [__m256; 4] {
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

/// The super-block of unit `b` (8 units of 32 per super-block) and the unit's index in it.
#[inline(always)]
pub(crate) fn unit(b: usize) -> (usize, usize) {
    (b / 8, b % 8)
}

/// The f16 at `p` as f32 (scalar lane).
///
/// # Safety
///
/// 2 readable bytes; F16C available.
#[inline(always)]
pub(crate) unsafe fn f16_scalar(p: *const u8) -> f32 {
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
pub(crate) unsafe fn scale16<const SIGNED: bool>(v: __m128i, f: f32, out: &mut [f32; 16]) {
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
pub(crate) unsafe fn q2_unit(qs: *const u8, u: usize) -> __m256i {
    // SAFETY: 32 bytes at `qs + 32 (u / 4)` (caller contract).
    unsafe {
        let q = _mm256_loadu_si256(qs.add(32 * (u / 4)).cast());
        let sh = _mm_cvtsi32_si128(2 * (u % 4) as i32);
        _mm256_and_si256(_mm256_srl_epi16(q, sh), _mm256_set1_epi8(3))
    }
}

/// The Q4_K/Q5_K values of unit `u` (sub-block `u`): nibbles of the 32 bytes `qs + 32 (u /
/// 2)` (low for even `u`, high for odd), `extra` or'ed in.
///
/// # Safety
///
/// 32 readable bytes at `qs + 32 (u / 2)`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn k4_values(qs: *const u8, u: usize, extra: __m256i) -> [__m256; 4] {
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
pub(crate) unsafe fn k4_scales(blk: *const u8, out: &mut Scales) {
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
pub(crate) struct Avx2F32;

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
}
