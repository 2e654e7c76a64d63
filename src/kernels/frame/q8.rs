//! The int8 (Q8 activation) product of the 32-element types, written once: the schedule of
//! tiles over a block of weight rows × activation rows ([`matmul`]), the loop over a tile's
//! groups of eight blocks with its prefetch policy ([`tile`]) and the entry glue
//! ([`q8_entries`]), generic over a tier's [`Q8Tier`].
//!
//! A tier supplies, per block type `Q`: how one group of up to eight blocks of an `R × N`
//! tile (`R` weight rows, `N` activation rows) is decoded, dotted and added to the tile's
//! accumulators ([`Q8Tier::group`]), how an output is read out of them ([`Q8Tier::output`]),
//! its prefetch instruction, and optionally a transposed 16-row tile ([`Q8Tier::tile16`]).
//! Every tier's group keeps the oracle's order for each output
//! ([`crate::quant::reference::accumulate8`]: block `b`'s term `(dw · dx) · isum [+ mw · s]`,
//! unfused, into lane `b % 8`, then [`crate::quant::reference::hsum8`]'s tree), so every
//! output has the scalar table's bits whichever tile computes it.

use super::{
    prefetch_ahead, prefetch_next_tile, Prefetch, GEMV_STREAMS, GEMV_STREAM_MIN_ROWS,
    PREFETCH_AHEAD, PREFETCH_MIN_BYTES,
};
use crate::quant::{Q8Acts, QK};

/// The activations of one tile: row `t` of the tile's block `i` at `qs + (t * nb + i) * 32`,
/// `d`, `s`, `sum` likewise at `t * nb + i` ([`Q8Acts`]' arrays from the tile's first row).
#[derive(Clone, Copy)]
pub(crate) struct TileX {
    /// Blocks per activation row.
    pub(crate) nb: usize,
    /// Whether the GEMV prefetches weight rows ahead ([`PREFETCH_MIN_BYTES`]).
    pub(crate) prefetch: bool,
    /// Whether the GEMV runs as [`GEMV_STREAMS`] streams ([`GEMV_STREAM_MIN_ROWS`]): the
    /// tile's rows are `rb` apart, each the head of its own stream of consecutive rows, and
    /// each prefetches [`PREFETCH_AHEAD`] bytes ahead in its stream.
    pub(crate) stream: bool,
    /// The Q8 values.
    pub(crate) qs: *const i8,
    /// The f32 block scales.
    pub(crate) d: *const f32,
    /// The scaled block sums (`d · Σ q`).
    pub(crate) s: *const f32,
    /// The block sums `Σ q`.
    pub(crate) sum: *const i32,
}

impl TileX {
    /// These activations from the tile's row `t` on.
    ///
    /// # Safety
    ///
    /// Row `t` is inside the activations.
    #[inline(always)]
    pub(crate) unsafe fn rows_from(self, t: usize) -> TileX {
        let o = t * self.nb;
        // SAFETY: whole rows inside the arrays (caller contract).
        unsafe {
            TileX {
                qs: self.qs.add(o * QK),
                d: self.d.add(o),
                s: self.s.add(o),
                sum: self.sum.add(o),
                ..self
            }
        }
    }
}

/// A tier's int8 products of the 32-element block type `Q` (a tier-specific block decoder,
/// which names its [`crate::quant::BlockLayout`]).
pub(crate) trait Q8Tier<Q> {
    /// Bytes per 32 weights: block `b` of a row starts at `b * BYTES`.
    const BYTES: usize;
    /// The fewest activation rows (of a tile step: 32, 16, 8, 4 or 2) that take
    /// [`Q8Tier::tile16`] for whole groups of 16 weight rows; `usize::MAX`: the tier has no
    /// such tile.
    const TILE16_MIN_N: usize = usize::MAX;
    /// The tier's prefetch instruction.
    type Prefetch: Prefetch;
    /// An accumulator vector (a tile holds one per output; a tier that keeps two outputs in
    /// one vector uses the first half).
    type Acc: Copy;

    /// A zero accumulator.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn zero() -> Self::Acc;

    /// One group of `m <= 8` blocks starting at block `b` (a multiple of 8) of an `R × N`
    /// tile (weight row `r` at `w + r * rb`, activation row `t` of `x`), added to `acc`
    /// (`P = R · N`): each output `r · N + t` gains blocks `b .. b + m`'s terms in the
    /// oracle's lanes.
    ///
    /// # Safety
    ///
    /// `R` rows of `x.nb` blocks at `w + r * rb`, `N` activation rows of `x.nb` blocks,
    /// `b + m <= x.nb`; the tier's features are available.
    unsafe fn group<const R: usize, const N: usize, const P: usize>(
        w: *const u8,
        rb: usize,
        x: TileX,
        b: usize,
        m: usize,
        acc: &mut [Self::Acc; P],
    );

    /// Output `o` (`r · N + t`) of the accumulators after the last group: the oracle's
    /// horizontal sum of its eight lanes.
    ///
    /// # Safety
    ///
    /// The tier's features are available.
    unsafe fn output<const P: usize>(acc: &[Self::Acc; P], o: usize) -> f32;

    /// A `16 × N` tile (`N` 2 to 8, 16 or 32) into `y[t * ldy + r]` (only called from
    /// [`Q8Tier::TILE16_MIN_N`] activation rows on, with `16 · rb <= i32::MAX`). By default
    /// the 16 rows one by one as [`row_tiles`].
    ///
    /// # Safety
    ///
    /// 16 rows of `x.nb` blocks at `w + r * rb`, `N` activation rows in `x`,
    /// `y[t * ldy + r]` writable for `r < 16`, `t < N`; the tier's features are available.
    #[inline(always)]
    unsafe fn tile16<const N: usize>(w: *const u8, rb: usize, x: TileX, y: *mut f32, ldy: usize)
    where
        Self: Sized,
    {
        for r in 0..ROWS16 {
            // SAFETY: row `r < 16`, activation rows `< N` and their outputs (caller contract).
            unsafe { row_tiles::<Self, Q>(w.add(r * rb), rb, x, N, y.add(r), ldy) };
        }
    }
}

/// Weight rows per [`Q8Tier::tile16`].
pub(crate) const ROWS16: usize = 16;

/// One weight row (at `w`) times `n` activation rows (2 to 8, 16 or 32) into `y[t * ldy]`:
/// up to eight as one `1 × n` [`tile`] (the row's blocks decoded once for all of them), 16
/// and 32 as `1 × 8` tiles.
///
/// # Safety
///
/// As [`Q8Tier::group`] for one weight row and `n` activation rows; `y[t * ldy]` writable for
/// `t < n`.
#[inline(always)]
unsafe fn row_tiles<T: Q8Tier<Q>, Q>(
    w: *const u8,
    rb: usize,
    x: TileX,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    // SAFETY: activation rows `< n` and their outputs (caller contract).
    unsafe {
        match n {
            2 => tile::<T, Q, 1, 2, 2>(w, rb, x, y, ldy, 1),
            3 => tile::<T, Q, 1, 3, 3>(w, rb, x, y, ldy, 1),
            4 => tile::<T, Q, 1, 4, 4>(w, rb, x, y, ldy, 1),
            5 => tile::<T, Q, 1, 5, 5>(w, rb, x, y, ldy, 1),
            6 => tile::<T, Q, 1, 6, 6>(w, rb, x, y, ldy, 1),
            7 => tile::<T, Q, 1, 7, 7>(w, rb, x, y, ldy, 1),
            _ => {
                for c in (0..n).step_by(8) {
                    tile::<T, Q, 1, 8, 8>(w, rb, x.rows_from(c), y.add(c * ldy), ldy, 1);
                }
            }
        }
    }
}

/// An `R × N` tile (`P = R · N` outputs) of weight rows at `w + r * rb` times activation rows
/// `x`, into `y[t * ldy + r * ys]` (`ys` 1, or the stream length of a GEMV run as streams,
/// [`TileX::stream`]): the groups of eight blocks in order, then the partial last group, each
/// by [`Q8Tier::group`], then each output by [`Q8Tier::output`].
///
/// The GEMV (`N = 1`) prefetches: as streams, each row [`PREFETCH_AHEAD`] bytes ahead in its
/// stream; from [`PREFETCH_MIN_BYTES`] each row ahead in whole groups of eight blocks, at
/// most one row (then the next tile's); below it the next tile's weights, spread over the
/// groups ([`prefetch_next_tile`]).
///
/// # Safety
///
/// As [`Q8Tier::group`] for every group; `y[t * ldy + r * ys]` writable for `r < R`,
/// `t < N`.
#[inline(always)]
pub(crate) unsafe fn tile<T: Q8Tier<Q>, Q, const R: usize, const N: usize, const P: usize>(
    w: *const u8,
    rb: usize,
    x: TileX,
    y: *mut f32,
    ldy: usize,
    ys: usize,
) {
    debug_assert_eq!(P, R * N);
    // SAFETY: blocks `b .. b + m <= nb` (caller contract); outputs `y[t * ldy + r * ys]`.
    unsafe {
        let mut acc = [T::zero(); P];
        let mut b = 0;
        let g = 8 * T::BYTES;
        let ahead = PREFETCH_AHEAD.div_ceil(g).min(x.nb / 8) * g;
        let parts = x.nb.div_ceil(8);
        while b + 8 <= x.nb {
            if N == 1 && x.stream {
                for i in 0..R {
                    // `len` unbounded: the stream goes on into the row after this one.
                    prefetch_ahead::<T::Prefetch>(
                        w,
                        rb,
                        i,
                        R,
                        b * T::BYTES,
                        PREFETCH_AHEAD,
                        usize::MAX,
                        g,
                    );
                }
            } else if N == 1 && ahead != 0 && x.prefetch {
                for i in 0..R {
                    prefetch_ahead::<T::Prefetch>(
                        w,
                        rb,
                        i,
                        R,
                        b * T::BYTES,
                        ahead,
                        x.nb * T::BYTES,
                        g,
                    );
                }
            } else if N == 1 {
                prefetch_next_tile::<T::Prefetch>(w, R * rb, b / 8, parts);
            }
            T::group::<R, N, P>(w, rb, x, b, 8, &mut acc);
            b += 8;
        }
        if b < x.nb {
            if N == 1 && !x.prefetch && !x.stream {
                prefetch_next_tile::<T::Prefetch>(w, R * rb, b / 8, parts);
            }
            T::group::<R, N, P>(w, rb, x, b, x.nb - b, &mut acc);
        }
        for o in 0..R * N {
            *y.add(o % N * ldy + o / N * ys) = T::output(&acc, o);
        }
    }
}

/// The block in tiles. Activation rows go 32 or 16 at a time (with 16 weight rows or more),
/// then eight, then the last two to seven together (a decode batch of that many sequences
/// reads each weight once); whole groups of 16 weight rows take the tier's [`Q8Tier::tile16`]
/// from [`Q8Tier::TILE16_MIN_N`] activation rows, and the other rows go one weight row at a
/// time ([`row_tiles`]: `1 × 2` to `1 × 8`, the row's blocks decoded once for the tile's
/// activation rows; `1 × 8` repeated for 16 and 32), the tile's activations staying in L1
/// across the rows.
/// A last single activation row (and `n = 1`, the GEMV) takes the weight rows four at a time
/// (`4 × 1`: four rows in flight), the last one to three rows as `2 × 1` and `1 × 1`; from
/// [`GEMV_STREAM_MIN_ROWS`] rows the `4 × 1` tiles take rows `j, j + q, j + 2 q, j + 3 q`
/// (`q = rows / 4`), four streams side by side each prefetched ahead ([`GEMV_STREAMS`]).
/// Every output has the same bits whichever tile computes it.
///
/// # Safety
///
/// As [`crate::kernels::MatmulQ8Fn`] for `Q`'s dtype; the tier's features are available.
#[inline(always)]
pub(crate) unsafe fn matmul<T: Q8Tier<Q>, Q>(
    w: *const u8,
    rb: usize,
    rows: usize,
    xq: &Q8Acts<'_>,
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    let nb = xq.nb();
    let x0 = TileX {
        nb,
        prefetch: rows * rb >= PREFETCH_MIN_BYTES,
        stream: false,
        qs: xq.qs().as_ptr(),
        d: xq.d().as_ptr(),
        s: xq.s().as_ptr(),
        sum: xq.sum().as_ptr(),
    };
    let mut t = 0;
    while t < n {
        // Up to eight activation rows in one pass over the weights (a batch of 3, 5, 6 or 7
        // sequences would otherwise read them two or three times).
        let step = match n - t {
            32.. if rows >= ROWS16 => 32,
            16.. if rows >= ROWS16 => 16,
            8.. => 8,
            s => s,
        };
        // SAFETY: activation rows `t .. t + step <= n <= xq.n()`.
        let x = unsafe { x0.rows_from(t) };
        let mut r = 0;
        if step == 1 && rows >= GEMV_STREAM_MIN_ROWS {
            // The GEMV as four streams: tile `j` takes rows `j + i q` (`i < 4`), so the four
            // quarters of the rows are read side by side, each prefetched ahead.
            const _: () = assert!(GEMV_STREAMS == 4);
            let q = rows / GEMV_STREAMS;
            let xs = TileX { stream: true, prefetch: false, ..x };
            for j in 0..q {
                // SAFETY: rows `j + i q < 4 q <= rows` (`i < 4`) of `nb` blocks and their
                // outputs `y[t * ldy + j + i q]` (caller contract).
                unsafe {
                    tile::<T, Q, 4, 1, 4>(w.add(j * rb), q * rb, xs, y.add(t * ldy + j), ldy, q)
                };
            }
            r = GEMV_STREAMS * q;
        }
        if step >= T::TILE16_MIN_N && ROWS16 * rb <= i32::MAX as usize {
            while rows - r >= ROWS16 {
                // SAFETY: rows `r .. r + 16` of `nb` blocks inside the block (`16 · rb` checked
                // above), outputs `y[(t + i) * ldy + r + j]` writable (caller contract).
                unsafe {
                    let (wr, yr) = (w.add(r * rb), y.add(t * ldy + r));
                    match step {
                        32 => T::tile16::<32>(wr, rb, x, yr, ldy),
                        16 => T::tile16::<16>(wr, rb, x, yr, ldy),
                        8 => T::tile16::<8>(wr, rb, x, yr, ldy),
                        7 => T::tile16::<7>(wr, rb, x, yr, ldy),
                        6 => T::tile16::<6>(wr, rb, x, yr, ldy),
                        5 => T::tile16::<5>(wr, rb, x, yr, ldy),
                        4 => T::tile16::<4>(wr, rb, x, yr, ldy),
                        3 => T::tile16::<3>(wr, rb, x, yr, ldy),
                        _ => T::tile16::<2>(wr, rb, x, yr, ldy),
                    }
                }
                r += ROWS16;
            }
        }
        while r < rows {
            // SAFETY: rows `r ..` of `nb` blocks inside the block, outputs `y[(t + i) * ldy +
            // r + j]` writable (caller contract).
            unsafe {
                let (wr, yr) = (w.add(r * rb), y.add(t * ldy + r));
                match step {
                    2.. => row_tiles::<T, Q>(wr, rb, x, step, yr, ldy),
                    _ if rows - r >= 4 => {
                        tile::<T, Q, 4, 1, 4>(wr, rb, x, yr, ldy, 1);
                        r += 3;
                    }
                    _ if rows - r >= 2 => {
                        tile::<T, Q, 2, 1, 2>(wr, rb, x, yr, ldy, 1);
                        r += 1;
                    }
                    _ => tile::<T, Q, 1, 1, 1>(wr, rb, x, yr, ldy, 1),
                }
            }
            r += 1;
        }
        t += step;
    }
}

/// Defines a tier's int8 [`crate::kernels::MatmulQ8Fn`] entries: `q8_entries! { Tier,
/// TierType, "doc"; name, BlockType; ... }` gives each `name` as a `tier_fn!` of `Tier` (its
/// `#[target_feature]`s from the tier declaration) running [`matmul`] over `TierType`'s
/// [`Q8Tier`] for `BlockType`; `q8_entries! { k: Tier, TierType, "doc"; name, SuperBlockType;
/// ... }` likewise runs the K-quant driver ([`super::k::matmul`]) over `TierType`'s
/// [`super::k::KTier`].
macro_rules! q8_entries {
    (@ $frame:ident, $tier:ident, $t:ty, $doc:literal; $($name:ident, $q:ty;)*) => { $(
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
                xq: &$crate::quant::Q8Acts<'_>,
                n: usize,
                y: *mut f32,
                ldy: usize,
            ) {
                // SAFETY: forwarded caller contract; the features are enabled here.
                unsafe {
                    $crate::kernels::frame::$frame::matmul::<$t, $q>(w, rb, rows, xq, n, y, ldy)
                }
            }
        }
    )* };
    (k: $($rest:tt)*) => {
        $crate::kernels::frame::q8::q8_entries! { @ k, $($rest)* }
    };
    ($($rest:tt)*) => {
        $crate::kernels::frame::q8::q8_entries! { @ q8, $($rest)* }
    };
}
pub(crate) use q8_entries;
