//! `rml bench`: prefill and decode speed at 1..=cores threads, and how close decoding comes to
//! the machine's read bandwidth (decoding one token reads every weight once, so its speed is
//! bounded by `read bandwidth / weight bytes per token`).
//!
//! The prompt length (`--prompt`), the KV-cache depth the decode steps start at (`--depth`),
//! the decode steps, repeats and thread counts are options, so that long-prompt prefill and
//! decode deep into the context are measured too. The `cpu pp/tg` column is the calling
//! thread's tokens per CPU second (prefill / decode): with one thread, the speed the code would
//! have on an idle core, whatever else the machine runs. The last three columns (two or more
//! threads) say where the best decode run's wall time went, from the pool's timing: inside
//! parallel loops, the caller waiting for workers after its own chunks, and the workers' busy
//! share ([`LoopShares`]).
//!
//! The `same-size GB/s` read loop runs over a buffer of the weights' size in windows shaped
//! like the decode runs: after each timed decode run, one pass per decode step back to back,
//! timed as a whole; the best window is reported, as the best decode run is. So both figures
//! come from the same moments of the run, over windows of about the same length: on a shared
//! machine a single short pass (a few milliseconds) often catches a quieter instant than a
//! run of decode steps can, which made the ratio move by 10-15 points between runs.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use rml::exec::{Schedule, ThreadPool};
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{AttentionPath, DecoderLM, DecoderOptions, KvDtype};
use rml::ops::Activations;
use rml::{Error, Result};

/// Bytes read by the bandwidth probe (well past any last-level cache).
const PROBE_BYTES: usize = 512 << 20;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Activations for quantized weights.
    pub act: Activations,
    /// Repack matrices at load for the active kernels ([`DecoderOptions::repack_weights`]).
    pub repack: bool,
    /// Prompt tokens of the timed prefill.
    pub prompt: usize,
    /// Cached tokens before the timed decode steps (0: right after the prompt).
    pub depth: usize,
    /// Timed decode steps.
    pub decode: usize,
    /// Repeats (best of).
    pub repeats: usize,
    /// Thread counts (empty: 1..=cores).
    pub threads: Vec<usize>,
    /// Element type of the KV cache.
    pub kv_dtype: KvDtype,
    /// Attention code.
    pub attention: AttentionPath,
    /// Matmul schedule of the pool.
    pub schedule: Schedule,
    /// The most prompt tokens per pass through the layers ([`DecoderOptions::prefill_chunk`]).
    pub prefill_chunk: usize,
}

/// Best-of-`repeats` read bandwidth in bytes per second with `pool`: every thread sums its
/// share of `buf` (a plain read loop), `passes` times back to back per timed window.
fn read_bandwidth(pool: &ThreadPool, buf: &[u64], repeats: usize, passes: usize) -> f64 {
    const CHUNK: usize = 1 << 17; // 1 MiB of u64
    let chunks = buf.len() / CHUNK;
    let mut best = f64::INFINITY;
    for _ in 0..repeats {
        let t = Instant::now();
        for _ in 0..passes {
            pool.parallel_for(0..chunks, Schedule::Static, &|r| {
                let mut acc = 0u64;
                for c in r {
                    for &v in &buf[c * CHUNK..(c + 1) * CHUNK] {
                        acc = acc.wrapping_add(v);
                    }
                }
                black_box(acc);
            });
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    (passes * chunks * CHUNK * 8) as f64 / best
}

/// `--activations`' spelling of `act`.
fn act_name(act: Activations) -> &'static str {
    match act {
        Activations::Int8 => "int8",
        Activations::Int8Plain => "int8-plain",
        Activations::Mixed => "mixed",
        Activations::F32 => "f32",
    }
}

/// Where the best decode run's wall time went with two or more threads, from the pool's
/// [timing](rml::exec::ThreadPoolBuilder::timing): the share inside parallel loops (the rest
/// ran on the calling thread alone: norms, activation quantization, sampling), the share the
/// caller spent waiting for workers after its own chunks, and how busy the workers were.
#[derive(Clone, Copy, Debug)]
struct LoopShares {
    in_loops: f64,
    caller_waits: f64,
    workers_busy: f64,
}

impl LoopShares {
    fn of(d: &rml::exec::PoolStats, wall_s: f64, threads: usize) -> LoopShares {
        let wall_ns = wall_s * 1e9;
        LoopShares {
            in_loops: d.dispatch_ns as f64 / wall_ns,
            caller_waits: d.caller_wait_ns as f64 / wall_ns,
            workers_busy: d.worker_busy_ns as f64 / (wall_ns * (threads - 1) as f64),
        }
    }
}

impl std::fmt::Display for LoopShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>7.1}% {:>5.1}% {:>5.1}%",
            100.0 * self.in_loops,
            100.0 * self.caller_waits,
            100.0 * self.workers_busy
        )
    }
}

/// CPU seconds the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): with one thread the
/// whole work of a step, unaffected by time spent waiting for a core on a loaded machine.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A probe buffer of `bytes` (rounded down to whole MiB, at least 1 MiB).
fn probe(bytes: usize) -> Vec<u64> {
    let n = (bytes >> 20).max(1) << 17;
    (0..n as u64).collect()
}

/// Runs the benchmark on the model at `path` and prints one row per thread count.
///
/// # Errors
///
/// The model's open and load errors; `INVALID_ARGUMENT` for a zero prompt, decode count or
/// repeat count, or a shape past the model's context; `INTERNAL` if a pool cannot start.
pub fn run(path: &Path, shape: &Shape) -> Result<()> {
    let &Shape { act, prompt, depth, decode, repeats, .. } = shape;
    if prompt == 0 || decode == 0 || repeats == 0 {
        return Err(Error::invalid_argument("--prompt, --decode and --repeats must be at least 1"));
    }
    let model = Model::open(path)?;
    let c = model.config();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> =
        if shape.threads.is_empty() { (1..=cores).collect() } else { shape.threads.clone() };
    let start = if depth == 0 { prompt } else { depth };
    let need = prompt.max(start + decode);
    if need > c.max_position_embeddings {
        return Err(Error::invalid_argument(format_args!(
            "prompt {prompt} / depth {depth} + {decode} decode steps need {need} positions; \
             the model has {}",
            c.max_position_embeddings
        )));
    }
    let opts = DecoderOptions {
        context_len: Some(need),
        activations: act,
        prefill_chunk: shape.prefill_chunk,
        kv_dtype: shape.kv_dtype,
        attention: shape.attention,
        repack_weights: shape.repack,
        ..DecoderOptions::default()
    };
    let inline = rml::InlineExecutor;
    let mut dec = DecoderLM::new(c, &PackedSource::new(&model)?, &inline, opts)?;
    let vocab = c.vocab_size as u32;
    let tokens: Vec<u32> = (0..prompt.max(start) as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let per_token = dec.weights().bytes_per_token() as f64;
    let repacked = dec.weights().matrices().filter(|m| m.is_repacked()).count();
    use std::io::Write;
    let mut out = crate::out::stdout();
    let big = probe(PROBE_BYTES);
    let same = probe(per_token as usize);
    writeln!(
        out,
        "{} ({} activations, kernels {}, {} KV cache, {} attention, schedule {}): {:.1} MiB \
         of weights read per token ({repacked} matrices repacked), prompt {prompt}, {decode} \
         decode steps from depth {start}, best of {repeats}",
        path.display(),
        act_name(act),
        rml::kernels::active()?.isa(),
        shape.kv_dtype.name(),
        match shape.attention {
            AttentionPath::Tiled => "tiled",
            AttentionPath::PerHead => "per-head",
        },
        shape.schedule,
        per_token / (1024.0 * 1024.0)
    )?;
    writeln!(
        out,
        "{:>7} {:>14} {:>13} {:>15} {:>13} {:>9} {:>15} {:>9} {:>10} {:>13} {:>8} {:>6} {:>6}",
        "threads",
        "prefill tok/s",
        "decode tok/s",
        "weights GB/s",
        "read GB/s",
        "of limit",
        "same-size GB/s",
        "of that",
        "disp/token",
        "cpu pp/tg",
        "in loops",
        "waits",
        "busy"
    )?;
    for &t in &threads {
        let pool =
            ThreadPool::builder().threads(t).schedule(shape.schedule).timing(true).build()?;
        let (mut prefill, mut dec_s, mut disp) = (f64::INFINITY, f64::INFINITY, 0.0);
        let mut bw_same = 0f64;
        let mut shares = None;
        let (mut prefill_cpu, mut dec_cpu) = (f64::INFINITY, f64::INFINITY);
        // One untimed prefill and decode step first, so the first thread count is not
        // charged for page faults on the weights, cold caches and workers starting up.
        dec.reset();
        // (`need` >= 2: room for at least one token and a step.)
        dec.forward_with(&pool, &tokens[..prompt.min(need - 1)], None, None)?;
        dec.decode_with(&pool, 7)?;
        for _ in 0..repeats {
            dec.reset();
            let (t0, c0) = (Instant::now(), thread_cpu_s());
            dec.forward_with(&pool, &tokens[..prompt], None, None)?;
            prefill = prefill.min(t0.elapsed().as_secs_f64());
            prefill_cpu = prefill_cpu.min(thread_cpu_s() - c0);
            if start != prompt {
                dec.reset();
                dec.forward_with(&pool, &tokens[..start], None, None)?;
            }
            let before = pool.stats();
            let (t0, c0) = (Instant::now(), thread_cpu_s());
            for i in 0..decode as u32 {
                dec.decode_with(&pool, (i * 31 + 7) % vocab)?;
            }
            let wall = t0.elapsed().as_secs_f64();
            dec_cpu = dec_cpu.min(thread_cpu_s() - c0);
            let d = pool.stats().since(&before);
            disp = d.dispatches as f64 / decode as f64;
            if wall < dec_s && t > 1 {
                shares = Some(LoopShares::of(&d, wall, t));
            }
            dec_s = dec_s.min(wall);
            // The same-size read loop's window for this run (see the module doc).
            bw_same = bw_same.max(read_bandwidth(&pool, &same, 1, decode));
        }
        let bw = read_bandwidth(&pool, &big, repeats, 1);
        let tps = decode as f64 / dec_s;
        let weights_bw = per_token * tps;
        writeln!(
        out,
            "{:>7} {:>14.1} {:>13.1} {:>15.2} {:>13.2} {:>8.0}% {:>15.2} {:>8.0}% {:>10.1} {:>6.0}/{:<6.1} {}",
            pool.threads(),
            prompt as f64 / prefill,
            tps,
            weights_bw / 1e9,
            bw / 1e9,
            100.0 * weights_bw / bw,
            bw_same / 1e9,
            100.0 * weights_bw / bw_same,
            disp,
            prompt as f64 / prefill_cpu,
            decode as f64 / dec_cpu,
            shares.map_or_else(|| format!("{:>8} {:>6} {:>6}", "-", "-", "-"), |s| s.to_string())
        )?;
    }
    Ok(())
}
