//! ThreadPool behaviour: every schedule covers every index once, the executor runs exactly the
//! planned chunks, panics reach the caller and leave the pool usable, tiny-dispatch stress,
//! prompt drop, statistics, row ownership and stealing, and a worker held outside a job not
//! delaying the caller. Every test that could hang runs inside a watchdog so that a hang fails
//! the test instead. (Speed under oversubscription is a benchmark: `benches/dispatch.rs`.)
#![cfg(feature = "std")]

use core::ops::Range;
use core::panic::AssertUnwindSafe;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, Ordering::Relaxed};
use core::time::Duration;
use std::panic::{catch_unwind, resume_unwind};
use std::sync::{mpsc, Mutex};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rml::exec::{ChunkPlan, Executor, InlineExecutor, Schedule, ThreadPool};

/// A pool of `threads` that always dispatches (no back-off under contention): these tests
/// check the protocol, whose counts a back-off on a loaded machine would change.
fn protocol_pool(threads: usize) -> ThreadPool {
    ThreadPool::builder().contention_backoff(false).threads(threads).build().unwrap()
}

/// Runs `f` on its own thread and fails the test if it does not finish within `secs`.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    must_finish(secs, "the test", f)
}

/// Runs `f` on its own thread; if it is still running after `secs` (a limit far above any
/// loaded machine's time, so only a hang reaches it), fails naming `what`. Not a speed bound.
fn must_finish<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => panic!("watchdog: {what} still running after {secs} s: a hang"),
    }
}

/// Polls `cond` every millisecond until it holds (the test's watchdog catches a hang).
fn wait_until(cond: impl Fn() -> bool) {
    while !cond() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn schedules() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        (0usize..200).prop_map(Schedule::Grain),
        proptest::sample::select(Schedule::ALL.to_vec())
    ]
}

/// Runs one `parallel_for` and checks that every index ran exactly once and that the chunks
/// were exactly the plan's.
fn check_cover(exec: &dyn Executor, start: usize, n: usize, s: Schedule) {
    let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let seen = Mutex::new(Vec::<Range<usize>>::new());
    exec.parallel_for(start..start + n, s, &|r| {
        for i in r.clone() {
            counts[i - start].fetch_add(1, Relaxed);
        }
        seen.lock().unwrap().push(r);
    });
    for (i, c) in counts.iter().enumerate() {
        assert_eq!(
            c.load(Relaxed),
            1,
            "index {} under {s:?} with {} threads",
            start + i,
            exec.threads()
        );
    }
    let mut seen = seen.into_inner().unwrap();
    seen.sort_by_key(|r| r.start);
    let plan = ChunkPlan::new(start..start + n, s, exec.threads(), false);
    if plan.num_chunks() <= 1 || exec.threads() == 1 {
        // Inline: one call over the whole range (none for an empty range).
        let expected: Vec<_> = plan.iter().next().map(|_| start..start + n).into_iter().collect();
        assert_eq!(seen, expected);
    } else {
        assert_eq!(seen, plan.iter().collect::<Vec<_>>(), "{s:?}");
    }
}

#[test]
fn every_schedule_and_thread_count_covers_each_index_once() {
    watchdog(600, || {
        for threads in [1, 2, 3, 4, 8] {
            let pool = protocol_pool(threads);
            assert_eq!(pool.threads(), threads);
            for s in Schedule::ALL.into_iter().chain([Schedule::Grain(7)]) {
                for n in [0, 1, 2, 7, 8, 9, 31, 64, 100, 1000] {
                    check_cover(&pool, 3, n, s);
                }
            }
            let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
            runner
                .run(&(0usize..1000, 0usize..3000, schedules()), |(start, n, s)| {
                    check_cover(&pool, start, n, s);
                    Ok(())
                })
                .unwrap();
        }
        for s in Schedule::ALL {
            check_cover(&InlineExecutor, 5, 77, s);
        }
    });
}

#[test]
fn panic_reaches_the_caller_and_the_pool_keeps_working() {
    watchdog(120, || {
        let pool = protocol_pool(4);
        for s in Schedule::ALL.into_iter().chain([Schedule::Fixed8, Schedule::Grain(3)]) {
            for bad in [0, 499, 999] {
                let ran = AtomicUsize::new(0);
                let result = catch_unwind(AssertUnwindSafe(|| {
                    pool.parallel_for(0..1000, s, &|r| {
                        for i in r {
                            if i == bad {
                                panic!("chunk failed at {i}");
                            }
                            ran.fetch_add(1, Relaxed);
                        }
                    });
                }));
                let payload = result.expect_err("the panic must reach the caller");
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| String::from("<not a String>"));
                assert_eq!(msg, format!("chunk failed at {bad}"), "{s:?}");
                assert!(ran.load(Relaxed) < 1000);
                // The same pool still computes a correct sum.
                let sum = AtomicUsize::new(0);
                pool.parallel_for(0..1000, s, &|r| {
                    sum.fetch_add(r.sum::<usize>(), Relaxed);
                });
                assert_eq!(sum.load(Relaxed), 999 * 1000 / 2, "{s:?}");
            }
        }
        // Several chunks panicking at once: the caller still gets one of them.
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.parallel_for(0..64, Schedule::Fixed8, &|_| panic!("everyone"));
        }));
        assert!(r.is_err());
        // A panic inside a nested (inline) loop travels out through both levels.
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.parallel_for(0..8, Schedule::Static, &|outer| {
                pool.parallel_for(0..8, Schedule::Static, &|inner| {
                    if outer.start == 2 && inner.contains(&5) {
                        panic!("nested");
                    }
                });
            });
        }));
        assert!(r.is_err());
        let sum = AtomicUsize::new(0);
        pool.parallel_for(0..100, Schedule::Grain(1), &|r| {
            sum.fetch_add(r.len(), Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 100);
    });
}

#[test]
fn alternating_tiny_dispatches_with_8_threads() {
    let total = watchdog(300, || {
        let pool = protocol_pool(8);
        let count = AtomicUsize::new(0);
        let body = |r: Range<usize>| {
            count.fetch_add(r.len(), Relaxed);
        };
        for i in 0..200_000usize {
            let n = if i % 2 == 0 { 1 } else { 9 };
            let s = Schedule::ALL[(i / 2) % Schedule::ALL.len()];
            pool.parallel_for(0..n, s, &body);
        }
        let stats = pool.stats();
        // Every n = 9 call under a schedule that makes 2+ chunks is a real dispatch.
        assert!(stats.dispatches >= 50_000, "{stats:?}");
        count.load(Relaxed)
    });
    assert_eq!(total, 100_000 * (1 + 9));
}

/// Dropping a pool wakes sleeping and spinning workers and joins them. States are counted,
/// not durations: each drop runs under its own watchdog, whose limit only a hang reaches (a
/// worker never woken, or one spinning out its one-hour window).
#[test]
fn dropping_a_pool_with_sleeping_or_spinning_workers_returns() {
    // Spin 0: workers sleep as soon as they have nothing to do.
    let pool = must_finish(120, "waiting for 3 idle workers to go to sleep (spin 0)", || {
        let pool = ThreadPool::builder()
            .contention_backoff(false)
            .threads(4)
            .spin_time(Duration::ZERO)
            .build()
            .unwrap();
        wait_until(|| pool.stats().sleeps >= 3);
        pool
    });
    must_finish(120, "dropping a pool whose 3 workers sleep", move || drop(pool));

    // After a dispatch and a spin window that has expired: every worker has gone back to sleep.
    let pool = must_finish(120, "a dispatch, then 2 workers going back to sleep", || {
        let pool = ThreadPool::builder()
            .contention_backoff(false)
            .threads(3)
            .spin_time(Duration::from_micros(100))
            .build()
            .unwrap();
        let s0 = pool.stats();
        pool.parallel_for(0..100, Schedule::Fixed8, &|_| {});
        assert_eq!(pool.stats().since(&s0).dispatches, 1);
        wait_until(|| pool.stats().since(&s0).sleeps >= 2);
        pool
    });
    must_finish(120, "dropping a pool whose workers went back to sleep", move || drop(pool));

    // While workers are still spinning (a one-hour spin window): the drop must stop the spin.
    let pool = must_finish(120, "a dispatch on a pool that spins for an hour", || {
        let pool = ThreadPool::builder()
            .contention_backoff(false)
            .threads(3)
            .spin_time(Duration::from_secs(3600))
            .build()
            .unwrap();
        pool.parallel_for(0..100, Schedule::Fixed8, &|_| {});
        assert_eq!(pool.stats().sleeps, 0, "a worker slept inside a one-hour spin window");
        pool
    });
    must_finish(120, "dropping a pool whose workers spin (one-hour window)", move || drop(pool));
}

#[test]
fn sleeping_workers_are_woken_and_counted() {
    watchdog(60, || {
        let pool = ThreadPool::builder()
            .contention_backoff(false)
            .threads(3)
            .spin_time(Duration::ZERO)
            .build()
            .unwrap();
        wait_until(|| pool.stats().sleeps >= 2);
        let before = pool.stats();
        let sum = AtomicUsize::new(0);
        for _ in 0..20 {
            pool.parallel_for(0..300, Schedule::Static, &|r| {
                sum.fetch_add(r.len(), Relaxed);
            });
        }
        assert_eq!(sum.load(Relaxed), 20 * 300);
        let d = pool.stats().since(&before);
        assert_eq!(d.dispatches, 20);
        assert_eq!(d.chunks, 60);
        // Static steals only the blocks of workers that had not arrived (still waking up)
        // when the caller ran dry: at most the two workers' blocks per dispatch.
        assert!(d.steals <= 40, "{d:?}");
        // With no spin window the first dispatch finds both workers asleep and wakes them
        // (later ones too, while they are still waking up or asleep again).
        assert!(d.wakeups >= 1 && d.wakeups <= 20, "{d:?}");
        // Woken, they look at the job (joining it or finding it closed) and sleep again.
        wait_until(|| pool.stats().since(&before).sleeps >= 2);
        // A job that cannot finish without both workers: each chunk waits until all three
        // threads are inside one, so sleeping workers must be woken and join it.
        let before = pool.stats();
        let started = AtomicUsize::new(0);
        pool.parallel_for(0..3, Schedule::Static, &|_| {
            started.fetch_add(1, Relaxed);
            while started.load(Relaxed) < 3 {
                std::thread::yield_now();
            }
        });
        let d = pool.stats().since(&before);
        assert_eq!((d.chunks, d.steals), (3, 0), "{d:?}");
    });
}

#[test]
fn stats_count_dispatches_chunks_inline_runs_and_steals() {
    watchdog(60, || {
        let pool = protocol_pool(2);
        let s0 = pool.stats();
        pool.parallel_for(0..1000, Schedule::Grain(10), &|_| {}); // 8 chunks
        pool.parallel_for(0..5, Schedule::Grain(10), &|_| {}); // 1 chunk: inline
        pool.parallel_for(0..0, Schedule::Grain(10), &|_| {}); // empty: nothing
        pool.parallel_for(0..100, Schedule::Static, &|_| {}); // 2 owned chunks
        let d = pool.stats().since(&s0);
        assert_eq!((d.dispatches, d.chunks, d.inline_runs), (2, 10, 1), "{d:?}");
        assert!(d.steals <= 8);

        // A pool without workers runs everything inline.
        let one = protocol_pool(1);
        one.parallel_for(0..100, Schedule::Fixed8, &|_| {});
        assert_eq!(one.stats().inline_runs, 1);
        assert_eq!(one.stats().dispatches, 0);
    });
}

#[test]
fn timing_splits_dispatch_time_into_work_and_waiting() {
    watchdog(60, || {
        // Static on two threads: one chunk each. Each chunk waits until both are running, so
        // the caller cannot take the worker's chunk and the worker must join: both clocks run.
        let run = |pool: &ThreadPool| {
            let inside = AtomicUsize::new(0);
            let s0 = pool.stats();
            pool.parallel_for(0..2, Schedule::Static, &|_| {
                inside.fetch_add(1, Relaxed);
                wait_until(|| inside.load(Relaxed) == 2);
            });
            pool.stats().since(&s0)
        };
        let timed = ThreadPool::builder().contention_backoff(false).threads(2).timing(true);
        let d = run(&timed.build().unwrap());
        assert_eq!((d.dispatches, d.chunks), (1, 2), "{d:?}");
        assert!(d.dispatch_ns > 0 && d.worker_busy_ns > 0, "{d:?}");
        assert!(d.caller_wait_ns <= d.dispatch_ns, "{d:?}");
        // Off by default: the fields stay 0.
        let d = run(&protocol_pool(2));
        assert_eq!((d.dispatch_ns, d.caller_wait_ns, d.worker_busy_ns), (0, 0, 0), "{d:?}");
    });
}

#[test]
fn a_blocked_worker_makes_the_caller_steal() {
    watchdog(60, || {
        // 2 threads, 8 chunks from the shared counter; chunk 0's runner waits until every other
        // chunk has run, so the other thread runs chunks 1..8: shares are 0..4 and 4..8, so
        // at least 3 of them belong to the waiting thread.
        let pool = protocol_pool(2);
        let done = AtomicUsize::new(0);
        let who = Mutex::new(vec![None; 8]);
        pool.parallel_for(0..8, Schedule::Fixed8, &|_| {});
        let s0 = pool.stats();
        pool.parallel_for(0..64, Schedule::Fixed8, &|r| {
            let c = r.start / 8;
            who.lock().unwrap()[c] = Some(std::thread::current().id());
            if c == 0 {
                // The other thread runs the 7 others (the watchdog catches a hang).
                while done.load(Relaxed) < 7 {
                    std::thread::yield_now();
                }
            } else {
                done.fetch_add(1, Relaxed);
            }
        });
        let d = pool.stats().since(&s0);
        let who = who.into_inner().unwrap();
        let caller = std::thread::current().id();
        // Expected steals from the recorded runners: chunk c is owned by thread c / 4.
        let plan = ChunkPlan::new(0..64, Schedule::Fixed8, 2, false);
        assert_eq!((plan.share(0), plan.share(1)), (0..4, 4..8));
        let expected =
            who.iter().enumerate().filter(|(c, t)| (*c < 4) != (t.unwrap() == caller)).count()
                as u64;
        assert_eq!(d.chunks, 8);
        assert_eq!(d.steals, expected, "{who:?}");
        assert!(d.steals >= 3, "one thread ran 7 chunks, so at least 3 were stolen: {d:?}");
    });
}

#[test]
fn concurrent_callers_take_turns() {
    watchdog(120, || {
        let pool = protocol_pool(3);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        pool.parallel_for(0..50, Schedule::Proportional2, &|r| {
                            total.fetch_add(r.len(), Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Relaxed), 4 * 2000 * 50);
    });
}

#[test]
fn global_pool_is_shared_and_sized() {
    let a = ThreadPool::global();
    let b = ThreadPool::global();
    assert!(core::ptr::eq(a, b));
    assert!(a.threads() >= 1);
    let sum = AtomicUsize::new(0);
    a.parallel_for(0..10_000, Schedule::Grain(64), &|r| {
        sum.fetch_add(r.sum::<usize>(), Relaxed);
    });
    assert_eq!(sum.load(Relaxed), 9999 * 10_000 / 2);
}

#[test]
fn owned_rows_are_stolen_from_the_far_end() {
    watchdog(60, || {
        // 2 threads, Owned over 64 rows: 8 chunks of 8, shares 0..4 (caller) and 4..8. The
        // caller claims the front of its share, chunk 0, first, and holds it until the 7 other
        // chunks have run: so the worker runs its share front to back, then takes the
        // caller's share from the far end. The worker waits in its last own chunk (7) until
        // the caller is inside chunk 0, so an OS that delays the caller's first claim (seen
        // under AddressSanitizer on a loaded machine) cannot let the worker steal chunk 0.
        let pool = protocol_pool(2);
        let plan = ChunkPlan::new(0..64, Schedule::Owned, 2, false);
        assert_eq!((plan.num_chunks(), plan.share(0), plan.share(1)), (8, 0..4, 4..8));
        let done = AtomicUsize::new(0);
        let caller_in = AtomicBool::new(false);
        let order = Mutex::new(Vec::new());
        let caller = std::thread::current().id();
        let s0 = pool.stats();
        pool.parallel_for(0..64, Schedule::Owned, &|r| {
            let c = r.start / 8;
            if c == 0 {
                assert_eq!(std::thread::current().id(), caller, "chunk 0 is the caller's first");
                caller_in.store(true, Ordering::SeqCst);
                while done.load(Relaxed) < 7 {
                    std::thread::yield_now();
                }
            } else {
                if c == 7 {
                    while !caller_in.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                }
                assert_ne!(std::thread::current().id(), caller, "the caller is held in chunk 0");
                order.lock().unwrap().push(c);
                done.fetch_add(1, Relaxed);
            }
        });
        assert_eq!(order.into_inner().unwrap(), [4, 5, 6, 7, 3, 2, 1]);
        let d = pool.stats().since(&s0);
        assert_eq!((d.chunks, d.steals), (8, 3), "{d:?}");
    });
}

/// Set while worker 2 of `held_worker_does_not_delay_the_caller`'s pool must stay outside.
static HOLD: AtomicBool = AtomicBool::new(true);
/// Times worker 2 entered the hook.
static HELD: AtomicUsize = AtomicUsize::new(0);

fn hold_worker_2(me: usize) {
    if me == 2 {
        HELD.fetch_add(1, Ordering::SeqCst);
        while HOLD.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Issue 13 item 7: a worker the OS has not run (here: held in the `before_join` hook, outside
/// the job) must not delay the caller. Before the join/close protocol the caller waited for
/// every worker, so the first dispatch below hung (the watchdog fails it).
#[test]
fn held_worker_does_not_delay_the_caller() {
    watchdog(120, || {
        let pool = ThreadPool::builder()
            .contention_backoff(false)
            .threads(3)
            .before_join(hold_worker_2)
            .build()
            .unwrap();
        let check = |s: Schedule, n: usize| {
            let counts: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            pool.parallel_for(0..n, s, &|r| {
                for i in r {
                    counts[i].fetch_add(1, Relaxed);
                }
            });
            assert!(counts.iter().all(|c| c.load(Relaxed) == 1), "{s:?}, {n} rows");
        };
        check(Schedule::Static, 300);
        // Worker 2 saw that job and is now held before its join, for as long as we like.
        while HELD.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for round in 0..50 {
            for s in Schedule::ALL {
                check(s, 100 + round);
            }
        }
        assert_eq!(HELD.load(Ordering::SeqCst), 1, "worker 2 never left the hook");
        // Released, worker 2 finds the last job closed and touches nothing of it.
        let missed = pool.stats().missed;
        HOLD.store(false, Ordering::SeqCst);
        while pool.stats().missed == missed {
            std::thread::sleep(Duration::from_millis(1));
        }
        for s in Schedule::ALL {
            check(s, 1000);
        }
        drop(pool);
    });
}

#[test]
fn a_worker_that_stalls_mid_chunk_makes_the_pool_back_off_to_the_caller() {
    watchdog(300, || {
        let me = std::thread::current().id();
        // One pass: up to `calls` calls of 8 chunks in which the worker stalls mid-chunk (as a
        // preempted worker would) while the caller runs the other chunks. Returns the calls that
        // ran backed off, each checked to have run on the caller alone.
        //
        // No timing assumption: in a dispatched call the caller's first chunk waits until the
        // worker has joined, and the worker's chunk waits until the caller has finished every
        // other chunk, then sleeps 3 × the time since the call began (at least 3 ms). The
        // caller's wait for it is then over the pool's stall bound (500 µs) and over twice its
        // own work however slowly a loaded machine runs either thread.
        let pass = |pool: &ThreadPool, calls: usize| {
            let mut backed = 0;
            for _ in 0..calls {
                let s0 = pool.stats();
                let began = std::time::Instant::now();
                let (total, on_caller) = (AtomicUsize::new(0), AtomicUsize::new(0));
                let (finished, worker_in) = (AtomicUsize::new(0), AtomicBool::new(false));
                pool.parallel_for(0..64, Schedule::Fixed8, &|r| {
                    total.fetch_add(r.len(), Relaxed);
                    if std::thread::current().id() == me {
                        on_caller.fetch_add(r.len(), Relaxed);
                        // `dispatches` counts this call before the caller runs a chunk; a
                        // backed-off call is not counted and has no worker to wait for.
                        if pool.stats().since(&s0).dispatches == 1 {
                            while !worker_in.load(Ordering::SeqCst) {
                                std::thread::yield_now();
                            }
                        }
                    } else {
                        worker_in.store(true, Ordering::SeqCst);
                        while finished.load(Ordering::SeqCst) + r.len() < 64 {
                            std::thread::yield_now();
                        }
                        let since = began.elapsed();
                        std::thread::sleep((since * 3).max(Duration::from_millis(3)));
                    }
                    finished.fetch_add(r.len(), Ordering::SeqCst);
                });
                assert_eq!(total.load(Relaxed), 64, "every index once");
                let d = pool.stats().since(&s0);
                if d.backed_off == 1 {
                    assert_eq!(d.dispatches, 0, "{d:?}");
                    assert_eq!(on_caller.load(Relaxed), 64, "a backed-off call runs on the caller");
                    backed += 1;
                    if backed == 3 {
                        break;
                    }
                }
            }
            backed
        };
        let on = ThreadPool::builder().threads(2).build().unwrap();
        // Every dispatched call stalls, so the third call is backed off; the bound allows for
        // calls that a caller preempted right after its chunks measures as unstalled.
        assert_eq!(pass(&on, 200), 3, "no back-off after stalls: {:?}", on.stats());
        let off = ThreadPool::builder().threads(2).contention_backoff(false).build().unwrap();
        assert_eq!(pass(&off, 100), 0);
        assert_eq!(off.stats().backed_off, 0);
    });
}
