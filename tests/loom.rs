//! loom model of the ThreadPool protocol (publish / spin / sleep / wake / leave job), run on
//! the real pool code built over loom's atomics, mutexes, condvar and threads:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --features std --test loom
//! ```
//!
//! What it checks, over every interleaving loom explores (2 workers + the caller):
//! - no lost wake-up: a lost wake-up leaves a worker asleep and the caller waiting for it
//!   forever, which loom reports as a deadlock (or a spin past its branch limit);
//! - the caller never returns while a worker still holds the job: under loom the pool kills a
//!   cell in the job when `parallel_for` returns and workers read it whenever they touch the
//!   job, so an unordered access is a causality violation;
//! - every index is written exactly once and the writes are visible to the caller afterwards
//!   (each index is a loom `UnsafeCell`, so a missing happens-before edge is reported);
//! - drop wakes and joins sleeping workers.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use rml::exec::{Schedule, ThreadPool};

/// One non-atomic counter per index; loom checks every access for races.
struct Cells(Vec<UnsafeCell<usize>>);

// SAFETY: the pool hands each index to exactly one chunk, so no two threads touch the same
// cell concurrently; loom verifies exactly that.
unsafe impl Sync for Cells {}

impl Cells {
    fn new(n: usize) -> Self {
        Cells((0..n).map(|_| UnsafeCell::new(0)).collect())
    }
    fn bump(&self, i: usize) {
        // SAFETY: see `impl Sync`; loom reports a concurrent access.
        self.0[i].with_mut(|p| unsafe { *p += 1 });
    }
    fn get(&self, i: usize) -> usize {
        // SAFETY: as in `bump`.
        self.0[i].with(|p| unsafe { *p })
    }
}

/// A model checker exploring every interleaving with at most `preemptions` preemptions
/// (switches away from a thread that could have gone on; blocking and yielding are free).
/// `LOOM_MAX_PREEMPTIONS` overrides. Bounds keep each model to seconds on two cores: one
/// dispatch with two preemptions is about 20 s, two dispatches with one about 20 s, two with
/// two would be many minutes.
fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b
}

/// One dispatch, one chunk per thread, then drop; two preemptions.
#[test]
fn one_job_static_two_workers() {
    builder(2).check(|| {
        let pool = ThreadPool::builder().threads(3).build().unwrap();
        let cells = Cells::new(3);
        pool.parallel_for(0..3, Schedule::Static, &|r| {
            for i in r {
                cells.bump(i);
            }
        });
        for i in 0..3 {
            assert_eq!(cells.get(i), 1, "index {i}");
        }
        drop(pool);
    });
}

/// Two jobs back to back on a pool of three threads (two workers), one chunk per thread,
/// then drop: the second job finds workers spinning or asleep, drop finds them asleep. One
/// preemption.
#[test]
fn publish_sleep_wake_leave_two_workers() {
    builder(1).check(|| {
        let pool = ThreadPool::builder().threads(3).build().unwrap();
        for round in 1..=2 {
            let cells = Cells::new(3);
            pool.parallel_for(0..3, Schedule::Static, &|r| {
                for i in r {
                    cells.bump(i);
                }
            });
            for i in 0..3 {
                assert_eq!(cells.get(i), 1, "round {round}, index {i}");
            }
        }
        drop(pool);
    });
}

/// Dynamic claiming: two chunks fought over by three threads; whoever arrives late finds
/// nothing left and must still leave the job before the caller returns. Two preemptions.
#[test]
fn dynamic_claims_two_workers() {
    builder(2).check(|| {
        let pool = ThreadPool::builder().threads(3).build().unwrap();
        let cells = Cells::new(16);
        pool.parallel_for(0..16, Schedule::Fixed8, &|r| {
            for i in r {
                cells.bump(i);
            }
        });
        for i in 0..16 {
            assert_eq!(cells.get(i), 1, "index {i}");
        }
    });
}
