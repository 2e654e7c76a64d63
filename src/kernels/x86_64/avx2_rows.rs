//! AVX2 int8 kernels of the row-interleaved layout (the drivers and shared helpers; each
//! type's [`RowsType`] and entries are in `kernels/types/<type>.rs`) ([`crate::kernels::rows8`]): a register
//! holds 8 weight rows (one per 32-bit lane), so each block's integer dot of the 8 rows is
//! 8 × `vpmaddubsw` against broadcast activation dwords and one `vpmaddwd` (Q8_0: one per
//! 4-byte chunk), with no horizontal reduction per row; the f32 terms of the 8 rows are one
//! vector per block, added into accumulator `b % 8` (8 registers, lanes = rows), and the
//! oracle's final [`crate::quant::reference::hsum8`] tree is vertical adds across them. Each
//! row's output is therefore the oracle's bits (block `b`'s term `(dw · dx) · isum [+ mw ·
//! s]`, unfused, into lane `b % 8`, then the fixed tree), the same as the plain layout's
//! kernels.
//!
//! Integer bounds (activations are in -127..=127, [`crate::quant::Q8Acts`]):
//! - Q4_0 / Q4_1: a `vpmaddubsw` lane of nibbles is at most `2 · 15 · 127 = 3810`; the 8 of
//!   a block (4 chunks × low and high nibbles) add up in i16 to at most 30480 < 32767.
//!   Their prompt tile is 8 activation rows (the decoded block reused by twice as many rows
//!   as Q5_0's 4, which measured no gain at 8).
//! - Q5_0: values up to 31, a lane at most `2 · 31 · 127 = 7874`: four add up in i16
//!   (31496), so two `vpmaddwd` per block.
//! - Q8_0: the sign trick (`|w|` as u8 times `x` with `w`'s sign), a lane at most
//!   `2 · 128 · 127 = 32512`, widened by `vpmaddwd` per chunk. Its prompt tile is 8
//!   activation rows taken chunk by chunk ([`RowsType::dots`]): each 4-byte chunk's `w` and
//!   `|w|` are loaded and made once for the 8 rows, whose 8 i32 sums stay in registers.
//! - Q4_K (super-blocks of 256, Q8_K activations): see its `R4K` in `kernels/types/q4_k.rs`
//!   (i16 sums at most 30480 per sub-block, i32 totals at most about 30.7 million).

use core::arch::x86_64::*;

use super::{X86Prefetch, PREFETCH_AHEAD};
use crate::kernels::frame::Prefetch;
use crate::kernels::rows8::ROWS;

/// `prefetcht0` of the line holding `p` (never faults).
#[inline(always)]
fn prefetch(p: *const u8) {
    // SAFETY: a prefetch reads nothing architecturally and never faults; SSE is available
    // on every x86_64 tier.
    unsafe { X86Prefetch::line(p) }
}
use crate::quant::{Q8Acts, QK};

/// One interleaved group-block (8 rows × one block of [`RowsType::ELEMS`]) of a weight type.
pub(crate) trait RowsType {
    /// Bytes per block of one row (the group-block is `8 · BYTES`).
    const BYTES: usize;
    /// Elements per block: 32 (activations in [`crate::quant::ActFormat::Q8`]) or 256 (a
    /// K-quant super-block, activations in [`crate::quant::ActFormat::Q8K`]).
    const ELEMS: usize = QK;
    /// Q4_1: the term adds `m · s` (the 8 f16 minimums at byte 16 of the group-block). With
    /// [`RowsType::finish`]'s default only for blocks of 32 (it reads the activations' scaled
    /// sums, which Q8_K activations do not have); Q4_K loads its `dmin` this way and
    /// subtracts its own term.
    const MIN: bool = false;
    /// Q4_0: the integer dot subtracts `8 · Σ x`.
    const OFFSET: i32 = 0;
    /// The decoded weights of a group-block, reused for every activation row of a tile.
    type Dec: Copy;

    /// Decodes the group-block at `g`.
    ///
    /// # Safety
    ///
    /// `8 · BYTES` readable bytes at `g`; AVX2 available.
    unsafe fn decode(g: *const u8) -> Self::Dec;

    /// The 8 rows' exact i32 dots (before the `OFFSET` correction) with the `ELEMS`
    /// activation values at `x`.
    ///
    /// # Safety
    ///
    /// `ELEMS` readable bytes at `x`, each in -127..=127; AVX2 available (and the features of
    /// the tier whose entry uses the type: AVX-VNNI for Q8_0's `V8_0`).
    unsafe fn dot(d: &Self::Dec, x: *const i8) -> __m256i;

    /// Activation rows a prompt's product takes per pass over a group ([`TILE_N`] or 8).
    const TILE: usize = TILE_N;

    /// Groups the GEMV reads side by side: [`STREAMS`], or 1 (the groups in order, one
    /// stream with software prefetch) where that streams faster. Q4_K takes 1: its
    /// group-blocks are 1152 bytes, and four streams ran the synthetic 1B model's decode
    /// (`RML_KERNELS=avx2`, 1 thread, int8-plain) at 30 tok/s against 46 in order, more
    /// prefetch distance recovering only part of it (37); the 32-element types run SmolLM2
    /// 10-15 % faster on four.
    const GEMV_STREAMS: usize = STREAMS;

    /// Bytes the GEMV prefetches ahead in each stream: [`PREFETCH_AHEAD`], or further for a
    /// single stream of large group-blocks. Q4_K takes 8 group-blocks (9216 bytes): the
    /// synthetic 1B model's decode (`RML_KERNELS=avx2`, 1 thread, int8) then read 99-100 % of
    /// the read loop against 81-87 % at 2816 bytes (92 % at 13824); a 25600 x 8192 GEMV past
    /// the last-level cache 97 % against 78 %. The four-stream types measured best at 2816.
    const GEMV_AHEAD: usize = PREFETCH_AHEAD;

    /// The 8 rows' exact i32 dots (as [`RowsType::dot`]) with each of the `N` activation
    /// blocks at `x[t]`; a type whose decoded block is costly to keep in registers computes
    /// them chunk by chunk for all `N` rows together.
    ///
    /// # Safety
    ///
    /// As [`RowsType::dot`] for every `x[t]`.
    #[inline(always)]
    unsafe fn dots<const N: usize>(d: &Self::Dec, x: [*const i8; N]) -> [__m256i; N] {
        // A plain loop: `array::map` is not compiled with the caller's target features, so
        // its vector values would cross calls.
        // SAFETY: forwarded caller contract.
        unsafe {
            let mut out = [_mm256_setzero_si256(); N];
            for (o, &x) in out.iter_mut().zip(&x) {
                *o = Self::dot(d, x);
            }
            out
        }
    }

    /// The f32 term of the 8 rows (scales `dw`, minimums `mw` from [`scales`]) with
    /// activation block `i` of `xq` from their i32 dots `isum` (before the `OFFSET`
    /// correction): `(dw · dx) · isum [+ mw · s]`, unfused (the oracle's).
    ///
    /// # Safety
    ///
    /// Activation block `i` inside `xq`; AVX2 available.
    #[inline(always)]
    unsafe fn finish(
        d: &Self::Dec,
        isum: __m256i,
        dw: __m256,
        mw: __m256,
        xq: &Q8Acts<'_>,
        i: usize,
    ) -> __m256 {
        let _ = d;
        // SAFETY: forwarded caller contract.
        unsafe { finish::<Self>(isum, dw, mw, xq, i) }
    }
}

/// Dword `c` of the 32 bytes at `x` in every lane.
///
/// # Safety
///
/// `4 c + 4` readable bytes at `x`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn bcast(x: *const i8, c: usize) -> __m256i {
    // SAFETY: 4 bytes at `x + 4 c` (caller contract).
    unsafe { _mm256_set1_epi32(x.add(4 * c).cast::<i32>().read_unaligned()) }
}

/// The 4 chunks of nibbles at `q` (chunk `c`: bytes `4 c .. 4 c + 4` of the 8 rows) as
/// their low nibbles (elements `4 c ..`) and high nibbles (elements `16 + 4 c ..`).
///
/// # Safety
///
/// 128 readable bytes at `q`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn nibbles(q: *const u8) -> [__m256i; 8] {
    // SAFETY: 4 × 32 bytes at `q` (caller contract); the rest is register-only.
    unsafe {
        let m = _mm256_set1_epi8(0x0F);
        let mut out = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            let v = _mm256_loadu_si256(q.add(32 * c).cast());
            out[c] = _mm256_and_si256(v, m);
            out[4 + c] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m);
        }
        out
    }
}

/// The nibbles' dot: 8 `vpmaddubsw` added in i16 (at most 30480, see the module docs), one
/// `vpmaddwd`.
///
/// # Safety
///
/// 32 readable bytes at `x` in -127..=127; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn nibble_dot(d: &[__m256i; 8], x: *const i8) -> __m256i {
    // SAFETY: 32 bytes at `x` (caller contract); the rest is register-only.
    unsafe {
        let p = |i: usize| _mm256_maddubs_epi16(d[i], bcast(x, i));
        let a = _mm256_add_epi16(_mm256_add_epi16(p(0), p(1)), _mm256_add_epi16(p(2), p(3)));
        let b = _mm256_add_epi16(_mm256_add_epi16(p(4), p(5)), _mm256_add_epi16(p(6), p(7)));
        _mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1))
    }
}

/// Chunk `C` of a Q5_0 group-block (quants at `q`, the 8 rows' permuted fifth bits in `h`,
/// [`crate::kernels::rows8`]): its low and high nibbles with the fifth bit added (values
/// `0..32`): the chunk's bits are at bit 4 of their bytes after shifting `h` right by `C`
/// (low) or left by `4 - C` (high).
///
/// # Safety
///
/// 32 readable bytes at `q + 32 C`; AVX2 available.
#[inline(always)]
pub(crate) unsafe fn chunk5<const C: i32, const L: i32>(
    q: *const u8,
    h: __m256i,
) -> (__m256i, __m256i) {
    // SAFETY: 32 bytes at `q + 32 C` (caller contract); the rest is register-only.
    unsafe {
        let (m, b4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
        let v = _mm256_loadu_si256(q.add(32 * C as usize).cast());
        let lo = _mm256_or_si256(
            _mm256_and_si256(v, m),
            _mm256_and_si256(_mm256_srli_epi32::<C>(h), b4),
        );
        let hi = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), m),
            _mm256_and_si256(_mm256_slli_epi32::<L>(h), b4),
        );
        (lo, hi)
    }
}

/// Activation rows per pass over a group of weight rows in the tile (`N > 1`).
const TILE_N: usize = 4;

/// Groups a GEMV reads side by side (as the plain layout's GEMV reads
/// [`crate::kernels::frame::GEMV_STREAMS`] rows): past the last-level cache one core gets
/// more from several sequential streams than from one.
const STREAMS: usize = 4;

/// The f32 term of the 8 rows of group-block `p` (its scales decoded, `dw`, `mw`) with
/// activation block `i` of `xq`: `(dw · dx) · isum [+ mw · s]`, unfused (the oracle's).
///
/// # Safety
///
/// As [`RowsType::dot`] for activation block `i` of `xq`; AVX2 + F16C available.
#[inline(always)]
unsafe fn term<Q: RowsType>(
    dec: &Q::Dec,
    dw: __m256,
    mw: __m256,
    xq: &Q8Acts<'_>,
    i: usize,
) -> __m256 {
    // SAFETY: activation block `i` inside `xq` (caller contract).
    unsafe { Q::finish(dec, Q::dot(dec, xq.qs().as_ptr().add(i * Q::ELEMS)), dw, mw, xq, i) }
}

/// [`term`] from the 8 rows' i32 dot `isum` with activation block `i` (before the `OFFSET`
/// correction): [`RowsType::finish`]'s default.
///
/// # Safety
///
/// Activation block `i` inside `xq`; AVX2 available.
#[inline(always)]
unsafe fn finish<Q: RowsType + ?Sized>(
    mut isum: __m256i,
    dw: __m256,
    mw: __m256,
    xq: &Q8Acts<'_>,
    i: usize,
) -> __m256 {
    // SAFETY: activation block `i` inside `xq` (caller contract); the rest is register-only.
    unsafe {
        if Q::OFFSET != 0 {
            let sum = *xq.sum().as_ptr().add(i);
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(Q::OFFSET * sum));
        }
        let t = _mm256_mul_ps(
            _mm256_mul_ps(dw, _mm256_set1_ps(*xq.d().as_ptr().add(i))),
            _mm256_cvtepi32_ps(isum),
        );
        if Q::MIN {
            _mm256_add_ps(t, _mm256_mul_ps(mw, _mm256_set1_ps(*xq.s().as_ptr().add(i))))
        } else {
            t
        }
    }
}

/// The scales (and minimums) of the group-block at `p`.
///
/// # Safety
///
/// A whole group-block at `p`; AVX2 + F16C available.
#[inline(always)]
unsafe fn scales<Q: RowsType + ?Sized>(p: *const u8) -> (__m256, __m256) {
    // SAFETY: the 8 f16 scales at byte 0 (and minimums at byte 16) of the group-block.
    unsafe {
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
        let mw = if Q::MIN {
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast()))
        } else {
            _mm256_setzero_ps()
        };
        (dw, mw)
    }
}

/// The oracle's [`crate::quant::reference::hsum8`] tree over accumulators `a[0..8]`, lane by
/// lane: `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`.
///
/// # Safety
///
/// AVX available.
#[inline(always)]
unsafe fn hsum8_lanes(a: &[__m256; 8]) -> __m256 {
    // SAFETY: register-only intrinsics.
    unsafe {
        _mm256_add_ps(
            _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
            _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])),
        )
    }
}

/// The `8 × N` product of one group of 8 interleaved rows at `g` (group-block `b` at
/// `g + b · 8 · BYTES`) with activation rows `t0 .. t0 + N` of `xq`, into
/// `y[(t0 + t) · ldy + i]` (`i < 8`). Blocks go eight at a time, block `b0 + u` into
/// accumulator `u` (the oracle's lane `b % 8`).
///
/// # Safety
///
/// `xq.nb()` group-blocks at `g`; activation rows `t0 .. t0 + N` in `xq`; the outputs
/// writable; AVX2 + F16C available.
#[inline(always)]
unsafe fn group<Q: RowsType, const N: usize>(
    g: *const u8,
    xq: &Q8Acts<'_>,
    t0: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let gb = ROWS * Q::BYTES;
    // SAFETY: group-blocks `b < nb` at `g` and activation blocks `(t0 + t) · nb + b` inside
    // `xq` (caller contract); outputs as the caller says.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 8]; N];
        let mut b0 = 0;
        while b0 < nb {
            for u in 0..8 {
                let b = b0 + u;
                if b == nb {
                    break;
                }
                let p = g.add(b * gb);
                let dec = Q::decode(p);
                let (dw, mw) = scales::<Q>(p);
                let mut x = [xq.qs().as_ptr(); N];
                for (t, x) in x.iter_mut().enumerate() {
                    *x = x.add(((t0 + t) * nb + b) * Q::ELEMS);
                }
                let isum = Q::dots::<N>(&dec, x);
                for (t, a) in acc.iter_mut().enumerate() {
                    let i = (t0 + t) * nb + b;
                    a[u] = _mm256_add_ps(a[u], Q::finish(&dec, isum[t], dw, mw, xq, i));
                }
            }
            b0 += 8;
        }
        for (t, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.add((t0 + t) * ldy), hsum8_lanes(a));
        }
    }
}

/// The GEMV of `S` groups side by side: group `i` at `w + i · stride`, block by block in
/// turn, each stream prefetched [`RowsType::GEMV_AHEAD`] bytes ahead, outputs at `y + i · ys`.
///
/// # Safety
///
/// `xq.nb()` group-blocks at each group, one activation row; outputs writable; AVX2 + F16C
/// available.
#[inline(always)]
unsafe fn streams<Q: RowsType, const S: usize>(
    w: *const u8,
    stride: usize,
    xq: &Q8Acts<'_>,
    y: *mut f32,
    ys: usize,
) {
    let nb = xq.nb();
    let gb = ROWS * Q::BYTES;
    // SAFETY: as `group` for each of the groups (caller contract).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 8]; S];
        let mut b0 = 0;
        while b0 < nb {
            for u in 0..8 {
                let b = b0 + u;
                if b == nb {
                    break;
                }
                for (i, a) in acc.iter_mut().enumerate() {
                    let p = w.add(i * stride + b * gb);
                    // A single block (the outlier correction's column read) has nothing of
                    // its own ahead.
                    let mut o = if nb > 1 { 0 } else { gb };
                    while o < gb {
                        prefetch(p.wrapping_add(Q::GEMV_AHEAD + o));
                        o += 64;
                    }
                    let dec = Q::decode(p);
                    let (dw, mw) = scales::<Q>(p);
                    a[u] = _mm256_add_ps(a[u], term::<Q>(&dec, dw, mw, xq, b));
                }
            }
            b0 += 8;
        }
        for (i, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(y.add(i * ys), hsum8_lanes(a));
        }
    }
}

/// The AVX2 kernel of `Q`'s interleaved layout: `rows / 8` groups of 8 rows at
/// `w + j · 8 · rb`. One activation row (the GEMV): from [`STREAMS`] groups on, the groups
/// as [`STREAMS`] streams (`j, j + q, ..`, `q = groups / STREAMS`), the rest one by one
/// (or every group in order, prefetched, where [`RowsType::GEMV_STREAMS`] is 1);
/// more: each group times [`RowsType::TILE`] activation rows at a time (8 ones first where
/// the type asks for them, then [`TILE_N`]), the last one to three together.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] for the interleaved layout ([`crate::kernels::rows8`]:
/// `rows` a multiple of 8, groups `8 · rb` bytes apart); AVX2 + F16C available.
#[inline(always)]
pub(crate) unsafe fn matmul<Q: RowsType>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    const {
        assert!(Q::TILE == 8 || Q::TILE == TILE_N, "RowsType::TILE is 8 or TILE_N");
        assert!(Q::GEMV_STREAMS == 1 || Q::GEMV_STREAMS == STREAMS, "GEMV_STREAMS is 1 or 4");
    }
    let (groups, gs) = (rows / ROWS, ROWS * rb);
    // SAFETY: groups `j < rows / 8` inside the block, activation rows `< n`, outputs
    // `y[t · ldy + 8 j + i]` (caller contract).
    unsafe {
        if n == 1 {
            if Q::GEMV_STREAMS == 1 {
                for j in 0..groups {
                    streams::<Q, 1>(w.add(j * gs), gs, xq, y.add(j * ROWS), ROWS);
                }
                return;
            }
            let q = groups / STREAMS;
            for j in 0..q {
                streams::<Q, STREAMS>(w.add(j * gs), q * gs, xq, y.add(j * ROWS), q * ROWS);
            }
            for j in STREAMS * q..groups {
                group::<Q, 1>(w.add(j * gs), xq, 0, y.add(j * ROWS), ldy);
            }
            return;
        }
        for j in 0..groups {
            let (g, yj) = (w.add(j * gs), y.add(j * ROWS));
            let mut t = 0;
            if Q::TILE == 8 {
                while n - t >= 8 {
                    group::<Q, 8>(g, xq, t, yj, ldy);
                    t += 8;
                }
            }
            while n - t >= TILE_N {
                group::<Q, TILE_N>(g, xq, t, yj, ldy);
                t += TILE_N;
            }
            match n - t {
                3 => group::<Q, 3>(g, xq, t, yj, ldy),
                2 => group::<Q, 2>(g, xq, t, yj, ldy),
                1 => group::<Q, 1>(g, xq, t, yj, ldy),
                _ => {}
            }
        }
    }
}

/// Defines the interleaved layout's entries: `rows8_entries! { Tier, name, RowsType; ... }`
/// gives each `name` as a `tier_fn!` of `Tier` running [`matmul`] over the type.
macro_rules! rows8_entries {
    ($($tier:ident, $name:ident, $q:ty;)*) => { $(
        tier_fn! { $tier;
            /// The row-interleaved layout's int8 kernel on this tier
            /// (`kernels/x86_64/avx2_rows.rs`).
            ///
            /// # Safety
            ///
            /// As [`crate::kernels::Kernels::matmul_q8_rows8`]'s kernels; the CPU has the
            /// features enabled here.
            pub(crate) unsafe fn $name(
                w: *const u8,
                rb: usize,
                rows: usize,
                xq: &$crate::quant::Q8Acts<'_>,
                n: usize,
                y: *mut f32,
                ldy: usize,
            ) {
                // SAFETY: forwarded caller contract; the features are enabled here.
                unsafe { $crate::kernels::x86_64::avx2_rows::matmul::<$q>(w, rb, rows, xq, n, y, ldy) }
            }
        }
    )* };
}
pub(crate) use rows8_entries;
