//! The C ABI (feature `capi`): `extern "C"` functions over opaque handles, declared for C in
//! `include/rml.h` (generated from this module by cbindgen; `.ci/run` checks it is current).
//!
//! The C library itself (`librml_capi.a`, `librml_capi.so`) is built by the wrapper crate in
//! `features/c-api/`, which links this module with `std`; the rml crate stays an `rlib`, so its
//! `no_std` and bare-metal builds need no panic handler.
//!
//! # Conventions
//!
//! - Every function that can fail returns an `RmlStatus`: `RML_STATUS_OK` (0) or the code of
//!   the failure, one per rml `Code`. The message of the last failure on the calling
//!   thread is `rml_last_error`.
//! - Results come back through out-parameters; on failure an out-parameter handle is set to
//!   `NULL` (when the out-pointer itself is not `NULL`).
//! - Every pointer argument must be non-`NULL` unless its documentation says otherwise; a
//!   `NULL` one is reported as `RML_STATUS_INVALID_ARGUMENT`, never dereferenced. Lengths are
//!   element counts and are checked against what they describe.
//! - Handles (`RmlModel *`, `RmlDecoder *`, `RmlSampler *`, `RmlTokenizer *`, `RmlEncoder *`)
//!   are opaque tokens, not addresses: rml looks each one up in a registry of live objects
//!   before use. A freed handle, a handle freed twice, a handle of the wrong kind or a made-up
//!   value is reported as `RML_STATUS_INVALID_ARGUMENT`, never used. (A handle's generation
//!   counter has 32 bits on 64-bit targets, 16 bits on 32-bit ones: a stale handle is
//!   recognised until its slot has been reused that many times.) `rml_*_free(NULL)` does
//!   nothing and returns `RML_STATUS_OK`, like `free(NULL)`.
//! - No panic crosses the boundary: one inside rml is caught and reported as
//!   `RML_STATUS_INTERNAL` (a bug in rml; the object it happened in refuses further calls).
//!   This needs the C library built with `panic = "unwind"` (the default).
//! - A decoder or sampler serves one call at a time: concurrent calls on the same handle from
//!   several threads are serialised. Different handles are independent.
//! - Pointers rml cannot check (a non-`NULL` pointer to too little memory, a logits pointer
//!   used after the decoder's next call) remain the caller's contract, stated per function.

use alloc::ffi::CString;
use alloc::format;
use alloc::string::String;
use core::cell::RefCell;
use core::ffi::c_char;
use core::panic::AssertUnwindSafe;
use std::panic::catch_unwind;

use crate::error::{Code, Error, Result};

mod decoder;
mod encoder;
mod handles;
mod model;
mod sampler;
mod tokenizer;

pub use decoder::*;
pub use encoder::*;
pub use model::*;
pub use sampler::*;
pub use tokenizer::*;

/// The outcome of a C ABI call: `RML_STATUS_OK` or the rml `Code` of the failure. The
/// values are fixed (new codes are only ever appended).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlStatus {
    /// Success.
    Ok = 0,
    /// A caller's argument is wrong regardless of state: a `NULL` pointer, a bad length, an
    /// option out of range, a freed or unknown handle (rml `Code::InvalidArgument`).
    InvalidArgument = 1,
    /// A named thing (file, tensor, metadata key, token) does not exist (rml `Code::NotFound`).
    NotFound = 2,
    /// Input data is malformed or truncated, e.g. a corrupt model file (rml `Code::DataLoss`).
    DataLoss = 3,
    /// Valid input that rml does not support, or a part of the ABI this build leaves out
    /// (the tokenizer) (rml `Code::Unimplemented`).
    Unimplemented = 4,
    /// An allocation failed or a request is over a limit (rml `Code::ResourceExhausted`).
    ResourceExhausted = 5,
    /// A position, token id or buffer size is past its valid range, e.g. the context length is
    /// exceeded or an output buffer is too small (rml `Code::OutOfRange`).
    OutOfRange = 6,
    /// An invariant inside rml broke, including a caught panic: a bug in rml
    /// (rml `Code::Internal`).
    Internal = 7,
    /// An operating-system I/O error, e.g. a file that cannot be read (rml `Code::Io`).
    Io = 8,
}

impl RmlStatus {
    /// The status for an error code.
    pub fn from_code(code: Code) -> Self {
        match code {
            Code::InvalidArgument => RmlStatus::InvalidArgument,
            Code::NotFound => RmlStatus::NotFound,
            Code::DataLoss => RmlStatus::DataLoss,
            Code::Unimplemented => RmlStatus::Unimplemented,
            Code::ResourceExhausted => RmlStatus::ResourceExhausted,
            Code::OutOfRange => RmlStatus::OutOfRange,
            Code::Internal => RmlStatus::Internal,
            Code::Io => RmlStatus::Io,
        }
    }

    /// The status's name as `rml_status_name` returns it (`"INVALID_ARGUMENT"`), from
    /// `Code::as_str`.
    fn name(self) -> &'static core::ffi::CStr {
        match self {
            RmlStatus::Ok => c"OK",
            RmlStatus::InvalidArgument => c"INVALID_ARGUMENT",
            RmlStatus::NotFound => c"NOT_FOUND",
            RmlStatus::DataLoss => c"DATA_LOSS",
            RmlStatus::Unimplemented => c"UNIMPLEMENTED",
            RmlStatus::ResourceExhausted => c"RESOURCE_EXHAUSTED",
            RmlStatus::OutOfRange => c"OUT_OF_RANGE",
            RmlStatus::Internal => c"INTERNAL",
            RmlStatus::Io => c"IO",
        }
    }
}

std::thread_local! {
    /// The message of the calling thread's last failed call; `None` after a success.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: String) {
    // A NUL inside a message (a file name can hold anything) would cut it short in C.
    let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; the status still says enough.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            *s = Some(message);
        }
    });
}

fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            *s = None;
        }
    });
}

/// The text of a caught panic's payload (a `&str` or `String` message), if it has one.
fn panic_message(payload: &(dyn core::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs one C ABI call: catches a panic (reported as `RmlStatus::Internal`), records the
/// error message for `rml_last_error` (or clears it on success) and returns the status.
pub(crate) fn ffi_call(what: &str, f: impl FnOnce() -> Result<()>) -> RmlStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            clear_last_error();
            RmlStatus::Ok
        }
        Ok(Err(e)) => {
            let status = RmlStatus::from_code(e.code());
            set_last_error(format!("{what}: {e}"));
            status
        }
        Err(payload) => {
            let msg = panic_message(&*payload);
            set_last_error(format!("{what}: INTERNAL: panic inside rml (a bug): {msg}"));
            // Dropping the payload runs arbitrary code; a panic there must not unwind either.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            RmlStatus::Internal
        }
    }
}

/// Checks that a pointer argument is not `NULL`.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        Err(Error::invalid_argument(format_args!("{name} is NULL")))
    } else {
        Ok(())
    }
}

/// Writes `value` through the out-pointer `out` after checking it is not `NULL`.
///
/// # Safety
///
/// A non-null `out` must be valid for a write of one `T` (the C caller's contract).
pub(crate) unsafe fn write_out<T>(out: *mut T, name: &str, value: T) -> Result<()> {
    non_null(out, name)?;
    // SAFETY: `out` is not null; the caller guarantees it points to writable memory for a `T`.
    unsafe { out.write(value) };
    Ok(())
}

/// A slice over `len` elements at `ptr`, checked: `ptr` must not be `NULL` when `len > 0`,
/// and `len` elements must fit in `isize::MAX` bytes. An empty slice for `len == 0` (the
/// pointer then may be `NULL`).
///
/// # Safety
///
/// A non-null `ptr` with `len > 0` must point to `len` initialised `T`s that stay unchanged
/// for `'a` (the C caller's contract).
pub(crate) unsafe fn slice_arg<'a, T>(ptr: *const T, len: usize, name: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    non_null(ptr, name)?;
    let fits = len.checked_mul(core::mem::size_of::<T>()).is_some_and(|b| b <= isize::MAX as usize);
    if !fits {
        return Err(Error::invalid_argument(format_args!(
            "{name}: length {len} is larger than any array can be"
        )));
    }
    if ptr as usize % core::mem::align_of::<T>() != 0 {
        return Err(Error::invalid_argument(format_args!(
            "{name} is not aligned for its element type ({} bytes)",
            core::mem::align_of::<T>()
        )));
    }
    // SAFETY: non-null, aligned, the size fits `isize`; the caller guarantees `len`
    // initialised elements that stay unchanged for `'a`.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// A NUL-terminated C string argument as bytes (without the NUL).
///
/// # Safety
///
/// A non-null `ptr` must point to a NUL-terminated string (the C caller's contract).
pub(crate) unsafe fn cstr_arg<'a>(ptr: *const c_char, name: &str) -> Result<&'a [u8]> {
    non_null(ptr, name)?;
    // SAFETY: not null; the caller guarantees a NUL-terminated string.
    Ok(unsafe { core::ffi::CStr::from_ptr(ptr) }.to_bytes())
}

/// The message of the calling thread's last failed rml call (`"CODE: what went wrong"`, naming
/// the function, file, tensor or argument), or `""` if its last call succeeded. Never `NULL`.
/// The string belongs to rml and stays valid until the thread's next rml call.
#[no_mangle]
pub extern "C" fn rml_last_error() -> *const c_char {
    static EMPTY: &core::ffi::CStr = c"";
    let r = catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| slot.try_borrow().ok().and_then(|s| s.as_ref().map(|c| c.as_ptr())))
            .ok()
            .flatten()
    });
    match r {
        Ok(Some(p)) => p,
        _ => EMPTY.as_ptr(),
    }
}

/// The name of a status code (`"OK"`, `"INVALID_ARGUMENT"`, ...), or `"UNKNOWN"` for a value
/// that is not one. A static string; never `NULL`.
#[no_mangle]
pub extern "C" fn rml_status_name(status: i32) -> *const c_char {
    use RmlStatus::*;
    const ALL: [RmlStatus; 9] = [
        Ok,
        InvalidArgument,
        NotFound,
        DataLoss,
        Unimplemented,
        ResourceExhausted,
        OutOfRange,
        Internal,
        Io,
    ];
    match ALL.iter().find(|s| **s as i32 == status) {
        Some(s) => s.name().as_ptr(),
        None => c"UNKNOWN".as_ptr(),
    }
}

/// rml's version (the crate's, e.g. `"0.1.0"`). A static string; never `NULL`.
#[no_mangle]
pub extern "C" fn rml_version() -> *const c_char {
    static VERSION: &core::ffi::CStr = {
        match core::ffi::CStr::from_bytes_with_nul(
            concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
        ) {
            core::result::Result::Ok(s) => s,
            Err(_) => c"unknown",
        }
    };
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: rml_last_error returns a valid NUL-terminated string.
        unsafe { core::ffi::CStr::from_ptr(rml_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let s = ffi_call("test_call", || panic!("boom {}", 7));
        assert_eq!(s, RmlStatus::Internal);
        assert!(
            last().contains("test_call: INTERNAL: panic inside rml (a bug): boom 7"),
            "{}",
            last()
        );
        assert_eq!(ffi_call("ok", || Ok(())), RmlStatus::Ok);
        assert_eq!(last(), "");
    }

    #[test]
    fn errors_map_to_their_status_and_message() {
        let s = ffi_call("f", || Err(Error::data_loss("bad\0header")));
        assert_eq!(s, RmlStatus::DataLoss);
        assert_eq!(last(), "f: DATA_LOSS: bad\\0header");
    }

    #[test]
    fn status_names() {
        // SAFETY: static NUL-terminated strings.
        let name = |s| unsafe { core::ffi::CStr::from_ptr(rml_status_name(s)) }.to_str().unwrap();
        assert_eq!(name(0), "OK");
        assert_eq!(name(RmlStatus::OutOfRange as i32), "OUT_OF_RANGE");
        assert_eq!(name(RmlStatus::Io as i32), "IO");
        assert_eq!(name(-1), "UNKNOWN");
        assert_eq!(name(9), "UNKNOWN");
        for c in [Code::InvalidArgument, Code::DataLoss, Code::Internal, Code::Io] {
            assert_eq!(name(RmlStatus::from_code(c) as i32), c.as_str());
        }
    }

    #[test]
    fn slice_arg_checks_null_and_length() {
        // SAFETY: only the checks run (null / huge length), nothing is read.
        unsafe {
            assert!(slice_arg::<u32>(core::ptr::null(), 0, "x").unwrap().is_empty());
            assert_eq!(
                slice_arg::<u32>(core::ptr::null(), 3, "x").unwrap_err().code(),
                Code::InvalidArgument
            );
            let v = [1u32, 2];
            assert_eq!(
                slice_arg(v.as_ptr(), usize::MAX / 2, "x").unwrap_err().code(),
                Code::InvalidArgument
            );
            let p = (v.as_ptr() as *const u8).wrapping_add(1) as *const u32;
            assert_eq!(slice_arg(p, 1, "x").unwrap_err().code(), Code::InvalidArgument);
            assert_eq!(slice_arg(v.as_ptr(), 2, "x").unwrap(), &[1, 2]);
        }
    }
}
