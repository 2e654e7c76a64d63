//! Idle CPU use of a ThreadPool: one dispatch, then the pool is left alone for 2 s while the
//! process's CPU time (getrusage, user + system) is sampled.
//!
//! ```sh
//! cargo run --release --features std --example idle_cpu [threads]
//! ```
//! Prints the CPU time used in the 2 s after the dispatch (the workers' spin window, then
//! nothing) and in the second half of it (after the spin window: should be ~0).

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use core::time::Duration;
use std::time::Instant;

use rml::exec::{Schedule, ThreadPool};

/// User + system CPU time of the whole process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let usage = unsafe {
        let mut u: libc::rusage = core::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut u), 0);
        u
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn main() {
    let threads = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let pool = ThreadPool::new(threads);
    let sum = AtomicUsize::new(0);
    pool.parallel_for(0..1 << 20, Schedule::Static, &|r| {
        sum.fetch_add(r.sum::<usize>() & 1, Relaxed);
    });
    let t0 = Instant::now();
    let c0 = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let c1 = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let c2 = cpu_time();
    let wall = t0.elapsed();
    let s = pool.stats();
    println!(
        "pool of {threads} threads, spin {:?}: CPU over the {:.2} s after one dispatch: {:?} \
         (first second {:?}, second second {:?}); worker sleeps {}",
        pool.spin_time(),
        wall.as_secs_f64(),
        c2 - c0,
        c1 - c0,
        c2 - c1,
        s.sleeps
    );
}
