//! The f32-activation product (weights widened or dequantized on the fly, activations f32),
//! written once: the register tiles and their schedule over a block of weight rows ×
//! activation rows ([`matmul`]), the K blocking of prompts and the entry glue
//! ([`f32_entries`]), generic over a tier's [`F32Lanes`] (how 8 f32 lanes are loaded,
//! multiplied-added and summed) and its [`F32Decode`] of each weight format (how 8, or 32,
//! consecutive weights of a row become f32 lanes). The AVX2 and NEON tiers implement them
//! (the AVX-512 tier's quantized f32 kernels are its own: `x86_64/avx512_f32.rs`).
//!
//! Both operands are contiguous along K (`W` is `rows × k` row-major, `X` is `n × k`); a tile
//! holds `R` weight rows × `N` activation rows, each output with one accumulator
//! ([`F32Lanes::Acc`]). The arithmetic of one output, whatever the tile: K is read in units
//! of 32 weights (a quantization block, or a run of 32 inside a K-quant super-block), each
//! unit as four chunks of 8 in order, each chunk added by the tier's [`F32Lanes::fma`] (its
//! lanes: element `i` of a chunk into lane `i` of the vector; NEON splits it into two 4-lane
//! FMAs); an unblocked row's (f32/f16/bf16) K tail goes by 8-element chunks, the last one
//! zero-filled; then the tier's fixed horizontal sum ([`F32Lanes::store`]).
//!
//! A format decoded in factored form ([`F32Decode::FACTORED`]: weight `i` of a unit is
//! `s · q_i + m`, `q_i` a small integer exact in f32, `s` and `m` the unit's or its half's
//! scale and offset) takes the scales out of the inner sums instead. Per unit, with its
//! chunks `q0..q3` (integers as f32) and `x0..x3`: `p = q0 ⊙ x0` (rounded), `p = fma(q1, x1,
//! p)`, `p = fma(q2, x2, p)`, `p = fma(q3, x3, p)`, `acc = fma(p, s, acc)`; with an offset
//! then `acc = fma(m, X, acc)`, `X = (x0 + x1) + (x2 + x3)`. With a scale per 16-element half
//! ([`F32Decode::HALF_SCALES`]): `p = fma(q1, x1, q0 ⊙ x0)`, `acc = fma(p, s_0, acc)`, the
//! same for chunks 2 and 3 with `s_1`, then the offsets `acc = fma(m_0, x0 + x1, acc)`, `acc =
//! fma(m_1, x2 + x3, acc)`. The result differs from the dequantize-then-multiply order (and
//! the scalar oracle) by rounding only.
//!
//! So a row's result does not depend on which rows share its tile or chunk: results are
//! bit-identical for every schedule and thread count, per tier.

use super::{
    prefetch_ahead, Prefetch, GEMV_STREAMS, GEMV_STREAM_MIN_ROWS, PREFETCH_AHEAD,
    PREFETCH_MIN_BYTES,
};

/// The f32 weight format (`DType::F32`), a marker for [`F32Decode`].
pub(crate) struct F32Weights;
/// The IEEE half weight format (`DType::F16`), a marker for [`F32Decode`].
pub(crate) struct F16Weights;
/// The bfloat16 weight format (`DType::BF16`), a marker for [`F32Decode`].
pub(crate) struct Bf16Weights;

/// A tier's f32 lanes: 8 f32 values ([`F32Lanes::V`]), an output's accumulator and the
/// operations the tiles use on them.
pub(crate) trait F32Lanes {
    /// 8 consecutive f32 values (a chunk).
    type V: Copy;
    /// One output's accumulator.
    type Acc: Copy;
    /// The tier's prefetch instruction (the GEMV's prefetches of large matrices).
    type Prefetch: Prefetch;
    /// Weight rows per GEMV tile (one activation row): 8, or 4 ([`GEMV_STREAMS`]), which
    /// also runs a GEMV of [`GEMV_STREAM_MIN_ROWS`] rows or more as the int8 GEMV's four
    /// streams, each prefetched ahead. Each row takes one accumulator next to the four
    /// activation chunks and the decode's temporaries: a tier with 16 vector registers
    /// (AVX2) takes 4, as 8 rows spill.
    const GEMV_ROWS: usize = 8;

    /// A zero accumulator.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn zero() -> Self::Acc;

    /// The 8 floats at `p`.
    ///
    /// # Safety
    ///
    /// 8 readable floats at `p`; the tier's features are available.
    unsafe fn load(p: *const f32) -> Self::V;

    /// The `len < 8` floats at `p`, the other lanes zero.
    ///
    /// # Safety
    ///
    /// `len` readable floats at `p`; the tier's features are available.
    unsafe fn load_tail(p: *const f32, len: usize) -> Self::V;

    /// `acc + w ⊙ x` lane by lane, in the tier's fused order.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn fma(acc: Self::Acc, w: Self::V, x: Self::V) -> Self::Acc;

    /// `v` in every lane.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn splat(v: f32) -> Self::V;

    /// `a + b` lane by lane (rounded).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;

    /// `a ⊙ b` lane by lane (rounded).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;

    /// `a ⊙ b + c` lane by lane, one rounding.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;

    /// Writes `y[t * ldy + r]` = the tier's fixed horizontal sum of `acc[r][t]` for `r < R`,
    /// `t < N`.
    ///
    /// # Safety
    ///
    /// Those outputs are writable; the tier's features are available.
    unsafe fn store<const R: usize, const N: usize>(
        acc: &[[Self::Acc; N]; R],
        y: *mut f32,
        ldy: usize,
    );
}

/// The scales and offsets of a group of up to 8 units of a [`F32Decode::GROUP_SCALES`]
/// format, as f32: weight `i` of unit `u` is `s · q_i + m` with `q_i` the format's small
/// integer ([`F32Decode::values`]) and `s = s[u]`, `m = m[u]`, or with
/// [`F32Decode::HALF_SCALES`] `s[2 u + h]`, `m[2 u + h]` for the unit's half `h = i / 16`
/// (`m` only with [`F32Decode::MIN`]).
pub(crate) struct Scales {
    /// Scales.
    pub s: [f32; 16],
    /// Offsets.
    pub m: [f32; 16],
}

impl Scales {
    /// All zero.
    pub const ZERO: Scales = Scales { s: [0.0; 16], m: [0.0; 16] };
}

/// A tier's decoder of the weight format `W` (a block layout of `crate::quant`, or
/// [`F32Weights`], [`F16Weights`], [`Bf16Weights`]) to its f32 lanes. Elements are
/// addressed in units of 32 (a quantization block, or a run of 32 inside a K-quant
/// super-block) and 8-element chunks inside them. An implementation supplies
/// [`F32Decode::chunk`] or [`F32Decode::block`] (each defaults to the other), and both give
/// the same values (the dequantized weights, exactly as the scalar oracle's where the
/// oracle's dequantization is exact).
pub(crate) trait F32Decode<W>: F32Lanes {
    /// Whether rows may end with a partial unit (f32/f16/bf16: any `k`; quantized: `k % 32
    /// == 0`).
    const TAIL: bool = false;
    /// Bytes per element of the unblocked formats (tail addressing).
    const ELEM_BYTES: usize = 0;
    /// Decoding a unit costs more than its four chunks' loads (the K-quants' scales, Q5's
    /// fifth bits): tiles with several activation rows decode each unit once per weight row
    /// ([`F32Decode::block`]) instead of chunk by chunk. The FMAs per output are the same.
    const DECODE_ONCE: bool = false;
    /// The units are read as integers ([`F32Decode::values`]) and their scales and offsets
    /// per unit ([`F32Decode::unit_scales`]) or per group of 8 units
    /// ([`F32Decode::GROUP_SCALES`]), the scales taken out of the inner sums (the module
    /// docs' factored order) instead of each weight being dequantized. Quantized formats
    /// only; they implement [`F32Decode::values`] and one of the two.
    const FACTORED: bool = false;
    /// With [`F32Decode::FACTORED`]: the scales are read once per group of 8 units
    /// ([`F32Decode::scales`]; the K-quants, whose super-block is such a group, and the
    /// 32-element formats whose tier gathers 8 blocks' heads at once) instead of per unit.
    const GROUP_SCALES: bool = false;
    /// With [`F32Decode::GROUP_SCALES`]: a group of fewer than 8 units (a row's last) reads
    /// its scales unit by unit ([`F32Decode::unit_scales`], which the format implements)
    /// instead of as a group.
    const PARTIAL_BY_UNIT: bool = false;
    /// With [`F32Decode::FACTORED`]: each 16-element half of a unit has its own scale (and
    /// offset).
    const HALF_SCALES: bool = false;
    /// With [`F32Decode::FACTORED`]: the format has an offset term (`m` of [`Scales`]).
    const MIN: bool = false;

    /// Elements `32 b + 8 c .. + 8` of the row at `row` (`c < 4`).
    ///
    /// # Safety
    ///
    /// Those elements are in bounds; the tier's features are available.
    #[inline(always)]
    unsafe fn chunk(row: *const u8, b: usize, c: usize) -> Self::V {
        // SAFETY: forwarded caller contract.
        unsafe { Self::block(row, b)[c] }
    }

    /// The four chunks of unit `b` at once (the same values as [`F32Decode::chunk`]; for a
    /// [`F32Decode::FACTORED`] format, `s · q + m`, one rounding).
    ///
    /// # Safety
    ///
    /// As [`F32Decode::chunk`].
    #[inline(always)]
    unsafe fn block(row: *const u8, b: usize) -> [Self::V; 4] {
        // SAFETY: forwarded caller contract.
        unsafe {
            if Self::FACTORED {
                let q = Self::values(row, b);
                let (s, m) = Self::unit_scales(row, b);
                return core::array::from_fn(|c| Self::mul_add(q[c], s[c / 2], m[c / 2]));
            }
            [
                Self::chunk(row, b, 0),
                Self::chunk(row, b, 1),
                Self::chunk(row, b, 2),
                Self::chunk(row, b, 3),
            ]
        }
    }

    /// The integers `q` of unit `b` as f32, chunk by chunk (called only when
    /// [`F32Decode::FACTORED`], whose formats implement it; by default
    /// [`F32Decode::block`]).
    ///
    /// # Safety
    ///
    /// As [`F32Decode::chunk`].
    #[inline(always)]
    unsafe fn values(row: *const u8, b: usize) -> [Self::V; 4] {
        // SAFETY: forwarded caller contract.
        unsafe { Self::block(row, b) }
    }

    /// The scales and offsets of unit `b`'s two halves in every lane (the same twice unless
    /// [`F32Decode::HALF_SCALES`]; offsets zero unless [`F32Decode::MIN`]). Implemented by
    /// the [`F32Decode::FACTORED`] formats without [`F32Decode::GROUP_SCALES`]; by default
    /// read from [`F32Decode::scales`].
    ///
    /// # Safety
    ///
    /// As [`F32Decode::chunk`].
    #[inline(always)]
    unsafe fn unit_scales(row: *const u8, b: usize) -> ([Self::V; 2], [Self::V; 2]) {
        let mut sc = Scales::ZERO;
        let u = b % 8;
        // SAFETY: units `b - u ..= b` are in bounds (caller contract).
        unsafe {
            Self::scales(row, b / 8, u + 1, &mut sc);
            let j = if Self::HALF_SCALES { [2 * u, 2 * u + 1] } else { [u, u] };
            (j.map(|j| Self::splat(sc.s[j])), j.map(|j| Self::splat(sc.m[j])))
        }
    }

    /// Writes the [`Scales`] of units `8 g .. 8 g + n` (`1 <= n <= 8`; entries past them
    /// are unspecified). Implemented by the [`F32Decode::GROUP_SCALES`] formats (by
    /// default nothing is written).
    ///
    /// # Safety
    ///
    /// Those units are in bounds of the row; the tier's features are available.
    #[inline(always)]
    unsafe fn scales(row: *const u8, g: usize, n: usize, out: &mut Scales) {
        let _ = (row, g, n, out);
    }

    /// `len < 8` elements starting at element `i` (unblocked formats only, called only when
    /// [`F32Decode::TAIL`]), the other lanes zero. By default the elements copied into a
    /// zero-filled buffer, then [`F32Decode::chunk`] of it.
    ///
    /// # Safety
    ///
    /// As [`F32Decode::chunk`].
    #[inline(always)]
    unsafe fn tail(row: *const u8, i: usize, len: usize) -> Self::V {
        let mut buf = [0u32; 8];
        // SAFETY: `len · ELEM_BYTES <= 28` readable bytes (caller contract) into a 32-byte,
        // 4-byte aligned buffer, which holds 8 elements of at most 4 bytes.
        unsafe {
            let dst = buf.as_mut_ptr().cast::<u8>();
            core::ptr::copy_nonoverlapping(
                row.add(i * Self::ELEM_BYTES),
                dst,
                len * Self::ELEM_BYTES,
            );
            Self::chunk(buf.as_ptr().cast(), 0, 0)
        }
    }
}

/// The sums of a unit's activation chunks the offsets multiply: `[x0 + x1, x2 + x3, (x0 +
/// x1) + (x2 + x3)]` (only with [`F32Decode::MIN`]; else the chunks themselves, unused).
///
/// # Safety
///
/// The tier's features are available.
#[inline(always)]
unsafe fn xsums<T: F32Decode<W>, W>(xv: &[T::V; 4]) -> [T::V; 3] {
    if !T::MIN {
        return [xv[0], xv[1], xv[2]];
    }
    // SAFETY: register-only lane operations (caller contract).
    unsafe {
        let (a, b) = (T::add(xv[0], xv[1]), T::add(xv[2], xv[3]));
        [a, b, T::add(a, b)]
    }
}

/// The scales and offsets of unit `u` of a group from its [`Scales`], as
/// [`F32Decode::unit_scales`] gives them.
///
/// # Safety
///
/// The tier's features are available.
#[inline(always)]
unsafe fn splat_scales<T: F32Decode<W>, W>(sc: &Scales, u: usize) -> ([T::V; 2], [T::V; 2]) {
    let j = if T::HALF_SCALES { [2 * u, 2 * u + 1] } else { [u, u] };
    // SAFETY: register-only lane operations (caller contract).
    unsafe { (j.map(|j| T::splat(sc.s[j])), j.map(|j| T::splat(sc.m[j]))) }
}

/// One unit (integers `q`, scales and offsets `s`, `m` of its halves) with the activation
/// chunks `xv` (and their [`xsums`] `xs`) added to `acc`, in the factored order of the module
/// docs.
///
/// # Safety
///
/// The tier's features are available.
#[inline(always)]
unsafe fn dot_factored<T: F32Decode<W>, W>(
    acc: T::Acc,
    q: &[T::V; 4],
    (s, m): ([T::V; 2], [T::V; 2]),
    xv: &[T::V; 4],
    xs: &[T::V; 3],
) -> T::Acc {
    // SAFETY: register-only lane operations (caller contract).
    unsafe {
        if T::HALF_SCALES {
            let p = T::mul_add(q[1], xv[1], T::mul(q[0], xv[0]));
            let acc = T::fma(acc, p, s[0]);
            let p = T::mul_add(q[3], xv[3], T::mul(q[2], xv[2]));
            let acc = T::fma(acc, p, s[1]);
            if T::MIN {
                T::fma(T::fma(acc, m[0], xs[0]), m[1], xs[1])
            } else {
                acc
            }
        } else {
            let mut p = T::mul(q[0], xv[0]);
            for c in 1..4 {
                p = T::mul_add(q[c], xv[c], p);
            }
            let acc = T::fma(acc, p, s[0]);
            if T::MIN {
                T::fma(acc, m[0], xs[2])
            } else {
                acc
            }
        }
    }
}

/// `R × N` accumulators, one per output.
type Acc<T, const R: usize, const N: usize> = [[<T as F32Lanes>::Acc; N]; R];

/// Unit `b` of the tile's rows added to `acc` in the factored order of the module docs, its
/// scales from `sc` (unit `u` of a group of 8 whose [`Scales`] were read) with `GROUP`, else
/// by [`F32Decode::unit_scales`].
///
/// # Safety
///
/// As [`accumulate`], unit `b` in bounds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn factored_unit<T: F32Decode<W>, W, const R: usize, const N: usize, const GROUP: bool>(
    acc: &mut Acc<T, R, N>,
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    b: usize,
    sc: &[Scales; R],
    u: usize,
) {
    // SAFETY: unit `b` of `R` rows and `N` activation rows is in bounds (caller contract).
    unsafe {
        let scales = |r: usize| {
            if GROUP {
                splat_scales::<T, W>(&sc[r], u)
            } else {
                T::unit_scales(w.add(r * rb), b)
            }
        };
        if N == 1 {
            let p = x.add(b * 32);
            let xv = [T::load(p), T::load(p.add(8)), T::load(p.add(16)), T::load(p.add(24))];
            let xs = xsums::<T, W>(&xv);
            for (r, acc) in acc.iter_mut().enumerate() {
                let q = T::values(w.add(r * rb), b);
                acc[0] = dot_factored::<T, W>(acc[0], &q, scales(r), &xv, &xs);
            }
        } else {
            for (r, acc) in acc.iter_mut().enumerate() {
                let q = T::values(w.add(r * rb), b);
                let s = scales(r);
                for (t, a) in acc.iter_mut().enumerate() {
                    let p = x.add(t * k + b * 32);
                    let xv =
                        [T::load(p), T::load(p.add(8)), T::load(p.add(16)), T::load(p.add(24))];
                    let xs = xsums::<T, W>(&xv);
                    *a = dot_factored::<T, W>(*a, &q, s, &xv, &xs);
                }
            }
        }
    }
}

/// Adds the products of elements `k0..k1` into `acc` (`k0` a multiple of 32; `k1` either a
/// multiple of 32 or `k`, in which case the tail past the last whole unit is included), in
/// the order of the module docs.
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats;
/// the tier's features are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<T: F32Decode<W>, W, const R: usize, const N: usize>(
    acc: &mut Acc<T, R, N>,
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    k0: usize,
    k1: usize,
    sc: &mut [Scales; R],
) {
    // SAFETY: every pointer below stays inside the rows described by the caller contract:
    // units below `k1 / 32 <= k / 32`, 8-element steps below `k`, a tail of `k % 8`.
    unsafe {
        if T::FACTORED {
            // Each weight unit decoded once per tile (its scales once per unit, or once per
            // group of 8 units with `k0` a multiple of 256), then per activation row the same
            // operations in the same order ([`dot_factored`]).
            let (mut b0, u1) = (k0 / 32, k1 / 32);
            while b0 < u1 {
                let n = if T::GROUP_SCALES { (u1 - b0).min(8) } else { u1 - b0 };
                if T::GROUP_SCALES && (n == 8 || !T::PARTIAL_BY_UNIT) {
                    debug_assert!(b0 % 8 == 0);
                    for (r, sc) in sc.iter_mut().enumerate() {
                        T::scales(w.add(r * rb), b0 / 8, n, sc);
                    }
                    if n == 8 {
                        // A whole group's units unrolled (the scales at constant offsets).
                        for u in 0..8 {
                            factored_unit::<T, W, R, N, true>(acc, w, rb, k, x, b0 + u, sc, u);
                        }
                    } else {
                        for u in 0..n {
                            factored_unit::<T, W, R, N, true>(acc, w, rb, k, x, b0 + u, sc, u);
                        }
                    }
                } else {
                    // Per unit, or a row's last, partial group read unit by unit.
                    for u in 0..n {
                        factored_unit::<T, W, R, N, false>(acc, w, rb, k, x, b0 + u, sc, u);
                    }
                }
                b0 += n;
            }
            return;
        }
        if N == 1 {
            // One activation row (GEMV): decode each weight unit once, then the same FMAs
            // in the same order as below.
            for b in k0 / 32..k1 / 32 {
                let p = x.add(b * 32);
                let xv = [T::load(p), T::load(p.add(8)), T::load(p.add(16)), T::load(p.add(24))];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let wv = T::block(w.add(r * rb), b);
                    for c in 0..4 {
                        acc[0] = T::fma(acc[0], wv[c], xv[c]);
                    }
                }
            }
        }
        for b in (k0 / 32..k1 / 32).filter(|_| N != 1 && T::DECODE_ONCE) {
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = T::block(w.add(r * rb), b);
                for (c, wv) in wv.iter().enumerate() {
                    for (t, a) in acc.iter_mut().enumerate() {
                        let xv = T::load(x.add(t * k + b * 32 + c * 8));
                        *a = T::fma(*a, *wv, xv);
                    }
                }
            }
        }
        for b in (k0 / 32..k1 / 32).filter(|_| N != 1 && !T::DECODE_ONCE) {
            for c in 0..4 {
                let xv: [T::V; N] =
                    core::array::from_fn(|t| T::load(x.add(t * k + b * 32 + c * 8)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let wv = T::chunk(w.add(r * rb), b, c);
                    for (a, xv) in acc.iter_mut().zip(&xv) {
                        *a = T::fma(*a, wv, *xv);
                    }
                }
            }
        }
        if T::TAIL && k1 == k {
            let mut i = k / 32 * 32;
            while i < k {
                let len = (k - i).min(8);
                let xv: [T::V; N] = core::array::from_fn(|t| {
                    let p = x.add(t * k + i);
                    if len == 8 {
                        T::load(p)
                    } else {
                        T::load_tail(p, len)
                    }
                });
                for (r, acc) in acc.iter_mut().enumerate() {
                    let row = w.add(r * rb);
                    let wv = if len == 8 {
                        T::chunk(row.add(i * T::ELEM_BYTES), 0, 0)
                    } else {
                        T::tail(row, i, len)
                    };
                    for (a, xv) in acc.iter_mut().zip(&xv) {
                        *a = T::fma(*a, wv, *xv);
                    }
                }
                i += 8;
            }
        }
    }
}

/// One `R × N` tile over all of K: `y[t * ldy + r] = W[r] · x[t]` for `r < R`, `t < N`.
///
/// # Safety
///
/// `w` points to `R` rows of `rb` bytes holding `k` elements, `x` to `N` rows of `k` floats,
/// every `y[t * ldy + r]` is writable; the tier's features are available.
#[inline(always)]
unsafe fn tile<T: F32Decode<W>, W, const R: usize, const N: usize>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: forwarded caller contract.
    unsafe {
        let mut acc = [[T::zero(); N]; R];
        accumulate::<T, W, R, N>(&mut acc, w, rb, k, x, 0, k, &mut [Scales::ZERO; R]);
        T::store(&acc, y, ldy);
    }
}

/// How a GEMV tile prefetches its weights.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GemvPrefetch {
    /// No software prefetch.
    None,
    /// Each row [`PREFETCH_AHEAD`] bytes ahead, at most one row (then the next tile's row).
    Ahead,
    /// Each row [`PREFETCH_AHEAD`] bytes ahead in its stream (the tile's rows are the heads
    /// of [`GEMV_STREAMS`] streams of consecutive rows).
    Stream,
}

/// One `R × 1` GEMV tile over all of K (as [`tile`], the same arithmetic): rows at
/// `w + i * rs` of `rb` bytes each, output `i` at `y[i * ys]`, K read by groups of eight
/// units with the prefetches of `pf` before each group.
///
/// # Safety
///
/// As [`tile`] for `N = 1` with rows `rs` bytes apart; `y[i * ys]` writable for `i < R`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_tile<T: F32Decode<W>, W, const R: usize>(
    w: *const u8,
    rs: usize,
    rb: usize,
    k: usize,
    x: *const f32,
    y: *mut f32,
    ys: usize,
    pf: GemvPrefetch,
) {
    // SAFETY: forwarded caller contract: the groups cover units `0 .. k / 32` (and the tail)
    // in order, so the FMAs per output are `tile`'s; prefetches never fault.
    unsafe {
        let mut acc = [[T::zero(); 1]; R];
        // The scales of a group of units, written by each group (one buffer for the tile).
        let mut sc = [Scales::ZERO; R];
        let units = k / 32;
        if pf != GemvPrefetch::None && units >= 8 {
            // Bytes per unit of 32 weights (`rb` is the row's bytes: exact for every format).
            let g = 8 * (rb * 32 / k);
            let ahead = PREFETCH_AHEAD.div_ceil(g).min(units / 8) * g;
            let mut b = 0;
            while b < units {
                let e = (b + 8).min(units);
                match pf {
                    GemvPrefetch::Ahead => {
                        for i in 0..R {
                            prefetch_ahead::<T::Prefetch>(w, rs, i, R, b / 8 * g, ahead, rb, g);
                        }
                    }
                    GemvPrefetch::Stream => {
                        for i in 0..R {
                            let at = b / 8 * g;
                            prefetch_ahead::<T::Prefetch>(
                                w,
                                rs,
                                i,
                                R,
                                at,
                                PREFETCH_AHEAD,
                                usize::MAX,
                                g,
                            );
                        }
                    }
                    GemvPrefetch::None => {}
                }
                let k1 = if e == units { k } else { e * 32 };
                accumulate::<T, W, R, 1>(&mut acc, w, rs, k, x, b * 32, k1, &mut sc);
                b = e;
            }
        } else {
            accumulate::<T, W, R, 1>(&mut acc, w, rs, k, x, 0, k, &mut sc);
        }
        if ys == 1 {
            T::store(&acc, y, 1);
        } else {
            let mut out = [0f32; R];
            T::store(&acc, out.as_mut_ptr(), 1);
            for (i, v) in out.iter().enumerate() {
                *y.add(i * ys) = *v;
            }
        }
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
/// As [`accumulate`]; `store` holds at least `R * N` accumulators.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate_parked<T: F32Decode<W>, W, const R: usize, const N: usize>(
    store: &mut [T::Acc],
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    k0: usize,
    k1: usize,
) {
    let mut acc: Acc<T, R, N> =
        core::array::from_fn(|r| core::array::from_fn(|t| store[r * N + t]));
    // SAFETY: forwarded caller contract.
    unsafe { accumulate::<T, W, R, N>(&mut acc, w, rb, k, x, k0, k1, &mut [Scales::ZERO; R]) };
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
/// As [`crate::kernels::MatmulF32Fn`] for 4 rows; the tier's features are available.
#[inline(always)]
unsafe fn rows4_kblocked<T: F32Decode<W>, W>(
    w: *const u8,
    rb: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: the tier's features are available (caller contract).
    let zero = unsafe { T::zero() };
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
                        let s = &mut store[t * 4..];
                        accumulate_parked::<T, W, 4, 3>(s, w, rb, k, xt, k0, k1);
                    } else {
                        // The last one or two activation rows, each a 4 × 1 tile parked at
                        // `4 * (t + i)` (inside the 12 accumulators a 4 × 3 tile would take).
                        for i in 0..tn - t {
                            let s = &mut store[(t + i) * 4..];
                            accumulate_parked::<T, W, 4, 1>(s, w, rb, k, xt.add(i * k), k0, k1);
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
                    let acc: Acc<T, 4, 3> =
                        core::array::from_fn(|r| [s[3 * r], s[3 * r + 1], s[3 * r + 2]]);
                    T::store(&acc, yt, ldy);
                } else {
                    for i in 0..tn - t {
                        let s = &store[(t + i) * 4..];
                        let acc: Acc<T, 4, 1> = core::array::from_fn(|r| [s[r]]);
                        T::store(&acc, yt.add(i * ldy), ldy);
                    }
                }
            }
            t += 3;
        }
        t0 += tn;
    }
}

/// Four weight rows against `n` activation rows: `4 × 3` tiles, the last one or two
/// activation rows one at a time (`4 × 1`; the same per-output arithmetic).
///
/// # Safety
///
/// As [`crate::kernels::MatmulF32Fn`] for 4 rows; the tier's features are available.
#[inline(always)]
unsafe fn rows4<T: F32Decode<W>, W>(
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
            tile::<T, W, 4, 3>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 3;
        }
        while t < n {
            tile::<T, W, 4, 1>(w, rb, k, x.add(t * k), y.add(t * ldy), ldy);
            t += 1;
        }
    }
}

/// The whole block of rows: [`F32Lanes::GEMV_ROWS`]-row tiles for one activation row (GEMV,
/// [`gemv_tile`]: with 4-row tiles from [`GEMV_STREAM_MIN_ROWS`] rows as [`GEMV_STREAMS`]
/// streams prefetched ahead, else each row prefetched ahead from [`PREFETCH_MIN_BYTES`]),
/// 4-row tiles with up to 3 activation rows otherwise (K-blocked past [`KC_MIN`]); rows left over go through
/// `4 × 1` and `1 × 1` tiles with the same per-output arithmetic (few tile shapes: each is
/// inlined into every entry).
///
/// # Safety
///
/// As [`crate::kernels::MatmulF32Fn`] for `W`'s dtype; the tier's features are available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul<T: F32Decode<W>, W>(
    w: *const u8,
    rb: usize,
    rows: usize,
    k: usize,
    x: *const f32,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: each call covers rows `r..r + R <= rows` (caller contract).
    unsafe {
        let mut r = 0;
        if n == 1 {
            let pf = if rows * rb >= PREFETCH_MIN_BYTES {
                GemvPrefetch::Ahead
            } else {
                GemvPrefetch::None
            };
            if T::GEMV_ROWS == GEMV_STREAMS && rows >= GEMV_STREAM_MIN_ROWS {
                // Four streams side by side (the int8 GEMV's scheme): tile `j` takes rows
                // `j + i q` (`i < 4`), each row prefetched ahead in its quarter.
                const _: () = assert!(GEMV_STREAMS == 4);
                let q = rows / GEMV_STREAMS;
                for j in 0..q {
                    let (wj, yj) = (w.add(j * rb), y.add(j));
                    gemv_tile::<T, W, 4>(wj, q * rb, rb, k, x, yj, q, GemvPrefetch::Stream);
                }
                r = GEMV_STREAMS * q;
            }
            if T::GEMV_ROWS >= 8 {
                while r + 8 <= rows {
                    gemv_tile::<T, W, 8>(w.add(r * rb), rb, rb, k, x, y.add(r), 1, pf);
                    r += 8;
                }
            }
            while r + 4 <= rows {
                gemv_tile::<T, W, 4>(w.add(r * rb), rb, rb, k, x, y.add(r), 1, pf);
                r += 4;
            }
        } else {
            while r + 4 <= rows {
                if k > KC_MIN {
                    rows4_kblocked::<T, W>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                } else {
                    rows4::<T, W>(w.add(r * rb), rb, k, x, n, y.add(r), ldy);
                }
                r += 4;
            }
        }
        // The last rows (at most 3), one weight row × one activation row at a time.
        while r < rows {
            for t in 0..n {
                tile::<T, W, 1, 1>(w.add(r * rb), rb, k, x.add(t * k), y.add(t * ldy + r), ldy);
            }
            r += 1;
        }
    }
}

/// Defines a tier's [`crate::kernels::MatmulF32Fn`] entries: `f32_entries! { Tier,
/// TierType, "doc"; name, Format; ... }` gives each `name` as a `tier_fn!` of `Tier` (its
/// `#[target_feature]`s from the tier declaration) running [`matmul`] over `TierType`'s
/// [`F32Decode`] of `Format`.
macro_rules! f32_entries {
    ($tier:ident, $t:ty, $doc:literal; $($name:ident, $w:ty;)*) => { $(
        tier_fn! { $tier;
            #[doc = $doc]
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::MatmulF32Fn`]; the CPU has the features enabled here.
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
                unsafe {
                    $crate::kernels::frame::f32::matmul::<$t, $w>(w, rb, rows, k, x, n, y, ldy)
                }
            }
        }
    )* };
}
pub(crate) use f32_entries;
