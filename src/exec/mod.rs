//! Executors: how a parallel loop over a range of output rows is split and run.
//!
//! [`Executor::parallel_for`] splits a range into chunks (see [`Schedule`] and the chunk
//! planner in `chunks.rs`) and runs a closure on each. Chunk boundaries are a pure function of
//! (range, schedule, thread count), so a kernel that writes each output element inside one
//! chunk and reduces in a fixed order gives bit-identical results for every schedule and thread
//! count. [`InlineExecutor`] (no_std) runs everything on the caller; the `std` layer adds a
//! persistent `ThreadPool`.

use core::ops::Range;

mod inline;

pub use inline::InlineExecutor;

/// How [`Executor::parallel_for`] cuts a range of `n` items into chunks for `threads` threads.
///
/// The formulas are design.md §3 "Executor and chunking".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// The default: `num_chunks = clamp(n / g, 1, 4 * threads)`, `chunk = ceil(n / num_chunks)`;
    /// one chunk when there are no workers or the caller is already inside a chunk.
    Grain(usize),
    /// One contiguous block per thread, no dynamic claiming.
    Static,
    /// Chunks of 8 rows, claimed dynamically.
    Fixed8,
    /// Chunks of 16 rows, claimed dynamically.
    Fixed16,
    /// Chunks of 32 rows, claimed dynamically.
    Fixed32,
    /// `chunk = ceil(n / (2 * threads))`.
    Proportional2,
    /// `chunk = ceil(n / (4 * threads))`.
    Proportional4,
    /// `Proportional4` with a floor of 16 rows per chunk.
    Adaptive,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::Grain(1)
    }
}

/// Runs a closure over chunks of a range, possibly in parallel.
pub trait Executor: Sync {
    /// Threads that work on a `parallel_for`, the caller included (1 for inline).
    fn threads(&self) -> usize;

    /// The schedule GEMV/GEMM use when the caller gives none.
    fn schedule(&self) -> Schedule {
        Schedule::default()
    }

    /// Calls `f` on chunks that tile `range` in order with no gap or overlap, and returns when
    /// all have run. Chunks may run on several threads at once.
    fn parallel_for(
        &self,
        range: Range<usize>,
        schedule: Schedule,
        f: &(dyn Fn(Range<usize>) + Sync),
    );
}
