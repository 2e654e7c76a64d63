//! Chunk planning: how a range is cut into chunks for a [`Schedule`] and a thread count.
//!
//! A [`ChunkPlan`] is a pure function of (range, schedule, threads, nested): the same inputs
//! give the same boundaries on every run and every machine. Chunk `i` is
//! `[start + i * chunk, min(start + (i + 1) * chunk, end))`, so chunks tile the range in order
//! with no gap or overlap and only the last may be short.
//!
//! The formulas, with `n = range.len()` and `t = threads` (the contract they serve:
//! docs/architecture.md, "Threads and schedules" and "Bit-identity"):
//!
//! | schedule | chunk length |
//! |---|---|
//! | `Grain(g)` | `num = clamp(n / g, 1, 4 t)`, `chunk = ceil(n / num)` |
//! | `Static` | `ceil(n / t)` (one block per thread, chunk `i` belongs to thread `i`) |
//! | `Fixed8` / `Fixed16` / `Fixed32` | 8 / 16 / 32 |
//! | `Proportional2` / `Proportional4` | `ceil(n / 2t)` / `ceil(n / 4t)` |
//! | `Adaptive` | `max(ceil(n / 4t), 16)` |
//! | `Owned` | `ceil(n / 4t)` (as `Proportional4`; chunks are owned, see below) |
//!
//! and `ceil(n / chunk)` chunks run. `Grain(0)` is treated as `Grain(1)`.
//!
//! **Shares:** thread `i` of `t` owns the contiguous chunks [`ChunkPlan::share`]`(i)` =
//! `[s(i), s(i + 1))` with `s(i) = i * (c / t) + min(i, c % t)` for `c` chunks (the first
//! `c % t` threads get one more). Under `Static` and `Owned` a thread runs its own share front
//! to back and, when it runs dry, takes chunks from the far end of another thread's share
//! (a "steal"); under the other schedules every thread claims the next chunk from one shared
//! counter, and a chunk run outside its owner's share is counted as a steal too. Shares decide
//! only *who* runs a chunk, never its boundaries.
//!
//! **One thread, or nested:** when the loop runs on a single thread (`threads <= 1`, or the
//! caller is already inside a chunk so the loop runs inline), every schedule gives one chunk
//! covering the whole range: splitting a loop that one thread runs start to finish only adds
//! calls, and rml kernels give bit-identical results whatever the boundaries.

use core::ops::Range;

use super::Schedule;

/// How one `parallel_for` over a range is cut: the chunk length and the number of chunks.
///
/// ```
/// use rml::exec::{ChunkPlan, Schedule};
/// let plan = ChunkPlan::new(0..1000, Schedule::Grain(10), 4, false);
/// assert_eq!(plan.num_chunks(), 16);
/// assert_eq!(plan.chunk_len(), 63);
/// assert_eq!(plan.chunk(15), 945..1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    start: usize,
    end: usize,
    chunk: usize,
    num_chunks: usize,
    threads: usize,
    owned: bool,
}

impl ChunkPlan {
    /// Plans `range` under `schedule` for `threads` threads (the caller included).
    ///
    /// `nested` says the caller is already inside a chunk of another loop, so this loop runs
    /// inline as a single chunk. An empty range has zero chunks. `threads == 0` is treated as 1.
    pub fn new(range: Range<usize>, schedule: Schedule, threads: usize, nested: bool) -> Self {
        let start = range.start;
        let end = range.end.max(start);
        let n = end - start;
        let t = threads.max(1);
        let owned = matches!(schedule, Schedule::Static | Schedule::Owned);
        if n == 0 {
            return ChunkPlan { start, end, chunk: 0, num_chunks: 0, threads: t, owned };
        }
        let chunk = if nested || t == 1 {
            n
        } else {
            match schedule {
                Schedule::Grain(g) => {
                    let num = (n / g.max(1)).clamp(1, t.saturating_mul(4));
                    n.div_ceil(num)
                }
                Schedule::Static => n.div_ceil(t),
                Schedule::Fixed8 => 8,
                Schedule::Fixed16 => 16,
                Schedule::Fixed32 => 32,
                Schedule::Proportional2 => n.div_ceil(t.saturating_mul(2)),
                Schedule::Proportional4 | Schedule::Owned => n.div_ceil(t.saturating_mul(4)),
                Schedule::Adaptive => n.div_ceil(t.saturating_mul(4)).max(16),
            }
        };
        let chunk = chunk.clamp(1, n);
        ChunkPlan { start, end, chunk, num_chunks: n.div_ceil(chunk), threads: t, owned }
    }

    /// Number of chunks (0 for an empty range).
    #[inline]
    pub fn num_chunks(&self) -> usize {
        self.num_chunks
    }

    /// Length of every chunk but the last (0 for an empty range).
    #[inline]
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// The whole range the plan covers.
    #[inline]
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }

    /// `true` when each thread runs its own [`share`](Self::share) first and takes chunks of
    /// other shares only from their far end (`Static`, `Owned`), rather than every thread
    /// claiming the next chunk from one shared counter.
    #[inline]
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// The thread count the plan was made for (at least 1).
    #[inline]
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The chunk indices thread `thread` owns: `[s(thread), s(thread + 1))` with
    /// `s(i) = i * (c / t) + min(i, c % t)` for `c` chunks and `t` threads, so shares are
    /// contiguous, in thread order, and differ in length by at most one. Empty for
    /// `thread >= threads` (and for the threads past `c` when there are fewer chunks than
    /// threads: then thread `i` owns exactly chunk `i`).
    ///
    /// ```
    /// use rml::exec::{ChunkPlan, Schedule};
    /// let plan = ChunkPlan::new(0..1000, Schedule::Owned, 2, false);
    /// assert_eq!((plan.share(0), plan.share(1)), (0..4, 4..8));
    /// ```
    #[inline]
    pub fn share(&self, thread: usize) -> Range<usize> {
        share_range(self.num_chunks, self.threads, thread)
    }

    /// Chunk `i`'s range: `[start + i * chunk, min(start + (i + 1) * chunk, end))`.
    ///
    /// # Panics
    /// If `i >= self.num_chunks()`.
    #[inline]
    pub fn chunk(&self, i: usize) -> Range<usize> {
        assert!(i < self.num_chunks, "chunk {i} of {}", self.num_chunks);
        // i < num_chunks = ceil(n / chunk), so i * chunk < n and neither sum overflows.
        let lo = self.start + i * self.chunk;
        let hi = lo + self.chunk.min(self.end - lo);
        lo..hi
    }

    /// The chunks in order.
    pub fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.num_chunks).map(move |i| self.chunk(i))
    }
}

/// `[s(i), s(i + 1))` with `s(i) = i * (units / threads) + min(i, units % threads)`: the
/// contiguous, balanced share of `units` items that thread `i` of `threads` owns.
#[inline]
pub(crate) fn share_range(units: usize, threads: usize, i: usize) -> Range<usize> {
    let t = threads.max(1);
    let (base, rem) = (units / t, units % t);
    // i <= t, so i * base <= units: no overflow.
    let s = |i: usize| {
        let i = i.min(t);
        i * base + i.min(rem)
    };
    s(i)..s(i.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const ALL: [Schedule; 9] = Schedule::ALL;

    /// (num_chunks, chunk_len, last chunk)
    fn shape(r: Range<usize>, s: Schedule, t: usize) -> (usize, usize, Range<usize>) {
        let p = ChunkPlan::new(r, s, t, false);
        (p.num_chunks(), p.chunk_len(), p.chunk(p.num_chunks() - 1))
    }

    #[test]
    fn seed_examples() {
        assert_eq!(shape(0..1000, Schedule::Grain(10), 4), (16, 63, 945..1000));
        assert_eq!(shape(0..100, Schedule::Grain(1), 4), (15, 7, 98..100));
    }

    #[test]
    fn grain_values() {
        // n / g below 1 clamps to one chunk.
        assert_eq!(shape(0..5, Schedule::Grain(10), 4), (1, 5, 0..5));
        // n / g between 1 and 4t: that many chunks.
        assert_eq!(shape(0..30, Schedule::Grain(10), 4), (3, 10, 20..30));
        assert_eq!(shape(0..35, Schedule::Grain(10), 2), (3, 12, 24..35));
        // Grain(0) acts as Grain(1).
        assert_eq!(shape(0..100, Schedule::Grain(0), 4), (15, 7, 98..100));
        // Offset ranges keep their offset.
        assert_eq!(shape(10..1010, Schedule::Grain(10), 4), (16, 63, 955..1010));
        // 2 threads: at most 8 chunks.
        assert_eq!(shape(0..576, Schedule::Grain(1), 2), (8, 72, 504..576));
    }

    #[test]
    fn static_values() {
        assert_eq!(shape(0..100, Schedule::Static, 4), (4, 25, 75..100));
        assert_eq!(shape(0..10, Schedule::Static, 4), (4, 3, 9..10));
        assert_eq!(shape(0..9, Schedule::Static, 8), (5, 2, 8..9));
        assert_eq!(shape(0..2, Schedule::Static, 3), (2, 1, 1..2));
        assert!(ChunkPlan::new(0..9, Schedule::Static, 8, false).is_owned());
        assert!(!ChunkPlan::new(0..9, Schedule::Fixed8, 8, false).is_owned());
    }

    #[test]
    fn fixed_values() {
        assert_eq!(shape(0..100, Schedule::Fixed8, 4), (13, 8, 96..100));
        assert_eq!(shape(0..100, Schedule::Fixed16, 2), (7, 16, 96..100));
        assert_eq!(shape(0..100, Schedule::Fixed32, 3), (4, 32, 96..100));
        assert_eq!(shape(0..5, Schedule::Fixed32, 3), (1, 5, 0..5));
        assert_eq!(shape(0..64, Schedule::Fixed32, 8), (2, 32, 32..64));
    }

    #[test]
    fn proportional_and_adaptive_values() {
        assert_eq!(shape(0..100, Schedule::Proportional2, 4), (8, 13, 91..100));
        assert_eq!(shape(0..100, Schedule::Proportional4, 4), (15, 7, 98..100));
        assert_eq!(shape(0..576, Schedule::Proportional2, 2), (4, 144, 432..576));
        assert_eq!(shape(0..576, Schedule::Proportional4, 2), (8, 72, 504..576));
        assert_eq!(shape(0..3, Schedule::Proportional4, 8), (3, 1, 2..3));
        // Adaptive: Proportional4 with a floor of 16.
        assert_eq!(shape(0..100, Schedule::Adaptive, 4), (7, 16, 96..100));
        assert_eq!(shape(0..576, Schedule::Adaptive, 2), (8, 72, 504..576));
        assert_eq!(shape(0..10, Schedule::Adaptive, 2), (1, 10, 0..10));
        // Owned: Proportional4's boundaries.
        assert_eq!(shape(0..576, Schedule::Owned, 2), (8, 72, 504..576));
        assert_eq!(shape(0..100, Schedule::Owned, 4), (15, 7, 98..100));
        assert!(ChunkPlan::new(0..100, Schedule::Owned, 4, false).is_owned());
    }

    #[test]
    fn shares_values() {
        let shares = |c: usize, t: usize| (0..t).map(|i| share_range(c, t, i)).collect::<Vec<_>>();
        assert_eq!(shares(8, 2), [0..4, 4..8]);
        assert_eq!(shares(15, 4), [0..4, 4..8, 8..12, 12..15]);
        assert_eq!(shares(10, 4), [0..3, 3..6, 6..8, 8..10]);
        // Fewer chunks than threads: thread i owns chunk i (Static's rule).
        assert_eq!(shares(2, 3), [0..1, 1..2, 2..2]);
        assert_eq!(shares(0, 2), [0..0, 0..0]);
        assert_eq!(share_range(8, 2, 5), 8..8);
        let p = ChunkPlan::new(0..9, Schedule::Static, 8, false);
        assert_eq!((p.num_chunks(), p.threads(), p.share(4), p.share(5)), (5, 8, 4..5, 5..5));
    }

    #[test]
    fn single_thread_and_nested_give_one_chunk() {
        for s in ALL {
            assert_eq!(shape(0..1000, s, 1), (1, 1000, 0..1000), "{s:?}");
            let p = ChunkPlan::new(3..1000, s, 8, true);
            assert_eq!((p.num_chunks(), p.chunk(0)), (1, 3..1000), "{s:?}");
        }
    }

    #[test]
    fn empty_ranges_have_no_chunks() {
        for s in ALL {
            for t in [1, 4] {
                let p = ChunkPlan::new(7..7, s, t, false);
                assert_eq!(p.num_chunks(), 0);
                assert_eq!(p.iter().count(), 0);
                #[allow(clippy::reversed_empty_ranges)]
                let p = ChunkPlan::new(9..3, s, t, false);
                assert_eq!(p.num_chunks(), 0);
            }
        }
    }

    #[test]
    #[should_panic(expected = "chunk 4 of 4")]
    fn chunk_past_end_panics() {
        ChunkPlan::new(0..100, Schedule::Fixed32, 2, false).chunk(4);
    }

    #[test]
    fn huge_ranges_do_not_overflow() {
        let p = ChunkPlan::new(usize::MAX - 100..usize::MAX, Schedule::Fixed32, usize::MAX, false);
        assert_eq!(p.num_chunks(), 4);
        assert_eq!(p.chunk(3), usize::MAX - 4..usize::MAX);
        let p = ChunkPlan::new(0..usize::MAX, Schedule::Proportional4, usize::MAX / 2, false);
        assert_eq!(p.num_chunks(), usize::MAX);
        assert_eq!(p.chunk(usize::MAX - 1), usize::MAX - 1..usize::MAX);
    }

    fn schedule_strategy() -> impl proptest::strategy::Strategy<Value = Schedule> {
        use proptest::prelude::*;
        prop_oneof![(0usize..300).prop_map(Schedule::Grain), proptest::sample::select(&ALL[1..])]
    }

    proptest::proptest! {
        #[test]
        fn shares_tile_the_chunks(c in 0usize..100_000, t in 1usize..300) {
            let mut at = 0;
            for i in 0..t {
                let r = share_range(c, t, i);
                proptest::prop_assert_eq!(r.start, at);
                proptest::prop_assert!(r.len() == c / t || r.len() == c / t + 1);
                at = r.end;
            }
            proptest::prop_assert_eq!(at, c);
        }
    }

    proptest::proptest! {
        #[test]
        fn chunks_tile_the_range(
            start in 0usize..10_000,
            n in 0usize..5_000,
            s in schedule_strategy(),
            t in 1usize..40,
            nested: bool,
        ) {
            let p = ChunkPlan::new(start..start + n, s, t, nested);
            let chunks: Vec<_> = p.iter().collect();
            proptest::prop_assert_eq!(chunks.len(), p.num_chunks());
            let mut at = start;
            for (i, c) in chunks.iter().enumerate() {
                proptest::prop_assert_eq!(c.start, at);
                proptest::prop_assert!(c.end > c.start);
                if i + 1 < chunks.len() {
                    proptest::prop_assert_eq!(c.len(), p.chunk_len());
                } else {
                    proptest::prop_assert!(c.len() <= p.chunk_len());
                }
                if let Schedule::Grain(g) = s {
                    if i + 1 < chunks.len() {
                        proptest::prop_assert!(c.len() >= g);
                    }
                    proptest::prop_assert!(chunks.len() <= 4 * t);
                }
                if s == Schedule::Static {
                    proptest::prop_assert!(chunks.len() <= t);
                }
                at = c.end;
            }
            proptest::prop_assert_eq!(at, start + n);
        }
    }
}
