//! The four process-wide counters move exactly as allocations and frees happen.
//!
//! The counters are process-wide, so every test in this binary takes `LOCK` and nothing else
//! in the binary allocates through rml concurrently.

use std::sync::Mutex;

use rml::mem::{self, aligned_alloc, aligned_free, reset_peak, stats, AlignedBlock};

static LOCK: Mutex<()> = Mutex::new(());

#[test]
fn n_allocations_and_frees_move_counters_exactly() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    let sizes = [1usize, 64, 100, 4096, 12345];
    let ptrs: Vec<_> = sizes.iter().map(|&n| aligned_alloc(n).unwrap()).collect();
    let mid = stats();
    assert_eq!(mid.allocations - before.allocations, sizes.len());
    assert_eq!(mid.frees, before.frees);
    assert_eq!(mid.live_bytes - before.live_bytes, sizes.iter().sum::<usize>());
    assert!(mid.peak_bytes >= mid.live_bytes);
    for p in ptrs {
        assert_eq!(p.as_ptr() as usize % mem::ALIGN, 0);
        // SAFETY: each pointer came from aligned_alloc and is freed once.
        unsafe { aligned_free(p) };
    }
    let after = stats();
    assert_eq!(after.frees - before.frees, sizes.len());
    assert_eq!(after.live_bytes, before.live_bytes);
}

#[test]
fn peak_follows_the_live_maximum_and_reset_peak_measures_a_region() {
    let _g = LOCK.lock().unwrap();
    reset_peak();
    let base = stats().live_bytes;
    assert_eq!(stats().peak_bytes, base);
    let a = AlignedBlock::try_new(1000).unwrap();
    let b = AlignedBlock::try_new(3000).unwrap();
    drop(a);
    let c = AlignedBlock::try_new(500).unwrap();
    assert_eq!(stats().peak_bytes, base + 4000);
    assert_eq!(stats().live_bytes, base + 3500);
    reset_peak();
    assert_eq!(stats().peak_bytes, base + 3500);
    drop(b);
    drop(c);
    let d = AlignedBlock::try_new(200).unwrap();
    assert_eq!(stats().peak_bytes, base + 3500, "peak does not fall on free");
    drop(d);
    reset_peak();
    assert_eq!(stats().peak_bytes, base);
}

#[test]
fn huge_requests_leave_counters_unchanged() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    for n in [usize::MAX - 8, isize::MAX as usize, usize::MAX / 2 + 1] {
        let e = aligned_alloc(n).unwrap_err();
        assert_eq!(e.code(), rml::Code::ResourceExhausted, "{n}");
        assert!(e.message().contains(&n.to_string()), "message names the size: {e}");
    }
    assert_eq!(stats(), before);
}

#[test]
fn zero_byte_requests_are_defined() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    let p = aligned_alloc(0).unwrap();
    assert_eq!(p.as_ptr() as usize % 64, 0);
    assert_eq!(stats().allocations, before.allocations + 1);
    assert_eq!(stats().live_bytes, before.live_bytes);
    // SAFETY: from aligned_alloc, freed once.
    unsafe { aligned_free(p) };
    let empty = AlignedBlock::try_new(0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.as_ptr() as usize % 64, 0);
    assert_eq!(stats().allocations, before.allocations + 1, "empty blocks allocate nothing");
}

#[test]
fn concurrent_allocation_from_8_threads_keeps_counters_consistent() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    const PER_THREAD: usize = if cfg!(miri) { 200 } else { 2000 };
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..PER_THREAD {
                    held.push(AlignedBlock::try_new(1 + (i * 7 + t) % 300).unwrap());
                    if held.len() > 16 {
                        held.swap_remove(i % 16);
                    }
                }
            });
        }
    });
    let after = stats();
    assert_eq!(after.allocations - before.allocations, 8 * PER_THREAD);
    assert_eq!(after.frees - before.frees, 8 * PER_THREAD);
    assert_eq!(after.live_bytes, before.live_bytes);
    assert!(after.peak_bytes >= before.live_bytes);
}
