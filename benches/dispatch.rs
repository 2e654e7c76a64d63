//! Dispatch + join cost of `ThreadPool::parallel_for` against rayon and `std::thread::scope`,
//! in the same run: an empty body, and a 4 KiB memset per chunk (one chunk per thread). The
//! calling thread is outside the pools (as in rml's decoder), except in
//! `rayon_par_iter_in_pool`, rayon's best case.
//!
//! ```sh
//! cargo bench --features std --bench dispatch -- --warm-up-time 1 --measurement-time 3
//! ```
//! Goal (issue 3): warm dispatch + join of an empty body ≤ 0.5 µs with 2 threads and ≥ 10×
//! faster than rayon. `rml_owned` / `rml_proportional4` compare row ownership with the shared
//! chunk counter on the same boundaries (4 chunks per thread, issue 11).
//!
//! `oversubscribed` (issue 13 item 7): 1,000 dispatches of a 32 Ki-float square-root sum on a
//! pool of 1 thread and of 8 threads, on a machine with fewer cores. Target: 8 threads ≤ 2× the
//! 1-thread time. `examples/pool_contention.rs` prints the same ratio directly.

use core::hint::black_box;
use core::ops::Range;

use criterion::{criterion_group, criterion_main, Criterion};
use rayon::prelude::*;
use rml::exec::{Schedule, ThreadPool};

const CHUNK: usize = 4096;

/// A raw pointer that chunks writing disjoint ranges may share.
#[derive(Clone, Copy)]
struct Shared(*mut u8);
// SAFETY: every user writes only the bytes of its own chunk, so no two threads touch the same
// byte; the buffer outlives every dispatch that uses the pointer.
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

impl Shared {
    /// Through a method, so closures capture the whole (Sync) wrapper.
    fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
}

fn empty(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_empty");
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        let body = |r: Range<usize>| {
            black_box(r);
        };
        g.bench_function(format!("rml_static/{threads}"), |b| {
            b.iter(|| pool.parallel_for(0..threads, Schedule::Static, &body))
        });
        g.bench_function(format!("rml_grain1/{threads}"), |b| {
            b.iter(|| pool.parallel_for(0..threads, Schedule::Grain(1), &body))
        });
        g.bench_function(format!("rml_owned/{threads}"), |b| {
            b.iter(|| pool.parallel_for(0..4 * threads, Schedule::Owned, &body))
        });
        g.bench_function(format!("rml_proportional4/{threads}"), |b| {
            b.iter(|| pool.parallel_for(0..4 * threads, Schedule::Proportional4, &body))
        });
        let rp = rayon_pool(threads);
        g.bench_function(format!("rayon_scope/{threads}"), |b| {
            b.iter(|| {
                rp.scope(|s| {
                    for i in 1..threads {
                        s.spawn(move |_| {
                            black_box(i);
                        });
                    }
                    black_box(0);
                })
            })
        });
        g.bench_function(format!("rayon_par_iter/{threads}"), |b| {
            b.iter(|| {
                rp.install(|| {
                    (0..threads).into_par_iter().with_min_len(1).for_each(|i| {
                        black_box(i);
                    })
                })
            })
        });
        // rayon's best case: the calling thread is already one of its workers, so a loop is
        // a join on the local deque instead of an injection from outside.
        g.bench_function(format!("rayon_par_iter_in_pool/{threads}"), |b| {
            rp.install(|| {
                b.iter(|| {
                    (0..threads).into_par_iter().with_min_len(1).for_each(|i| {
                        black_box(i);
                    })
                })
            })
        });
    }
    g.bench_function("std_thread_scope/2", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                s.spawn(|| black_box(1));
                black_box(0);
            })
        })
    });
    g.finish();
}

fn memset(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch_memset4k");
    for threads in [1, 2] {
        let mut buf = vec![0u8; threads * CHUNK];
        let pool = ThreadPool::new(threads);
        g.bench_function(format!("rml_static/{threads}"), |b| {
            let p = Shared(buf.as_mut_ptr());
            let mut v = 0u8;
            b.iter(|| {
                v = v.wrapping_add(1);
                pool.parallel_for(0..threads, Schedule::Static, &|r| {
                    // SAFETY: chunk r covers bytes [r.start * CHUNK, r.end * CHUNK) of a
                    // buffer of threads * CHUNK bytes, written by this chunk only.
                    unsafe { p.at(r.start * CHUNK).write_bytes(v, r.len() * CHUNK) };
                })
            })
        });
        let rp = rayon_pool(threads);
        g.bench_function(format!("rayon_par_iter/{threads}"), |b| {
            let mut v = 0u8;
            b.iter(|| {
                v = v.wrapping_add(1);
                rp.install(|| buf.par_chunks_mut(CHUNK).for_each(|c| c.fill(v)));
            })
        });
        black_box(&buf);
    }
    let mut buf = vec![0u8; 2 * CHUNK];
    g.bench_function("std_thread_scope/2", |b| {
        let mut v = 0u8;
        b.iter(|| {
            v = v.wrapping_add(1);
            let (lo, hi) = buf.split_at_mut(CHUNK);
            std::thread::scope(|s| {
                s.spawn(|| hi.fill(v));
                lo.fill(v);
            })
        })
    });
    g.finish();
}

fn oversubscribed(c: &mut Criterion) {
    let mut g = c.benchmark_group("oversubscribed_1000_dispatches");
    g.sample_size(10);
    let data: Vec<f32> = (0..32_768).map(|i| i as f32 * 0.25).collect();
    for threads in [1, 8] {
        let pool = ThreadPool::new(threads);
        g.bench_function(format!("rml/{threads}"), |b| {
            b.iter(|| {
                for _ in 0..1000 {
                    pool.parallel_for(0..data.len(), Schedule::Proportional4, &|r| {
                        let s: f32 = data[r].iter().map(|x| x.sqrt()).sum();
                        black_box(s);
                    });
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, empty, memset, oversubscribed);
criterion_main!(benches);
