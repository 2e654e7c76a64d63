//! Edges of the memory layer: requests at the exact overflow boundary of `aligned_alloc`, the
//! backends' behaviour on impossible sizes, and the arena's alignment, padding, zero-size and
//! high-water semantics.
//!
//! The counters are process-wide, so every test in this binary takes `LOCK`.

use std::sync::Mutex;

use rml::mem::{self, aligned_alloc, stats, AlignedBlock, Arena, Backend, GlobalBackend};
use rml::Code;

static LOCK: Mutex<()> = Mutex::new(());

/// Header (two words) plus alignment slack that `aligned_alloc` adds to every request.
const OVERHEAD: usize = 64 + 2 * std::mem::size_of::<usize>();

#[test]
fn requests_at_the_overflow_boundary_fail_cleanly() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    let limit = isize::MAX as usize - OVERHEAD;
    // `limit` passes the overflow check and reaches the backend, which cannot serve it;
    // `limit + 1` and above never reach it. Either way: ResourceExhausted, counters unchanged.
    for n in [limit - 15, limit, limit + 1, isize::MAX as usize, usize::MAX - OVERHEAD, usize::MAX]
    {
        let e = aligned_alloc(n).unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{n}: {e}");
        assert!(e.message().contains(&n.to_string()) || e.message().contains("backend"), "{e}");
        assert_eq!(AlignedBlock::try_new(n).unwrap_err().code(), Code::ResourceExhausted);
        assert_eq!(Arena::new(n).unwrap_err().code(), Code::ResourceExhausted);
    }
    assert_eq!(stats(), before);
}

#[test]
fn backends_return_null_for_impossible_sizes() {
    // SAFETY: sizes are non-zero and at most isize::MAX, as `allocate` requires.
    unsafe {
        assert!(GlobalBackend.allocate(isize::MAX as usize).is_null());
        assert!(GlobalBackend.allocate(isize::MAX as usize - 15).is_null());
        #[cfg(feature = "std")]
        assert!(mem::LibcBackend.allocate(isize::MAX as usize).is_null());
    }
    // A real round trip through the libc backend (used directly, not installed).
    #[cfg(feature = "std")]
    // SAFETY: a fresh 100-byte block is written within bounds and returned once.
    unsafe {
        let p = mem::LibcBackend.allocate(100);
        assert!(!p.is_null());
        assert_eq!(p as usize % std::mem::align_of::<usize>(), 0);
        p.write_bytes(7, 100);
        mem::LibcBackend.deallocate(p, 100);
    }
}

#[test]
fn arena_padding_for_large_alignments_comes_out_of_the_capacity() {
    let _g = LOCK.lock().unwrap();
    // The block is 64-aligned, so a 4096-aligned request may need up to 4032 bytes of padding:
    // an arena of 4096 + 4032 bytes always fits one 4096-byte page at 4096 alignment.
    let arena = Arena::new(4096 + 4032).unwrap();
    let page = arena.alloc_slice_aligned::<u8>(4096, 4096).unwrap();
    assert_eq!(page.as_ptr() as usize % 4096, 0);
    assert!(arena.used() >= 4096 && arena.used() <= 4096 + 4032);
    // Every power of two up to 4096 is honoured, one after another, with odd sizes between.
    let arena = Arena::new(64 << 10).unwrap();
    for shift in 0..=12 {
        let _odd = arena.alloc_slice::<u8>(2 * shift + 1).unwrap();
        let s = arena.alloc_slice_aligned::<u16>(3, 1 << shift).unwrap();
        assert_eq!(s.as_ptr() as usize % (1 << shift).max(2), 0, "align {}", 1 << shift);
    }
    for bad in [3usize, 4097, 8192, usize::MAX] {
        let e = arena.alloc_slice_aligned::<u8>(1, bad).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "align {bad}");
    }
}

#[test]
fn arena_zero_sizes_failures_and_high_water() {
    let _g = LOCK.lock().unwrap();
    let before = stats();
    let mut arena = Arena::new(256).unwrap();
    assert_eq!(stats().allocations, before.allocations + 1, "one counted block");
    assert_eq!(stats().live_bytes, before.live_bytes + 256);
    assert_eq!((arena.capacity(), arena.used(), arena.high_water_mark()), (256, 0, 0));

    assert!(arena.alloc_slice::<f32>(0).unwrap().is_empty());
    let a = arena.alloc_slice::<u8>(100).unwrap();
    a.fill(1);
    assert_eq!(arena.used(), 100);
    // A failed request (too big, or overflowing) moves neither the offset nor the mark.
    assert_eq!(arena.alloc_slice::<u8>(157).unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!(
        arena.alloc_slice::<u64>(usize::MAX / 4).unwrap_err().code(),
        Code::ResourceExhausted
    );
    assert_eq!(arena.alloc_slice::<u8>(usize::MAX).unwrap_err().code(), Code::ResourceExhausted);
    assert_eq!((arena.used(), arena.high_water_mark()), (100, 100));
    // Filling exactly to capacity works; a zero-size request at the end still works.
    let rest = arena.alloc_slice::<u8>(156).unwrap();
    assert_eq!(rest.len(), 156);
    assert!(arena.alloc_slice::<u8>(0).unwrap().is_empty());
    assert_eq!(arena.used(), 256);
    // Reset: used back to 0, the high-water mark stays; fresh slices are zeroed again.
    arena.reset();
    assert_eq!((arena.used(), arena.high_water_mark()), (0, 256));
    let b = arena.alloc_slice::<u8>(10).unwrap();
    assert!(b.iter().all(|&x| x == 0), "slices are zeroed after a reset");
    assert_eq!(arena.high_water_mark(), 256);
    drop(arena);
    assert_eq!(stats().live_bytes, before.live_bytes);
    assert_eq!(stats().frees, before.frees + 1);

    // An empty arena allocates nothing and serves only empty requests.
    let empty = Arena::new(0).unwrap();
    assert_eq!(stats().allocations, before.allocations + 1);
    assert!(empty.alloc_slice::<f64>(0).unwrap().is_empty());
    assert_eq!(empty.alloc_slice::<u8>(1).unwrap_err().code(), Code::ResourceExhausted);
}
