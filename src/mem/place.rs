//! Where a long-lived buffer goes: the aligned heap allocator, or the next 64-byte aligned
//! piece of a caller's memory region (a firmware `static`, say). The decoder's constructors
//! place every buffer of its [memory plan](crate::model::MemoryPlan) through one [`Place`], so
//! the heap and the caller-memory builds take the same sizes in the same order.

use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::error::{Error, Result};
use crate::mem::{AlignedBlock, ALIGN};

/// `bytes` rounded up to a multiple of [`ALIGN`], or `None` on overflow.
pub(crate) const fn round_up(bytes: usize) -> Option<usize> {
    match bytes.checked_add(ALIGN - 1) {
        Some(b) => Some(b & !(ALIGN - 1)),
        None => None,
    }
}

/// A source of zeroed, 64-byte aligned blocks that live for `'r`.
pub(crate) struct Place<'r> {
    region: Option<Region>,
    _memory: PhantomData<&'r mut [u8]>,
}

/// The part of a caller's region not handed out yet.
struct Region {
    /// 64-byte aligned start of the usable part.
    base: NonNull<u8>,
    /// Usable bytes from `base`.
    len: usize,
    /// Bytes handed out so far (a multiple of [`ALIGN`]).
    used: usize,
}

impl<'r> Place<'r> {
    /// Blocks from the aligned heap allocator ([`AlignedBlock::try_new`]).
    pub(crate) fn heap() -> Self {
        Place { region: None, _memory: PhantomData }
    }

    /// Blocks carved from `memory`, starting at its first 64-byte boundary.
    pub(crate) fn region(memory: &'r mut [u8]) -> Self {
        let skip = memory.as_ptr().align_offset(ALIGN).min(memory.len());
        let usable = &mut memory[skip..];
        let region =
            Region { base: NonNull::from(&mut *usable).cast(), len: usable.len(), used: 0 };
        Place { region: Some(region), _memory: PhantomData }
    }

    /// Bytes of a region handed out so far (0 for the heap).
    pub(crate) fn used(&self) -> usize {
        self.region.as_ref().map_or(0, |r| r.used)
    }

    /// A zeroed block of `len` bytes. In a region it takes `len` rounded up to 64 bytes;
    /// a zero-length block takes nothing from either.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] naming `what` when the heap cannot provide it or the
    /// region has no room left.
    pub(crate) fn block(&mut self, len: usize, what: &str) -> Result<AlignedBlock> {
        let Some(r) = self.region.as_mut() else {
            return AlignedBlock::try_new(len)
                .map_err(|e| e.context(format_args!("{what} ({len} bytes)")));
        };
        if len == 0 {
            return Ok(AlignedBlock::empty());
        }
        let take = round_up(len).filter(|&t| t <= r.len - r.used).ok_or_else(|| {
            Error::resource_exhausted(format_args!(
                "memory region full: {what} needs {len} bytes, {} of {} left",
                r.len - r.used,
                r.len
            ))
        })?;
        // SAFETY: `r.used + take <= r.len`, so the block lies inside the usable part of the
        // region; `base` and `used` are multiples of 64, so it is 64-byte aligned; pieces never
        // overlap (`used` only grows) and the region is borrowed mutably for `'r`, which the
        // blocks cannot outlive: they stay inside the values built with this `Place<'r>`.
        let block = unsafe { AlignedBlock::from_region(r.base.add(r.used), len) };
        r.used += take;
        Ok(block)
    }
}
