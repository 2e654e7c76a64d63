//! `RmlEncoder`: sentence embeddings from a BERT-family encoder (a sentence-transformers folder
//! or a llama.cpp BERT GGUF; see `crate::model::encoder`). Present in every build of the C
//! library; in a build without rml's tokenizer every function but `rml_encoder_free` and
//! `rml_encoder_options_default` returns `RML_STATUS_UNIMPLEMENTED`.

use alloc::sync::Arc;
use core::ffi::c_char;
use std::sync::Mutex;

use super::handles::{self, Object};
use super::model::clear_out;
use super::{cstr_arg, ffi_call, slice_arg, write_out, RmlStatus};
use crate::error::{Error, Result};

/// A loaded encoder (opaque). Made by `rml_encoder_open`, released by `rml_encoder_free`.
pub struct RmlEncoder {
    _opaque: [u8; 0],
}

/// How `rml_encoder_open` loads and runs an encoder. Zero in every field means the default
/// (`rml_encoder_options_default`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmlEncoderOptions {
    /// Texts per batch (each batch is one matrix product per weight); 0: 32.
    pub batch_size: u32,
    /// Threads; 0: the machine's default (`ThreadPool::default_threads`); 1: no worker
    /// threads. At most 1024.
    pub threads: u32,
    /// 0: f32 (exact); 1: int8 (matrices quantized to Q8_0 at load, activations to int8;
    /// all-MiniLM-L6-v2 keeps cosine >= 0.999 to the f32 vectors).
    pub int8: u32,
}

/// The default encoder options (all zeros).
#[no_mangle]
pub extern "C" fn rml_encoder_options_default() -> RmlEncoderOptions {
    RmlEncoderOptions::default()
}

#[cfg(feature = "tokenizer")]
mod imp {
    use alloc::boxed::Box;
    use alloc::vec::Vec;

    use super::*;
    use crate::exec::{Executor, InlineExecutor, ThreadPool};

    /// The most threads `RmlEncoderOptions::threads` may ask for.
    const MAX_THREADS: u32 = 1024;
    use crate::model::encoder::{Encoder, EncoderFiles, EncoderOptions};

    /// What a live `RmlEncoder` handle holds. Field order is drop order: the encoder borrows
    /// the pool and the files, so it goes first.
    pub(crate) struct EncoderState {
        encoder: Encoder<'static>,
        _pool: Option<Arc<ThreadPool>>,
        _files: Box<EncoderFiles>,
    }

    // SAFETY: the parts that are not `Send` by type are the encoder's references: to this
    // state's own `ThreadPool` or the `InlineExecutor` (both `Sync`), and to this state's own
    // `EncoderFiles` on the heap (memory maps, a tokenizer and plain data, only read). The
    // state is used under a `Mutex`, one call at a time.
    unsafe impl Send for EncoderState {}

    pub(crate) fn open(path: &std::path::Path, o: &RmlEncoderOptions) -> Result<EncoderState> {
        if o.threads > MAX_THREADS {
            return Err(Error::invalid_argument(format_args!(
                "options.threads {} is above the limit of {MAX_THREADS}",
                o.threads
            )));
        }
        let base = match o.int8 {
            0 => EncoderOptions::default(),
            1 => EncoderOptions::int8(),
            v => {
                return Err(Error::invalid_argument(format_args!(
                    "options.int8 {v} is neither 0 (f32) nor 1 (int8)"
                )))
            }
        };
        let batch_size = if o.batch_size == 0 { 32 } else { o.batch_size as usize };
        let files = Box::new(EncoderFiles::open(path)?);
        let threads =
            if o.threads == 0 { ThreadPool::default_threads() } else { o.threads as usize };
        let pool = if threads > 1 {
            Some(Arc::new(ThreadPool::builder().threads(threads).build()?))
        } else {
            None
        };
        let exec: &'static dyn Executor = match &pool {
            // SAFETY: the pool lives on the heap inside the `Arc`, which the state keeps and
            // drops after the encoder that borrows it (see `EncoderState`).
            Some(p) => unsafe { &*Arc::as_ptr(p) },
            None => &InlineExecutor,
        };
        // SAFETY: the files live on the heap inside the `Box`, which the state keeps (never
        // moving its contents) and drops after the encoder that borrows them.
        let files_ref: &'static EncoderFiles = unsafe { &*(&*files as *const EncoderFiles) };
        let encoder = Encoder::new(files_ref, exec, EncoderOptions { batch_size, ..base })?;
        Ok(EncoderState { encoder, _pool: pool, _files: files })
    }

    pub(crate) fn dim(s: &EncoderState) -> usize {
        s.encoder.files().config().hidden_size
    }

    pub(crate) fn embed(s: &EncoderState, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        s.encoder.embed(texts)
    }
}

#[cfg(not(feature = "tokenizer"))]
mod imp {
    use alloc::vec::Vec;

    use super::*;

    /// The object behind an `RmlEncoder` in a build without the tokenizer: never made.
    pub(crate) enum EncoderState {}

    pub(crate) fn open(_: &std::path::Path, _: &RmlEncoderOptions) -> Result<EncoderState> {
        Err(Error::unimplemented("this C library was built without rml's tokenizer"))
    }

    pub(crate) fn dim(s: &EncoderState) -> usize {
        match *s {}
    }

    pub(crate) fn embed(s: &EncoderState, _: &[&str]) -> Result<Vec<Vec<f32>>> {
        match *s {}
    }
}

pub(crate) use imp::EncoderState;

fn encoder_arc(enc: *const RmlEncoder) -> Result<Arc<Mutex<EncoderState>>> {
    handles::get(enc.addr(), "RmlEncoder", |o| match o {
        Object::Encoder(e) => Some(e.clone()),
        _ => None,
    })
}

fn lock(e: &Mutex<EncoderState>) -> Result<std::sync::MutexGuard<'_, EncoderState>> {
    e.lock().map_err(|_| {
        Error::internal("this encoder is unusable: an earlier call on it panicked (a bug in rml)")
    })
}

/// Opens an encoder (a NUL-terminated path): a sentence-transformers folder (`config.json`,
/// `model.safetensors`, `tokenizer.json`, ...) or a llama.cpp BERT GGUF file. `options ==
/// NULL` means the defaults.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `path` or `out`, a path that is not
/// UTF-8, an option out of range, or a decoder model (named in `rml_last_error`);
/// `RML_STATUS_NOT_FOUND` for a missing folder or file in it; `RML_STATUS_DATA_LOSS` for
/// malformed files; `RML_STATUS_UNIMPLEMENTED` for an encoder family rml does not run or a
/// build without the tokenizer. `*out` is set to the new encoder, or to `NULL` on failure.
///
/// # Safety
///
/// `path` must be a NUL-terminated string; `options` `NULL` or pointing to an
/// `RmlEncoderOptions`; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_encoder_open(
    path: *const c_char,
    options: *const RmlEncoderOptions,
    out: *mut *mut RmlEncoder,
) -> RmlStatus {
    ffi_call("rml_encoder_open", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        // SAFETY: the C caller's contract.
        let bytes = unsafe { cstr_arg(path, "path")? };
        let p = core::str::from_utf8(bytes)
            .map_err(|_| Error::invalid_argument("path is not valid UTF-8"))?;
        let o = if options.is_null() {
            RmlEncoderOptions::default()
        } else {
            // SAFETY: non-null, and the C caller's contract says it points to options.
            unsafe { *options }
        };
        let state = imp::open(std::path::Path::new(p), &o)?;
        let h = handles::insert(Object::Encoder(Arc::new(Mutex::new(state))))?;
        // SAFETY: `out` was checked non-null by `clear_out`; C owns the slot.
        unsafe { write_out(out, "out", core::ptr::without_provenance_mut(h)) }
    })
}

/// Writes the length of the encoder's vectors (its hidden size, e.g. 384) to `*dim`.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `dim` or a handle that is not a live
/// encoder.
///
/// # Safety
///
/// `dim` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_encoder_dim(enc: *const RmlEncoder, dim: *mut usize) -> RmlStatus {
    ffi_call("rml_encoder_dim", || {
        super::non_null(dim, "dim")?;
        let e = encoder_arc(enc)?;
        let d = imp::dim(&*lock(&e)?);
        // SAFETY: checked non-null; the C caller's contract.
        unsafe { write_out(dim, "dim", d) }
    })
}

/// Embeds `n_texts` texts: text `i` is `text_lens[i]` bytes of UTF-8 at `texts[i]` (no NUL
/// needed). The vectors are written one after another to `out`, `n_texts × dim` floats
/// (`rml_encoder_dim`), in text order: pooled and, when the model says so (always for a GGUF),
/// L2-normalized, as `Encoder::embed` does; texts longer than the model's `max_seq_length`
/// are cut. `capacity` is the number of floats `out` has room for. `n_texts == 0` writes
/// nothing (`texts`, `text_lens` and `out` may then be `NULL`).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer, a text that is not UTF-8 or a
/// handle that is not a live encoder; `RML_STATUS_OUT_OF_RANGE` if `capacity < n_texts × dim`
/// (nothing is written).
///
/// # Safety
///
/// `texts` and `text_lens` must point to `n_texts` entries each, every `texts[i]` to
/// `text_lens[i]` bytes; `out` to room for `capacity` floats.
#[no_mangle]
pub unsafe extern "C" fn rml_embed(
    enc: *const RmlEncoder,
    texts: *const *const c_char,
    text_lens: *const usize,
    n_texts: usize,
    out: *mut f32,
    capacity: usize,
) -> RmlStatus {
    ffi_call("rml_embed", || {
        let e = encoder_arc(enc)?;
        let state = lock(&e)?;
        let dim = imp::dim(&state);
        if n_texts == 0 {
            return Ok(());
        }
        super::non_null(out, "out")?;
        // SAFETY: the C caller's contract.
        let ptrs = unsafe { slice_arg(texts, n_texts, "texts")? };
        // SAFETY: the C caller's contract.
        let lens = unsafe { slice_arg(text_lens, n_texts, "text_lens")? };
        let need = n_texts
            .checked_mul(dim)
            .ok_or_else(|| Error::invalid_argument("n_texts × dim overflows"))?;
        if capacity < need {
            return Err(Error::out_of_range(format_args!(
                "{n_texts} vectors of {dim} floats do not fit in capacity {capacity}"
            )));
        }
        let mut strs = alloc::vec::Vec::with_capacity(n_texts);
        for (i, (&p, &len)) in ptrs.iter().zip(lens).enumerate() {
            // SAFETY: the C caller's contract.
            let bytes = unsafe { slice_arg(p.cast::<u8>(), len, "texts[i]")? };
            strs.push(core::str::from_utf8(bytes).map_err(|e| {
                Error::invalid_argument(format_args!("texts[{i}] is not valid UTF-8: {e}"))
            })?);
        }
        let vectors = imp::embed(&state, &strs)?;
        for (i, v) in vectors.iter().enumerate() {
            // SAFETY: `out` has room for `capacity >= n_texts × dim` floats (checked above and
            // the C caller's contract); `v` is ours, so the regions cannot overlap.
            unsafe { core::ptr::copy_nonoverlapping(v.as_ptr(), out.add(i * dim), dim) };
        }
        Ok(())
    })
}

/// Releases an encoder: its converted weights and threads (joined before this returns, or
/// when a call still running on another thread ends). `enc == NULL` does nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live encoder (freed
/// already, say); nothing is freed then.
#[no_mangle]
pub extern "C" fn rml_encoder_free(enc: *mut RmlEncoder) -> RmlStatus {
    ffi_call("rml_encoder_free", || {
        drop(handles::remove(enc.addr(), "RmlEncoder")?);
        Ok(())
    })
}
