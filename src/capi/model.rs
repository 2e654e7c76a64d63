//! `RmlModel`: a model opened from a path (a GGUF file or a Hugging Face folder) or from the
//! bytes of a GGUF file in memory.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::ffi::c_char;

use super::handles::{self, Object};
use super::{cstr_arg, ffi_call, slice_arg, write_out, RmlStatus};
use crate::error::{Error, Result};
use crate::format::gguf::Gguf;
use crate::format::TensorSource;
use crate::load::Model;
use crate::mem::AlignedBlock;
use crate::model::config::ModelConfig;
use crate::model::packed::PackedSource;

/// An opened model (opaque). Made by `rml_model_open` or `rml_model_open_bytes`, released
/// by `rml_model_free`. Decoders and tokenizers made from it keep what they need alive, so
/// the model may be freed before them.
pub struct RmlModel {
    _opaque: [u8; 0],
}

/// Where a model's bytes live.
pub(crate) enum Source {
    /// Files mapped from disk.
    File(Box<Model>),
    /// A GGUF file in memory. `gguf` borrows `bytes` (declared first, so dropped first).
    Bytes { gguf: Gguf<'static>, _bytes: Option<AlignedBlock> },
}

/// The object behind an `RmlModel` handle.
pub(crate) struct ModelInner {
    pub(crate) source: Source,
    pub(crate) config: ModelConfig,
}

impl ModelInner {
    /// Calls `f` with the model's tensors. The views live as long as the model's bytes, which
    /// every holder of the `Arc` keeps alive.
    pub(crate) fn with_source<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&dyn TensorSource<'static>) -> Result<R>,
    ) -> Result<R> {
        // SAFETY: the inner value lives on the heap inside the `Arc` and never moves; the
        // caller of this function (the decoder) stores a clone of the `Arc` next to anything
        // that keeps views of 'static lifetime, and drops those first (field order).
        let this: &'static ModelInner = unsafe { &*Arc::as_ptr(self) };
        match &this.source {
            Source::File(m) => f(&PackedSource::new(m)?),
            Source::Bytes { gguf, .. } => f(gguf),
        }
    }
}

fn model_handle(inner: ModelInner, out: *mut *mut RmlModel) -> Result<()> {
    let h = handles::insert(Object::Model(Arc::new(inner)))?;
    // SAFETY: `out` was checked non-null by the caller of this helper; C owns the slot.
    unsafe { write_out(out, "out", core::ptr::without_provenance_mut(h)) }
}

pub(crate) fn model_arc(model: *const RmlModel) -> Result<Arc<ModelInner>> {
    handles::get(model.addr(), "RmlModel", |o| match o {
        Object::Model(m) => Some(m.clone()),
        _ => None,
    })
}

/// Sets `*out = NULL` first, so that every failure leaves a null handle.
///
/// # Safety
///
/// A non-null `out` must be valid for a write (the C caller's contract).
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { write_out(out, "out", core::ptr::null_mut()) }
}

fn open_gguf_bytes(bytes: &'static [u8], owned: Option<AlignedBlock>) -> Result<ModelInner> {
    let gguf = Gguf::parse(bytes)?;
    let config = crate::model::config::from_gguf(&gguf)?;
    Ok(ModelInner { source: Source::Bytes { gguf, _bytes: owned }, config })
}

/// Opens the model at `path` (a NUL-terminated path): a GGUF file, or a Hugging Face folder
/// with `config.json` and `model.safetensors` (or shards). The files are memory-mapped, not
/// read; keep them unchanged while the model or anything made from it is alive.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` argument or a path that is not valid
/// UTF-8 (off Unix); `RML_STATUS_IO` or `RML_STATUS_NOT_FOUND` if it cannot be read;
/// `RML_STATUS_DATA_LOSS` for a malformed file; `RML_STATUS_UNIMPLEMENTED` for an
/// architecture or tensor type rml does not support. `*out` is set to the new model, or to
/// `NULL` on failure.
///
/// # Safety
///
/// `path` must be a NUL-terminated string and `out` valid for a write (or `NULL`, which is
/// reported as an error).
#[no_mangle]
pub unsafe extern "C" fn rml_model_open(path: *const c_char, out: *mut *mut RmlModel) -> RmlStatus {
    ffi_call("rml_model_open", || {
        // SAFETY: the C caller's contract for `out` and `path`.
        unsafe { clear_out(out)? };
        // SAFETY: as above.
        let bytes = unsafe { cstr_arg(path, "path")? };
        #[cfg(unix)]
        let path = {
            use std::os::unix::ffi::OsStrExt;
            std::path::Path::new(std::ffi::OsStr::from_bytes(bytes))
        };
        #[cfg(not(unix))]
        let path = std::path::Path::new(
            core::str::from_utf8(bytes)
                .map_err(|_| Error::invalid_argument("path is not valid UTF-8"))?,
        );
        if bytes.is_empty() {
            return Err(Error::invalid_argument("path is empty"));
        }
        let model = Model::open(path)?;
        let config = model.config().clone();
        model_handle(ModelInner { source: Source::File(Box::new(model)), config }, out)
    })
}

/// Opens a GGUF file held in memory (`len` bytes at `data`). The bytes are copied into an
/// aligned buffer that the model owns, so `data` may be freed as soon as this returns.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` argument or `len == 0`;
/// `RML_STATUS_DATA_LOSS` for bytes that are not a well-formed GGUF file;
/// `RML_STATUS_UNIMPLEMENTED` for an unsupported architecture or tensor type;
/// `RML_STATUS_RESOURCE_EXHAUSTED` if the copy cannot be allocated. `*out` is set to the new
/// model, or to `NULL` on failure.
///
/// # Safety
///
/// `data` must point to `len` readable bytes; `out` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_model_open_bytes(
    data: *const u8,
    len: usize,
    out: *mut *mut RmlModel,
) -> RmlStatus {
    ffi_call("rml_model_open_bytes", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        if len == 0 {
            return Err(Error::invalid_argument("len is 0: no model bytes"));
        }
        // SAFETY: the C caller's contract: `len` readable bytes at `data`, read only here.
        let src = unsafe { slice_arg(data, len, "data")? };
        let block = AlignedBlock::try_from_slice(src)?;
        // SAFETY: the block's heap bytes never move and are never written again; the model
        // stores the block after the parsed view that borrows it, so the view is dropped
        // first (see `Source::Bytes`).
        let bytes: &'static [u8] =
            unsafe { core::slice::from_raw_parts(block.as_ptr(), block.len()) };
        model_handle(open_gguf_bytes(bytes, Some(block))?, out)
    })
}

/// Opens a GGUF file held in memory without copying it: the model and every decoder and
/// tokenizer made from it read the tensors in place (firmware keeps weights in flash this
/// way). Tensors are used in place when `data` is suitably aligned (64 bytes is always
/// enough), otherwise the misaligned ones are copied.
///
/// Errors: as `rml_model_open_bytes`, less the copy.
///
/// # Safety
///
/// `data` must point to `len` readable bytes that stay valid and unchanged until the model
/// and every decoder and tokenizer made from it have been freed; `out` must be valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn rml_model_open_bytes_borrowed(
    data: *const u8,
    len: usize,
    out: *mut *mut RmlModel,
) -> RmlStatus {
    ffi_call("rml_model_open_bytes_borrowed", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        if len == 0 {
            return Err(Error::invalid_argument("len is 0: no model bytes"));
        }
        // SAFETY: the C caller guarantees the bytes outlive every object made from them.
        let bytes: &'static [u8] = unsafe { slice_arg(data, len, "data")? };
        model_handle(open_gguf_bytes(bytes, None)?, out)
    })
}

/// A model's shape, filled by `rml_model_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmlModelInfo {
    /// Tokens in the vocabulary: the length of every logits array.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (fewer than `num_heads` with grouped-query attention).
    pub num_kv_heads: usize,
    /// Width of one attention head.
    pub head_dim: usize,
    /// The longest context the model was trained for (the largest `context_len`).
    pub max_position_embeddings: usize,
    /// The beginning-of-sequence token, or -1 if the model names none.
    pub bos_token_id: i64,
    /// The first end-of-sequence token, or -1 if the model names none.
    pub eos_token_id: i64,
}

/// Fills `*info` with the shape of `model`.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` argument or a handle that is not a live
/// model.
///
/// # Safety
///
/// `info` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_model_info(
    model: *const RmlModel,
    info: *mut RmlModelInfo,
) -> RmlStatus {
    ffi_call("rml_model_info", || {
        let m = model_arc(model)?;
        let c = &m.config;
        let v = RmlModelInfo {
            vocab_size: c.vocab_size,
            hidden_size: c.hidden_size,
            intermediate_size: c.intermediate_size,
            num_layers: c.num_hidden_layers,
            num_heads: c.num_attention_heads,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            max_position_embeddings: c.max_position_embeddings,
            bos_token_id: c.bos_token_id.map_or(-1, i64::from),
            eos_token_id: c.eos_token_ids.first().map_or(-1, |&t| i64::from(t)),
        };
        // SAFETY: the C caller's contract.
        unsafe { write_out(info, "info", v) }
    })
}

/// Releases a model handle. Decoders and tokenizers made from it stay usable (they hold the
/// model's bytes until they are freed themselves). `model == NULL` does nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live model (freed
/// already, say); nothing is freed then.
#[no_mangle]
pub extern "C" fn rml_model_free(model: *mut RmlModel) -> RmlStatus {
    ffi_call("rml_model_free", || {
        drop(handles::remove(model.addr(), "RmlModel")?);
        Ok(())
    })
}
