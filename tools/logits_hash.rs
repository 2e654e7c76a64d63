//! Bit-identity check for structural changes: one line per (model, configuration) with a hash
//! of every logit bit a prefill plus a few decode steps produce.
//!
//! ```text
//! cargo run --release --features cli --example logits_hash > before.txt
//! # ... change the code ...
//! cargo run --release --features cli --example logits_hash > after.txt
//! diff before.txt after.txt   # must be empty
//! ```
//!
//! Models: every tiny fixture of `tests/data` (f32 safetensors and each GGUF type) and, when
//! present, SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M from `target/models/` (or
//! `$RML_SMOLLM2_GGUF` / `$RML_GEMMA3_GGUF`). Configurations: threads 1-3 × every
//! [`Schedule`] × the four activation modes × prefill chunks (7 and 64) × repack on/off for the
//! tiny files; a smaller sweep (threads 1-2, three schedules, f32 and int8, repack on/off) for
//! the real models. `RML_HASH_QUICK=1` runs only threads 1-2 and the default schedule.
//!
//! Each run prefills a fixed 40-token sequence (ids derived from the vocabulary size) and then
//! decodes 6 tokens greedily; the hash (FNV-1a, 64 bit) covers the logits of every prefill
//! position and every decode step, so any changed bit in any logit changes the line. Logits
//! must be identical across threads and schedules within one activation mode (the crate's
//! contract), so the tool also prints, per model and mode, how many distinct hashes it saw:
//! anything but 1 is a bug, whether or not the code changed. Each model and mode also runs the
//! same sequence as one slot of a [`DecoderBatch`] next to another sequence (one token per
//! step, so every position's logits come back) on 1 and 2 threads; its hash joins that count
//! without a line of its own, so a batched row that differs from the single one fails the run
//! while the printed lines stay comparable with older outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rml::exec::{Schedule, ThreadPool};
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderBatch, DecoderLM, DecoderOptions, SeqInput};
use rml::ops::Activations;
use rml::Result;

fn fnv(h: &mut u64, xs: &[f32]) {
    for x in xs {
        for b in x.to_bits().to_le_bytes() {
            *h ^= u64::from(b);
            *h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// The same run as [`run`] on slot 1 of a 2-slot [`DecoderBatch`], one token per step (so
/// every position's logits come back), while slot 0 prefills another prompt in chunks of 3
/// and then decodes alongside: the hash must equal [`run`]'s (each sequence's logits are the
/// same bits whatever shares its step).
fn run_batch(
    model: &Model,
    pool: &ThreadPool,
    act: Activations,
    schedule: Schedule,
) -> Result<u64> {
    let c = model.config();
    let vocab = c.vocab_size;
    let ids: Vec<u32> = (0..40u64).map(|i| ((i * 7919 + 13) % vocab as u64) as u32).collect();
    let other: Vec<u32> = (0..45u64).map(|i| ((i * 104_729 + 5) % vocab as u64) as u32).collect();
    let opts = DecoderOptions {
        context_len: Some(64),
        activations: act,
        schedule: Some(schedule),
        ..DecoderOptions::default()
    };
    let mut batch = DecoderBatch::new(c, &PackedSource::new(model)?, pool, opts, 2)?;
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let (mut fed, mut next) = (0, ids[0]);
    for step in 0..ids.len() + 6 {
        let tok = [if step < ids.len() { ids[step] } else { next }];
        let o = &other[(3 * step).min(other.len() - 1)..(3 * step + 3).min(other.len())];
        let mut work = vec![SeqInput { slot: 1, tokens: &tok }];
        if !o.is_empty() && fed + o.len() <= 64 {
            work.insert(0, SeqInput { slot: 0, tokens: o });
            fed += o.len();
        }
        batch.step(&work)?;
        let logits = batch.logits(work.len() - 1);
        if step + 1 >= ids.len() {
            next = argmax(logits);
        }
        fnv(&mut h, logits);
    }
    Ok(h)
}

/// One run: prefill + greedy decode, hashed.
fn run(
    model: &Model,
    pool: &ThreadPool,
    act: Activations,
    schedule: Schedule,
    chunk: usize,
    repack: bool,
) -> Result<u64> {
    let c = model.config();
    let vocab = c.vocab_size;
    let ids: Vec<u32> = (0..40u64).map(|i| ((i * 7919 + 13) % vocab as u64) as u32).collect();
    let opts = DecoderOptions {
        context_len: Some(64),
        activations: act,
        prefill_chunk: chunk,
        schedule: Some(schedule),
        repack_weights: repack,
        ..DecoderOptions::default()
    };
    let mut dec = DecoderLM::new(c, &PackedSource::new(model)?, pool, opts)?;
    let mut all = vec![0f32; ids.len() * vocab];
    dec.forward(&ids, Some(&mut all), None)?;
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, &all);
    let mut next = argmax(&all[(ids.len() - 1) * vocab..]);
    for _ in 0..6 {
        let logits = dec.decode(next)?;
        fnv(&mut h, logits);
        next = argmax(logits);
    }
    Ok(h)
}

fn models(root: &Path) -> Vec<(String, PathBuf, bool)> {
    let mut out = Vec::new();
    let tiny = |rel: &str| (rel.to_string(), root.join("tests/data").join(rel), true);
    out.push(tiny("tiny-llama/f32"));
    for dir in [
        "tiny-llama-gguf",
        "tiny-gemma3/gguf",
        "tiny-llama3/gguf",
        "tiny-qwen2/gguf",
        "tiny-qwen3/gguf",
    ] {
        let mut files: Vec<_> = std::fs::read_dir(root.join("tests/data").join(dir))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|e| e == "gguf") {
                let name = format!("{dir}/{}", f.file_name().unwrap().to_string_lossy());
                out.push((name, f, true));
            }
        }
    }
    for dir in ["tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-llama3", "tiny-gemma3"] {
        let p = root.join("tests/data").join(dir);
        if p.join("model.safetensors").exists() {
            out.push((dir.to_string(), p, true));
        }
    }
    let real = |env: &str, file: &str| {
        std::env::var_os(env)
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/models").join(file))
    };
    for (env, file) in [
        ("RML_SMOLLM2_GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("RML_GEMMA3_GGUF", "gemma-3-270m-q4_k_m.gguf"),
    ] {
        let p = real(env, file);
        if p.exists() {
            out.push((file.to_string(), p, false));
        } else {
            eprintln!("note: {} not found: skipped (.ci/fetch-model.sh fetches it)", p.display());
        }
    }
    out
}

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let quick = std::env::var_os("RML_HASH_QUICK").is_some();
    let pools: Vec<ThreadPool> =
        (1..=3).map(|t| ThreadPool::builder().threads(t).build()).collect::<Result<_>>()?;
    let all_schedules = [
        Schedule::Grain(1),
        Schedule::Static,
        Schedule::Fixed8,
        Schedule::Proportional2,
        Schedule::Proportional4,
        Schedule::Adaptive,
        Schedule::Owned,
    ];
    let modes = [
        ("f32", Activations::F32),
        ("int8", Activations::Int8),
        ("int8-plain", Activations::Int8Plain),
        ("mixed", Activations::Mixed),
    ];
    println!("# kernels {}", rml::kernels::active()?.isa());
    let mut bad = 0;
    for (name, path, tiny) in models(root) {
        let model = Model::open(&path)?;
        let threads: &[usize] = if quick || !tiny { &[1, 2] } else { &[1, 2, 3] };
        let schedules: &[Schedule] = if quick {
            &all_schedules[..1]
        } else if tiny {
            &all_schedules
        } else {
            &all_schedules[..3]
        };
        let chunks: &[usize] = if tiny { &[7, 64] } else { &[64] };
        let modes: &[(&str, Activations)] = if tiny { &modes } else { &modes[..2] };
        let mut per_mode: BTreeMap<&str, BTreeMap<u64, usize>> = BTreeMap::new();
        for &(mode, act) in modes {
            for &t in threads {
                for &s in schedules {
                    for &chunk in chunks {
                        for repack in [false, true] {
                            let h = run(&model, &pools[t - 1], act, s, chunk, repack)?;
                            println!(
                                "{name} {mode} t{t} {s:?} chunk{chunk} repack{} {h:016x}",
                                u8::from(repack)
                            );
                            *per_mode.entry(mode).or_default().entry(h).or_default() += 1;
                        }
                    }
                }
            }
        }
        // A batched sequence hashes as the single one (not printed: the lines stay those of
        // the single runs; a difference shows as a second hash below).
        for &(mode, act) in modes {
            for &t in threads {
                let h = run_batch(&model, &pools[t - 1], act, schedules[0])?;
                *per_mode.entry(mode).or_default().entry(h).or_default() += 1;
            }
        }
        for (mode, hashes) in per_mode {
            if hashes.len() != 1 {
                bad += 1;
                eprintln!("DIFFER: {name} {mode}: {} distinct hashes {hashes:?}", hashes.len());
            }
        }
    }
    if bad > 0 {
        eprintln!("{bad} model/mode pairs are not bit-identical across threads/schedules/chunks");
        std::process::exit(1);
    }
    Ok(())
}
