//! [`Arena`]: a bump allocator over one [`AlignedBlock`].
//!
//! Allocation moves an offset forward (aligned to the request) and never touches the heap or
//! the counters; [`Arena::reset`] returns everything at once. The decoder takes its per-step
//! scratch from an arena reset at each step, which is how a decode step allocates nothing.
//!
//! Allocation takes `&self` (the offset is a `Cell`), so several slices can be live together;
//! `reset` takes `&mut self`, so the borrow checker proves no slice outlives a reset.

use core::cell::Cell;
use core::mem::{align_of, size_of};

use crate::error::{Error, Result};
use crate::mem::AlignedBlock;

/// Plain-old-data element types an [`Arena`] hands out: every bit pattern (zero included) is a
/// valid value, and there is no drop glue.
///
/// # Safety
///
/// Implementors must be `Copy`, have no padding and no invalid bit patterns.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numeric type: no padding, every bit pattern valid.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64);

/// The largest alignment an [`Arena`] request may ask for, in bytes.
pub const MAX_ARENA_ALIGN: usize = 4096;

/// A bump allocator over one 64-byte aligned block of fixed capacity.
///
/// ```
/// let mut arena = rml::mem::Arena::new(1024).unwrap();
/// let a = arena.alloc_slice::<f32>(10).unwrap();
/// let b = arena.alloc_slice::<u8>(3).unwrap();
/// a[0] = 1.0;
/// b[0] = 2;
/// assert!(arena.used() >= 43);
/// arena.reset();
/// assert_eq!(arena.used(), 0);
/// ```
pub struct Arena {
    block: AlignedBlock,
    offset: Cell<usize>,
    high_water: Cell<usize>,
}

impl Arena {
    /// An arena with `capacity` bytes, allocated once (and counted) from the aligned allocator.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if the block cannot be allocated.
    pub fn new(capacity: usize) -> Result<Self> {
        Ok(Arena {
            block: AlignedBlock::try_new(capacity)?,
            offset: Cell::new(0),
            high_water: Cell::new(0),
        })
    }

    /// An arena over `block` (the decoder's scratch, placed on the heap or in caller memory).
    pub(crate) fn from_block(block: AlignedBlock) -> Self {
        Arena { block, offset: Cell::new(0), high_water: Cell::new(0) }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.block.len()
    }

    /// Bytes in use since the last reset: the offset of the end of the last slice handed
    /// out (alignment padding included).
    pub fn used(&self) -> usize {
        self.offset.get()
    }

    /// The most bytes ever in use at once since the arena was made: the largest
    /// [`Arena::used`] seen, not lowered by [`Arena::reset`] (size the next arena from it).
    pub fn high_water_mark(&self) -> usize {
        self.high_water.get()
    }

    /// Frees everything handed out since the last reset. O(1); does not clear memory.
    pub fn reset(&mut self) {
        self.offset.set(0);
    }

    /// Reserves `size` bytes aligned to `align` and returns the byte offset into the block.
    fn bump(&self, size: usize, align: usize) -> Result<usize> {
        if !align.is_power_of_two() || align > MAX_ARENA_ALIGN {
            return Err(Error::invalid_argument(format_args!(
                "arena: alignment {align} is not a power of two up to {MAX_ARENA_ALIGN}"
            )));
        }
        let base = self.block.as_ptr() as usize;
        let cur = self.offset.get();
        // Align the absolute address (the block itself is only 64-aligned).
        let start_addr = (base + cur).checked_add(align - 1).map(|a| a & !(align - 1));
        let start = start_addr.map(|a| a - base);
        let end = start.and_then(|s| s.checked_add(size));
        match (start, end) {
            (Some(start), Some(end)) if end <= self.block.len() => {
                self.offset.set(end);
                if end > self.high_water.get() {
                    self.high_water.set(end);
                }
                Ok(start)
            }
            _ => Err(Error::resource_exhausted(format_args!(
                "arena full: {size} bytes (align {align}) requested, {} of {} in use",
                cur,
                self.block.len()
            ))),
        }
    }

    /// Hands out `n` zeroed elements of `T`, aligned to `align_of::<T>()`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] if the arena cannot fit them (it never grows).
    #[allow(clippy::mut_from_ref)] // Disjoint regions of the block, as in bumpalo.
    pub fn alloc_slice<T: Pod>(&self, n: usize) -> Result<&mut [T]> {
        self.alloc_slice_aligned(n, align_of::<T>())
    }

    /// Hands out `n` zeroed elements of `T` aligned to `align` bytes (a power of two up to
    /// [`MAX_ARENA_ALIGN`]; raised to `align_of::<T>()` if smaller).
    ///
    /// The padding that aligns the start counts as used: the arena's block is 64-byte
    /// aligned, so a request aligned above 64 can cost up to `align - 64` extra bytes (size an
    /// arena that must hold `b` bytes at 4096 alignment as `b + 4032`).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a bad alignment, [`crate::Code::ResourceExhausted`]
    /// if the arena is full.
    #[allow(clippy::mut_from_ref)] // Disjoint regions of the block, as in bumpalo.
    pub fn alloc_slice_aligned<T: Pod>(&self, n: usize, align: usize) -> Result<&mut [T]> {
        let bytes = n.checked_mul(size_of::<T>()).ok_or_else(|| {
            Error::resource_exhausted(format_args!("arena: {n} elements overflow usize"))
        })?;
        let start = self.bump(bytes, align.max(align_of::<T>()))?;
        // SAFETY: `[start, start + bytes)` lies inside the block, is aligned for `T`, and was
        // never handed out since the last reset (the offset only moves forward, and `reset`
        // needs `&mut self`, so no earlier slice is alive). Zero is a valid `T` (Pod).
        unsafe {
            let p = self.block.as_ptr().add(start).cast_mut();
            p.write_bytes(0, bytes);
            Ok(core::slice::from_raw_parts_mut(p.cast::<T>(), n))
        }
    }
}

impl core::fmt::Debug for Arena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Arena")
            .field("capacity", &self.capacity())
            .field("used", &self.used())
            .field("high_water_mark", &self.high_water_mark())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_after_mixed_sizes() {
        let arena = Arena::new(64 * 1024).unwrap();
        for (i, align) in [1usize, 2, 4, 8, 16, 64, 128, 256, 4096].iter().enumerate() {
            let _pad = arena.alloc_slice::<u8>(i * 3 + 1).unwrap();
            let s = arena.alloc_slice_aligned::<u8>(5, *align).unwrap();
            assert_eq!(s.as_ptr() as usize % align, 0);
            let f = arena.alloc_slice::<f64>(3).unwrap();
            assert_eq!(f.as_ptr() as usize % 8, 0);
        }
        assert!(arena.alloc_slice_aligned::<u8>(1, 3).is_err());
        assert!(arena.alloc_slice_aligned::<u8>(1, 8192).is_err());
    }

    #[test]
    fn full_arena_is_an_error_not_growth() {
        let mut arena = Arena::new(100).unwrap();
        assert!(arena.alloc_slice::<u8>(100).is_ok());
        let e = arena.alloc_slice::<u8>(1).unwrap_err();
        assert_eq!(e.code(), crate::Code::ResourceExhausted);
        assert!(arena.alloc_slice::<u64>(usize::MAX / 4).is_err());
        arena.reset();
        assert_eq!(arena.alloc_slice::<u8>(100).unwrap().len(), 100);
        assert_eq!(arena.high_water_mark(), 100);
    }

    #[test]
    fn slices_are_zeroed_and_disjoint() {
        let arena = Arena::new(1024).unwrap();
        let a = arena.alloc_slice::<u32>(8).unwrap();
        let b = arena.alloc_slice::<u32>(8).unwrap();
        a.fill(u32::MAX);
        assert!(b.iter().all(|&x| x == 0));
        let (a0, a1) = (a.as_ptr() as usize, a.as_ptr() as usize + 32);
        assert!(b.as_ptr() as usize >= a1 || (b.as_ptr() as usize) + 32 <= a0);
    }
}
