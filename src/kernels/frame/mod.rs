//! The kernel frame: the drivers every SIMD tier shares, written once and generic over a
//! per-tier trait, so that a lever (a multi-row GEMV, a register tile, a prefetch policy) is
//! written once and every tier that implements the trait has it.
//!
//! - [`q8`]: the int8 (Q8 activation) product of the 32-element types (Q8_0, Q4_0, Q4_1,
//!   Q5_0, Q5_1, IQ4_NL, Q5_0x2): the schedule of tiles over weight rows and activation rows
//!   (the multi-row GEMV, the GEMV as [`GEMV_STREAMS`] streams, the `1 × N` prefill tiles, a
//!   tier's transposed 16-row tile), the prefetch policy inside a tile and the entry glue
//!   ([`q8_entries`](q8::q8_entries)), over a tier's [`q8::Q8Tier`]: how it decodes a group of
//!   blocks and dots it with the activations. The AVX2, AVX-VNNI, AVX-512 (+ GFNI), NEON and
//!   NEON + SDOT tiers implement it.
//! - `k`: the int8 product of the K-quants (Q2_K .. Q6_K × Q8_K activations): the 4-row
//!   GEMV (as [`GEMV_STREAMS`] streams from [`GEMV_STREAM_MIN_ROWS`] rows), the `1 × N`
//!   prefill tiles, their prefetch and f32 epilogue and the entry glue, over a tier's
//!   `k::KTier` (decode a super-block, its integer dot, the joint reduction). The AVX2,
//!   AVX-VNNI, NEON and NEON + SDOT tiers implement it.
//! - [`f32`]: the f32-activation product (weights widened or dequantized on the fly): the
//!   register tiles, their schedule (8- or 4-row GEMV, `4 × 3` prefill tiles, K blocking) and the
//!   entry glue ([`f32_entries`](f32::f32_entries)), over a tier's [`f32::F32Lanes`] and its
//!   [`f32::F32Decode`] of each weight format. The AVX2 and NEON tiers implement them.
//! - This module: the prefetch policy's constants and the two prefetch patterns, over a
//!   tier's [`Prefetch`] instruction (the AVX-512 K-quant and f32 kernels use them too).
//!
//! Generic code instantiated inside a tier's `#[target_feature]` entry is `#[inline(always)]`
//! all the way down, so it compiles with the entry's features; each output keeps the oracle's
//! arithmetic order ([`crate::quant::reference`]), so every tier stays bit-identical to the
//! scalar table whatever tile computes an output.

pub(crate) mod f32;
pub(crate) mod k;
pub(crate) mod q8;

/// How far ahead of its reads a multi-row GEMV prefetches each weight row, in bytes.
///
/// A GEMV over `R` rows at once reads `R` interleaved streams, each one row long; past the
/// last-level cache the hardware prefetchers (AMD Zen 5 above all) restart on every row and
/// leave the kernel waiting on memory (a quarter of a plain read loop's rate). About 2.5 KB
/// ahead per row brings every type to the read loop's rate; L2-resident matrices lose a few
/// percent to the extra instructions (measurements, AVX-512: `docs/perf/notes-kernels.md`).
pub(crate) const PREFETCH_AHEAD: usize = 2560;

/// The smallest matrix (bytes) whose GEMV prefetches ahead ([`PREFETCH_AHEAD`]). A model's
/// per-layer matrices (SmolLM2's 0.1-0.6 MB) decoded one after the other lose int8 decode
/// speed to the prefetches, while matrices of several MB (an output head, the 8192 × 8192
/// benchmark shapes) need them to read at the memory's pace. Smaller matrices prefetch the
/// next tile's weights instead ([`prefetch_next_tile`], the f32 kernels' scheme), which
/// speeds up decode of in-cache models (measurements: `docs/perf/notes-kernels.md`).
pub(crate) const PREFETCH_MIN_BYTES: usize = 4 << 20;

/// How many streams a GEMV of at least [`GEMV_STREAM_MIN_ROWS`] rows reads side by side
/// (the 32-element types' int8 GEMV and the f32-activation GEMV of tiers with 4-row GEMV
/// tiles; the AVX-512 K-quant one reads one per row of its group of four or eight rows).
///
/// A GEMV over one activation row reads its weights once, so past the caches it runs at the
/// pace memory delivers one core's reads. Row by row, a matrix is one sequential stream and
/// one core gets about a plain read loop's rate from it; the GEMV instead splits the rows
/// into this many equal parts and takes one row of each part per step (outputs unchanged:
/// each row's dot product is the same code), every part prefetched [`PREFETCH_AHEAD`] bytes
/// ahead. Faster than row by row both from memory and in cache on AVX-512 (measurements:
/// `docs/perf/notes-kernels.md`).
pub(crate) const GEMV_STREAMS: usize = 4;

/// The fewest rows a GEMV runs as [`GEMV_STREAMS`] streams (fewer: one row group after the
/// other, with [`prefetch_next_tile`] or, from [`PREFETCH_MIN_BYTES`], [`prefetch_ahead`]).
pub(crate) const GEMV_STREAM_MIN_ROWS: usize = 64;

/// How far past the end of a GEMV tile [`prefetch_next_tile`] reads ahead, in bytes.
pub(crate) const NEXT_TILE_LEAD: usize = 4096;

/// A tier's prefetch instruction.
pub(crate) trait Prefetch {
    /// Asks for the cache line holding `p` in L1. Never faults, whatever `p` is.
    ///
    /// # Safety
    ///
    /// The tier's features are available (a prefetch reads nothing architecturally).
    unsafe fn line(p: *const u8);
}

/// Prefetches the `span` bytes of row `i` of an `r`-row group (rows at `w + i * rb`) that are
/// `ahead` bytes past byte `at` of the row: in the row while that is inside its `len` bytes,
/// else at the same distance into row `i + r` (the next group's row `i`). One prefetch per
/// 64 bytes, so calls on touching spans cover every line. A prefetch never faults: past the
/// matrix it only costs its slot (the address arithmetic wraps, never dereferenced).
///
/// # Safety
///
/// `P`'s features are available.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn prefetch_ahead<P: Prefetch>(
    w: *const u8,
    rb: usize,
    i: usize,
    r: usize,
    at: usize,
    ahead: usize,
    len: usize,
    span: usize,
) {
    let to = at + ahead;
    let p = if to < len {
        w.wrapping_add(i * rb + to)
    } else {
        w.wrapping_add((i + r) * rb + (to - len))
    };
    let mut o = 0;
    while o < span {
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { P::line(p.wrapping_add(o)) };
        o += 64;
    }
}

/// Prefetches part `part` of `parts` of the `span` bytes that lie [`NEXT_TILE_LEAD`] bytes
/// past the end of a tile of `span` bytes at `w` (the weights of a later tile): a GEMV calls
/// it once per group of blocks with `parts` groups per tile, so the prefetches spread over the
/// tile's work. One prefetch per 64 bytes; never faults (as [`prefetch_ahead`]).
///
/// # Safety
///
/// `P`'s features are available.
#[inline(always)]
pub(crate) unsafe fn prefetch_next_tile<P: Prefetch>(
    w: *const u8,
    span: usize,
    part: usize,
    parts: usize,
) {
    let per = span.div_ceil(parts.max(1)).next_multiple_of(64);
    let ahead = w.wrapping_add(span + NEXT_TILE_LEAD);
    let end = ((part + 1) * per).min(span);
    let mut o = part * per;
    while o < end {
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { P::line(ahead.wrapping_add(o)) };
        o += 64;
    }
}
