//! Nested `parallel_for` three deep on a 2-thread pool: exact counts, no thread spawned.
//! (Alone in its file so that no other test starts threads while this one counts them.)
#![cfg(feature = "std")]

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use core::time::Duration;
use std::collections::HashSet;
use std::sync::{mpsc, Mutex};

use rml::exec::{Schedule, ThreadPool};

/// A pool of `threads` that always dispatches (no back-off under contention): these tests
/// check the protocol, whose counts a back-off on a loaded machine would change.
fn protocol_pool(threads: usize) -> ThreadPool {
    ThreadPool::builder().contention_backoff(false).threads(threads).build().unwrap()
}

/// Threads of this process, from /proc (Linux); `None` elsewhere.
fn os_threads() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/task").ok()?.count())
}

#[test]
fn nested_three_deep_on_two_threads() {
    let (tx, rx) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        let pool = protocol_pool(2);
        const N: usize = 12;
        let cells: Vec<AtomicU32> = (0..N * N * N).map(|_| AtomicU32::new(0)).collect();
        let runners = Mutex::new(HashSet::new());
        let before = os_threads();
        let s0 = pool.stats();
        for s in [Schedule::Grain(1), Schedule::Fixed8, Schedule::Static] {
            pool.parallel_for(0..N, s, &|a| {
                for i in a {
                    pool.parallel_for(0..N, s, &|b| {
                        for j in b {
                            pool.parallel_for(0..N, s, &|c| {
                                runners.lock().unwrap().insert(std::thread::current().id());
                                for k in c {
                                    cells[(i * N + j) * N + k].fetch_add(1, Relaxed);
                                }
                            });
                        }
                    });
                }
            });
        }
        let after = os_threads();
        let d = pool.stats().since(&s0);
        for (x, c) in cells.iter().enumerate() {
            assert_eq!(c.load(Relaxed), 3, "cell {x}");
        }
        // Only the caller and the pool's single worker ever ran a chunk.
        assert!(runners.into_inner().unwrap().len() <= 2);
        assert_eq!(before, after, "a nested parallel_for started threads");
        // One real dispatch per outer call; every inner call ran inline.
        assert_eq!(d.dispatches, 3, "{d:?}");
        assert_eq!(d.inline_runs, 3 * (N + N * N) as u64, "{d:?}");
        tx.send(()).unwrap();
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => runner.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(runner.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("watchdog: nested loops hung"),
    }
}
