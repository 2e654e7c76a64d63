//! A pluggable backend: a test backend that can be told to fail injects allocation faults.
//! This binary installs its backend before any allocation, so it runs as one test.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use rml::mem::{self, aligned_alloc, aligned_free, set_backend, AlignedBlock, Arena, Backend};
use rml::Code;

struct FlakyBackend {
    fail: AtomicBool,
    calls: AtomicUsize,
    outstanding: AtomicUsize,
}

// SAFETY: forwards to the global-allocator backend, which upholds the contract; failing only
// returns null.
unsafe impl Backend for FlakyBackend {
    unsafe fn allocate(&self, size: usize) -> *mut u8 {
        self.calls.fetch_add(1, SeqCst);
        if self.fail.load(SeqCst) {
            return std::ptr::null_mut();
        }
        self.outstanding.fetch_add(1, SeqCst);
        // SAFETY: forwarded contract.
        unsafe { mem::GlobalBackend.allocate(size) }
    }

    unsafe fn deallocate(&self, ptr: *mut u8, size: usize) {
        self.outstanding.fetch_sub(1, SeqCst);
        // SAFETY: forwarded contract.
        unsafe { mem::GlobalBackend.deallocate(ptr, size) }
    }
}

static BACKEND: FlakyBackend = FlakyBackend {
    fail: AtomicBool::new(false),
    calls: AtomicUsize::new(0),
    outstanding: AtomicUsize::new(0),
};

#[test]
fn failing_backend_gives_resource_exhausted_and_leaves_counters_unchanged() {
    set_backend(&BACKEND).expect("first set_backend succeeds");
    let again = set_backend(&mem::GlobalBackend).unwrap_err();
    assert_eq!(again.code(), Code::InvalidArgument, "a second set_backend is an error: {again}");

    // The installed backend serves allocations.
    let p = aligned_alloc(100).unwrap();
    assert_eq!(BACKEND.outstanding.load(SeqCst), 1);
    // SAFETY: from aligned_alloc, freed once.
    unsafe { aligned_free(p) };
    assert_eq!(BACKEND.outstanding.load(SeqCst), 0);

    BACKEND.fail.store(true, SeqCst);
    let before = mem::stats();
    let calls = BACKEND.calls.load(SeqCst);
    let e = aligned_alloc(64).unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert_eq!(AlignedBlock::try_new(10).unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(Arena::new(1 << 20).unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(BACKEND.calls.load(SeqCst), calls + 3, "the backend was asked each time");
    assert_eq!(mem::stats(), before, "failed allocations leave the counters unchanged");

    // An overflowing request never reaches the backend.
    let calls = BACKEND.calls.load(SeqCst);
    assert_eq!(aligned_alloc(usize::MAX - 8).unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(BACKEND.calls.load(SeqCst), calls);

    BACKEND.fail.store(false, SeqCst);
    let b = AlignedBlock::try_new(10).unwrap();
    assert_eq!(b.as_ptr() as usize % 64, 0);
}
