//! Zero heap allocations per decode step after warm-up: a counting global allocator watches
//! 16 decode steps (plus sampling) of the tiny model, of every family's tiny fixture, of
//! K-quant GGUFs (tiny-qwen3 Q4_K_M: Q4_K and Q6_K matrices, Q8_K activations in int8 mode;
//! tiny-gemma3 Q4_K_M) and of SmolLM2, with the inline executor and with a thread pool, in both
//! activation modes, with the f32 and the f16 KV cache; and deep in a long context (decode
//! attention split into several cache segments, run in parallel). The same for 16 steps of a
//! 3-slot `DecoderBatch` mixing decode tokens with prefill chunks and a rewind.
//!
//! `harness = false`: the counter is process-wide and libtest allocates on its own threads
//! (its "has been running for over 60 seconds" notice, printed mid-test under AddressSanitizer,
//! was once counted as two allocations of a decode step), so this binary is its own `main`.

mod decoder_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use decoder_common::{data, leak_aligned, smollm2_gguf};
use rml::exec::Executor;
use rml::format::safetensors::SafeTensors;
use rml::format::TensorSource;
use rml::load::Model;
use rml::model::config::parse_config;
use rml::model::config::ModelConfig;
use rml::model::{
    DecoderBatch, DecoderLM, DecoderOptions, KvDtype, Sampler, SamplerConfig, SeqInput,
};
use rml::ops::Activations;
use rml::InlineExecutor;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, SeqCst);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Prompt, one warm-up step, then 16 counted steps of decode + sampling.
fn count_steps(
    what: &str,
    config: &ModelConfig,
    src: &dyn TensorSource<'_>,
    exec: &dyn Executor,
    activations: Activations,
) {
    for kv_dtype in [KvDtype::F32, KvDtype::F16] {
        let what = format!("{what}, {kv_dtype:?} KV");
        count_steps_at(&what, config, src, exec, activations, kv_dtype, 8);
    }
}

/// As [`count_steps`] with one KV type, after a prompt of `prompt_len` tokens.
fn count_steps_at(
    what: &str,
    config: &ModelConfig,
    src: &dyn TensorSource<'_>,
    exec: &dyn Executor,
    activations: Activations,
    kv_dtype: KvDtype,
    prompt_len: usize,
) {
    let opts = DecoderOptions {
        context_len: Some(prompt_len + 56),
        activations,
        kv_dtype,
        ..DecoderOptions::default()
    };
    let mut m = DecoderLM::new(config, src, exec, opts).unwrap();
    let sc = SamplerConfig {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        repetition_penalty: 1.1,
        seed: 7,
    };
    let mut sampler = Sampler::new(sc, config.vocab_size).unwrap();
    let prompt: Vec<u32> =
        [1u32, 17, 42, 99, 3, 128, 7, 64].into_iter().cycle().take(prompt_len).collect();
    sampler.record(&prompt).unwrap();
    let mut tok = sampler.sample(m.prefill(&prompt).unwrap()).unwrap();
    tok = sampler.sample(m.decode(tok).unwrap()).unwrap();
    let before = ALLOCATIONS.load(SeqCst);
    for _ in 0..16 {
        tok = sampler.sample(m.decode(tok).unwrap()).unwrap();
    }
    let allocs = ALLOCATIONS.load(SeqCst) - before;
    eprintln!("{what}: {allocs} allocations in 16 decode steps");
    assert_eq!(allocs, 0, "{what}: 16 decode steps allocated {allocs} times");
}

/// A 3-slot `DecoderBatch`: slots 0 and 1 prefilled, then 16 counted steps mixing their decode
/// tokens with prefill chunks of slot 2 (restarted by `rewind` when full) and sampling.
fn count_batch_steps(
    what: &str,
    config: &ModelConfig,
    src: &dyn TensorSource<'_>,
    exec: &dyn Executor,
    activations: Activations,
) {
    let opts = DecoderOptions {
        context_len: Some(40),
        activations,
        prefill_chunk: 8,
        ..DecoderOptions::default()
    };
    let mut b = DecoderBatch::new(config, src, exec, opts, 3).unwrap();
    let mut sampler = Sampler::new(SamplerConfig::default(), config.vocab_size).unwrap();
    let prompt = [1u32, 17, 42, 99, 3, 128, 7];
    b.step(&[SeqInput { slot: 0, tokens: &prompt }, SeqInput { slot: 1, tokens: &prompt[..1] }])
        .unwrap();
    let mut toks = [sampler.sample(b.logits(0)).unwrap(), sampler.sample(b.logits(1)).unwrap()];
    let before = ALLOCATIONS.load(SeqCst);
    for i in 0..16 {
        if b.position(2) + 5 > b.context_len() {
            b.rewind(2, 2).unwrap();
        }
        let (t0, t1) = ([toks[0]], [toks[1]]);
        let work = [
            SeqInput { slot: 1, tokens: &t1 },
            SeqInput { slot: 2, tokens: &prompt[i % 3..i % 3 + 5] },
            SeqInput { slot: 0, tokens: &t0 },
        ];
        b.step(&work).unwrap();
        toks = [sampler.sample(b.logits(2)).unwrap(), sampler.sample(b.logits(0)).unwrap()];
    }
    let allocs = ALLOCATIONS.load(SeqCst) - before;
    eprintln!("{what}: {allocs} allocations in 16 batch steps");
    assert_eq!(allocs, 0, "{what}: 16 batch steps allocated {allocs} times");
}

fn executors() -> Vec<(&'static str, Box<dyn Executor>)> {
    vec![
        ("inline", Box::new(InlineExecutor)),
        ("2-thread pool", Box::new(rml::exec::ThreadPool::new(2))),
    ]
}

fn main() {
    decode_steps_allocate_nothing();
    eprintln!("decoder_alloc: ok");
}

fn decode_steps_allocate_nothing() {
    let dir = data("tiny-llama/f32");
    let cfg = parse_config(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let st = SafeTensors::parse(leak_aligned(&dir.join("model.safetensors"))).unwrap();
    let smol = Some(Model::open(smollm2_gguf()).unwrap());
    let families: Vec<(&str, Model)> = [
        "tiny-qwen2",
        "tiny-qwen3",
        "tiny-gemma3",
        "tiny-llama3",
        "tiny-mistral",
        "tiny-qwen3/gguf/tiny-qwen3-Q4_K_M.gguf",
        "tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf",
    ]
    .into_iter()
    .map(|d| (d, Model::open(data(d)).unwrap()))
    .collect();
    // The K-quant files really hold K-quant matrices.
    for (dir, model) in &families[5..] {
        let k = model.tensor_infos().iter().filter(|t| t.dtype.name() == "Q4_K").count();
        assert!(k >= 10, "{dir}: {k} Q4_K tensors");
    }
    for (name, exec) in executors() {
        for act in [Activations::F32, Activations::Int8Plain, Activations::Int8] {
            count_steps(&format!("tiny f32, {name}, {act:?}"), &cfg, &st, &*exec, act);
            // 3 decode segments of 256 positions, attention run in parallel on the pool.
            let mut long = cfg.clone();
            long.max_position_embeddings = long.max_position_embeddings.max(700);
            for kv in [KvDtype::F32, KvDtype::F16] {
                let what = format!("tiny f32 at depth 600, {name}, {act:?}, {kv:?} KV");
                count_steps_at(&what, &long, &st, &*exec, act, kv, 600);
            }
            count_batch_steps(&format!("tiny f32 batch, {name}, {act:?}"), &cfg, &st, &*exec, act);
            for (dir, model) in &families {
                let what = format!("{dir}, {name}, {act:?}");
                count_steps(&what, model.config(), &model, &*exec, act);
                let what = format!("{dir} batch, {name}, {act:?}");
                count_batch_steps(&what, model.config(), &model, &*exec, act);
            }
            if let Some(model) = &smol {
                let what = format!("SmolLM2 Q4_1, {name}, {act:?}");
                count_steps(&what, model.config(), &model, &*exec, act);
                let what = format!("SmolLM2 Q4_1 batch, {name}, {act:?}");
                count_batch_steps(&what, model.config(), &model, &*exec, act);
            }
        }
    }
}
