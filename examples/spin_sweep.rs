//! The measurement behind `DEFAULT_SPIN_US`: the cost of a dispatch that follows a stretch of
//! serial work on the caller (a "gap"), for several worker spin windows.
//!
//! ```sh
//! cargo run --release --features std --example spin_sweep [threads]
//! ```
//! For each spin window S and gap G, a 2-thread pool (by default) runs `iters` rounds of:
//! busy-wait G on the caller, then one `parallel_for` of two empty chunks (`Static`). Printed:
//! the median dispatch latency, and the CPU the workers burn per round beyond the caller's
//! own work (process CPU time minus the caller's wall time, per round). A gap longer than S
//! lets the workers fall asleep, and the dispatch then pays a condvar wake-up.

use core::time::Duration;
use std::time::Instant;

use rml::exec::{Schedule, ThreadPool};

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

fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        core::hint::spin_loop();
    }
}

fn main() {
    let threads = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let spins = [0u64, 20, 50, 100, 200, 500, 1000, 2000];
    let gaps = [0u64, 5, 20, 50, 100, 200, 500, 1000, 3000];
    println!("threads {threads}; cells: median dispatch µs / worker CPU µs per round");
    print!("{:>9}", "spin\\gap");
    for g in gaps {
        print!("{:>14}", format!("{g} µs"));
    }
    println!();
    for s in spins {
        let pool = ThreadPool::builder()
            .threads(threads)
            .spin_time(Duration::from_micros(s))
            .build()
            .unwrap();
        print!("{:>9}", format!("{s} µs"));
        for g in gaps {
            let gap = Duration::from_micros(g);
            let iters = if g >= 1000 { 300 } else { 1500 };
            let mut lat = Vec::with_capacity(iters);
            for _ in 0..50 {
                pool.parallel_for(0..threads, Schedule::Static, &|_| {});
            }
            let c0 = cpu_time();
            let w0 = Instant::now();
            for _ in 0..iters {
                busy(gap);
                let t = Instant::now();
                pool.parallel_for(0..threads, Schedule::Static, &|r| {
                    core::hint::black_box(r);
                });
                lat.push(t.elapsed());
            }
            let wall = w0.elapsed();
            let cpu = cpu_time() - c0;
            lat.sort_unstable();
            let median = lat[iters / 2].as_secs_f64() * 1e6;
            let extra = cpu.saturating_sub(wall).as_secs_f64() * 1e6 / iters as f64;
            print!("{:>14}", format!("{median:.2} / {extra:.1}"));
        }
        println!();
    }
}
