//! `RmlTokenizer`: text to token ids and back. Present in every build of the C library; in
//! a build without rml's tokenizer every function but `rml_tokenizer_free` returns
//! `RML_STATUS_UNIMPLEMENTED`.

use alloc::sync::Arc;
use core::ffi::c_char;

use super::handles::{self, Object};
use super::model::{clear_out, model_arc, RmlModel};
use super::{ffi_call, slice_arg, write_out, RmlStatus};
use crate::error::{Error, Result};

/// A tokenizer (opaque). Made by `rml_tokenizer_from_model` or `rml_tokenizer_open`,
/// released by `rml_tokenizer_free`.
pub struct RmlTokenizer {
    _opaque: [u8; 0],
}

#[cfg(feature = "tokenizer")]
pub(crate) use crate::tokenizer::Tokenizer as TokenizerInner;

/// The object behind an `RmlTokenizer` in a build without the tokenizer: never made.
#[cfg(not(feature = "tokenizer"))]
pub(crate) enum TokenizerInner {}

#[cfg(feature = "tokenizer")]
mod imp {
    use super::*;
    use crate::tokenizer::Tokenizer;

    /// The model's tokenizer as [`Tokenizer::for_container`] finds it; a GGUF in memory has
    /// only its own vocabulary.
    pub(super) fn from_model(m: &super::super::model::ModelInner) -> Result<Tokenizer> {
        use super::super::model::Source;
        match &m.source {
            Source::File(model) => Tokenizer::for_container(model),
            Source::Bytes { gguf, .. } => {
                Tokenizer::from_gguf(gguf).map_err(|e| e.context("GGUF bytes"))
            }
        }
    }

    pub(super) fn open(path: &std::path::Path) -> Result<Tokenizer> {
        // A missing or unreadable file is an I/O error, not a malformed one.
        std::fs::metadata(path).map_err(|e| Error::from(e).context(path.display()))?;
        Tokenizer::from_file(path)
    }
}

#[cfg(not(feature = "tokenizer"))]
mod imp {
    use super::*;

    fn missing() -> Error {
        Error::unimplemented("this C library was built without rml's tokenizer")
    }

    pub(super) fn from_model(_: &super::super::model::ModelInner) -> Result<TokenizerInner> {
        Err(missing())
    }

    pub(super) fn open(_: &std::path::Path) -> Result<TokenizerInner> {
        Err(missing())
    }

    pub(super) fn encode(t: &TokenizerInner, _: &str, _: bool) -> Result<alloc::vec::Vec<u32>> {
        match *t {}
    }

    pub(super) fn decode(t: &TokenizerInner, _: &[u32]) -> Result<alloc::string::String> {
        match *t {}
    }

    pub(super) fn token_id(t: &TokenizerInner, _: &str) -> Option<u32> {
        match *t {}
    }

    pub(super) fn vocab_size(t: &TokenizerInner) -> usize {
        match *t {}
    }
}

#[cfg(feature = "tokenizer")]
mod ops {
    use super::*;
    pub(super) fn encode(
        t: &TokenizerInner,
        text: &str,
        add_special: bool,
    ) -> Result<alloc::vec::Vec<u32>> {
        t.encode_with_special(text, add_special)
    }
    pub(super) fn decode(t: &TokenizerInner, ids: &[u32]) -> Result<alloc::string::String> {
        t.decode(ids)
    }
    pub(super) fn token_id(t: &TokenizerInner, token: &str) -> Option<u32> {
        t.token_to_id(token)
    }
    pub(super) fn vocab_size(t: &TokenizerInner) -> usize {
        t.vocab_size()
    }
}
#[cfg(not(feature = "tokenizer"))]
use imp as ops;

fn tokenizer_arc(t: *const RmlTokenizer) -> Result<Arc<TokenizerInner>> {
    handles::get(t.addr(), "RmlTokenizer", |o| match o {
        Object::Tokenizer(t) => Some(t.clone()),
        _ => None,
    })
}

fn tokenizer_handle(t: TokenizerInner, out: *mut *mut RmlTokenizer) -> Result<()> {
    let h = handles::insert(Object::Tokenizer(Arc::new(t)))?;
    // SAFETY: the C caller's contract for `out` (checked non-null by `clear_out` before).
    unsafe { write_out(out, "out", core::ptr::without_provenance_mut(h)) }
}

/// The model's tokenizer: `tokenizer.json` in its Hugging Face folder or beside its GGUF
/// file, else the vocabulary inside the GGUF file.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `out` or a handle that is not a live
/// model; `RML_STATUS_NOT_FOUND` if the model has no tokenizer; `RML_STATUS_UNIMPLEMENTED`
/// for a vocabulary type rml does not read, or a build without the tokenizer. `*out` is set
/// to the new tokenizer, or to `NULL` on failure.
///
/// # Safety
///
/// `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_tokenizer_from_model(
    model: *const RmlModel,
    out: *mut *mut RmlTokenizer,
) -> RmlStatus {
    ffi_call("rml_tokenizer_from_model", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        let m = model_arc(model)?;
        tokenizer_handle(imp::from_model(&m)?, out)
    })
}

/// Opens a Hugging Face `tokenizer.json` (a NUL-terminated path).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` argument or a path that is not UTF-8;
/// `RML_STATUS_IO` or `RML_STATUS_DATA_LOSS` if it cannot be read or parsed;
/// `RML_STATUS_UNIMPLEMENTED` in a build without the tokenizer. `*out` is set to the new
/// tokenizer, or to `NULL` on failure.
///
/// # Safety
///
/// `path` must be a NUL-terminated string; `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_tokenizer_open(
    path: *const c_char,
    out: *mut *mut RmlTokenizer,
) -> RmlStatus {
    ffi_call("rml_tokenizer_open", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        // SAFETY: the C caller's contract.
        let bytes = unsafe { super::cstr_arg(path, "path")? };
        let p = core::str::from_utf8(bytes)
            .map_err(|_| Error::invalid_argument("path is not valid UTF-8"))?;
        tokenizer_handle(imp::open(std::path::Path::new(p))?, out)
    })
}

/// Splits `text_len` bytes of UTF-8 `text` (no NUL needed) into token ids; special tokens
/// written in the text (`<|im_start|>`) are recognised. With `add_special` nonzero, BOS/EOS
/// are added as the model asks (its tokenizer.json post-processor, or the GGUF's
/// `tokenizer.ggml.add_bos_token`), as transformers' `add_special_tokens=True` and
/// llama.cpp's `add_special` do; with 0, none are.
/// `*n_tokens` receives the number of ids; they are written to `tokens` if it has room for
/// them (`capacity` ids). With `tokens == NULL` and `capacity == 0` it only counts them
/// (and returns `RML_STATUS_OK`).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer (`tokens` may be `NULL` only
/// with `capacity == 0`), text that is not UTF-8 or a handle that is not a live tokenizer;
/// `RML_STATUS_OUT_OF_RANGE` if `capacity` is too small (nothing is written to `tokens`,
/// `*n_tokens` says how many are needed).
///
/// # Safety
///
/// `text` must point to `text_len` bytes; `tokens` to room for `capacity` ids; `n_tokens`
/// must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_tokenizer_encode(
    tokenizer: *const RmlTokenizer,
    text: *const c_char,
    text_len: usize,
    add_special: u32,
    tokens: *mut u32,
    capacity: usize,
    n_tokens: *mut usize,
) -> RmlStatus {
    ffi_call("rml_tokenizer_encode", || {
        super::non_null(n_tokens, "n_tokens")?;
        super::non_null(text, "text")?;
        if capacity > 0 {
            super::non_null(tokens, "tokens")?;
        }
        // SAFETY: the C caller's contract.
        let bytes = unsafe { slice_arg(text.cast::<u8>(), text_len, "text")? };
        let text = core::str::from_utf8(bytes)
            .map_err(|e| Error::invalid_argument(format_args!("text is not valid UTF-8: {e}")))?;
        let t = tokenizer_arc(tokenizer)?;
        let ids = ops::encode(&t, text, add_special != 0)?;
        // SAFETY: checked non-null above; the C caller's contract.
        unsafe { write_out(n_tokens, "n_tokens", ids.len())? };
        if tokens.is_null() && capacity == 0 {
            return Ok(());
        }
        if ids.len() > capacity {
            return Err(Error::out_of_range(format_args!(
                "{} tokens do not fit in capacity {capacity}",
                ids.len()
            )));
        }
        if !ids.is_empty() {
            // SAFETY: `tokens` is non-null (capacity >= ids.len() > 0) and has room for
            // `capacity` ids (the C caller's contract); the regions cannot overlap (`ids` is
            // ours).
            unsafe { core::ptr::copy_nonoverlapping(ids.as_ptr(), tokens, ids.len()) };
        }
        Ok(())
    })
}

/// Turns `n_tokens` ids into UTF-8 text (special tokens left out). `*text_len` receives its
/// length in bytes, without the NUL; the text and a terminating NUL are written to `text` if
/// it has room (`capacity` bytes, so at least `*text_len + 1`). With `text == NULL` and
/// `capacity == 0` it only measures the text (and returns `RML_STATUS_OK`).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer (`tokens` may be `NULL` only
/// with `n_tokens == 0`, `text` only with `capacity == 0`) or a handle that is not a live
/// tokenizer; `RML_STATUS_OUT_OF_RANGE` if an id is past the vocabulary or `capacity` is too
/// small (nothing is written to `text` then).
///
/// # Safety
///
/// `tokens` must point to `n_tokens` ids; `text` to `capacity` writable bytes; `text_len`
/// must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_tokenizer_decode(
    tokenizer: *const RmlTokenizer,
    tokens: *const u32,
    n_tokens: usize,
    text: *mut c_char,
    capacity: usize,
    text_len: *mut usize,
) -> RmlStatus {
    ffi_call("rml_tokenizer_decode", || {
        super::non_null(text_len, "text_len")?;
        if capacity > 0 {
            super::non_null(text, "text")?;
        }
        // SAFETY: the C caller's contract.
        let ids = unsafe { slice_arg(tokens, n_tokens, "tokens")? };
        let t = tokenizer_arc(tokenizer)?;
        let vocab = ops::vocab_size(&t);
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::out_of_range(format_args!(
                "token id {bad} is past the vocabulary of {vocab}"
            )));
        }
        let s = ops::decode(&t, ids)?;
        // SAFETY: checked non-null above; the C caller's contract.
        unsafe { write_out(text_len, "text_len", s.len())? };
        if text.is_null() && capacity == 0 {
            return Ok(());
        }
        if s.len() >= capacity {
            return Err(Error::out_of_range(format_args!(
                "{} bytes of text and a NUL do not fit in capacity {capacity}",
                s.len()
            )));
        }
        // SAFETY: `text` is non-null (capacity > s.len() >= 0) with room for `capacity` bytes
        // (the C caller's contract); `s` is ours, so no overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(s.as_ptr(), text.cast::<u8>(), s.len());
            text.add(s.len()).write(0);
        }
        Ok(())
    })
}

/// Looks up the id of one token by its text (e.g. `"<|im_end|>"`) and writes it to `*id`.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer or a handle that is not a live
/// tokenizer; `RML_STATUS_NOT_FOUND` if the vocabulary has no such token.
///
/// # Safety
///
/// `token` must be a NUL-terminated string; `id` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_tokenizer_token_id(
    tokenizer: *const RmlTokenizer,
    token: *const c_char,
    id: *mut u32,
) -> RmlStatus {
    ffi_call("rml_tokenizer_token_id", || {
        super::non_null(id, "id")?;
        // SAFETY: the C caller's contract.
        let bytes = unsafe { super::cstr_arg(token, "token")? };
        let t = tokenizer_arc(tokenizer)?;
        let s = core::str::from_utf8(bytes)
            .map_err(|_| Error::invalid_argument("token is not valid UTF-8"))?;
        let v = ops::token_id(&t, s).ok_or_else(|| {
            Error::not_found(format_args!("token {s:?} is not in the vocabulary"))
        })?;
        // SAFETY: checked non-null above; the C caller's contract.
        unsafe { write_out(id, "id", v) }
    })
}

/// Releases a tokenizer. `tokenizer == NULL` does nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live tokenizer (freed
/// already, say); nothing is freed then.
#[no_mangle]
pub extern "C" fn rml_tokenizer_free(tokenizer: *mut RmlTokenizer) -> RmlStatus {
    ffi_call("rml_tokenizer_free", || {
        drop(handles::remove(tokenizer.addr(), "RmlTokenizer")?);
        Ok(())
    })
}
