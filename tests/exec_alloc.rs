//! Dispatch allocates nothing: a counting global allocator sees zero allocations, on any
//! thread, over 1,000 warm `parallel_for` calls. (Alone in its file: the allocator counts the
//! whole process, so no other test may run beside it.)
#![cfg(feature = "std")]

use core::alloc::{GlobalAlloc, Layout};
use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use core::time::Duration;
use std::alloc::System;
use std::sync::mpsc;

use rml::exec::{Executor, Schedule, ThreadPool};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn calls(pool: &dyn Executor, sum: &AtomicUsize, rounds: usize) {
    let body = |r: Range<usize>| {
        sum.fetch_add(r.len(), Relaxed);
    };
    for i in 0..rounds {
        let s = Schedule::ALL[i % Schedule::ALL.len()];
        pool.parallel_for(0..(i % 300), s, &body);
        // Nested calls (inline) allocate nothing either.
        pool.parallel_for(0..4, Schedule::Static, &|_| pool.parallel_for(0..64, s, &body));
    }
}

#[test]
fn warm_dispatch_allocates_nothing() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for threads in [2, 4] {
            // A short spin window so that the sleep/wake path is exercised too.
            let pool = ThreadPool::builder()
                .contention_backoff(false)
                .threads(threads)
                .spin_time(Duration::from_micros(20))
                .build()
                .unwrap();
            let sum = AtomicUsize::new(0);
            calls(&pool, &sum, 100);
            let before = ALLOCATIONS.load(Relaxed);
            let s0 = pool.stats();
            calls(&pool, &sum, 500); // 1,000 parallel_for calls on the caller, more nested
            let after = ALLOCATIONS.load(Relaxed);
            let d = pool.stats().since(&s0);
            assert_eq!(after - before, 0, "{threads} threads: {} allocations", after - before);
            assert!(d.dispatches >= 500, "{d:?}");
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(120)).expect("watchdog: dispatch loop hung or failed");
}
