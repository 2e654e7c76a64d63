//! `rml bench`: prefill and decode speed at 1..=cores threads, and how close decoding comes to
//! the machine's read bandwidth (decoding one token reads every weight once, so its speed is
//! bounded by `read bandwidth / weight bytes per token`).

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use rml::exec::{Schedule, ThreadPool};
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;
use rml::{Error, Result};

const PROMPT: usize = 64;
const DECODE: usize = 32;
const REPEATS: usize = 3;
/// Bytes read by the bandwidth probe (well past any last-level cache).
const PROBE_BYTES: usize = 512 << 20;

/// Best-of-`REPEATS` read bandwidth in bytes per second with `pool`: every thread sums its
/// share of a buffer of `PROBE_BYTES`.
fn read_bandwidth(pool: &ThreadPool, buf: &[u64]) -> f64 {
    const CHUNK: usize = 1 << 17; // 1 MiB of u64
    let chunks = buf.len() / CHUNK;
    let mut best = f64::INFINITY;
    for _ in 0..REPEATS {
        let t = Instant::now();
        pool.parallel_for(0..chunks, Schedule::Static, &|r| {
            let mut acc = 0u64;
            for c in r {
                for &v in &buf[c * CHUNK..(c + 1) * CHUNK] {
                    acc = acc.wrapping_add(v);
                }
            }
            black_box(acc);
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    (chunks * CHUNK * 8) as f64 / best
}

/// Runs the benchmark on the model at `path` and prints one row per thread count.
///
/// # Errors
///
/// The model's open and load errors; `INTERNAL` if a pool cannot start.
pub fn run(path: &Path, act: Activations) -> Result<()> {
    let model = Model::open(path)?;
    let c = model.config();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let opts = DecoderOptions {
        context_len: Some((PROMPT + DECODE + 1).min(c.max_position_embeddings)),
        activations: act,
        ..DecoderOptions::default()
    };
    let inline = rml::InlineExecutor;
    let mut dec = DecoderLM::new(c, &PackedSource::new(&model)?, &inline, opts)?;
    let vocab = c.vocab_size as u32;
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    if PROMPT + DECODE > dec.context_len() {
        return Err(Error::invalid_argument(format_args!(
            "the model's context ({}) is too short for the benchmark",
            dec.context_len()
        )));
    }
    let per_token = dec.weights().bytes_per_token() as f64;
    let mut probe = vec![0u64; PROBE_BYTES / 8];
    for (i, v) in probe.iter_mut().enumerate() {
        *v = i as u64;
    }
    use std::io::Write;
    let mut out = crate::out::stdout();
    writeln!(
        out,
        "{} ({:?} activations): {:.1} MiB of weights read per token, prompt {PROMPT}, {DECODE} decode steps, best of {REPEATS}",
        path.display(),
        act,
        per_token / (1024.0 * 1024.0)
    )?;
    writeln!(
        out,
        "{:>7} {:>14} {:>13} {:>15} {:>13} {:>9}",
        "threads", "prefill tok/s", "decode tok/s", "weights GB/s", "read GB/s", "of limit"
    )?;
    for threads in 1..=cores {
        let pool =
            ThreadPool::builder().threads(threads).schedule(Schedule::Proportional2).build()?;
        let (mut prefill, mut decode) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..REPEATS {
            dec.reset();
            let t = Instant::now();
            dec.forward_with(&pool, &prompt, None, None)?;
            prefill = prefill.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for i in 0..DECODE as u32 {
                dec.decode_with(&pool, (i * 31 + 7) % vocab)?;
            }
            decode = decode.min(t.elapsed().as_secs_f64());
        }
        let bw = read_bandwidth(&pool, &probe);
        let tps = DECODE as f64 / decode;
        let weights_bw = per_token * tps;
        writeln!(
            out,
            "{:>7} {:>14.1} {:>13.1} {:>15.2} {:>13.2} {:>8.0}%",
            pool.threads(),
            PROMPT as f64 / prefill,
            tps,
            weights_bw / 1e9,
            bw / 1e9,
            100.0 * weights_bw / bw
        )?;
    }
    Ok(())
}
