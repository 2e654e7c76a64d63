//! AVX-512 matmul with f32 activations for the quantized weight types (Q2_K..Q6_K, Q8_0,
//! Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; f32/f16/bf16 keep AVX2's bodies).
//!
//! A row is read in units of 32 elements (a block, or a sub-block of a K-quant super-block)
//! and groups of 8 units (a super-block, or 8 blocks). The weights of a unit are
//! `w_i = s_h · q_i + m_h` with `q_i` small integers, `s_h` the scale of the unit's half `h`
//! (16 elements; both halves share it except in Q2_K, Q3_K, Q6_K) and `m_h` an offset (the
//! types with a min: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), so the scales are factored out of the inner sums:
//!
//! `y = Σ_units [s · (q[0..16] ⊙ x[0..16] + q[16..32] ⊙ x[16..32])] + Σ_groups m ⊙ X`
//!
//! with `X` the sums of the activations over each run of 16, computed once per activation row
//! and call (a fixed reduction tree, [`half_sums`]) and shared by every weight row.
//!
//! The arithmetic order of one output, whatever the tile: a 16-lane accumulator `acc` and
//! (types with a min) `accm`, both zero; for each group, for each unit in order:
//! `p = q_lo · x_lo` (rounded), `p = fma(q_hi, x_hi, p)`, `acc = fma(p, s, acc)` (Q2_K, Q3_K, Q6_K:
//! `acc = fma(q_lo · x_lo, s_lo, acc)` then `acc = fma(q_hi · x_hi, s_hi, acc)`); after the
//! group's units `accm = fma(m, X, accm)` (lane `2u + h` holding unit `u`'s half `h`); the
//! result is `_mm512_reduce_add_ps(acc + accm)`. `q` is exact in f32, `s`, `m` and `X` do not
//! depend on the tile, so GEMV and every GEMM tile give the same bits for an output, for
//! every schedule and thread count. The result differs from the scalar oracle (which
//! dequantizes, then accumulates by 8 lanes) by rounding only.
//!
//! The GEMV runs 4 weight rows per activation load; prefill tiles are 2 weight rows × 4
//! activation rows. Each tile prefetches (`prefetcht0`) the weights of the tile after it,
//! [`crate::kernels::frame::NEXT_TILE_LEAD`] bytes further on ([`super::prefetch_next_tile`]): SmolLM2's rows are 400–900 bytes, too short for the hardware
//! stream prefetchers (measured: `docs/perf/notes-kernels.md`).
//!
//! Rows whose `k / 16` run sums do not fit the stack buffer ([`XH_CAP`]) go through AVX2's
//! body (a function of `k` only, so GEMV and GEMM still agree).

use core::arch::x86_64::*;

use crate::quant::q4_k::BlockQ4K;
use crate::quant::BlockLayout;

/// Run sums (per 16 activations) held on the stack: rows with more (`k > 65536` for one
/// activation row) use AVX2's body.
const XH_CAP: usize = 4096;

/// A quantized weight encoding, read by units of 32 elements in groups of 8.
pub(crate) trait W512 {
    /// Bytes of one 32-element block, or of one super-block for the K-quants.
    const BYTES: usize;
    /// Whether each half of a unit has its own scale (Q6_K).
    const HALF_SCALES: bool = false;
    /// Whether the type has an offset term (`m` above).
    const MIN: bool = false;
    /// AVX2's body, for `k > 16 · XH_CAP`.
    const FALLBACK: crate::kernels::MatmulF32Fn;

    /// The scales `s` and offsets `m` of units `8 g .. 8 g + n` (`n <= 8`), lane `2 u + h`
    /// for unit `8 g + u`'s half `h`; lanes past `2 n` zero.
    ///
    /// # Safety
    ///
    /// Those units are in bounds of the row; the AVX-512 tier's features are available.
    unsafe fn scales(row: *const u8, g: usize, n: usize) -> (__m512, __m512);

    /// The integers `q` of unit `b` as f32: elements 0..16 and 16..32.
    ///
    /// # Safety
    ///
    /// As [`W512::scales`].
    unsafe fn values(row: *const u8, b: usize) -> [__m512; 2];
}

/// Lane `i` = `i` as f32 (a 4-bit index read through `vpermps`).
#[inline(always)]
pub(crate) unsafe fn iota() -> __m512 {
    // SAFETY: register-only.
    unsafe { _mm512_setr_ps(0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.) }
}

/// The 16 bytes at `p` as u32 lanes.
///
/// # Safety
///
/// 16 readable bytes; AVX-512 F available.
#[inline(always)]
pub(crate) unsafe fn bytes16(p: *const u8) -> __m512i {
    // SAFETY: 16 bytes readable (caller contract).
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
}

/// As [`bytes16`] by `vpshufb` of a broadcast load (faster where two units read the same
/// bytes: Q4_K / Q5_K).
///
/// # Safety
///
/// 16 readable bytes; AVX-512 F/BW available.
#[inline(always)]
unsafe fn bytes16_shuf(p: *const u8) -> __m512i {
    // SAFETY: 16 bytes readable (caller contract).
    unsafe {
        // Dword lane 4 q + i gets byte 4 q + i of the broadcast 16 (`vpshufb` within each
        // 128-bit quarter `q`), zero above.
        let z = -128i8;
        let idx = _mm512_set_epi8(
            z, z, z, 15, z, z, z, 14, z, z, z, 13, z, z, z, 12, //
            z, z, z, 11, z, z, z, 10, z, z, z, 9, z, z, z, 8, //
            z, z, z, 7, z, z, z, 6, z, z, z, 5, z, z, z, 4, //
            z, z, z, 3, z, z, z, 2, z, z, z, 1, z, z, z, 0,
        );
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(p.cast())), idx)
    }
}

/// 16 i8 as f32 lanes.
#[inline(always)]
pub(crate) unsafe fn sbytes_f32(v: __m128i) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)) }
}

/// `tbl[v_i & 15]` per lane.
#[inline(always)]
pub(crate) unsafe fn lut(v: __m512i, tbl: __m512) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe { _mm512_permutexvar_ps(v, tbl) }
}

/// Up to 128 bytes at `p` (the first `len`, the rest zero) as two vectors.
///
/// # Safety
///
/// `len` readable bytes at `p`; AVX-512 BW available.
#[inline(always)]
unsafe fn window(p: *const u8, len: usize) -> (__m512i, __m512i) {
    let mask = |l: usize| if l >= 64 { u64::MAX } else { (1u64 << l) - 1 };
    // SAFETY: masked-off bytes are not read (no fault); the others are in bounds.
    unsafe {
        (
            _mm512_maskz_loadu_epi8(mask(len), p.cast()),
            _mm512_maskz_loadu_epi8(mask(len.saturating_sub(64)), p.add(64).cast()),
        )
    }
}

/// The f16 at byte `2 · off` of each of units `8 g .. 8 g + n` (blocks of `bytes` bytes, an
/// even number, at most 34) as f32 in lanes `2 u`, `2 u + 1`, for each `off` of `offs`;
/// lanes past `2 n` zero. Two windows of 4 blocks, the words picked by `vpermt2w`.
///
/// # Safety
///
/// Units `8 g .. 8 g + n` are in bounds; AVX-512 F/BW and F16C available.
#[inline(always)]
unsafe fn heads<const M: usize>(
    row: *const u8,
    g: usize,
    n: usize,
    bytes: usize,
    offs: [usize; M],
) -> [__m512; M] {
    // SAFETY: the windows read only the group's `n · bytes` bytes (masked past them).
    unsafe {
        let base = row.add(8 * g * bytes);
        let valid = n * bytes;
        let (a0, a1) = window(base, valid);
        let (b0, b1) = window(base.add(4 * bytes), valid.saturating_sub(4 * bytes));
        // Word lane i < 16: unit (i / 2) % 4 of its window.
        let u = _mm512_setr_epi32(
            0x0000_0000,
            0x0001_0001,
            0x0002_0002,
            0x0003_0003,
            0x0000_0000,
            0x0001_0001,
            0x0002_0002,
            0x0003_0003,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        );
        let words = _mm512_mullo_epi16(u, _mm512_set1_epi16((bytes / 2) as i16));
        let mut out = [_mm512_setzero_ps(); M];
        for (o, off) in out.iter_mut().zip(offs) {
            let idx = _mm512_add_epi16(words, _mm512_set1_epi16(off as i16));
            let r1 = _mm512_permutex2var_epi16(a0, idx, a1);
            let r2 = _mm512_permutex2var_epi16(b0, idx, b1);
            *o = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00, r1, r2)));
        }
        out
    }
}

/// The fifth bits of a Q5 block (the u32 at `qh`) as lane masks of the two halves.
#[inline(always)]
pub(crate) unsafe fn qh_masks(qh: *const u8) -> (__mmask16, __mmask16) {
    // SAFETY: 4 readable bytes (caller contract).
    let h = unsafe { qh.cast::<u32>().read_unaligned() };
    (h as u16, (h >> 16) as u16)
}

/// `v + 16` in the lanes of `m`.
#[inline(always)]
pub(crate) unsafe fn add16(v: __m512, m: __mmask16) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe { _mm512_mask_add_ps(v, m, v, _mm512_set1_ps(16.0)) }
}

/// Scales of a 32-element type with its f16 `d` first (no offset).
///
/// # Safety
///
/// As [`W512::scales`].
#[inline(always)]
pub(crate) unsafe fn d_only(row: *const u8, g: usize, n: usize, bytes: usize) -> (__m512, __m512) {
    // SAFETY: forwarded caller contract.
    unsafe { (heads(row, g, n, bytes, [0])[0], _mm512_setzero_ps()) }
}

/// Scales of a 32-element type with f16 `d`, `m` first.
///
/// # Safety
///
/// As [`W512::scales`].
#[inline(always)]
pub(crate) unsafe fn d_and_m(row: *const u8, g: usize, n: usize, bytes: usize) -> (__m512, __m512) {
    // SAFETY: forwarded caller contract.
    unsafe {
        let [d, m] = heads(row, g, n, bytes, [0, 1]);
        (d, m)
    }
}

/// Q4_K / Q5_K scales: lanes `2 u`, `2 u + 1` get `d · sc_u` and `-(dmin · m_u)`.
///
/// # Safety
///
/// `blk` is a whole super-block with `d`, `dmin` at 0 and the packed scales at 4..16;
/// AVX-512 F/VL, F16C available.
#[inline(always)]
pub(crate) unsafe fn k4_scales(blk: *const u8) -> (__m512, __m512) {
    // SAFETY: 16 bytes at `blk` (caller contract); the rest is register-only.
    unsafe {
        let sm = super::avx2_k::k4_scales_mins(blk.add(BlockQ4K::SCALES_OFFSET));
        let f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm));
        let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(
            blk.add(BlockQ4K::D_OFFSET).cast::<i32>().read_unaligned(),
        ));
        let d = _mm512_broadcastss_ps(dd);
        let dmin = _mm512_broadcastss_ps(_mm_movehdup_ps(dd));
        let lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        let hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
        let s = _mm512_mul_ps(d, _mm512_permutexvar_ps(lo, f));
        let m = _mm512_mul_ps(dmin, _mm512_permutexvar_ps(hi, f));
        (s, _mm512_sub_ps(_mm512_setzero_ps(), m))
    }
}

/// Q4_K / Q5_K nibbles of unit `u`: the 32 bytes at `qs + 32 (u / 2)`, low nibbles for even
/// `u`, high for odd.
///
/// # Safety
///
/// 32 readable bytes there; AVX-512 F available.
#[inline(always)]
pub(crate) unsafe fn k4_nibbles(qs: *const u8, u: usize) -> [__m512; 2] {
    // SAFETY: in bounds (caller contract).
    unsafe {
        let p = qs.add(32 * (u / 2));
        let (a, b) = (bytes16_shuf(p), bytes16_shuf(p.add(16)));
        if u % 2 == 0 {
            [lut(a, iota()), lut(b, iota())]
        } else {
            [
                _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(a)),
                _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(b)),
            ]
        }
    }
}

/// The 2-bit values of unit `u` of a Q2_K / Q3_K super-block's 64 bytes at `qs` (bits
/// `2 (u % 4)` of bytes `32 (u / 4) ..`) looked up in `tbl` (indexed by those two bits and
/// the two above them, which the table ignores).
///
/// # Safety
///
/// 64 readable bytes at `qs`; AVX-512 F available.
#[inline(always)]
pub(crate) unsafe fn q2_values(qs: *const u8, u: usize, tbl: __m512) -> [__m512; 2] {
    // SAFETY: 32 bytes at `qs + 32 (u / 4)` (caller contract).
    unsafe {
        let p = qs.add(32 * (u / 4));
        let sh = _mm_cvtsi32_si128(2 * (u % 4) as i32);
        let f = |v: __m512i| lut(_mm512_srl_epi32(v, sh), tbl);
        [f(bytes16(p)), f(bytes16(p.add(16)))]
    }
}

/// `[i & 3 - bias for i in 0..16]` as f32.
#[inline(always)]
pub(crate) unsafe fn two_bits(bias: f32) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe {
        let i = _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
        _mm512_sub_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(bias))
    }
}

/// Per 128-bit quarter: `[a0 + a2, b0 + b2, a1 + a3, b1 + b3]`.
#[inline(always)]
unsafe fn pair(a: __m512, b: __m512) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe { _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)) }
}

/// Per 128-bit quarter: `[a0 + a2, a1 + a3, b0 + b2, b1 + b3]` (64-bit halves added as f32).
#[inline(always)]
unsafe fn quad(a: __m512, b: __m512) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe {
        let (a, b) = (_mm512_castps_pd(a), _mm512_castps_pd(b));
        _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
            _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
        )
    }
}

/// Quarters `[a0 + a1, a2 + a3, b0 + b1, b2 + b3]`.
#[inline(always)]
unsafe fn halves(a: __m512, b: __m512) -> __m512 {
    // SAFETY: register-only AVX-512 F.
    unsafe {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
        )
    }
}

/// The sums of the `k` activations at `x` over each run of 16, 16 runs per group of 256
/// (the last group zero-padded), into `out[0 .. 16 · ceil(k / 256)]`. Each run's sum is a
/// fixed tree: within each 128-bit quarter `(x0 + x2) + (x1 + x3)`, then the quarters
/// `(Q0 + Q1) + (Q2 + Q3)`.
///
/// # Safety
///
/// `x` holds `k` floats (`k % 16 == 0`), `out` `16 · ceil(k / 256)`; AVX-512 F available.
#[inline(always)]
unsafe fn half_sums(x: *const f32, k: usize, out: *mut f32) {
    // SAFETY: loads stay below `k` (masked past it), stores below `16 · ceil(k / 256)`.
    unsafe {
        let runs = k / 16;
        let mut g = 0;
        while 16 * g < runs {
            let mut v = [_mm512_setzero_ps(); 16];
            for (j, v) in v.iter_mut().enumerate() {
                let run = 16 * g + j;
                if run < runs {
                    *v = _mm512_loadu_ps(x.add(16 * run));
                }
            }
            let mut w = [_mm512_setzero_ps(); 4];
            for (i, w) in w.iter_mut().enumerate() {
                let a = pair(v[4 * i], v[4 * i + 1]);
                let b = pair(v[4 * i + 2], v[4 * i + 3]);
                *w = quad(a, b);
            }
            let a = halves(w[0], w[1]);
            let b = halves(w[2], w[3]);
            _mm512_storeu_ps(out.add(16 * g), halves(a, b));
            g += 1;
        }
    }
}

/// Unit `b` (the `u`-th of its group, scales `s`) of `R` weight rows into the accumulators of
/// `N` activation rows.
///
/// # Safety
///
/// As [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
pub(crate) unsafe fn unit<W: W512, const R: usize, const N: usize>(
    acc: &mut [[__m512; N]; R],
    s: &[[f32; 16]; R],
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    b: usize,
    u: usize,
) {
    // SAFETY: unit `b` of each row and activations `32 b .. 32 b + 32` of each activation
    // row are in bounds (caller contract).
    unsafe {
        let mut xv = [[_mm512_setzero_ps(); 2]; N];
        for t in 0..N {
            let p = x.add(t * k + 32 * b);
            xv[t] = [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))];
        }
        for r in 0..R {
            let q = W::values(w.add(r * rb), b);
            if W::HALF_SCALES {
                let (s0, s1) = (_mm512_set1_ps(s[r][2 * u]), _mm512_set1_ps(s[r][2 * u + 1]));
                for t in 0..N {
                    let a = _mm512_fmadd_ps(_mm512_mul_ps(q[0], xv[t][0]), s0, acc[r][t]);
                    acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(q[1], xv[t][1]), s1, a);
                }
            } else {
                let s0 = _mm512_set1_ps(s[r][2 * u]);
                for t in 0..N {
                    let p = _mm512_mul_ps(q[0], xv[t][0]);
                    let p = _mm512_fmadd_ps(q[1], xv[t][1], p);
                    acc[r][t] = _mm512_fmadd_ps(p, s0, acc[r][t]);
                }
            }
        }
    }
}

/// One `R × N` tile over all of K: `y[t * ldy + r] = W[r] · x[t]` in the order of the module
/// docs; `xh` holds the run sums of the `N` activation rows, `hk` apart.
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats,
/// `xh` (types with a min) to `N` rows of `16 · ceil(k / 256)` sums; every `y[t * ldy + r]` is
/// writable; the AVX-512 tier's features are available.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn tile<W: W512, const R: usize, const N: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    xh: *const f32,
    hk: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: every access stays inside the rows of the caller contract: units below
    // `k / 32`, activations below `k`, run sums below `hk`.
    unsafe {
        let zero = _mm512_setzero_ps();
        let mut acc = [[zero; N]; R];
        let mut accm = [[zero; N]; R];
        let nu = k / 32;
        let mut g = 0;
        while 8 * g < nu {
            let n = (nu - 8 * g).min(8);
            // Software prefetch of the weights that follow this tile, spread over its groups
            // (short rows defeat the hardware's stream detection).
            super::prefetch_next_tile(w, R * rb, g, nu.div_ceil(8));
            let mut s = [zero; R];
            let mut m = [zero; R];
            let mut sa = [[0f32; 16]; R];
            for r in 0..R {
                (s[r], m[r]) = W::scales(w.add(r * rb), g, n);
                _mm512_storeu_ps(sa[r].as_mut_ptr(), s[r]);
            }
            if n == 8 {
                macro_rules! units {
                    ($($u:literal)*) => {
                        $(unit::<W, R, N>(&mut acc, &sa, w, rb, k, x, 8 * g + $u, $u);)*
                    };
                }
                units!(0 1 2 3 4 5 6 7);
            } else {
                for u in 0..n {
                    unit::<W, R, N>(&mut acc, &sa, w, rb, k, x, 8 * g + u, u);
                }
            }
            if W::MIN {
                for t in 0..N {
                    let xs = _mm512_loadu_ps(xh.add(t * hk + 16 * g));
                    for r in 0..R {
                        accm[r][t] = _mm512_fmadd_ps(m[r], xs, accm[r][t]);
                    }
                }
            }
            g += 1;
        }
        for r in 0..R {
            for t in 0..N {
                let a = if W::MIN { _mm512_add_ps(acc[r][t], accm[r][t]) } else { acc[r][t] };
                *y.add(t * ldy + r) = _mm512_reduce_add_ps(a);
            }
        }
    }
}

/// Weight rows `0..rows` against the `N` activation rows at `x`, `R` rows at a time, then
/// the rest one weight row × one activation row at a time (`1 × 1` tiles: the same
/// per-output arithmetic, and one tile shape fewer to inline into every entry).
///
/// # Safety
///
/// As [`tile`] for `rows` weight rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of<W: W512, const R: usize, const N: usize>(
    w: *const u8,
    rb: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    xh: *const f32,
    hk: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: each tile covers rows `r .. r + R <= rows` (caller contract).
    unsafe {
        let mut r = 0;
        while r + R <= rows {
            tile::<W, R, N>(w.add(r * rb), rb, k, x, xh, hk, y.add(r), ldy);
            r += R;
        }
        while r < rows {
            for t in 0..N {
                let (xt, ht, yt) = (x.add(t * k), xh.add(t * hk), y.add(t * ldy + r));
                tile::<W, 1, 1>(w.add(r * rb), rb, k, xt, ht, hk, yt, ldy);
            }
            r += 1;
        }
    }
}

/// The whole block of rows: 4-row tiles for one activation row (GEMV), 2 weight rows × 4
/// activation rows otherwise (activation rows in batches whose run sums fit [`XH_CAP`]).
///
/// # Safety
///
/// As [`super::super::MatmulF32Fn`]; the AVX-512 tier's features are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul<W: W512>(
    w: *const u8,
    rb: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let hk = k.div_ceil(256) * 16;
    if W::MIN && hk > XH_CAP {
        // SAFETY: forwarded caller contract; AVX2, FMA and F16C are part of the tier.
        return unsafe { (W::FALLBACK)(w, rb, rows, k, x, n, y, ldy) };
    }
    let mut xh = core::mem::MaybeUninit::<[f32; XH_CAP]>::uninit();
    let batch = if W::MIN { (XH_CAP / hk.max(1)).min(n) } else { n };
    let mut t0 = 0;
    while t0 < n {
        let tn = batch.min(n - t0);
        // SAFETY: activation rows `t0 .. t0 + tn <= n` and their outputs (caller contract);
        // `xh` holds `tn · hk <= XH_CAP` sums.
        unsafe {
            let xt = x.add(t0 * k);
            let yt = y.add(t0 * ldy);
            if W::MIN {
                for t in 0..tn {
                    half_sums(xt.add(t * k), k, xh.as_mut_ptr().cast::<f32>().add(t * hk));
                }
            }
            // Read only where `half_sums` wrote (types with a min) or not at all.
            let xh = xh.as_ptr().cast::<f32>();
            if tn == 1 {
                rows_of::<W, 4, 1>(w, rb, rows, k, xt, xh, hk, yt, ldy);
            } else {
                let mut t = 0;
                while t + 4 <= tn {
                    let (xs, ys, hs) = (xt.add(t * k), yt.add(t * ldy), xh.add(t * hk));
                    rows_of::<W, 2, 4>(w, rb, rows, k, xs, hs, hk, ys, ldy);
                    t += 4;
                }
                // The last one to three activation rows one at a time (`2 × 1` tiles).
                while t < tn {
                    let (xs, ys, hs) = (xt.add(t * k), yt.add(t * ldy), xh.add(t * hk));
                    rows_of::<W, 2, 1>(w, rb, rows, k, xs, hs, hk, ys, ldy);
                    t += 1;
                }
            }
        }
        t0 += tn;
    }
}

macro_rules! entry {
    ($name:ident, $w:ty) => {
        tier_fn! { Avx512;
            /// AVX-512 table entry (see [`crate::kernels::MatmulF32Fn`]).
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulF32Fn`]; the CPU has the AVX-512 tier's features
            /// (AVX-512 F/BW/VL on top of AVX2, FMA and F16C).
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
pub(crate) use entry;

// ---- f32 weights: AVX2's arithmetic on 512-bit registers ----
//
// The AVX2 tier (`avx2_f32.rs`, the frame's `matmul`) gives each output one 8-lane
// accumulator: `acc = fma(w[8 c ..], x[8 c ..], acc)` for each 8-element chunk `c` of K in
// order (a K tail past the last whole chunk as one chunk zero-filled past `k`), then
// `hsum4`'s fixed sum of the eight lanes. Here one 512-bit register holds the accumulators of
// two outputs, the same weight row against two activation rows (lanes 0..8 and 8..16): the
// chunk of weights is broadcast to both halves, and the activation rows are first copied
// pair by pair into a stack buffer with the two rows' chunks side by side, so that one load
// gives both. Every lane runs the same FMAs in the same order as AVX2's, and the halves are
// summed by AVX2's `hsum4`, so each output has AVX2's bits (tiles, blocks and thread splits
// do not change them) at twice the FLOPs per instruction on cores with 512-bit FMA units.

/// Weight rows per f32 tile.
const F32_ROWS: usize = 4;
/// Activation-row pairs per f32 tile: `F32_ROWS × F32_PAIRS` accumulators (more spill).
const F32_PAIRS: usize = 4;
/// The largest K the paired kernel takes (its activation buffer, `2 F32_PAIRS × F32_KMAX`
/// floats, is on the stack); longer rows go through AVX2's body, which gives the same bits.
const F32_KMAX: usize = 2048;

/// The 8 floats at `p` in both halves.
///
/// # Safety
///
/// 8 readable floats at `p`; AVX-512 F available.
#[inline(always)]
unsafe fn bcast8(p: *const f32) -> __m512 {
    // SAFETY: 32 readable bytes (caller contract).
    unsafe { _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(p.cast()))) }
}

/// The `len < 8` floats at `p`, the other lanes zero (AVX2's masked tail).
///
/// # Safety
///
/// `len` readable floats at `p`; AVX-512 F/VL available.
#[inline(always)]
unsafe fn load_tail8(p: *const f32, len: usize) -> __m256 {
    // SAFETY: masked lanes are not read.
    unsafe { _mm256_maskz_loadu_ps(((1u32 << len) - 1) as __mmask8, p) }
}

/// Copies the `nt <= 2 F32_PAIRS` activation rows at `x` (`k` floats each) into `buf` pair
/// by pair: chunk `c` of rows `2 p` and `2 p + 1` at `buf[16 (c F32_PAIRS + p) ..]`, 8 floats
/// each; a K tail as one more chunk zero-filled past `k`; rows past `nt` repeat the last.
///
/// # Safety
///
/// `x` holds `nt >= 1` rows of `k` floats, `buf` `16 F32_PAIRS ceil(k / 8)` floats; AVX-512
/// F/VL available.
#[inline(always)]
unsafe fn f32_pack(x: *const f32, k: usize, nt: usize, buf: *mut f32) {
    // SAFETY: reads below `k` in rows below `nt`, writes inside `buf` (caller contract).
    unsafe {
        let (chunks, len) = (k / 8, k % 8);
        for p in 0..F32_PAIRS {
            for h in 0..2 {
                let src = x.add((2 * p + h).min(nt - 1) * k);
                let dst = buf.add(16 * p + 8 * h);
                for c in 0..chunks {
                    _mm256_storeu_ps(dst.add(16 * F32_PAIRS * c), _mm256_loadu_ps(src.add(8 * c)));
                }
                if len != 0 {
                    let v = load_tail8(src.add(8 * chunks), len);
                    _mm256_storeu_ps(dst.add(16 * F32_PAIRS * chunks), v);
                }
            }
        }
    }
}

/// Accumulators of one f32 tile: `R` weight rows × `F32_PAIRS` pairs of activation rows.
type F32Acc<const R: usize> = [[__m512; F32_PAIRS]; R];

/// Adds chunks `c0 .. c1` of `R` f32 weight rows × the activation rows packed in `xp` by
/// [`f32_pack`] into `acc`, in chunk order (AVX2's per-output arithmetic); chunk `k / 8`, when
/// `k % 8 != 0`, is the tail (masked below `k`).
///
/// # Safety
///
/// `w` points to `R <= 4` rows of `rb` bytes holding `k` f32, `xp` as [`f32_pack`] wrote it,
/// `c0 <= c1 <= ceil(k / 8)`; the AVX-512 tier's features are available.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn f32_span<const R: usize>(
    acc: &mut F32Acc<R>,
    w: *const u8,
    rb: usize,
    k: usize,
    xp: *const f32,
    c0: usize,
    c1: usize,
) {
    // SAFETY: weight loads below `k / 8` chunks of each row (the tail masked below `k`),
    // activation loads inside the packed buffer (caller contract).
    unsafe {
        let w = w.cast::<f32>();
        let rs = rb / 4;
        let (chunks, len) = (k / 8, k % 8);
        let mut xq = xp.add(16 * F32_PAIRS * c0);
        for c in c0..c1.min(chunks) {
            let mut wv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                wv[r] = bcast8(w.add(r * rs + 8 * c));
            }
            for p in 0..F32_PAIRS {
                let xv = _mm512_loadu_ps(xq.add(16 * p));
                for r in 0..R {
                    acc[r][p] = _mm512_fmadd_ps(wv[r], xv, acc[r][p]);
                }
            }
            xq = xq.add(16 * F32_PAIRS);
        }
        if len != 0 && c1 > chunks {
            let mut wv = [_mm512_setzero_ps(); R];
            for r in 0..R {
                let v = _mm256_castps_pd(load_tail8(w.add(r * rs + 8 * chunks), len));
                wv[r] = _mm512_castpd_ps(_mm512_broadcast_f64x4(v));
            }
            for p in 0..F32_PAIRS {
                let xv = _mm512_loadu_ps(xq.add(16 * p));
                for r in 0..R {
                    acc[r][p] = _mm512_fmadd_ps(wv[r], xv, acc[r][p]);
                }
            }
        }
    }
}

/// Writes `y[t * ldy + r]` = AVX2's `hsum4` of the half of `acc[r][t / 2]` that holds
/// activation row `t`, for `t < nt`, `r < R`.
///
/// # Safety
///
/// Every `y[t * ldy + r]` is writable; the AVX-512 tier's features are available.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn f32_store<const R: usize>(acc: &F32Acc<R>, nt: usize, y: *mut f32, ldy: usize) {
    // SAFETY: stores only the caller's outputs.
    unsafe {
        for p in 0..F32_PAIRS {
            for h in 0..2 {
                let t = 2 * p + h;
                if t >= nt {
                    break;
                }
                let mut hv = [_mm256_setzero_ps(); 4];
                for r in 0..R {
                    let a = _mm512_castps_pd(acc[r][p]);
                    hv[r] = _mm256_castpd_ps(if h == 0 {
                        _mm512_castpd512_pd256(a)
                    } else {
                        _mm512_extractf64x4_pd::<1>(a)
                    });
                }
                let s = super::avx2_f32::hsum4(hv[0], hv[1], hv[2], hv[3]);
                let mut v = [0f32; 4];
                _mm_storeu_ps(v.as_mut_ptr(), s);
                for r in 0..R {
                    *y.add(t * ldy + r) = v[r];
                }
            }
        }
    }
}

/// `R` f32 weight rows × the `nt` activation rows packed in `xp` by [`f32_pack`]:
/// `y[t * ldy + r] = W[r] · x[t]` for `t < nt`, `r < R`, with AVX2's per-output arithmetic.
///
/// # Safety
///
/// `w` points to `R <= 4` rows of `rb` bytes holding `k` f32, `xp` as [`f32_pack`] wrote it;
/// every `y[t * ldy + r]` is writable; the AVX-512 tier's features are available.
#[inline(always)]
unsafe fn f32_tile<const R: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    xp: *const f32,
    nt: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); F32_PAIRS]; R];
        f32_span::<R>(&mut acc, w, rb, k, xp, 0, k.div_ceil(8));
        f32_store::<R>(&acc, nt, y, ldy);
    }
}

/// Weight bytes per panel of rows: each group of activation rows runs past one panel, which
/// stays in L2 from group to group, before the next panel starts.
const F32_PANEL_BYTES: usize = 384 << 10;
/// Chunks of 8 per K block once a row has more: the packed activations of a K block
/// (`16 F32_PAIRS F32_KC` floats, 16 KiB) stay in L1 while the panel's tiles run past them.
const F32_KC: usize = 64;
/// Tiles per panel whose accumulators are parked between K blocks (K-blocked panels have at
/// most `F32_ROWS F32_PARK` rows).
const F32_PARK: usize = 16;

tier_fn! { Avx512;
    /// AVX-512 table entry for f32 weights (see [`super::super::MatmulF32Fn`]): AVX2's
    /// per-output arithmetic, two outputs per 512-bit register, `F32_ROWS` weight rows ×
    /// `2 F32_PAIRS` activation rows per tile. Weight rows run in panels of about
    /// `F32_PANEL_BYTES`; per panel, each group of activation rows is packed, then the
    /// panel's tiles run past it, in K blocks of `F32_KC` chunks (accumulators parked in
    /// between, the same values) when rows are longer. One activation row (GEMV) and rows
    /// longer than `F32_KMAX` go through AVX2's body.
    ///
    /// # Safety
    ///
    /// As [`super::super::MatmulF32Fn`]; the CPU has the AVX-512 tier's features.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn avx512_f32_f32(
        w: *const u8,
        rb: usize,
        rows: usize,
        k: usize,
        x: *const f32,
        n: usize,
        y: *mut f32,
        ldy: usize,
    ) {
        // SAFETY: every tile covers weight rows `r .. r + R <= rows` and activation rows
        // `t0 .. t0 + nt <= n` (caller contract), packed into `buf`, which holds
        // `16 F32_PAIRS ceil(k / 8)` floats for `k <= F32_KMAX`; parked tiles `i < F32_PARK`
        // (a K-blocked panel has at most `F32_ROWS F32_PARK` rows), each written (first K
        // block) before it is read; AVX2 and FMA are part of the tier.
        unsafe {
            if n <= 1 || k > F32_KMAX {
                return super::avx2_f32::matmul_f32(w, rb, rows, k, x, n, y, ldy);
            }
            let mut buf = core::mem::MaybeUninit::<[f32; 2 * F32_PAIRS * F32_KMAX]>::uninit();
            let buf = buf.as_mut_ptr().cast::<f32>();
            let mut park = core::mem::MaybeUninit::<[F32Acc<F32_ROWS>; F32_PARK]>::uninit();
            let park = park.as_mut_ptr().cast::<F32Acc<F32_ROWS>>();
            let chunks = k.div_ceil(8);
            let kc = if chunks > F32_KC { F32_KC } else { chunks };
            let main = rows / F32_ROWS * F32_ROWS;
            let mut pr = (F32_PANEL_BYTES / rb.max(1)).max(1).div_ceil(F32_ROWS) * F32_ROWS;
            if kc < chunks {
                pr = pr.min(F32_ROWS * F32_PARK);
            }
            let mut r0 = 0;
            while r0 < rows {
                // A panel of whole tiles, or the last `rows % F32_ROWS` rows.
                let r1 = if r0 < main { (r0 + pr).min(main) } else { rows };
                let mut t0 = 0;
                while t0 < n {
                    let nt = (n - t0).min(2 * F32_PAIRS);
                    f32_pack(x.add(t0 * k), k, nt, buf);
                    let yt = y.add(t0 * ldy);
                    if r0 >= main {
                        for r in r0..r1 {
                            f32_tile::<1>(w.add(r * rb), rb, k, buf, nt, yt.add(r), ldy);
                        }
                    } else if kc == chunks {
                        let mut r = r0;
                        while r < r1 {
                            f32_tile::<F32_ROWS>(w.add(r * rb), rb, k, buf, nt, yt.add(r), ldy);
                            r += F32_ROWS;
                        }
                    } else {
                        let mut c0 = 0;
                        while c0 < chunks {
                            let c1 = (c0 + kc).min(chunks);
                            let mut r = r0;
                            while r < r1 {
                                let slot = &mut *park.add((r - r0) / F32_ROWS);
                                let mut acc = if c0 == 0 {
                                    [[_mm512_setzero_ps(); F32_PAIRS]; F32_ROWS]
                                } else {
                                    *slot
                                };
                                f32_span::<F32_ROWS>(&mut acc, w.add(r * rb), rb, k, buf, c0, c1);
                                if c1 == chunks {
                                    f32_store::<F32_ROWS>(&acc, nt, yt.add(r), ldy);
                                } else {
                                    *slot = acc;
                                }
                                r += F32_ROWS;
                            }
                            c0 = c1;
                        }
                    }
                    t0 += nt;
                }
                r0 = r1;
            }
        }
    }
}
