//! The C ABI (feature `capi`) called from Rust: the tiny Llama through `rml_*` functions gives
//! PyTorch's greedy tokens and the same logits as `DecoderLM` itself; its Q8_0 GGUF opened from
//! a path, from copied bytes and from borrowed bytes gives PyTorch's tokens; SmolLM2 (if present)
//! generates its reference continuation with its own tokenizer; handles are checked (double
//! free, wrong kind, stale). features/c-api/errors.c checks every error path from C.
#![cfg(feature = "capi")]

mod decoder_common;

use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};

use decoder_common::{data, smollm2_gguf, Reference};
use rml::capi::*;
use rml::load::Model;
use rml::model::{DecoderLM, DecoderOptions, WeightFormat};
use rml::ops::Activations;
use rml::InlineExecutor;

fn last_error() -> String {
    // SAFETY: rml_last_error always returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(rml_last_error()) }.to_string_lossy().into_owned()
}

#[track_caller]
fn ok(s: RmlStatus) {
    assert_eq!(s, RmlStatus::Ok, "{}", last_error());
}

fn cpath(p: &std::path::Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

fn open(p: &std::path::Path) -> *mut RmlModel {
    let mut m = null_mut();
    // SAFETY: a valid C string and out-pointer.
    ok(unsafe { rml_model_open(cpath(p).as_ptr(), &mut m) });
    m
}

/// Prefills `prompt`, then takes `n` greedy tokens through the C ABI.
fn greedy(dec: *mut RmlDecoder, vocab: usize, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = null_mut();
    let mut out = Vec::new();
    let (mut logits, mut nl) = (null(), 0usize);
    // SAFETY: valid pointers and lengths throughout; the logits are read before the next call.
    unsafe {
        ok(rml_sampler_new(null(), vocab, &mut s));
        ok(rml_decoder_prefill(dec, prompt.as_ptr(), prompt.len(), &mut logits, &mut nl));
        assert_eq!(nl, vocab);
        for i in 0..n {
            let mut t = 0;
            ok(rml_sampler_sample(s, logits, nl, &mut t));
            out.push(t);
            if i + 1 < n {
                ok(rml_decoder_decode(dec, t, &mut logits, &mut nl));
            }
        }
    }
    ok(rml_sampler_free(s));
    out
}

#[test]
fn tiny_llama_through_the_c_abi_matches_pytorch_and_the_rust_decoder() {
    let dir = data("tiny-llama/f32");
    let r = Reference::open(&dir.join("reference.safetensors"));
    let (prompt, want) = (r.tokens("prompt"), r.tokens("generated"));
    let m = open(&dir);
    let mut info = RmlModelInfo::default();
    // SAFETY: valid handle and out-pointer.
    ok(unsafe { rml_model_info(m, &mut info) });
    for threads in [1, 2] {
        let opts = RmlDecoderOptions {
            threads,
            context_len: prompt.len() + want.len(),
            ..rml_decoder_options_default()
        };
        let mut d = null_mut();
        // SAFETY: valid handle, options and out-pointer.
        ok(unsafe { rml_decoder_new(m, &opts, &mut d) });
        assert_eq!(greedy(d, info.vocab_size, &prompt, want.len()), want, "{threads} threads");

        // The logits after the prompt are bit-identical to DecoderLM's own.
        let model = Model::open(&dir).unwrap();
        let mut rust = DecoderLM::new(
            model.config(),
            &&model,
            &InlineExecutor,
            DecoderOptions { context_len: Some(prompt.len()), ..DecoderOptions::default() },
        )
        .unwrap();
        let direct = rust.prefill(&prompt).unwrap().to_vec();
        ok(rml_decoder_rewind(d, 0));
        let (mut l, mut n) = (null(), 0);
        // SAFETY: valid pointers; the logits are read before the decoder's next call.
        let via_c = unsafe {
            ok(rml_decoder_prefill(d, prompt.as_ptr(), prompt.len(), &mut l, &mut n));
            std::slice::from_raw_parts(l, n).to_vec()
        };
        assert_eq!(via_c, direct);
        ok(rml_decoder_free(d));
    }
    ok(rml_model_free(m));
}

#[test]
fn the_f16_kv_cache_option_reaches_the_decoder() {
    let dir = data("tiny-llama/f32");
    let r = Reference::open(&dir.join("reference.safetensors"));
    let prompt = r.tokens("prompt");
    let m = open(&dir);
    let model = Model::open(&dir).unwrap();
    let opts = DecoderOptions {
        context_len: Some(prompt.len()),
        kv_dtype: rml::model::KvDtype::F16,
        ..DecoderOptions::default()
    };
    let mut rust = DecoderLM::new(model.config(), &&model, &InlineExecutor, opts).unwrap();
    let direct = rust.prefill(&prompt).unwrap().to_vec();
    let opts = RmlDecoderOptions {
        threads: 1,
        context_len: prompt.len(),
        kv_cache: RmlKvCache::F16 as u32,
        ..rml_decoder_options_default()
    };
    let mut d = null_mut();
    let (mut l, mut n) = (null(), 0);
    // SAFETY: valid handle, options and out-pointers; the logits are read before the
    // decoder's next call.
    let via_c = unsafe {
        ok(rml_decoder_new(m, &opts, &mut d));
        ok(rml_decoder_prefill(d, prompt.as_ptr(), prompt.len(), &mut l, &mut n));
        std::slice::from_raw_parts(l, n).to_vec()
    };
    assert_eq!(via_c, direct);
    ok(rml_decoder_free(d));
    let bad = RmlDecoderOptions { kv_cache: 2, ..rml_decoder_options_default() };
    let mut d = null_mut();
    // SAFETY: valid handle, options and out-pointer.
    let status = unsafe { rml_decoder_new(m, &bad, &mut d) };
    assert_ne!(status, RmlStatus::Ok, "kv_cache 2 must be refused");
    assert!(d.is_null());
    ok(rml_model_free(m));
}

/// `RmlDecoderOptions::repack`: AUTO (the default) and OFF give the same logits bit for bit on
/// a file with Q5_0 matrices (repacked or not, see tests/decoder_gguf_types.rs), and an
/// unknown value is refused.
#[test]
fn the_repack_option_reaches_the_decoder() {
    let m = open(&data("tiny-llama-gguf/tiny-llama-Q4_K_M.gguf"));
    let prompt = [1u32, 17, 42, 99, 7];
    let mut logits = Vec::new();
    for repack in [RmlRepack::Auto as u32, RmlRepack::Off as u32] {
        let opts = RmlDecoderOptions { threads: 1, repack, ..rml_decoder_options_default() };
        let (mut d, mut l, mut n) = (null_mut(), null(), 0);
        // SAFETY: valid pointers; the logits are read before the decoder's next call.
        logits.push(unsafe {
            ok(rml_decoder_new(m, &opts, &mut d));
            ok(rml_decoder_prefill(d, prompt.as_ptr(), prompt.len(), &mut l, &mut n));
            std::slice::from_raw_parts(l, n).iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        });
        ok(rml_decoder_free(d));
    }
    assert_eq!(logits[0], logits[1]);
    let bad = RmlDecoderOptions { repack: 2, ..rml_decoder_options_default() };
    let mut d = null_mut();
    // SAFETY: valid handle, options and out-pointer.
    let status = unsafe { rml_decoder_new(m, &bad, &mut d) };
    assert_ne!(status, RmlStatus::Ok, "repack 2 must be refused");
    assert!(d.is_null());
    ok(rml_model_free(m));
}

#[test]
fn gguf_bytes_copied_or_borrowed_give_pytorchs_tokens_as_the_file_does() {
    let path = data("tiny-llama-gguf/tiny-llama-Q8_0.gguf");
    let r = Reference::open(&data("tiny-llama-gguf/reference_Q8_0.safetensors"));
    let (prompt, want) = (r.tokens("prompt"), r.tokens("generated"));
    let bytes = std::fs::read(&path).unwrap();
    let mut runs = Vec::new();
    let (mut copied, mut borrowed) = (null_mut(), null_mut());
    // SAFETY: `bytes` outlives every object made from the borrowed model (freed below).
    unsafe {
        ok(rml_model_open_bytes(bytes.as_ptr(), bytes.len(), &mut copied));
        ok(rml_model_open_bytes_borrowed(bytes.as_ptr(), bytes.len(), &mut borrowed));
    }
    for m in [open(&path), copied, borrowed] {
        let mut info = RmlModelInfo::default();
        let mut d = null_mut();
        // SAFETY: valid handles and out-pointers.
        unsafe {
            ok(rml_model_info(m, &mut info));
            ok(rml_decoder_new(m, null(), &mut d));
        }
        ok(rml_model_free(m));
        runs.push(greedy(d, info.vocab_size, &prompt, want.len()));
        ok(rml_decoder_free(d));
    }
    for run in runs {
        assert_eq!(run, want);
    }
    drop(bytes);
}

/// The tokenizer of a model opened from GGUF bytes is the file's SentencePiece vocabulary;
/// `add_special` adds its BOS (`tokenizer.ggml.add_bos_token`), and decoding round-trips.
#[cfg(feature = "tokenizer")]
#[test]
fn tokenizer_from_gguf_bytes_adds_bos_on_request() {
    let bytes = std::fs::read(data("tiny-llama-gguf/tiny-llama-Q8_0.gguf")).unwrap();
    let (mut m, mut tok) = (null_mut(), null_mut());
    let text = "the cat";
    let (mut plain, mut special) = (vec![0u32; 32], vec![0u32; 32]);
    let (mut n0, mut n1, mut len) = (0, 0, 0);
    let mut back = vec![0u8; 64];
    // SAFETY: valid pointers, buffers and lengths throughout.
    unsafe {
        ok(rml_model_open_bytes(bytes.as_ptr(), bytes.len(), &mut m));
        ok(rml_tokenizer_from_model(m, &mut tok));
        ok(rml_model_free(m));
        let t = text.as_ptr().cast();
        ok(rml_tokenizer_encode(tok, t, text.len(), 0, plain.as_mut_ptr(), 32, &mut n0));
        ok(rml_tokenizer_encode(tok, t, text.len(), 1, special.as_mut_ptr(), 32, &mut n1));
        ok(rml_tokenizer_decode(tok, plain.as_ptr(), n0, back.as_mut_ptr().cast(), 64, &mut len));
    }
    assert!(n0 > 0);
    assert_eq!(n1, n0 + 1);
    assert_eq!(special[0], 1, "BOS");
    assert_eq!(special[1..n1], plain[..n0]);
    assert_eq!(std::str::from_utf8(&back[..len]).unwrap(), text);
    ok(rml_tokenizer_free(tok));
}

/// The options reach the decoder: int8 activations, Q8_0 weight conversion and every schedule
/// give the logits `DecoderLM` gives with the same options (bit for bit).
#[test]
fn decoder_options_reach_the_decoder() {
    let dir = data("tiny-llama/f32");
    let prompt = [1u32, 17, 42, 99, 3];
    let m = open(&dir);
    let model = Model::open(&dir).unwrap();
    for (activations, weight_format) in [(0, 0), (1, 1), (0, 1), (2, 1), (3, 1)] {
        let rust_opts = DecoderOptions {
            context_len: Some(8),
            activations: [
                Activations::Int8,
                Activations::Int8Plain,
                Activations::F32,
                Activations::Mixed,
            ][activations as usize],
            weight_format: [WeightFormat::AsStored, WeightFormat::Q8_0][weight_format as usize],
            ..DecoderOptions::default()
        };
        let mut rust = DecoderLM::new(model.config(), &&model, &InlineExecutor, rust_opts).unwrap();
        let want = rust.prefill(&prompt).unwrap().to_vec();
        for schedule in 0..10 {
            let opts = RmlDecoderOptions {
                threads: 2,
                schedule,
                grain: 3,
                activations,
                weight_format,
                context_len: 8,
                prefill_chunk: 2,
                kv_cache: 0,
                repack: 0,
            };
            let (mut d, mut l, mut n) = (null_mut(), null(), 0);
            // SAFETY: valid pointers; the logits are read before the decoder's next call.
            let got = unsafe {
                ok(rml_decoder_new(m, &opts, &mut d));
                ok(rml_decoder_prefill(d, prompt.as_ptr(), prompt.len(), &mut l, &mut n));
                std::slice::from_raw_parts(l, n).to_vec()
            };
            assert_eq!(got, want, "{opts:?}");
            ok(rml_decoder_free(d));
        }
    }
    ok(rml_model_free(m));
}

#[test]
fn handles_freed_twice_mistyped_or_invented_are_refused() {
    let m = open(&data("tiny-llama/f32"));
    let mut s = null_mut();
    // SAFETY: valid options pointer (NULL) and out-pointer.
    ok(unsafe { rml_sampler_new(null(), 512, &mut s) });
    assert_eq!(rml_decoder_free(s.cast()), RmlStatus::InvalidArgument);
    assert!(last_error().contains("is an RmlSampler, not an RmlDecoder"), "{}", last_error());
    ok(rml_model_free(m));
    assert_eq!(rml_model_free(m), RmlStatus::InvalidArgument);
    assert!(last_error().contains("not live"), "{}", last_error());
    let mut info = RmlModelInfo::default();
    // SAFETY: the handle is checked before anything is read; `info` is valid.
    assert_eq!(unsafe { rml_model_info(m, &mut info) }, RmlStatus::InvalidArgument);
    let local = 0u64;
    assert_eq!(
        rml_model_free((&local as *const u64).cast_mut().cast()),
        RmlStatus::InvalidArgument
    );
    ok(rml_sampler_free(s));
    assert_eq!(rml_sampler_free(s), RmlStatus::InvalidArgument);
    ok(rml_sampler_free(null_mut()));
    let mut d = null_mut();
    // SAFETY: the stale handle is refused before use; `d` is a valid out-pointer.
    assert_eq!(unsafe { rml_decoder_new(m, null(), &mut d) }, RmlStatus::InvalidArgument);
    assert!(d.is_null());
}

/// SmolLM2-135M-Instruct Q4_1 through the C ABI with its own tokenizer, greedy, f32
/// activations: the 16 tokens and the text of the reference continuation (the 17th reference
/// token, 260, would add " the").
#[cfg(feature = "tokenizer")]
#[test]
fn smollm2_continues_the_reference_prompt() {
    let path = smollm2_gguf();
    let r = Reference::open(&data("smollm2-135m/reference.safetensors"));
    let want =
        [8180, 3365, 20391, 617, 5732, 288, 1238, 281, 260, 2388, 30, 2306, 736, 1129, 685, 288];
    assert_eq!(r.tokens("generated")[..16], want);
    let m = open(&path);
    let mut tok = null_mut();
    let mut info = RmlModelInfo::default();
    let text = "Once upon a time, there was a little";
    let mut ids = vec![0u32; 64];
    let mut n = 0;
    // SAFETY: valid handles, buffers and lengths.
    unsafe {
        ok(rml_model_info(m, &mut info));
        ok(rml_tokenizer_from_model(m, &mut tok));
        ok(rml_tokenizer_encode(
            tok,
            text.as_ptr().cast(),
            text.len(),
            0,
            ids.as_mut_ptr(),
            64,
            &mut n,
        ));
    }
    ids.truncate(n);
    assert_eq!(ids, r.tokens("prompt"));
    let opts =
        RmlDecoderOptions { threads: 2, context_len: n + 16, ..rml_decoder_options_default() };
    let mut d = null_mut();
    // SAFETY: valid handle, options and out-pointer.
    ok(unsafe { rml_decoder_new(m, &opts, &mut d) });
    let got = greedy(d, info.vocab_size, &ids, 16);
    assert_eq!(got, want);
    let mut buf = vec![0u8; 256];
    let mut len = 0;
    // SAFETY: valid handle and buffers.
    ok(unsafe {
        rml_tokenizer_decode(
            tok,
            got.as_ptr(),
            got.len(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut len,
        )
    });
    assert_eq!(
        std::str::from_utf8(&buf[..len]).unwrap(),
        " girl named Emma who loved to play in the sun. She would often go to"
    );
    for s in [rml_decoder_free(d), rml_tokenizer_free(tok), rml_model_free(m)] {
        ok(s);
    }
}
