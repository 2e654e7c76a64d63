//! Zero heap allocations per decode step after warm-up: a counting global allocator watches
//! 16 decode steps (plus sampling) of the tiny model, of every family's tiny fixture, of
//! K-quant GGUFs (tiny-qwen3 Q4_K_M: Q4_K and Q6_K matrices, Q8_K activations in int8 mode;
//! tiny-gemma3 Q4_K_M) and of SmolLM2, with the inline executor and with a thread pool, in both
//! activation modes, with the f32 and the f16 KV cache; and deep in a long context (decode
//! attention split into several cache segments, run in parallel).
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
use rml::model::{DecoderLM, DecoderOptions, KvDtype, Sampler, SamplerConfig};
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
            for (dir, model) in &families {
                let what = format!("{dir}, {name}, {act:?}");
                count_steps(&what, model.config(), &model, &*exec, act);
            }
            if let Some(model) = &smol {
                let what = format!("SmolLM2 Q4_1, {name}, {act:?}");
                count_steps(&what, model.config(), &model, &*exec, act);
            }
        }
    }
}
