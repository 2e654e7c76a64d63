//! Aggregate decode throughput of a `DecoderBatch` with 1, 2, 4 and 8 concurrent sequences:
//! what batching several streams into one forward pass per step buys over one stream.
//!
//! ```text
//! cargo run --release --features std --example batch_throughput -- [MODEL.gguf] [TOKENS]
//! ```
//!
//! `MODEL` defaults to `$RML_SMOLLM2_GGUF`, else `target/models/SmolLM2-135M-Instruct.Q4_1.gguf`;
//! `TOKENS` (default 128) is how many tokens each stream generates. Threads: `$RML_NUM_THREADS`
//! (default 2). `BT_STREAMS=1,4` picks the stream counts, `BT_ROUNDS` (default 3) how many
//! interleaved rounds run (each stream count once per round; the best round counts, which is
//! the steadier figure on a machine shared with other work). Activations: int8 (the default
//! options).
//!
//! Each stream gets its own prompt of 16 tokens (prefilled before the clock starts), then all
//! decode greedily together, one token each per step. Printed: generated tokens per second
//! summed over the streams, milliseconds per step, and the ratio to the single stream of the
//! same run, then the median step of all rounds (milliseconds) and the ratio that gives (a
//! figure that the steps preempted by other work on a shared machine barely move). A
//! `DecoderLM` decoding alone runs in each round too, as the reference for the
//! one-stream row. Last, per stream count, the median step's process CPU time (all threads,
//! a pool worker's spinning included) and the ratio that gives: on a machine loaded by other
//! work, the one-thread CPU figures are the steadiest (a preempted step's CPU time does not
//! count the time it waited).

use std::path::PathBuf;
use std::time::Instant;

use rml::exec::ThreadPool;
use rml::load::Model;
use rml::model::{DecoderBatch, DecoderLM, DecoderOptions, SeqInput};
use rml::Result;

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Seconds of CPU time this process has used (all threads).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write; the clock id is a constant the OS knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Prompt `s` (16 ids derived from the stream index and the vocabulary size).
fn prompt(s: usize, vocab: usize) -> Vec<u32> {
    (0..16u64).map(|i| ((i * 7919 + s as u64 * 104_729 + 13) % vocab as u64) as u32).collect()
}

/// Seconds `streams` sequences take to generate `tokens` tokens each, decoding together;
/// each step's seconds are appended to `steps`.
fn batch_run(
    model: &Model,
    pool: &ThreadPool,
    opts: DecoderOptions,
    streams: usize,
    tokens: usize,
    steps: &mut Vec<f64>,
    cpu: &mut Vec<f64>,
) -> Result<f64> {
    let c = model.config();
    let mut b = DecoderBatch::new(c, &model, pool, opts, streams)?;
    let mut next = vec![[0u32; 1]; streams];
    for (s, next) in next.iter_mut().enumerate() {
        b.step(&[SeqInput { slot: s, tokens: &prompt(s, c.vocab_size) }])?;
        *next = [argmax(b.logits(0))];
    }
    let t0 = Instant::now();
    for _ in 0..tokens {
        let work: Vec<SeqInput<'_>> =
            next.iter().enumerate().map(|(s, t)| SeqInput { slot: s, tokens: t }).collect();
        let (ts, cs) = (Instant::now(), cpu_seconds());
        b.step(&work)?;
        steps.push(ts.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - cs);
        drop(work);
        for (i, n) in next.iter_mut().enumerate() {
            *n = [argmax(b.logits(i))];
        }
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// Seconds a `DecoderLM` alone takes to generate `tokens` tokens.
fn single_run(
    model: &Model,
    pool: &ThreadPool,
    opts: DecoderOptions,
    tokens: usize,
) -> Result<f64> {
    let c = model.config();
    let mut lm = DecoderLM::new(c, &model, pool, opts)?;
    let mut next = argmax(lm.prefill(&prompt(0, c.vocab_size))?);
    let t0 = Instant::now();
    for _ in 0..tokens {
        next = argmax(lm.decode(next)?);
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("RML_SMOLLM2_GGUF").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        })
    });
    let tokens: usize = args.next().map_or(128, |t| t.parse().expect("TOKENS: a number"));
    let env_num = |k: &str, d: usize| {
        std::env::var(k).ok().map_or(d, |v| v.parse().unwrap_or_else(|_| panic!("{k}: a number")))
    };
    let threads = env_num("RML_NUM_THREADS", 2);
    let rounds = env_num("BT_ROUNDS", 3).max(1);
    let streams: Vec<usize> = std::env::var("BT_STREAMS").map_or(vec![1, 2, 4, 8], |v| {
        v.split(',').map(|s| s.trim().parse().expect("BT_STREAMS: numbers")).collect()
    });
    let model = Model::open(&path)?;
    let pool = ThreadPool::new(threads);
    let opts = DecoderOptions { context_len: Some(16 + tokens + 1), ..DecoderOptions::default() };
    println!(
        "# {} ({}), {threads} threads, kernels {}, {tokens} tokens per stream, best of {rounds} rounds",
        path.file_name().unwrap_or_default().to_string_lossy(),
        model.config().arch.name,
        rml::kernels::active()?.isa(),
    );
    let mut best = vec![f64::MAX; streams.len()];
    let mut steps = vec![Vec::new(); streams.len()];
    let mut cpu = vec![Vec::new(); streams.len()];
    let mut alone = f64::MAX;
    for _ in 0..rounds {
        alone = alone.min(single_run(&model, &pool, opts, tokens)?);
        for (i, &s) in streams.iter().enumerate() {
            let secs = batch_run(&model, &pool, opts, s, tokens, &mut steps[i], &mut cpu[i])?;
            best[i] = best[i].min(secs);
        }
    }
    let rate = |s: usize, secs: f64| (s * tokens) as f64 / secs;
    let one = streams.iter().position(|&s| s == 1);
    // The median step of all rounds: a second figure that a few preempted steps do not move.
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let med: Vec<f64> = steps.iter_mut().map(median).collect();
    let cpu_med: Vec<f64> = cpu.iter_mut().map(median).collect();
    println!("DecoderLM alone: {:8.1} tokens/s", rate(1, alone));
    println!(
        "{:>7} {:>12} {:>9} {:>8} {:>10} {:>11} {:>8} {:>11}",
        "streams", "tokens/s", "ms/step", "vs 1", "median ms", "vs 1 (med)", "cpu ms", "vs 1 (cpu)"
    );
    for (i, &s) in streams.iter().enumerate() {
        let r = rate(s, best[i]);
        let ratio = |o: f64| format!("{:.2}x", o);
        let vs = one.map_or(String::from("-"), |o| ratio(r / rate(1, best[o])));
        let vs_med = one.map_or(String::from("-"), |o| ratio(s as f64 * med[o] / med[i]));
        let vs_cpu = one.map_or(String::from("-"), |o| ratio(s as f64 * cpu_med[o] / cpu_med[i]));
        let (ms, mm, cm) = (best[i] * 1e3 / tokens as f64, med[i] * 1e3, cpu_med[i] * 1e3);
        println!(
            "{s:>7} {r:>12.1} {ms:>9.2} {vs:>8} {mm:>10.2} {vs_med:>11} {cm:>8.2} {vs_cpu:>11}"
        );
    }
    Ok(())
}
