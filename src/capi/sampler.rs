//! `RmlSampler`: picks the next token from logits (greedy, temperature, top-k, top-p,
//! repetition penalty, seeded).

use alloc::sync::Arc;
use std::sync::{Mutex, MutexGuard};

use super::handles::{self, Object};
use super::model::clear_out;
use super::{ffi_call, slice_arg, write_out, RmlStatus};
use crate::error::{Error, Result};
use crate::model::{Sampler, SamplerConfig};

/// A sampler (opaque) for one vocabulary size. Made by `rml_sampler_new`, released by
/// `rml_sampler_free`.
pub struct RmlSampler {
    _opaque: [u8; 0],
}

/// Options of `rml_sampler_new`, applied in Hugging Face `generate`'s order: repetition
/// penalty, temperature, top-k, top-p, then a draw. All zeros
/// (`RmlSamplerOptions opts = {0};`) is greedy decoding, as
/// `rml_sampler_options_default` returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RmlSamplerOptions {
    /// Softmax temperature; 0 is greedy (argmax, ties to the lower id). Finite, `>= 0`.
    pub temperature: f32,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in
    /// `(0, 1]`; 0 or 1 keep all.
    pub top_p: f32,
    /// Divide the logit of a token already seen (recorded prompt or sampled) by this if
    /// positive, multiply if negative; 0 or 1 is off. Otherwise `> 0`.
    pub repetition_penalty: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Seed of the random stream (a PCG-64): the same seed, options and logits give the same
    /// tokens on every platform.
    pub seed: u64,
}

/// Greedy decoding: all zeros.
#[no_mangle]
pub extern "C" fn rml_sampler_options_default() -> RmlSamplerOptions {
    RmlSamplerOptions::default()
}

fn config_of(o: &RmlSamplerOptions) -> SamplerConfig {
    SamplerConfig {
        temperature: o.temperature,
        top_k: o.top_k,
        top_p: if o.top_p == 0.0 { 1.0 } else { o.top_p },
        repetition_penalty: if o.repetition_penalty == 0.0 { 1.0 } else { o.repetition_penalty },
        seed: o.seed,
    }
}

fn sampler_arc(s: *const RmlSampler) -> Result<Arc<Mutex<Sampler>>> {
    handles::get(s.addr(), "RmlSampler", |o| match o {
        Object::Sampler(s) => Some(s.clone()),
        _ => None,
    })
}

fn lock(s: &Mutex<Sampler>) -> Result<MutexGuard<'_, Sampler>> {
    s.lock().map_err(|_| {
        Error::internal("this sampler is unusable: an earlier call on it panicked (a bug in rml)")
    })
}

/// Makes a sampler for logits of `vocab_size` floats (the model's vocabulary, from
/// `rml_model_info`). `options == NULL` means greedy. Allocates its buffers once: sampling
/// allocates nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `out`, `vocab_size` 0 or above
/// 2^32 - 1, or an option out of range (a negative or NaN temperature, `top_p` outside
/// `[0, 1]`, a negative penalty), named in `rml_last_error`. `*out` is set to the new
/// sampler, or to `NULL` on failure.
///
/// # Safety
///
/// `options` must be `NULL` or point to an `RmlSamplerOptions`; `out` must be valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn rml_sampler_new(
    options: *const RmlSamplerOptions,
    vocab_size: usize,
    out: *mut *mut RmlSampler,
) -> RmlStatus {
    ffi_call("rml_sampler_new", || {
        // SAFETY: the C caller's contract.
        unsafe { clear_out(out)? };
        let o = if options.is_null() {
            RmlSamplerOptions::default()
        } else {
            // SAFETY: not null; the C caller's contract. Every field is a number, any bit
            // pattern is valid (NaN is checked by the sampler).
            unsafe { options.read() }
        };
        let s = Sampler::new(config_of(&o), vocab_size)?;
        let h = handles::insert(Object::Sampler(Arc::new(Mutex::new(s))))?;
        // SAFETY: the C caller's contract (checked non-null above).
        unsafe { write_out(out, "out", core::ptr::without_provenance_mut(h)) }
    })
}

/// Picks the next token from `n_logits` logits (one per vocabulary entry; NaN counts as
/// -infinity), writes it to `*token` and records it as seen (for the repetition penalty).
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` pointer, a handle that is not a live
/// sampler, or `n_logits` other than the sampler's vocabulary size.
///
/// # Safety
///
/// `logits` must point to `n_logits` floats; `token` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rml_sampler_sample(
    sampler: *mut RmlSampler,
    logits: *const f32,
    n_logits: usize,
    token: *mut u32,
) -> RmlStatus {
    ffi_call("rml_sampler_sample", || {
        super::non_null(token, "token")?;
        if n_logits == 0 {
            return Err(Error::invalid_argument("n_logits is 0"));
        }
        // SAFETY: the C caller's contract.
        let l = unsafe { slice_arg(logits, n_logits, "logits")? };
        let s = sampler_arc(sampler)?;
        let id = lock(&s)?.sample(l)?;
        // SAFETY: checked non-null above; the C caller's contract.
        unsafe { write_out(token, "token", id) }
    })
}

/// Records `n_tokens` ids as seen (the prompt), for the repetition penalty.
/// `tokens` may be `NULL` when `n_tokens` is 0.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a `NULL` `tokens` with `n_tokens > 0` or a
/// handle that is not a live sampler; `RML_STATUS_OUT_OF_RANGE` naming the first id past the
/// vocabulary (the ids before it are recorded).
///
/// # Safety
///
/// `tokens` must point to `n_tokens` ids.
#[no_mangle]
pub unsafe extern "C" fn rml_sampler_record(
    sampler: *mut RmlSampler,
    tokens: *const u32,
    n_tokens: usize,
) -> RmlStatus {
    ffi_call("rml_sampler_record", || {
        // SAFETY: the C caller's contract.
        let ids = unsafe { slice_arg(tokens, n_tokens, "tokens")? };
        let s = sampler_arc(sampler)?;
        let mut s = lock(&s)?;
        s.record(ids)
    })
}

/// Forgets the seen tokens and restarts the random stream from the seed.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live sampler.
#[no_mangle]
pub extern "C" fn rml_sampler_reset(sampler: *mut RmlSampler) -> RmlStatus {
    ffi_call("rml_sampler_reset", || {
        let s = sampler_arc(sampler)?;
        lock(&s)?.reset();
        Ok(())
    })
}

/// Releases a sampler. `sampler == NULL` does nothing.
///
/// Errors: `RML_STATUS_INVALID_ARGUMENT` for a handle that is not a live sampler (freed
/// already, say); nothing is freed then.
#[no_mangle]
pub extern "C" fn rml_sampler_free(sampler: *mut RmlSampler) -> RmlStatus {
    ffi_call("rml_sampler_free", || {
        drop(handles::remove(sampler.addr(), "RmlSampler")?);
        Ok(())
    })
}
