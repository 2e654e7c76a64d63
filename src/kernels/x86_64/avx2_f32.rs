//! AVX2 + FMA matmul with f32 activations, for f32, f16, bf16 weights (widened on the fly)
//! and Q8_0 / Q4_0 / Q4_1 weights (dequantized on the fly).
//!
//! Both operands are contiguous along K (`W` is `rows × k` row-major, `X` is `n × k`), so
//! the micro-kernel is a register tile of `R` weight rows × `N` activation rows, each output
//! with one 8-lane accumulator: lane `j` accumulates the products of the elements
//! `i ≡ j (mod 8)` in order with FMA, a K tail shorter than 8 goes through zero-filled lanes,
//! and the lanes are summed by [`super::hsum_ps`]. Every output sees exactly that sequence of
//! operations whatever the tile shape, so a row's result does not depend on which rows share
//! its tile or chunk: results are bit-identical for every schedule and thread count.

use core::arch::x86_64::*;

use super::hsum_ps;

/// A weight encoding: how 8 consecutive elements of a row become 8 f32 lanes. Elements are
/// addressed in units of 32 (a quantization block) and 8-element chunks inside them.
trait Weights {
    /// Whether rows may end with a partial unit (f32/f16/bf16: any `k`; quantized: `k % 32
    /// == 0`).
    const TAIL: bool;
    /// Bytes per element for the unblocked encodings (tail addressing).
    const ELEM_BYTES: usize;

    /// Elements `32 b + 8 c .. + 8` of the row at `row` (`c < 4`).
    ///
    /// # Safety
    ///
    /// Those elements are in bounds; AVX2, FMA and F16C are available.
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256;

    /// `len < 8` elements starting at element `i` (unblocked encodings only), the other lanes
    /// zero.
    ///
    /// # Safety
    ///
    /// As [`Weights::chunk`].
    unsafe fn tail(row: *const u8, i: usize, len: usize) -> __m256;
}

/// `-1` × 8 then `0` × 8: loading 8 lanes at `8 - len` gives a mask of `len` lanes.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// A lane mask selecting the first `len <= 8` lanes.
///
/// # Safety
///
/// AVX must be available; `len <= 8`.
#[inline(always)]
unsafe fn mask(len: usize) -> __m256i {
    // SAFETY: `8 - len <= 8`, so 8 lanes from there stay inside `MASKS`.
    unsafe { _mm256_loadu_si256(MASKS.as_ptr().add(8 - len).cast()) }
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

impl Weights for Q8_0W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract). `d * q` is exact in f32 (11 + 8
        // significant bits), as in the oracle's dequantization.
        unsafe {
            let blk = row.add(b * 34);
            let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(blk.add(2 + 8 * c).cast()));
            _mm256_mul_ps(_mm256_cvtepi32_ps(q), f16_splat(blk))
        }
    }

    #[inline(always)]
    unsafe fn tail(_: *const u8, _: usize, _: usize) -> __m256 {
        // SAFETY: register-only; never called (`TAIL` is false).
        unsafe { _mm256_setzero_ps() }
    }
}

impl Weights for Q4_0W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract); `(q - 8) * d` is exact.
        unsafe {
            let blk = row.add(b * 18);
            let q = _mm256_cvtepi32_ps(nibbles(blk.add(2), c));
            _mm256_mul_ps(_mm256_sub_ps(q, _mm256_set1_ps(8.0)), f16_splat(blk))
        }
    }

    #[inline(always)]
    unsafe fn tail(_: *const u8, _: usize, _: usize) -> __m256 {
        // SAFETY: register-only; never called (`TAIL` is false).
        unsafe { _mm256_setzero_ps() }
    }
}

impl Weights for Q4_1W {
    const TAIL: bool = false;
    const ELEM_BYTES: usize = 0;

    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> __m256 {
        // SAFETY: block `b` is in bounds (caller contract). `d * q` is exact, so the fused
        // `d * q + m` rounds once, like the oracle's `d * q + m`.
        unsafe {
            let blk = row.add(b * 20);
            let q = _mm256_cvtepi32_ps(nibbles(blk.add(4), c));
            _mm256_fmadd_ps(q, f16_splat(blk), f16_splat(blk.add(2)))
        }
    }

    #[inline(always)]
    unsafe fn tail(_: *const u8, _: usize, _: usize) -> __m256 {
        // SAFETY: register-only; never called (`TAIL` is false).
        unsafe { _mm256_setzero_ps() }
    }
}

/// One `R × N` tile: `y[t * ldy + r] = W[r] · x[t]` for `r < R`, `t < N`.
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
    // SAFETY: every pointer below stays inside the rows described by the caller contract:
    // blocks `b < k / 32`, 8-element steps below `k`, and a masked tail of `k % 8` lanes.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        let nblk = k / 32;
        for b in 0..nblk {
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
        if W::TAIL {
            let mut i = nblk * 32;
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
        for (r, acc) in acc.iter().enumerate() {
            for (t, a) in acc.iter().enumerate() {
                *y.add(t * ldy + r) = hsum_ps(*a);
            }
        }
    }
}

/// Tiles `rows × n` with `R × N` micro-tiles for each `N` in `3, 2, 1`.
///
/// # Safety
///
/// As [`super::super::MatmulF32Fn`]; AVX2, FMA and F16C are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of<W: Weights, const R: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: tiles stay inside `R` rows and `n` activation rows (caller contract).
    unsafe {
        let mut t = 0;
        while t + 3 <= n {
            tile::<W, R, 3>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 3;
        }
        match n - t {
            2 => tile::<W, R, 2>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy),
            1 => tile::<W, R, 1>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy),
            _ => {}
        }
    }
}

/// The whole block of rows: 8-row tiles for one activation row (GEMV), 4-row tiles with up
/// to 3 activation rows otherwise; rows left over go through smaller tiles with the same
/// per-output arithmetic.
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
                rows_of::<W, 4>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                r += 4;
            }
        }
        if r + 2 <= rows {
            rows_of::<W, 2>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
            r += 2;
        }
        if r < rows {
            rows_of::<W, 1>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
        }
    }
}

macro_rules! entry {
    ($name:ident, $w:ty) => {
        /// AVX2 table entry (see [`super::super::MatmulF32Fn`]).
        ///
        /// # Safety
        ///
        /// As [`super::super::MatmulF32Fn`]; the CPU has AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
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
    };
}

entry!(matmul_f32, F32W);
entry!(matmul_f16, F16W);
entry!(matmul_bf16, Bf16W);
entry!(matmul_q8_0, Q8_0W);
entry!(matmul_q4_0, Q4_0W);
entry!(matmul_q4_1, Q4_1W);
