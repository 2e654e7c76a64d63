//! loom model of the ThreadPool protocol (publish / spin / sleep / wake / join / close /
//! leave), run on the real pool code built over loom's atomics, mutexes, condvar and threads:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --features std --test loom
//! ```
//!
//! (A plain `cargo test` lists one ignored test here that says so.)
//!
//! What it checks, over every interleaving loom explores (one or two workers + the caller):
//! - no lost wake-up: a lost wake-up leaves a worker asleep and the caller waiting for it
//!   forever, which loom reports as a deadlock (or a spin past its branch limit);
//! - the caller never returns while a worker that joined still holds the job, and a worker
//!   that arrives after the close never touches it: under loom the pool kills a cell in the
//!   job when `parallel_for` returns and workers read it whenever they touch the job, so an
//!   unordered access is a causality violation; `desc` is a loom cell too;
//! - every index is written exactly once and the writes are visible to the caller afterwards
//!   (each index is a loom `UnsafeCell`, so a missing happens-before edge is reported), also
//!   when a worker is late and its share is run by others;
//! - a panicking chunk reaches the caller once the joined workers left, and the pool works on;
//! - drop wakes and joins sleeping workers.
//!
//! The join/close models also assert that loom really explored a worker that joined and a
//! worker that arrived after the close (`PoolStats::missed`).

/// Without `--cfg loom` there is nothing to run: say so, and how to run the model.
#[cfg(not(loom))]
#[test]
#[ignore = "loom model of the ThreadPool protocol: run it with RUSTFLAGS=\"--cfg loom\" CARGO_TARGET_DIR=target/loom cargo test --release --features std --test loom"]
fn loom_model_needs_cfg_loom() {
    panic!(
        "tests/loom.rs is a loom model: RUSTFLAGS=\"--cfg loom\" CARGO_TARGET_DIR=target/loom \
         cargo test --release --features std --test loom"
    );
}

#[cfg(loom)]
mod model {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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
        /// Runs one `parallel_for` over all cells and checks each was bumped once.
        fn run_once(&self, pool: &ThreadPool, s: Schedule, what: &str) {
            pool.parallel_for(0..self.0.len(), s, &|r| {
                for i in r {
                    self.bump(i);
                }
            });
            for i in 0..self.0.len() {
                assert_eq!(self.get(i), 1, "{what}: index {i}");
            }
        }
    }

    /// A model checker exploring every interleaving with at most `preemptions` preemptions
    /// (switches away from a thread that could have gone on; blocking and yielding are free).
    /// `LOOM_MAX_PREEMPTIONS` overrides. Bounds keep each model to seconds or tens of seconds
    /// on two cores.
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
            Cells::new(3).run_once(&pool, Schedule::Static, "static");
            drop(pool);
        });
    }

    /// Two jobs back to back on a pool of three threads (two workers), one chunk per thread,
    /// then drop: the second job finds workers spinning, asleep, or not yet done with the
    /// first job's close; drop finds them asleep. One preemption.
    #[test]
    fn publish_sleep_wake_leave_two_workers() {
        builder(1).check(|| {
            let pool = ThreadPool::builder().threads(3).build().unwrap();
            for round in ["round 1", "round 2"] {
                Cells::new(3).run_once(&pool, Schedule::Static, round);
            }
            drop(pool);
        });
    }

    /// Dynamic claiming: two chunks fought over by three threads; whoever arrives late finds
    /// nothing left (or the job closed) and must still leave before the caller returns. Two
    /// preemptions.
    #[test]
    fn dynamic_claims_two_workers() {
        builder(2).check(|| {
            let pool = ThreadPool::builder().threads(3).build().unwrap();
            Cells::new(16).run_once(&pool, Schedule::Fixed8, "fixed8");
        });
    }

    /// Executions of `join_close_handshake_one_worker` in which the worker ran a chunk of
    /// the first job / had found it closed by the time the caller looked.
    static WORKER_RAN: AtomicUsize = AtomicUsize::new(0);
    static WORKER_MISSED: AtomicUsize = AtomicUsize::new(0);

    /// The join/close handshake with one worker over two jobs (owned claims, then the shared
    /// counter): the worker may join early, join exactly as the caller closes (its CAS racing
    /// the caller's `fetch_or`), arrive after the close (then the caller ran the worker's
    /// share), or skip a job entirely; the second job's claim reset and `desc` write must not
    /// race with a late worker. Asserts that loom explored both a worker that ran a chunk and
    /// one that arrived after the close. Three preemptions.
    #[test]
    fn join_close_handshake_one_worker() {
        builder(3).check(|| {
            let pool = ThreadPool::builder().threads(2).build().unwrap();
            let caller = loom::thread::current().id();
            let cells = Cells::new(2);
            let worker_ran = std::sync::atomic::AtomicBool::new(false);
            pool.parallel_for(0..2, Schedule::Owned, &|r| {
                if loom::thread::current().id() != caller {
                    worker_ran.store(true, Relaxed);
                }
                for i in r {
                    cells.bump(i);
                }
            });
            assert_eq!((cells.get(0), cells.get(1)), (1, 1));
            // A free switch point, so that a late worker can look at the closed job now.
            loom::thread::yield_now();
            if worker_ran.load(Relaxed) {
                WORKER_RAN.fetch_add(1, Relaxed);
            }
            if pool.stats().missed > 0 {
                WORKER_MISSED.fetch_add(1, Relaxed);
            }
            Cells::new(16).run_once(&pool, Schedule::Fixed8, "job 2");
            drop(pool);
        });
        let (ran, missed) = (WORKER_RAN.load(Relaxed), WORKER_MISSED.load(Relaxed));
        assert!(ran > 0 && missed > 0, "executions: worker ran {ran}, worker missed {missed}");
        println!(
            "executions where the worker ran a chunk: {ran}; arrived after the close: {missed}"
        );
    }

    /// A panicking chunk, with one worker: the panic reaches the caller after the joined
    /// worker left, unclaimed chunks are dropped, and the next job runs normally. Two
    /// preemptions.
    #[test]
    fn panic_in_a_chunk() {
        std::panic::set_hook(Box::new(|_| {}));
        builder(2).check(|| {
            let pool = ThreadPool::builder().threads(2).build().unwrap();
            let cells = Cells::new(2);
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.parallel_for(0..2, Schedule::Owned, &|r| {
                    if r.start == 1 {
                        panic!("chunk 1");
                    }
                    cells.bump(r.start);
                });
            }));
            let msg = r.expect_err("the panic must reach the caller");
            assert_eq!(msg.downcast_ref::<&str>(), Some(&"chunk 1"));
            Cells::new(2).run_once(&pool, Schedule::Owned, "after the panic");
            drop(pool);
        });
        let _ = std::panic::take_hook();
    }
}
