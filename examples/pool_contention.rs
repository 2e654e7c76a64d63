//! The pool under external load and oversubscription (issue 13 item 7), and row ownership
//! against the shared chunk counter (issue 11). Two measurements:
//!
//! ```sh
//! cargo run --release --features std --example pool_contention -- dispatch [rounds]
//! cargo run --release --features std --example pool_contention -- decode MODEL.gguf [rounds]
//! ```
//!
//! `dispatch`: 1,000 `parallel_for` calls, each summing square roots over 32 Ki floats
//! (`Proportional4`), on a pool of 1 thread and of 8 threads (more threads than this machine
//! has cores). Rounds alternate between the pools; printed: the median of each and the ratio
//! 8 threads / 1 thread. Target: ≤ 2.
//!
//! `decode`: greedy-free decode speed (32 steps after an 8-token prompt, token ids fixed) of
//! the model with f32 activations, in tok/s, for: 1 thread on an otherwise idle process; 2
//! threads (`Proportional4`, then `Owned`) with nothing else in the process; 2 threads
//! (`Proportional4`, `Owned`, and `Proportional4` with the contention back-off off) while two
//! busy-loop threads of this process compete for the cores. Rounds interleave the
//! configurations; printed: the median and best of each, the steal, missed-job and back-off
//! counts of the 2-thread pools, and the ratio of the contended 2-thread decode to the idle
//! 1-thread decode. Target: ≥ 0.5.

use core::hint::black_box;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::path::Path;
use std::time::{Duration, Instant};

use rml::exec::{PoolStats, Schedule, ThreadPool};
use rml::load::Model;
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions};
use rml::ops::Activations;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Threads spinning on the CPU until dropped: the "external load".
struct Busy {
    stop: &'static AtomicBool,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(n: usize) -> Busy {
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let handles = (0..n)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Relaxed) {
                        for _ in 0..1000 {
                            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                        }
                    }
                })
            })
            .collect();
        // Let them get going.
        std::thread::sleep(Duration::from_millis(20));
        Busy { stop, handles }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for h in self.handles.drain(..) {
            h.join().unwrap();
        }
    }
}

fn dispatch(rounds: usize) {
    let data: Vec<f32> = (0..32_768).map(|i| i as f32 * 0.25).collect();
    let run = |pool: &ThreadPool| {
        let sink = AtomicU32::new(0);
        let t = Instant::now();
        for _ in 0..1000 {
            pool.parallel_for(0..data.len(), Schedule::Proportional4, &|r| {
                let s: f32 = data[r].iter().map(|x| x.sqrt()).sum();
                sink.fetch_add(s as u32 & 1, Relaxed);
            });
        }
        black_box(sink.load(Relaxed));
        t.elapsed().as_secs_f64() * 1e3
    };
    let one = ThreadPool::new(1);
    let eight = ThreadPool::new(8);
    run(&one);
    run(&eight);
    let s0 = eight.stats();
    let (mut t1, mut t8) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        t1.push(run(&one));
        t8.push(run(&eight));
    }
    let d = eight.stats().since(&s0);
    let (m1, m8) = (median(&mut t1), median(&mut t8));
    println!(
        "1,000 dispatches of 32 Ki sqrt-sums, {} cores, median of {rounds}: 1 thread {m1:.1} ms, \
         8 threads {m8:.1} ms, ratio {:.2} (target <= 2)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        m8 / m1
    );
    println!(
        "8-thread pool: {} dispatches, {} chunks, {} stolen, {} jobs missed by late workers, {} \
         sleeps",
        d.dispatches, d.chunks, d.steals, d.missed, d.sleeps
    );
}

fn decode(path: &Path, rounds: usize) -> rml::Result<()> {
    const PROMPT: usize = 8;
    const STEPS: usize = 32;
    let model = Model::open(path)?;
    let c = model.config();
    let opts = DecoderOptions {
        context_len: Some(PROMPT + STEPS + 1),
        activations: Activations::F32,
        ..DecoderOptions::default()
    };
    let mut dec = DecoderLM::new(c, &PackedSource::new(&model)?, &rml::InlineExecutor, opts)?;
    let vocab = c.vocab_size as u32;
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let mut tps = |pool: &ThreadPool| -> rml::Result<f64> {
        dec.reset();
        dec.forward_with(pool, &prompt, None, None)?;
        let t = Instant::now();
        for i in 0..STEPS as u32 {
            dec.decode_with(pool, (i * 31 + 7) % vocab)?;
        }
        Ok(STEPS as f64 / t.elapsed().as_secs_f64())
    };
    let p1 = ThreadPool::builder().threads(1).build()?;
    let pp = ThreadPool::builder().threads(2).schedule(Schedule::Proportional4).build()?;
    let po = ThreadPool::builder().threads(2).schedule(Schedule::Owned).build()?;
    // The same as `pp` without the contention back-off, for comparison in the same run.
    let pn = ThreadPool::builder()
        .threads(2)
        .schedule(Schedule::Proportional4)
        .contention_backoff(false)
        .build()?;
    let names = [
        "1 thread, idle",
        "2 threads proportional4, idle",
        "2 threads owned, idle",
        "2 threads proportional4, 2 busy threads",
        "2 threads owned, 2 busy threads",
        "2 threads proportional4 no back-off, 2 busy",
    ];
    let mut samples = vec![Vec::new(); names.len()];
    let (sp, so) = (pp.stats(), po.stats());
    let mut busy_stats = [PoolStats::default(); 2];
    for round in 0..=rounds {
        let mut r = [0.0; 6];
        r[0] = tps(&p1)?;
        r[1] = tps(&pp)?;
        r[2] = tps(&po)?;
        {
            let _busy = Busy::start(2);
            let b = [pp.stats(), po.stats()];
            r[3] = tps(&pp)?;
            r[4] = tps(&po)?;
            r[5] = tps(&pn)?;
            if round > 0 {
                for (acc, (now, before)) in
                    busy_stats.iter_mut().zip([pp.stats(), po.stats()].iter().zip(b.iter()))
                {
                    let d = now.since(before);
                    acc.steals += d.steals;
                    acc.missed += d.missed;
                    acc.chunks += d.chunks;
                    acc.backed_off += d.backed_off;
                    acc.dispatches += d.dispatches;
                }
            }
        }
        if round > 0 {
            // Round 0 warms up.
            for (s, v) in samples.iter_mut().zip(r) {
                s.push(v);
            }
        }
    }
    println!(
        "{} ({STEPS} decode steps, f32 activations), {} cores, tok/s over {rounds} interleaved rounds:",
        path.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut med = Vec::new();
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let best = s.iter().copied().fold(0.0, f64::max);
        let m = median(s);
        med.push(m);
        println!("  {name:<42} median {m:6.1}  best {best:6.1}");
    }
    let (dp, dpo) = (pp.stats().since(&sp), po.stats().since(&so));
    println!(
        "  2-thread pools, all rounds: proportional4 {} chunks, {} stolen, {} missed; owned {} \
         chunks, {} stolen, {} missed",
        dp.chunks, dp.steals, dp.missed, dpo.chunks, dpo.steals, dpo.missed
    );
    println!(
        "  under load only: proportional4 {} stolen of {} chunks, {} missed; owned {} stolen of \
         {} chunks, {} missed",
        busy_stats[0].steals,
        busy_stats[0].chunks,
        busy_stats[0].missed,
        busy_stats[1].steals,
        busy_stats[1].chunks,
        busy_stats[1].missed
    );
    println!(
        "  under load only, calls run on the caller after stalls (contention back-off): \
         proportional4 {} of {}, owned {} of {}; all rounds with the warm-up: {}, {}",
        busy_stats[0].backed_off,
        busy_stats[0].backed_off + busy_stats[0].dispatches,
        busy_stats[1].backed_off,
        busy_stats[1].backed_off + busy_stats[1].dispatches,
        dp.backed_off,
        dpo.backed_off
    );
    println!(
        "  contended 2-thread / idle 1-thread: proportional4 {:.2}, owned {:.2} (target >= 0.5), \
         proportional4 without the back-off {:.2}; idle owned / proportional4 {:.3}",
        med[3] / med[0],
        med[4] / med[0],
        med[5] / med[0],
        med[2] / med[1]
    );
    Ok(())
}

fn main() -> rml::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("dispatch") => {
            dispatch(args.get(1).and_then(|a| a.parse().ok()).unwrap_or(9));
            Ok(())
        }
        Some("decode") if args.len() >= 2 => {
            decode(Path::new(&args[1]), args.get(2).and_then(|a| a.parse().ok()).unwrap_or(7))
        }
        _ => {
            eprintln!("usage: pool_contention dispatch [rounds] | decode MODEL.gguf [rounds]");
            std::process::exit(2);
        }
    }
}
