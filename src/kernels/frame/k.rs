//! The int8 product of the K-quants (Q2_K .. Q6_K weights × Q8_K activations), written once:
//! the schedule of tiles over weight rows and activation rows ([`matmul`]), the loop over a
//! tile's super-blocks with its prefetch policy and the f32 epilogue ([`tile`]), and the entry
//! glue ([`q8_entries`](super::q8::q8_entries) with `k:`), generic over a tier's [`KTier`].
//!
//! A tier supplies, per super-block type: how a super-block is decoded ([`KTier::decode`]),
//! the exact integer sums of decoded weights against one activation super-block
//! ([`KTier::dot`]), how the sums of up to eight outputs are reduced into one 8-lane vector
//! ([`KTier::totals`]) and the few f32 lane operations of the epilogue. The frame does the
//! rest: per super-block `b` every output's term `(d · dx) · isum [- (dmin · dx) · msum]`,
//! each product unfused, for all the tile's outputs at once (one lane each), into accumulator
//! `b % 8`, and at the end [`crate::quant::reference::hsum8`]'s tree lane by lane: the
//! oracle's operations ([`crate::quant::reference::accumulate8`]) per output, so every tier
//! and every tile shape gives the scalar table's bits.

use super::{
    prefetch_ahead, prefetch_next_tile, Prefetch, GEMV_STREAMS, GEMV_STREAM_MIN_ROWS,
    PREFETCH_AHEAD, PREFETCH_MIN_BYTES,
};
use crate::quant::{Q8Acts, QK_K};
use core::mem::MaybeUninit;

/// A tier's int8 product of the K-quant super-block type `K` (a tier-specific marker that
/// names the format).
pub(crate) trait KTier<K> {
    /// Bytes per super-block: super-block `b` of a row starts at `b * BYTES`.
    const BYTES: usize;
    /// Byte offset of the f16 `d` in a super-block (followed by the f16 `dmin` when
    /// [`KTier::MINS`]).
    const D_AT: usize;
    /// Whether the term subtracts `(dmin · dx) · msum` (Q2_K, Q4_K, Q5_K).
    const MINS: bool;
    /// The tier's prefetch instruction.
    type Prefetch: Prefetch;
    /// One super-block decoded for the dot (values, spread scales, per-16 weights).
    type W: Copy;
    /// One output's integer sums against one activation super-block, before reduction.
    type S: Copy;
    /// Eight f32 lanes.
    type F: Copy;

    /// The super-block at `blk`, decoded.
    ///
    /// # Safety
    ///
    /// `blk` is a whole super-block; the tier's features are available.
    unsafe fn decode(blk: *const u8) -> Self::W;

    /// The sums of `w` against the 256 activations at `x` with per-16 sums `bsums`: their
    /// totals ([`KTier::totals`]) are the oracle's `isum` (offsets of signed types taken back)
    /// and `msum` (0 without [`KTier::MINS`]).
    ///
    /// # Safety
    ///
    /// 256 readable values at `x`, 16 sums at `bsums`; the tier's features are available.
    unsafe fn dot(w: &Self::W, x: *const i8, bsums: *const i32) -> Self::S;

    /// The totals of `s[o]` (`o < P <= 8`) as f32 lanes `o`: `(isum, msum)`, each the exact
    /// i32 total rounded as `as f32` does (`msum` lanes 0 without [`KTier::MINS`]; lanes
    /// from `P` on are unspecified).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn totals<const P: usize>(s: &[Self::S; P]) -> (Self::F, Self::F);

    /// The f16 values `h` as f32 lanes (exact).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn f16(h: [u16; 8]) -> Self::F;

    /// `v` as lanes.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn lanes(v: [f32; 8]) -> Self::F;

    /// `a + b`, lane by lane.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;

    /// `a - b`, lane by lane.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F;

    /// `a · b`, lane by lane (rounded once, never fused with an add).
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;

    /// The lanes of `a`.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn array(a: Self::F) -> [f32; 8];
}

/// How a GEMV tile ([`tile`] with one activation row) prefetches its weights.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pf {
    /// The next tile's rows, spread over the super-blocks ([`prefetch_next_tile`]): whole
    /// rows, matrices under [`PREFETCH_MIN_BYTES`], and the prefill tiles.
    NextTile,
    /// [`PREFETCH_AHEAD`] bytes ahead in each row (whole super-blocks, at most one row), then
    /// in the next tile's row.
    Ahead,
    /// [`PREFETCH_AHEAD`] bytes ahead in each row's stream (the rows `rb` apart, each followed
    /// by its own next rows; [`GEMV_STREAMS`]).
    Stream,
    /// None (a column block of a row, whose next bytes are not the next tile's).
    Off,
}

/// An `R × N` tile (`P = R · N` outputs, at most 8; output `o` is weight row `o / N` times
/// activation row `o % N`): weight row `r` (`nb` super-blocks) at `w + r * rb`, activation
/// row `t`'s super-block `b` at `qs + (t * nb + b) * 256`, its `d` at `d + t * nb + b` and
/// per-16 sums at `sums + 16 (t * nb + b)`; into `y[t * ldy + r * ys]`.
///
/// Per super-block: each weight row decoded once ([`KTier::decode`]) and dotted with each
/// activation row, the `P` outputs' sums reduced together ([`KTier::totals`]), their terms as
/// one vector into accumulator `b % 8`; at the end [`crate::quant::reference::hsum8`]'s tree
/// lane by lane.
///
/// # Safety
///
/// `R` rows of `nb` super-blocks at `w + r * rb`, `N` activation rows of `nb` super-blocks
/// from `qs`, `d`, `sums`, `y[t * ldy + r * ys]` writable for `r < R`, `t < N`; the tier's
/// features are available.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn tile<T: KTier<K>, K, const R: usize, const N: usize, const P: usize>(
    w: *const u8,
    rb: usize,
    nb: usize,
    qs: *const i8,
    d: *const f32,
    sums: *const i32,
    y: *mut f32,
    ldy: usize,
    ys: usize,
    pf: Pf,
) {
    const { assert!(P == R * N && P <= 8) };
    // SAFETY: super-blocks `b < nb` of rows `r < R`, activation blocks `t * nb + b` of rows
    // `t < N`, outputs `y[t * ldy + r * ys]` (caller contract); prefetches never fault.
    unsafe {
        let ahead = PREFETCH_AHEAD.div_ceil(T::BYTES).min(nb) * T::BYTES;
        let span = if N == 1 { R * rb } else { nb * T::BYTES };
        let mut acc = [T::lanes([0.0; 8]); 8];
        for b in 0..nb {
            let at = b * T::BYTES;
            match pf {
                Pf::Stream => {
                    for i in 0..R {
                        let big = usize::MAX;
                        prefetch_ahead::<T::Prefetch>(
                            w,
                            rb,
                            i,
                            R,
                            at,
                            PREFETCH_AHEAD,
                            big,
                            T::BYTES,
                        );
                    }
                }
                Pf::Ahead => {
                    for i in 0..R {
                        let len = nb * T::BYTES;
                        prefetch_ahead::<T::Prefetch>(w, rb, i, R, at, ahead, len, T::BYTES);
                    }
                }
                Pf::NextTile => prefetch_next_tile::<T::Prefetch>(w, span, b, nb),
                Pf::Off => {}
            }
            // Plain loops, no closures: a closure's body is compiled without the entry's
            // target features, so one the inliner leaves out calls every intrinsic.
            let mut s = [MaybeUninit::<T::S>::uninit(); P];
            if N == 1 {
                // One activation row: each row decoded right before its dot.
                for (r, s) in s.iter_mut().enumerate() {
                    let blk = w.add(r * rb + at);
                    s.write(T::dot(&T::decode(blk), qs.add(b * QK_K), sums.add(b * 16)));
                }
            } else {
                let mut dec = [MaybeUninit::<T::W>::uninit(); R];
                for (r, dec) in dec.iter_mut().enumerate() {
                    dec.write(T::decode(w.add(r * rb + at)));
                }
                for (o, s) in s.iter_mut().enumerate() {
                    let i = (o % N) * nb + b;
                    let dw = dec[o / N].assume_init_ref();
                    s.write(T::dot(dw, qs.add(i * QK_K), sums.add(i * 16)));
                }
            }
            // Every element written above.
            let s = s.as_ptr().cast::<[T::S; P]>().read();
            let (is, ms) = T::totals(&s);
            // Lane `o`: row `o / N`'s `d` (and `dmin`), activation row `o % N`'s `dx`.
            let (mut hd, mut hm, mut dx) = ([0u16; 8], [0u16; 8], [0f32; 8]);
            for o in 0..P {
                let p = w.add((o / N) * rb + at + T::D_AT);
                hd[o] = p.cast::<u16>().read_unaligned();
                if T::MINS {
                    hm[o] = p.add(2).cast::<u16>().read_unaligned();
                }
                dx[o] = *d.add((o % N) * nb + b);
            }
            let dx = T::lanes(dx);
            let mut term = T::mul(T::mul(T::f16(hd), dx), is);
            if T::MINS {
                term = T::sub(term, T::mul(T::mul(T::f16(hm), dx), ms));
            }
            acc[b % 8] = T::add(acc[b % 8], term);
        }
        let a = &acc;
        let s = T::add(
            T::add(T::add(a[0], a[4]), T::add(a[2], a[6])),
            T::add(T::add(a[1], a[5]), T::add(a[3], a[7])),
        );
        let out = T::array(s);
        for (o, v) in out.iter().enumerate().take(P) {
            *y.add(o % N * ldy + o / N * ys) = *v;
        }
    }
}

/// The K-quant product in tiles: the GEMV (`n = 1`) as `4 × 1` tiles (four weight rows
/// sharing the activations, their sums reduced together), from [`GEMV_STREAM_MIN_ROWS`] rows
/// taking rows `j, j + q, j + 2 q, j + 3 q` (`q = rows / 4`: [`GEMV_STREAMS`] streams side by
/// side, each prefetched ahead), below it groups of four consecutive rows prefetching
/// [`PREFETCH_AHEAD`] bytes ahead from [`PREFETCH_MIN_BYTES`] or else the next tile's rows;
/// the last one to three rows as `2 × 1` and `1 × 1`. More activation rows go in `1 × N`
/// tiles of up to eight (a weight super-block decoded once for all of them, the tile's
/// activations staying in L1 across the weight rows), whole rows prefetching the next row.
/// Every output has the same bits whichever tile computes it.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] with `xq` in the Q8_K format for `K`'s dtype; the tier's
/// features are available.
#[inline(always)]
pub(crate) unsafe fn matmul<T: KTier<K>, K>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let (qs, d, sums) = (xq.qs().as_ptr(), xq.d().as_ptr(), xq.sum().as_ptr());
    // Whole rows (not a column block, the outlier correction's) prefetch the next tile.
    let whole = rb == nb * T::BYTES;
    let mut t = 0;
    while t < n {
        let step = (n - t).min(8);
        let o = t * nb;
        // SAFETY: activation rows `t .. t + step <= n <= xq.n()` from block `o`.
        let (q, dd, s) = unsafe { (qs.add(o * QK_K), d.add(o), sums.add(o * 16)) };
        let mut r = 0;
        if step == 1 {
            if rows >= GEMV_STREAM_MIN_ROWS {
                const _: () = assert!(GEMV_STREAMS == 4);
                let qr = rows / GEMV_STREAMS;
                let pf = if whole { Pf::Stream } else { Pf::Off };
                for j in 0..qr {
                    // SAFETY: rows `j + i qr < 4 qr <= rows` (`i < 4`) and their outputs
                    // `y[t * ldy + j + i qr]` (caller contract).
                    unsafe {
                        let (wr, yr) = (w.add(j * rb), y.add(t * ldy + j));
                        tile::<T, K, 4, 1, 4>(wr, qr * rb, nb, q, dd, s, yr, ldy, qr, pf)
                    };
                }
                r = GEMV_STREAMS * qr;
            }
            let pf = match () {
                _ if !whole => Pf::Off,
                _ if rows * rb >= PREFETCH_MIN_BYTES => Pf::Ahead,
                _ => Pf::NextTile,
            };
            while r < rows {
                // SAFETY: rows `r .. r + 4 (2, 1) <= rows` and their outputs (caller contract).
                unsafe {
                    let (wr, yr) = (w.add(r * rb), y.add(t * ldy + r));
                    if rows - r >= 4 {
                        tile::<T, K, 4, 1, 4>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf);
                        r += 4;
                    } else if rows - r >= 2 {
                        tile::<T, K, 2, 1, 2>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf);
                        r += 2;
                    } else {
                        tile::<T, K, 1, 1, 1>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf);
                        r += 1;
                    }
                }
            }
        } else {
            let pf = if whole { Pf::NextTile } else { Pf::Off };
            for r in 0..rows {
                // SAFETY: row `r < rows`, activation rows `t .. t + step`, outputs
                // `y[(t + i) * ldy + r]` (caller contract).
                unsafe {
                    let (wr, yr) = (w.add(r * rb), y.add(t * ldy + r));
                    match step {
                        8 => tile::<T, K, 1, 8, 8>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        7 => tile::<T, K, 1, 7, 7>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        6 => tile::<T, K, 1, 6, 6>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        5 => tile::<T, K, 1, 5, 5>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        4 => tile::<T, K, 1, 4, 4>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        3 => tile::<T, K, 1, 3, 3>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                        _ => tile::<T, K, 1, 2, 2>(wr, rb, nb, q, dd, s, yr, ldy, 1, pf),
                    }
                }
            }
        }
        t += step;
    }
}
