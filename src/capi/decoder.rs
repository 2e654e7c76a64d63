//! `RmlDecoder`: a `DecoderLM` with its KV cache and its own thread pool.

use alloc::sync::Arc;
use std::sync::{Mutex, MutexGuard};

use super::handles::{self, Object};
use super::model::{clear_out, model_arc, ModelInner, RmlModel};
use super::{ffi_call, slice_arg, write_out, RmlStatus};
use crate::error::{Error, Result};
use crate::exec::ThreadPool;
use crate::exec::{Executor, InlineExecutor, Schedule};
use crate::model::{DecoderLM, DecoderOptions, KvDtype, WeightFormat};
use crate::ops::Activations;

/// A decoder (opaque): a model's forward pass with a KV cache and a thread pool. Made by
/// `rml_decoder_new`, released by `rml_decoder_free`.
pub struct RmlDecoder {
    _opaque: [u8; 0],
}

/// How the rows of each matrix product are split into chunks across threads (the values of
/// `RmlDecoderOptions::schedule`; rml's `Schedule::code`, where the reasons for the default
/// are given).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlSchedule {
    /// rml's default schedule (today `RML_SCHEDULE_STATIC`, the fastest measured). Value 0
    /// was `RML_SCHEDULE_PROPORTIONAL2` before one default was chosen for every interface;
    /// that schedule is now value 8. Results are the same bits under every schedule.
    Default = 0,
    /// `num_chunks = clamp(rows / grain, 1, 4 * threads)` with
    /// `RmlDecoderOptions::grain` rows per chunk at least.
    Grain = 1,
    /// One contiguous block per thread; a late thread's block is run by another.
    Static = 2,
    /// Chunks of 8 rows, claimed dynamically.
    Fixed8 = 3,
    /// Chunks of 16 rows, claimed dynamically.
    Fixed16 = 4,
    /// Chunks of 32 rows, claimed dynamically.
    Fixed32 = 5,
    /// `chunk = ceil(rows / (4 * threads))`, claimed dynamically.
    Proportional4 = 6,
    /// `Proportional4` with a floor of 16 rows per chunk.
    Adaptive = 7,
    /// `chunk = ceil(rows / (2 * threads))`, claimed dynamically.
    Proportional2 = 8,
    /// `Proportional4`'s chunks, thread `i` owning a contiguous share it runs first, taking
    /// chunks from the far end of other shares when it runs dry.
    Owned = 9,
}

// The C values are rml's one integer encoding of a schedule.
const _: () = {
    assert!(RmlSchedule::Default as u32 == Schedule::DEFAULT_CODE);
    assert!(RmlSchedule::Grain as u32 == Schedule::Grain(1).code());
    assert!(RmlSchedule::Static as u32 == Schedule::Static.code());
    assert!(RmlSchedule::Fixed8 as u32 == Schedule::Fixed8.code());
    assert!(RmlSchedule::Fixed16 as u32 == Schedule::Fixed16.code());
    assert!(RmlSchedule::Fixed32 as u32 == Schedule::Fixed32.code());
    assert!(RmlSchedule::Proportional4 as u32 == Schedule::Proportional4.code());
    assert!(RmlSchedule::Adaptive as u32 == Schedule::Adaptive.code());
    assert!(RmlSchedule::Proportional2 as u32 == Schedule::Proportional2.code());
    assert!(RmlSchedule::Owned as u32 == Schedule::Owned.code());
};

/// How activations meet quantized weights (the values of `RmlDecoderOptions::activations`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlActivations {
    /// int8 activations with outlier-block correction on the RMS-normalized inputs (the
    /// default; Rust's `Activations::Int8`): closer to f32 than llama.cpp's int8 path on
    /// SmolLM2; decode a little slower than the plain int8 mode (docs/perf/ has figures).
    Int8 = 0,
    /// Activations quantized to Q8_0 / Q8_K blocks once per product, dotted in int8
    /// (ggml's scheme, fastest; logits move by up to about 2 on SmolLM2). Value 1 was called
    /// `RML_ACTIVATIONS_INT8` before the corrected mode became the default, with this meaning.
    Int8Plain = 1,
    /// f32 activations; quantized weights are dequantized on the fly (exact).
    F32 = 2,
    /// f32 activations for q/k/v and gate/up, plain int8 for the rest.
    Mixed = 3,
}

/// Element type of the KV cache (the values of `RmlDecoderOptions::kv_cache`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlKvCache {
    /// 4-byte floats (exact; the default).
    F32 = 0,
    /// IEEE half precision (2 bytes; values rounded to nearest even when stored): half the
    /// cache memory and half the bytes attention reads per token.
    F16 = 1,
}

/// Whether matrices are repacked at load (the values of `RmlDecoderOptions::repack`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlRepack {
    /// Repack the matrices of the layers and the output head (a tied embedding included)
    /// into the layout the active kernels read fastest: with int8 activations Q5_0 pairs on
    /// AVX-512, 8-row-interleaved Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K on AVX2 and AVX-VNNI;
    /// with f32 activations Q5_0 and IQ4_NL widened to Q8_0 on AVX2 and AVX-VNNI (the
    /// default: a copy of those matrices, the same logits bit for bit, faster decoding).
    Auto = 0,
    /// Use every matrix as stored (no copy).
    Off = 1,
}

/// How weights are kept in memory (the values of `RmlDecoderOptions::weight_format`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmlWeightFormat {
    /// As stored in the file, used in place (the default).
    AsStored = 0,
    /// f32 / f16 / bf16 matrices quantized to Q8_0 once at load.
    Q8_0 = 1,
}

/// Options of `rml_decoder_new`. All zeros (`RmlDecoderOptions opts = {0};`) means the
/// defaults, which `rml_decoder_options_default` also returns. Enumerated fields are plain
/// integers so that any value C stores can be checked: an unknown one is an error.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmlDecoderOptions {
    /// Threads working on each step, the caller's included; 0: `RML_NUM_THREADS` or the
    /// number of performance cores; 1: no worker threads at all. At most 1024.
    pub threads: u32,
    /// One of `RmlSchedule`; 0 (`RML_SCHEDULE_DEFAULT`) by default.
    pub schedule: u32,
    /// Rows per chunk at least, for `RML_SCHEDULE_GRAIN` only (0 means 1).
    pub grain: u32,
    /// One of `RmlActivations`; 0 (`RML_ACTIVATIONS_INT8`) by default.
    pub activations: u32,
    /// One of `RmlWeightFormat`; 0 (`RML_WEIGHT_FORMAT_AS_STORED`) by default.
    pub weight_format: u32,
    /// Positions the KV cache holds (prompt + generated tokens); 0:
    /// `min(max_position_embeddings, 4096)`. At most `max_position_embeddings`.
    pub context_len: usize,
    /// The most prompt tokens run through the layers at once (bounds the scratch memory);
    /// 0 means 128 (`DecoderOptions::prefill_chunk`'s default).
    pub prefill_chunk: usize,
    /// One of `RmlKvCache`; 0 (`RML_KV_CACHE_F32`) by default.
    pub kv_cache: u32,
    /// One of `RmlRepack`; 0 (`RML_REPACK_AUTO`) by default. Added after `kv_cache` (in the
    /// struct's former tail padding, so its size did not change): a caller that fills the
    /// struct field by field must set it too, or start from `rml_decoder_options_default()`
    /// or `{0}`; a stray value is refused (`RML_STATUS_INVALID_ARGUMENT`).
    pub repack: u32,
}

/// The default decoder options (all zeros: default threads, `RML_SCHEDULE_DEFAULT`,
/// int8 activations, weights as stored, default context, prefill chunks of 128, f32 KV cache,
/// matrices repacked where the kernels gain from it).
#[no_mangle]
pub extern "C" fn rml_decoder_options_default() -> RmlDecoderOptions {
    RmlDecoderOptions::default()
}

/// The most threads `RmlDecoderOptions::threads` may ask for.
const MAX_THREADS: u32 = 1024;

fn schedule_of(o: &RmlDecoderOptions) -> Result<Schedule> {
    Schedule::from_code(o.schedule, o.grain.max(1) as usize).map_err(|_| {
        Error::invalid_argument(format_args!(
            "options.schedule {} is not an RmlSchedule (0..=9)",
            o.schedule
        ))
    })
}

/// What a live `RmlDecoder` handle holds. Field order is drop order: the decoder borrows the
/// pool and the model's bytes, so it goes first.
pub(crate) struct DecoderState {
    decoder: DecoderLM<'static>,
    _pool: Option<Arc<ThreadPool>>,
    _model: Arc<ModelInner>,
}

// SAFETY: the one field that is not `Send` by its type is the decoder's `&dyn Executor`, which
// points at this state's own `ThreadPool` or at the `InlineExecutor`, both `Sync` (asserted
// below), so the state may move to another thread. Every other part (weights borrowed from
// the model's bytes, aligned blocks) is plain data.
unsafe impl Send for DecoderState {}

const _: () = {
    const fn sync<T: Sync>() {}
    sync::<ThreadPool>();
    sync::<InlineExecutor>();
};

fn new_state(model: Arc<ModelInner>, o: &RmlDecoderOptions) -> Result<DecoderState> {
    if o.threads > MAX_THREADS {
        return Err(Error::invalid_argument(format_args!(
            "options.threads {} is above the limit of {MAX_THREADS}",
            o.threads
        )));
    }
    let schedule = schedule_of(o)?;
    let activations = match o.activations {
        0 => Activations::Int8,
        1 => Activations::Int8Plain,
        2 => Activations::F32,
        3 => Activations::Mixed,
        a => {
            return Err(Error::invalid_argument(format_args!(
                "options.activations {a} is not an RmlActivations (0 = INT8, 1 = INT8_PLAIN, \
                 2 = F32, 3 = MIXED)"
            )))
        }
    };
    let weight_format = match o.weight_format {
        0 => WeightFormat::AsStored,
        1 => WeightFormat::Q8_0,
        w => {
            return Err(Error::invalid_argument(format_args!(
                "options.weight_format {w} is not an RmlWeightFormat (0 = AS_STORED, 1 = Q8_0)"
            )))
        }
    };
    let kv_dtype = match o.kv_cache {
        0 => KvDtype::F32,
        1 => KvDtype::F16,
        k => {
            return Err(Error::invalid_argument(format_args!(
                "options.kv_cache {k} is not an RmlKvCache (0 = F32, 1 = F16)"
            )))
        }
    };
    let repack_weights = match o.repack {
        0 => true,
        1 => false,
        r => {
            return Err(Error::invalid_argument(format_args!(
                "options.repack {r} is not an RmlRepack (0 = AUTO, 1 = OFF)"
            )))
        }
    };
    let max = model.config.max_position_embeddings;
    if o.context_len > max {
        return Err(Error::invalid_argument(format_args!(
            "options.context_len {} is above the model's max_position_embeddings {max}",
            o.context_len
        )));
    }
    let options = DecoderOptions {
        context_len: (o.context_len > 0).then_some(o.context_len),
        activations,
        weight_format,
        prefill_chunk: if o.prefill_chunk == 0 { 128 } else { o.prefill_chunk },
        schedule: Some(schedule),
        kv_dtype,
        repack_weights,
        ..DecoderOptions::default()
    };
    let threads = if o.threads == 0 { ThreadPool::default_threads() } else { o.threads as usize };
    let pool = if threads > 1 {
        Some(Arc::new(ThreadPool::builder().threads(threads).schedule(schedule).build()?))
    } else {
        None
    };
    let exec: &'static dyn Executor = match &pool {
        // SAFETY: the pool lives on the heap inside the `Arc`, which the state keeps (and
        // drops after the decoder that borrows it; see `DecoderState`).
        Some(p) => unsafe { &*Arc::as_ptr(p) },
        None => &InlineExecutor,
    };
    let decoder = model.with_source(|src| DecoderLM::new(&model.config, src, exec, options))?;
    Ok(DecoderState { decoder, _pool: pool, _model: model })
}

fn decoder_arc(dec: *const RmlDecoder) -> Result<Arc<Mutex<DecoderState>>> {
    handles::get(dec.addr(), "RmlDecoder", |o| match o {
        Object::Decoder(d) => Some(d.clone()),
        _ => None,
    })
}

/// Locks a decoder for one call. A decoder whose previous call panicked is refused: its cache
/// may be half-written.
fn lock(d: &Mutex<DecoderState>) -> Result<MutexGuard<'_, DecoderState>> {
    d.lock().map_err(|_| {
        Error::internal("this decoder is unusable: an earlier call on it panicked (a bug in rml)")
    })
}

/// Makes a decoder for `model`: allocates its KV cache (f32, `context_len` positions), logits
/// and scratch memory and starts its threads. `options == NULL` means the defaults. The
/// decoder keeps the model's bytes alive: the model handle may be freed first.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `out`, a handle that is not a live
/// model, or an option out of range (an unknown schedule, activations or weight format,
/// more than 1024 threads, a context length above `max_position_embeddings`), named in
/// `rml_last_error`; `RML_STATUS_RESOURCE_EXHAUSTED` if the memory cannot be allocated;
/// `RML_STATUS_UNIMPLEMENTED` or `RML_STATUS_DATA_LOSS` for weights rml cannot use.
/// `*out` is set to the new decoder, or to `NULL` on failure.
///
/// # Safety
///
/// `options` must be `NULL` or point to an `RmlDecoderOptions`; `out` must be valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn rml_decoder_new(
    model: *const RmlModel,
    options: *const RmlDecoderOptions,
    out: *mut *mut RmlDecoder,
) -> RmlStatus {
    ffi_call("rml_decoder_new", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        let m = model_arc(model)?;
        let o = if options.is_null() {
            RmlDecoderOptions::default()
        } else {
            // SAFETY: not null; the C caller's contract. Every field is an integer, so any
            // bit pattern is a valid value (checked below).
            unsafe { options.read() }
        };
        let state = new_state(m, &o)?;
        let h = handles::insert(Object::Decoder(Arc::new(Mutex::new(state))))?;
        // SAFETY: the C caller's contract for `out` (checked non-null above).
        unsafe { write_out(out, "out", core::ptr::without_provenance_mut(h)) }
    })
}

/// Writes a logits slice's address and length to the out-parameters.
///
/// # Safety
///
/// Both pointers must be valid for a write.
unsafe fn put_logits(l: &[f32], logits: *mut *const f32, n: *mut usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        write_out(logits, "logits", l.as_ptr())?;
        write_out(n, "n_logits", l.len())
    }
}

/// Runs `n_tokens` prompt tokens through the model after what is cached (matrix-matrix
/// products, `prefill_chunk` tokens at a time) and returns the logits of the last one:
/// `*logits` points to `*n_logits` floats (`vocab_size`), owned by the decoder and valid until
/// its next call (`prefill`, `decode`, `rewind`, `free`).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer, `n_tokens == 0` or a handle
/// that is not a live decoder; `RML_STATUS_OUT_OF_RANGE` if a token id is past the vocabulary
/// or the tokens do not fit in the context. Nothing is cached when an error is returned.
///
/// # Safety
///
/// `tokens` must point to `n_tokens` ids; `logits` and `n_logits` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_decoder_prefill(
    dec: *mut RmlDecoder,
    tokens: *const u32,
    n_tokens: usize,
    logits: *mut *const f32,
    n_logits: *mut usize,
) -> RmlStatus {
    ffi_call("rml_decoder_prefill", || {
        super::non_null(logits, "logits")?;
        super::non_null(n_logits, "n_logits")?;
        if n_tokens == 0 {
            return Err(Error::invalid_argument("n_tokens is 0: nothing to prefill"));
        }
        // SAFETY: the C caller's contract; read before anything else runs.
        let ids = unsafe { slice_arg(tokens, n_tokens, "tokens")? };
        let d = decoder_arc(dec)?;
        let mut s = lock(&d)?;
        let l = s.decoder.prefill(ids)?;
        // SAFETY: both checked non-null above; the C caller's contract.
        unsafe { put_logits(l, logits, n_logits) }
    })
}

/// Runs one token through the model at the next position (matrix-vector products) and
/// returns its logits, as `rml_decoder_prefill` does.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer or a handle that is not a live
/// decoder; `RML_STATUS_OUT_OF_RANGE` if `token` is past the vocabulary or the context is
/// full.
///
/// # Safety
///
/// `logits` and `n_logits` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_decoder_decode(
    dec: *mut RmlDecoder,
    token: u32,
    logits: *mut *const f32,
    n_logits: *mut usize,
) -> RmlStatus {
    ffi_call("rml_decoder_decode", || {
        super::non_null(logits, "logits")?;
        super::non_null(n_logits, "n_logits")?;
        let d = decoder_arc(dec)?;
        let mut s = lock(&d)?;
        let l = s.decoder.decode(token)?;
        // SAFETY: both checked non-null above; the C caller's contract.
        unsafe { put_logits(l, logits, n_logits) }
    })
}

/// Writes the number of cached positions (the position of the next token) to `*position`.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer or a handle that is not a live
/// decoder.
///
/// # Safety
///
/// `position` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_decoder_position(
    dec: *const RmlDecoder,
    position: *mut usize,
) -> RmlStatus {
    ffi_call("rml_decoder_position", || {
        let d = decoder_arc(dec)?;
        let p = lock(&d)?.decoder.position();
        // SAFETY: the C caller's contract.
        unsafe { write_out(position, "position", p) }
    })
}

/// Writes the decoder's context length (positions its KV cache holds) to `*context_len`.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer or a handle that is not a live
/// decoder.
///
/// # Safety
///
/// `context_len` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_decoder_context_len(
    dec: *const RmlDecoder,
    context_len: *mut usize,
) -> RmlStatus {
    ffi_call("rml_decoder_context_len", || {
        let d = decoder_arc(dec)?;
        let c = lock(&d)?.decoder.context_len();
        // SAFETY: the C caller's contract.
        unsafe { write_out(context_len, "context_len", c) }
    })
}

/// Forgets every cached position from `position` on (0 empties the cache), so that
/// generation can resume from there.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live decoder;
/// `RML_STATUS_OUT_OF_RANGE` if `position` is past the current position.
#[no_mangle]
pub extern "C" fn rml_decoder_rewind(dec: *mut RmlDecoder, position: usize) -> RmlStatus {
    ffi_call("rml_decoder_rewind", || {
        let d = decoder_arc(dec)?;
        let mut s = lock(&d)?;
        s.decoder.rewind(position)
    })
}

/// Releases a decoder: its cache, scratch memory and threads (joined before this returns, or
/// when a call still running on another thread ends). `dec == NULL` does nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live decoder (freed
/// already, say); nothing is freed then.
#[no_mangle]
pub extern "C" fn rml_decoder_free(dec: *mut RmlDecoder) -> RmlStatus {
    ffi_call("rml_decoder_free", || {
        drop(handles::remove(dec.addr(), "RmlDecoder")?);
        Ok(())
    })
}
