//! [`InlineExecutor`]: runs every `parallel_for` as one call on the caller's thread.

use core::ops::Range;

use super::{Executor, Schedule};

/// The single-thread executor (no_std): `parallel_for` calls `f(range)` once, inline.
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineExecutor;

impl Executor for InlineExecutor {
    fn threads(&self) -> usize {
        1
    }

    fn parallel_for(
        &self,
        range: Range<usize>,
        _schedule: Schedule,
        f: &(dyn Fn(Range<usize>) + Sync),
    ) {
        if !range.is_empty() {
            f(range);
        }
    }
}
