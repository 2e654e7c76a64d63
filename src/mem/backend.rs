//! The pluggable, process-wide allocation backend behind [`crate::mem::aligned_alloc`].
//!
//! A backend is malloc-like: it hands out raw bytes with no alignment promise beyond
//! `align_of::<usize>()`; rml adds the 64-byte alignment and the header itself. The backend is
//! chosen once per process with [`set_backend`], before the first aligned allocation; the
//! default is [`GlobalBackend`] (Rust's global allocator). Tests plug a failing backend to
//! inject allocation faults.

use crate::error::{Error, Result};

/// A malloc-like source of raw memory.
///
/// # Safety
///
/// Implementors promise that:
/// - `allocate(size)` returns either null (failure) or a pointer to at least `size` bytes that
///   are valid for reads and writes, aligned to at least `align_of::<usize>()`, and not handed
///   out again until they are deallocated;
/// - `deallocate(ptr, size)` accepts exactly the pointers returned by `allocate`, with the same
///   `size`, once each;
/// - both may be called from any thread at the same time.
pub unsafe trait Backend: Sync {
    /// Returns `size` (> 0) bytes, or null on failure.
    ///
    /// # Safety
    ///
    /// `size` must be non-zero and at most `isize::MAX`.
    unsafe fn allocate(&self, size: usize) -> *mut u8;

    /// Returns a block to the backend.
    ///
    /// # Safety
    ///
    /// `ptr` must come from `self.allocate(size)` with this same `size`, and not have been
    /// deallocated since.
    unsafe fn deallocate(&self, ptr: *mut u8, size: usize);
}

/// The default backend: Rust's global allocator (`alloc::alloc`), 16-byte aligned layouts.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalBackend;

const GLOBAL_ALIGN: usize = 16;

// SAFETY: `alloc::alloc::alloc` returns null or a fresh block of the layout's size; the same
// layout is rebuilt in `deallocate`; the global allocator is thread-safe.
unsafe impl Backend for GlobalBackend {
    unsafe fn allocate(&self, size: usize) -> *mut u8 {
        match core::alloc::Layout::from_size_align(size, GLOBAL_ALIGN) {
            // SAFETY: the caller guarantees `size > 0`, so the layout is not zero-sized.
            Ok(layout) => unsafe { alloc::alloc::alloc(layout) },
            Err(_) => core::ptr::null_mut(),
        }
    }

    unsafe fn deallocate(&self, ptr: *mut u8, size: usize) {
        // SAFETY: `allocate(size)` succeeded with this layout, so it is valid.
        let layout = unsafe { core::alloc::Layout::from_size_align_unchecked(size, GLOBAL_ALIGN) };
        // SAFETY: the caller guarantees `ptr` came from `allocate(size)` and is live.
        unsafe { alloc::alloc::dealloc(ptr, layout) }
    }
}

/// A backend over the C library's `malloc` / `free` (feature `std`).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default)]
pub struct LibcBackend;

// SAFETY: malloc returns null or a fresh block aligned for any fundamental type (>= usize);
// free takes exactly malloc's pointers; both are thread-safe.
#[cfg(feature = "std")]
unsafe impl Backend for LibcBackend {
    unsafe fn allocate(&self, size: usize) -> *mut u8 {
        // SAFETY: malloc has no preconditions.
        unsafe { libc::malloc(size).cast() }
    }

    unsafe fn deallocate(&self, ptr: *mut u8, _size: usize) {
        // SAFETY: the caller guarantees `ptr` came from `allocate` (malloc) and is live.
        unsafe { libc::free(ptr.cast()) }
    }
}

static BACKEND: spin::Once<&'static dyn Backend> = spin::Once::new();
static DEFAULT: GlobalBackend = GlobalBackend;

/// Installs `backend` as the process-wide allocation backend.
///
/// Call it once, before the first aligned allocation (from rml or from your code).
///
/// # Errors
///
/// [`crate::Code::InvalidArgument`] if a backend is already in place, either from an earlier
/// call or because an allocation already fixed the default. The backend in place is kept.
pub fn set_backend(backend: &'static dyn Backend) -> Result<()> {
    let mut installed = false;
    BACKEND.call_once(|| {
        installed = true;
        backend
    });
    if installed {
        Ok(())
    } else {
        Err(Error::invalid_argument(
            "set_backend: a backend is already in place (set_backend must be called once, \
             before the first allocation)",
        ))
    }
}

/// The backend in place; fixes the default ([`GlobalBackend`]) on first use.
pub(crate) fn backend() -> &'static dyn Backend {
    *BACKEND.call_once(|| &DEFAULT)
}
