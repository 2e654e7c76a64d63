//! An `Arbitrary` list of allocator and arena actions. Checks: every aligned allocation is
//! 64-byte aligned and disjoint from every live one, its bytes survive until it is freed
//! (each block is filled with its own tag and verified on free), the four counters move by
//! exactly what the actions did; arena slices are aligned as asked, disjoint since the last
//! reset, zeroed, inside the arena, and `used` / `high_water_mark` follow them.
#![no_main]

use std::ptr::NonNull;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rml::mem::{aligned_alloc, aligned_free, stats, Arena};

#[derive(Arbitrary, Debug)]
enum Action {
    /// `aligned_alloc` of up to 64 KiB.
    Alloc { size: u16 },
    /// Frees the live block at `index % live` (if any).
    Free { index: u8 },
    /// `Arena::alloc_slice_aligned::<u8>` of `n` bytes with alignment `1 << (align_log2 % 14)`
    /// (up to 8192, above the arena's 4096 limit, so refusals are exercised too).
    ArenaBytes { n: u16, align_log2: u8 },
    /// `Arena::alloc_slice::<f64>` of `n` elements.
    ArenaF64 { n: u8 },
    /// `Arena::reset`.
    ArenaReset,
}

#[derive(Arbitrary, Debug)]
struct Input {
    arena_capacity: u16,
    actions: Vec<Action>,
}

struct Live {
    ptr: NonNull<u8>,
    size: usize,
    tag: u8,
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

fuzz_target!(|input: Input| {
    // libFuzzer runs inputs on one thread, so the process-wide counters move only by what
    // this input does.
    let before = stats();
    let mut arena = Arena::new(usize::from(input.arena_capacity)).unwrap();
    let cap = arena.capacity();
    let base = arena.alloc_slice::<u8>(0).unwrap().as_ptr() as usize;
    arena.reset();
    let mut live: Vec<Live> = Vec::new();
    let mut expect_allocs = usize::from(cap > 0);
    let mut expect_frees = 0usize;
    let mut slices: Vec<(usize, usize)> = Vec::new();
    let mut high = 0usize;
    let mut next_tag = 0u8;
    for action in &input.actions {
        match *action {
            Action::Alloc { size } => {
                let size = usize::from(size);
                let p = aligned_alloc(size).unwrap();
                let addr = p.as_ptr() as usize;
                assert_eq!(addr % 64, 0, "aligned_alloc returned {addr:#x}");
                for l in &live {
                    let range = (l.ptr.as_ptr() as usize, l.size.max(1));
                    assert!(!overlaps((addr, size.max(1)), range), "blocks overlap");
                }
                next_tag = next_tag.wrapping_add(1);
                // SAFETY: `p` is valid for `size` bytes of writes.
                unsafe { p.as_ptr().write_bytes(next_tag, size) };
                live.push(Live { ptr: p, size, tag: next_tag });
                expect_allocs += 1;
            }
            Action::Free { index } => {
                if live.is_empty() {
                    continue;
                }
                let l = live.swap_remove(usize::from(index) % live.len());
                // SAFETY: `l.ptr` is live and valid for `l.size` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(l.ptr.as_ptr(), l.size) };
                assert!(all_equal(bytes, l.tag), "a block's bytes changed");
                // SAFETY: from `aligned_alloc`, freed once (removed from `live`).
                unsafe { aligned_free(l.ptr) };
                expect_frees += 1;
            }
            Action::ArenaBytes { n, align_log2 } => {
                let align = 1usize << (align_log2 % 14);
                let n = usize::from(n);
                let used = arena.used();
                match arena.alloc_slice_aligned::<u8>(n, align) {
                    Ok(s) => {
                        let addr = s.as_ptr() as usize;
                        assert!(align <= 4096);
                        assert_eq!(addr % align, 0);
                        assert!(all_equal(s, 0), "arena slice not zeroed");
                        s.fill(0xA5);
                        check_slice(&mut slices, base, cap, addr, n);
                        assert_eq!(arena.used(), addr - base + n);
                    }
                    Err(_) => {
                        assert_eq!(
                            arena.used(),
                            used,
                            "a failed arena allocation moved the offset"
                        );
                        // Refused only for a bad alignment or when it does not fit.
                        let start = (base + used).next_multiple_of(align) - base;
                        assert!(align > 4096 || start + n > cap, "arena refused a fitting request");
                    }
                }
            }
            Action::ArenaF64 { n } => {
                let n = usize::from(n);
                if let Ok(s) = arena.alloc_slice::<f64>(n) {
                    let addr = s.as_ptr() as usize;
                    assert_eq!(addr % 8, 0);
                    assert!(s.iter().all(|&x| x == 0.0));
                    s.fill(1.5);
                    check_slice(&mut slices, base, cap, addr, n * 8);
                }
            }
            Action::ArenaReset => {
                arena.reset();
                assert_eq!(arena.used(), 0);
                slices.clear();
            }
        }
        high = high.max(arena.used());
        assert_eq!(arena.high_water_mark(), high);
        let s = stats();
        assert_eq!(s.allocations - before.allocations, expect_allocs);
        assert_eq!(s.frees - before.frees, expect_frees);
        let live_bytes: usize = live.iter().map(|l| l.size).sum::<usize>() + cap;
        assert_eq!(s.live_bytes - before.live_bytes, live_bytes);
        assert!(s.peak_bytes >= s.live_bytes);
    }
    for l in live.drain(..) {
        // SAFETY: from `aligned_alloc`, not yet freed.
        unsafe { aligned_free(l.ptr) };
    }
    drop(arena);
    let after = stats();
    assert_eq!(after.live_bytes, before.live_bytes, "bytes leaked");
    assert_eq!(after.allocations - after.frees, before.allocations - before.frees);
});

/// Whether every byte of `bytes` is `v`: the first byte is `v` and each byte equals the next,
/// compared as two overlapping slices, so the comparison is one `memcmp` (which ASan checks
/// once per range) instead of a load per byte (each instrumented), which made this target
/// run at about 1,600 inputs/s.
fn all_equal(bytes: &[u8], v: u8) -> bool {
    bytes.first().is_none_or(|&b| b == v)
        && bytes[1.min(bytes.len())..] == bytes[..bytes.len().saturating_sub(1)]
}

/// Checks an arena slice lies in the arena and overlaps no slice since the last reset.
fn check_slice(slices: &mut Vec<(usize, usize)>, base: usize, cap: usize, addr: usize, len: usize) {
    assert!(addr >= base && addr + len <= base + cap, "arena slice outside the arena");
    for &s in slices.iter() {
        if len > 0 && s.1 > 0 {
            assert!(!overlaps((addr, len), s), "arena slices overlap");
        }
    }
    slices.push((addr, len));
}
