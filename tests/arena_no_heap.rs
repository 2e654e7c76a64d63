//! Allocating from an `Arena` never touches the heap or rml's counters: a counting
//! `#[global_allocator]` sees nothing across 100 rounds of allocations and resets.
//! `harness = false`: libtest itself allocates on other threads, which would pollute the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use rml::mem::{stats, Arena};

struct Counting;
static HEAP_ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP_ALLOCS.fetch_add(1, SeqCst);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let mut arena = Arena::new(64 * 1024).unwrap();
    let heap_before = HEAP_ALLOCS.load(SeqCst);
    let counters_before = stats();
    for round in 0..100 {
        let a = arena.alloc_slice::<f32>(1000 + round).unwrap();
        a[0] = round as f32;
        let b = arena.alloc_slice_aligned::<u8>(3 + round % 5, 256).unwrap();
        assert_eq!(b.as_ptr() as usize % 256, 0);
        let c = arena.alloc_slice::<i64>(7).unwrap();
        assert_eq!(c.as_ptr() as usize % 8, 0);
        arena.reset();
    }
    let heap = HEAP_ALLOCS.load(SeqCst) - heap_before;
    assert_eq!(heap, 0, "arena rounds touched the heap {heap} times");
    assert_eq!(stats(), counters_before, "arena rounds moved rml's counters");
    println!("arena_no_heap: 100 rounds, 0 heap allocations, counters unchanged");
    println!("1 passed, 0 failed");
}
