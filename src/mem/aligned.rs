//! 64-byte aligned allocation with a two-word header, and the [`AlignedBlock`] owner.
//!
//! `aligned_alloc(bytes)` asks the [backend](crate::mem::backend) for
//! `bytes + ALIGN + HEADER` bytes, rounds the start up to a multiple of [`ALIGN`] past room for
//! the header, and stores the header — the backend's original pointer and the requested size —
//! in the two words just below the returned pointer. `aligned_free(ptr)` reads the header back
//! and needs nothing else. Every size computation is overflow-checked before the backend is
//! asked, so a request for `usize::MAX - 8` bytes fails cleanly.

use core::mem::size_of;
use core::ptr::NonNull;

use crate::error::{Error, Result};
use crate::mem::{backend::backend, stats};

/// The alignment of every tensor buffer, in bytes (one cache line, and the widest SIMD load).
pub const ALIGN: usize = 64;

/// Bytes of the header stored just below each returned pointer: original pointer, requested
/// size.
const HEADER: usize = 2 * size_of::<usize>();

/// What [`aligned_alloc`] asks the backend for beyond the requested bytes: room to align the
/// start ([`ALIGN`]) and the two-word header. A block of `n > 0` bytes costs the backend
/// `n + ALLOC_OVERHEAD` bytes.
pub const ALLOC_OVERHEAD: usize = ALIGN + HEADER;

/// The backend request for `bytes` usable bytes, or `None` on overflow / over `isize::MAX`.
fn backend_size(bytes: usize) -> Option<usize> {
    let total = bytes.checked_add(ALIGN + HEADER)?;
    (total <= isize::MAX as usize).then_some(total)
}

/// Allocates `bytes` bytes aligned to [`ALIGN`] from the process-wide backend and counts it in
/// [`stats`](crate::mem::stats()).
///
/// A zero-byte request is a real allocation (a unique pointer with no usable bytes) that must be
/// freed like any other; it counts as one allocation of 0 live bytes. The memory is not
/// initialised.
///
/// # Errors
///
/// [`crate::Code::ResourceExhausted`] when `bytes + 64 + 16` overflows or exceeds
/// `isize::MAX`, or when the backend returns null. The counters are unchanged then.
pub fn aligned_alloc(bytes: usize) -> Result<NonNull<u8>> {
    let total = backend_size(bytes).ok_or_else(|| {
        Error::resource_exhausted(format_args!(
            "aligned_alloc: {bytes} bytes (plus {} of alignment and header) exceed the address space",
            ALIGN + HEADER
        ))
    })?;
    // SAFETY: `total > 0` and `total <= isize::MAX`, as `Backend::allocate` requires.
    let raw = unsafe { backend().allocate(total) };
    if raw.is_null() {
        return Err(Error::resource_exhausted(format_args!(
            "aligned_alloc: the allocation backend could not provide {total} bytes"
        )));
    }
    let addr = raw.addr();
    // Cannot overflow: `raw + total` is inside one allocation, and `aligned + bytes <= raw + total`.
    let aligned_addr = (addr + HEADER + ALIGN - 1) & !(ALIGN - 1);
    let offset = aligned_addr - addr;
    // SAFETY: `offset <= HEADER + ALIGN - 1 < total`, so the pointer stays inside the block.
    let aligned = unsafe { raw.add(offset) };
    // SAFETY: `aligned - HEADER >= raw` (offset >= HEADER) and is usize-aligned (aligned is
    // 64-aligned, HEADER is a multiple of usize), so both header words are in the block. The
    // backend's pointer is stored as a pointer (not an integer), keeping its provenance.
    unsafe {
        aligned.cast::<*mut u8>().sub(2).write(raw);
        aligned.cast::<usize>().sub(1).write(bytes);
    }
    stats::record_alloc(bytes);
    // SAFETY: `aligned` is derived from the non-null `raw` by a forward offset.
    Ok(unsafe { NonNull::new_unchecked(aligned) })
}

/// Reads the header of a pointer returned by [`aligned_alloc`]: (backend pointer, requested
/// bytes).
///
/// # Safety
///
/// `ptr` must come from [`aligned_alloc`] and not have been freed.
pub unsafe fn header(ptr: NonNull<u8>) -> (*mut u8, usize) {
    // SAFETY: the caller guarantees the header words below `ptr` were written by aligned_alloc.
    unsafe {
        let p = ptr.as_ptr();
        (p.cast::<*mut u8>().sub(2).read(), p.cast::<usize>().sub(1).read())
    }
}

/// Frees a pointer returned by [`aligned_alloc`] and counts the free.
///
/// # Safety
///
/// `ptr` must come from [`aligned_alloc`] and not have been freed already.
pub unsafe fn aligned_free(ptr: NonNull<u8>) {
    // SAFETY: forwarded from the caller.
    let (raw, bytes) = unsafe { header(ptr) };
    stats::record_free(bytes);
    // `backend_size` succeeded for `bytes` when it was allocated.
    let total = bytes + ALIGN + HEADER;
    // SAFETY: `raw` came from `backend().allocate(total)`; the backend is fixed for the process.
    unsafe { backend().deallocate(raw, total) }
}

/// An owned, 64-byte aligned, zero-initialised byte buffer that frees itself on drop.
///
/// A zero-length block allocates nothing (its pointer is dangling but 64-aligned) and does not
/// touch the counters. Inside the crate a block may also stand for a piece of caller memory
/// (`from_region`, used by the decoder's caller-memory constructor); such a block frees
/// nothing and is never handed out by value.
pub struct AlignedBlock {
    ptr: NonNull<u8>,
    len: usize,
    /// `false` for a block over caller memory: nothing to free.
    owned: bool,
}

// SAFETY: the block owns its bytes exclusively, like a `Box<[u8]>`.
unsafe impl Send for AlignedBlock {}
// SAFETY: shared access only reads through `&[u8]`.
unsafe impl Sync for AlignedBlock {}

impl AlignedBlock {
    /// Allocates `len` zeroed bytes, 64-byte aligned.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] as [`aligned_alloc`].
    pub fn try_new(len: usize) -> Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        let ptr = aligned_alloc(len)?;
        // SAFETY: `ptr` is valid for `len` bytes of writes.
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        Ok(AlignedBlock { ptr, len, owned: true })
    }

    /// A block over `len` bytes of caller memory at `ptr`, zeroed; dropping it frees nothing.
    ///
    /// # Safety
    ///
    /// `ptr` is 64-byte aligned and valid for reads and writes of `len` bytes, used by nothing
    /// else while the block (and every slice borrowed from it) lives. The caller ties that
    /// lifetime to the memory's own, e.g. by keeping the block inside a value that borrows the
    /// region.
    pub(crate) unsafe fn from_region(ptr: NonNull<u8>, len: usize) -> Self {
        debug_assert_eq!(ptr.as_ptr() as usize % ALIGN, 0);
        // SAFETY: valid for `len` bytes of writes (caller contract).
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        AlignedBlock { ptr, len, owned: false }
    }

    /// `true` if the bytes came from the allocator (and are freed on drop); `false` for a
    /// block over caller memory or an empty block.
    pub fn is_heap(&self) -> bool {
        self.owned && self.len != 0
    }

    /// Allocates a block holding a copy of `bytes`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::ResourceExhausted`] as [`aligned_alloc`].
    pub fn try_from_slice(bytes: &[u8]) -> Result<Self> {
        let mut block = Self::try_new(bytes.len())?;
        block.as_mut_slice().copy_from_slice(bytes);
        Ok(block)
    }

    /// A block of zero bytes; allocates nothing.
    pub const fn empty() -> Self {
        // SAFETY: ALIGN is non-zero; a dangling, aligned pointer (with no provenance: it is
        // never dereferenced) is valid for zero-length slices.
        let ptr = unsafe { NonNull::new_unchecked(core::ptr::without_provenance_mut(ALIGN)) };
        AlignedBlock { ptr, len: 0, owned: true }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for a zero-length block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of the buffer (64-byte aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The start of the buffer (64-byte aligned), for writes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised bytes (zeroed at creation).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, for writes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` gives exclusive access.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBlock {
    fn drop(&mut self) {
        if self.owned && self.len != 0 {
            // SAFETY: a non-empty owned block's pointer came from `aligned_alloc` and is freed
            // once.
            unsafe { aligned_free(self.ptr) }
        }
    }
}

impl core::fmt::Debug for AlignedBlock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AlignedBlock").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_alignment() {
        for n in [0usize, 1, 7, 63, 64, 65, 4096, 100_000] {
            let p = aligned_alloc(n).unwrap();
            assert_eq!(p.as_ptr() as usize % ALIGN, 0, "{n} bytes");
            // SAFETY: fresh pointer from aligned_alloc.
            let (raw, len) = unsafe { header(p) };
            assert_eq!(len, n);
            assert!((raw as usize) < p.as_ptr() as usize);
            // SAFETY: `p` is live and valid for `n` bytes.
            unsafe {
                p.as_ptr().write_bytes(0xAB, n);
                aligned_free(p);
            }
        }
    }

    #[test]
    fn huge_requests_fail_cleanly() {
        for n in [usize::MAX - 8, usize::MAX, isize::MAX as usize, usize::MAX / 2 + 1] {
            let e = aligned_alloc(n).unwrap_err();
            assert_eq!(e.code(), crate::Code::ResourceExhausted);
            assert_eq!(
                AlignedBlock::try_new(n).unwrap_err().code(),
                crate::Code::ResourceExhausted
            );
        }
    }

    #[test]
    fn empty_block_is_aligned_and_free() {
        let b = AlignedBlock::empty();
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.as_slice().is_empty());
    }
}
