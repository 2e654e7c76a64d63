//! `DecoderBatch`: several sequences stepped through one forward pass per tick give, for every
//! sequence, the same logit bits as `DecoderLM` running that sequence alone.
//!
//! A small scheduler runs requests of different prompt lengths through a batch of 3 slots
//! the way a server does: requests arrive at different ticks and wait for a free slot; each
//! tick steps the decode tokens of some slots together with prefill chunks (of changing sizes)
//! of others, within `max_step_tokens`; finished requests leave their slot, and a new request
//! takes the free slot whose cached tokens share the longest prefix with its prompt, rewinds
//! to it and prefills only the rest. Every logit row the batch returns is compared bit for bit
//! with a fresh `DecoderLM` run over that request's whole sequence alone. Over every tiny
//! fixture of `tests/data` and SmolLM2-135M Q4_1, with f32 and int8 activations, inline and on a
//! 2-thread pool.

mod decoder_common;

use std::path::PathBuf;

use decoder_common::{argmax, data, smollm2_gguf};
use rml::exec::{Executor, ThreadPool};
use rml::load::Model;
use rml::model::{DecoderBatch, DecoderLM, DecoderOptions, KvDtype, SeqInput};
use rml::ops::Activations;
use rml::{Code, InlineExecutor};

/// Every tiny decoder fixture (each safetensors family and every GGUF type).
fn tiny_models() -> Vec<(String, PathBuf)> {
    let mut out = vec![("tiny-llama/f32".to_string(), data("tiny-llama/f32"))];
    for dir in [
        "tiny-llama-gguf",
        "tiny-gemma3/gguf",
        "tiny-llama3/gguf",
        "tiny-qwen2/gguf",
        "tiny-qwen3/gguf",
    ] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(data(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{dir}: no GGUF fixtures");
        for f in files {
            out.push((format!("{dir}/{}", f.file_name().unwrap().to_string_lossy()), f));
        }
    }
    for dir in ["tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-llama3", "tiny-gemma3"] {
        out.push((dir.to_string(), data(dir)));
    }
    out
}

/// One request: its prompt, how many tokens it generates (greedy), the tick it arrives at.
struct Request {
    prompt: Vec<u32>,
    generate: usize,
    arrives: usize,
}

/// A request in a slot: its whole sequence so far, how much of it is cached, what it has
/// generated, and the logits the batch gave (position, row).
struct Active {
    req: usize,
    seq: Vec<u32>,
    fed: usize,
    generated: usize,
}

/// Token ids `len` long, derived from `seed` and the vocabulary size.
fn ids(seed: u64, len: usize, vocab: usize) -> Vec<u32> {
    (0..len as u64).map(|i| ((i * 7919 + seed * 104_729 + 13) % vocab as u64) as u32).collect()
}

/// Runs the schedule on `batch` and returns, per request, its final sequence and the logits
/// the batch gave for it (position of the token, row).
#[allow(clippy::type_complexity)]
fn run_schedule(
    batch: &mut DecoderBatch<'_>,
    vocab: usize,
) -> Vec<(Vec<u32>, Vec<(usize, Vec<f32>)>)> {
    // Requests 3 and 4 continue earlier ones (a multi-turn chat resending its history): 3
    // extends request 0's whole sequence, 4 shares the first 4 tokens of request 1's.
    let mut reqs = [
        Request { prompt: ids(1, 11, vocab), generate: 6, arrives: 0 },
        Request { prompt: ids(2, 5, vocab), generate: 9, arrives: 0 },
        Request { prompt: ids(3, 23, vocab), generate: 4, arrives: 2 },
        Request { prompt: Vec::new(), generate: 5, arrives: 3 },
        Request { prompt: Vec::new(), generate: 3, arrives: 4 },
        Request { prompt: ids(6, 1, vocab), generate: 7, arrives: 5 },
    ];
    let slots = batch.slots();
    let max_step = batch.max_step_tokens();
    let mut active: Vec<Option<Active>> = (0..slots).map(|_| None).collect();
    // What each slot's cache holds (kept after its request leaves: the prefix cache).
    let mut cached: Vec<Vec<u32>> = vec![Vec::new(); slots];
    let mut results: Vec<(Vec<u32>, Vec<(usize, Vec<f32>)>)> =
        reqs.iter().map(|_| (Vec::new(), Vec::new())).collect();
    let mut next_req = 0;
    let mut done = 0;
    let mut tick = 0;
    let mut reused = 0;
    let mut mixed = 0;
    while done < reqs.len() {
        assert!(tick < 500, "schedule does not finish");
        // Admit arrived requests while a slot is free, in order.
        while next_req < reqs.len() && reqs[next_req].arrives <= tick {
            // Requests 3 and 4 come once the requests they continue have finished.
            if (next_req == 3 || next_req == 4) && results[next_req - 3].0.is_empty() {
                break;
            }
            if next_req == 3 {
                let mut p = results[0].0.clone();
                p.extend(ids(4, 6, vocab));
                reqs[3].prompt = p;
            }
            if next_req == 4 {
                let mut p = ids(2, 4, vocab);
                p.extend(ids(5, 9, vocab));
                reqs[4].prompt = p;
            }
            let prompt = &reqs[next_req].prompt;
            // The free slot sharing the longest prefix with the prompt.
            let best = (0..slots).filter(|&s| active[s].is_none()).max_by_key(|&s| {
                let common = cached[s].iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (common, usize::MAX - s)
            });
            let Some(slot) = best else { break };
            let common = cached[slot].iter().zip(prompt).take_while(|(a, b)| a == b).count();
            // At least one prompt token runs, for its logits.
            let keep = common.min(prompt.len() - 1);
            assert!(keep <= batch.position(slot));
            batch.rewind(slot, keep).unwrap();
            assert_eq!(batch.position(slot), keep);
            reused += keep;
            cached[slot].truncate(keep);
            active[slot] =
                Some(Active { req: next_req, seq: prompt.clone(), fed: keep, generated: 0 });
            next_req += 1;
        }
        // The step: decode tokens first, then prefill chunks (of a size changing with the
        // tick) within the step's budget; the entry order alternates.
        let cap = [3, 16, 7, 1, 5][tick % 5];
        let mut order: Vec<usize> = (0..slots).collect();
        if tick % 2 == 1 {
            order.reverse();
        }
        let mut budget = max_step;
        let mut plan: Vec<(usize, usize, usize)> = Vec::new(); // (slot, from, to)
        for decode_pass in [true, false] {
            for &s in &order {
                let Some(a) = &active[s] else { continue };
                let pending = a.seq.len() - a.fed;
                if (pending == 1) != decode_pass || budget == 0 {
                    continue;
                }
                let n = pending.min(budget).min(if decode_pass { 1 } else { cap });
                plan.push((s, a.fed, a.fed + n));
                budget -= n;
            }
        }
        tick += 1;
        if plan.is_empty() {
            continue;
        }
        let work: Vec<SeqInput<'_>> = plan
            .iter()
            .map(|&(s, from, to)| SeqInput {
                slot: s,
                tokens: &active[s].as_ref().unwrap().seq[from..to],
            })
            .collect();
        let (decodes, prefills) = work.iter().fold((0, 0), |(d, p), e| match e.tokens.len() {
            1 => (d + 1, p),
            _ => (d, p + 1),
        });
        mixed += usize::from(decodes > 0 && prefills > 0);
        batch.step(&work).unwrap_or_else(|e| panic!("tick {tick}: {e}"));
        drop(work);
        for (i, &(s, from, to)) in plan.iter().enumerate() {
            let logits = batch.logits(i).to_vec();
            let a = active[s].as_mut().unwrap();
            cached[s].extend_from_slice(&a.seq[from..to]);
            a.fed = to;
            assert_eq!(batch.position(s), to);
            results[a.req].1.push((to - 1, logits.clone()));
            if a.fed < a.seq.len() {
                continue;
            }
            if a.generated < reqs[a.req].generate {
                a.seq.push(argmax(&logits));
                a.generated += 1;
            } else {
                results[a.req].0 = a.seq.clone();
                active[s] = None;
                done += 1;
            }
        }
    }
    assert!(reused >= 21, "the prefix cache was used ({reused} tokens reused)");
    assert!(mixed >= 3, "{mixed} steps mixed decode tokens with prefill chunks");
    results
}

/// The schedule on a batch against each request alone on a `DecoderLM`.
fn check(name: &str, model: &Model, exec: &dyn Executor, act: Activations, kv: KvDtype) {
    let c = model.config();
    let vocab = c.vocab_size;
    let opts = DecoderOptions {
        context_len: Some(64.min(c.max_position_embeddings)),
        activations: act,
        prefill_chunk: 16,
        kv_dtype: kv,
        ..DecoderOptions::default()
    };
    let what = format!("{name}, {act:?}, {kv:?} KV, {} threads", exec.threads());
    let mut batch = DecoderBatch::new(c, &model, exec, opts, 3).unwrap();
    assert_eq!(batch.slots(), 3);
    assert_eq!(batch.max_step_tokens(), 16);
    assert_eq!(batch.config(), c);
    let results = run_schedule(&mut batch, vocab);
    let mut alone = DecoderLM::new(c, &model, exec, opts).unwrap();
    let mut rows = 0;
    for (r, (seq, got)) in results.iter().enumerate() {
        alone.reset();
        let mut all = vec![0f32; seq.len() * vocab];
        alone.forward(seq, Some(&mut all), None).unwrap();
        for (pos, logits) in got {
            let want = &all[pos * vocab..(pos + 1) * vocab];
            let same = want.iter().zip(logits).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: request {r} position {pos}: batch logits differ from alone");
            rows += 1;
        }
    }
    eprintln!("{what}: {rows} logit rows bit-identical");
}

fn executors() -> Vec<Box<dyn Executor>> {
    vec![Box::new(InlineExecutor), Box::new(ThreadPool::new(2))]
}

#[test]
fn batch_matches_alone_tiny_fixtures() {
    let execs = executors();
    for (name, path) in tiny_models() {
        let model = Model::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        for exec in &execs {
            for act in [Activations::F32, Activations::Int8] {
                check(&name, &model, &**exec, act, KvDtype::F32);
            }
        }
        // The other int8 modes and the f16 cache, on one executor.
        for act in [Activations::Int8Plain, Activations::Mixed] {
            check(&name, &model, &*execs[1], act, KvDtype::F32);
        }
        check(&name, &model, &*execs[1], Activations::Int8, KvDtype::F16);
    }
}

#[test]
fn batch_matches_alone_smollm2() {
    let model = Model::open(smollm2_gguf()).unwrap();
    for exec in executors() {
        for act in [Activations::F32, Activations::Int8] {
            check("SmolLM2 Q4_1", &model, &*exec, act, KvDtype::F32);
        }
    }
}

#[test]
fn bad_steps_change_nothing() {
    let model = &Model::open(data("tiny-llama/f32")).unwrap();
    let c = model.config();
    let vocab = c.vocab_size as u32;
    let opts =
        DecoderOptions { context_len: Some(12), prefill_chunk: 8, ..DecoderOptions::default() };
    let pool = ThreadPool::new(2);
    let mut b = DecoderBatch::new(c, &model, &pool, opts, 2).unwrap();
    assert_eq!((b.context_len(), b.max_step_tokens()), (12, 8));
    let a = [1u32, 2, 3, 4, 5];
    b.step(&[SeqInput { slot: 0, tokens: &a }, SeqInput { slot: 1, tokens: &a[..2] }]).unwrap();
    let (l0, l1) = (b.logits(0).to_vec(), b.logits(1).to_vec());
    let past = [vocab];
    let bad: Vec<(Code, Vec<SeqInput<'_>>)> = vec![
        (Code::InvalidArgument, vec![]),
        (Code::OutOfRange, vec![SeqInput { slot: 2, tokens: &a[..1] }]),
        (
            Code::InvalidArgument,
            vec![SeqInput { slot: 1, tokens: &a[..1] }, SeqInput { slot: 1, tokens: &a[..1] }],
        ),
        (Code::InvalidArgument, vec![SeqInput { slot: 0, tokens: &[] }]),
        (Code::OutOfRange, vec![SeqInput { slot: 1, tokens: &past }]),
        // 5 cached + 8 new > 12 positions.
        (Code::OutOfRange, vec![SeqInput { slot: 0, tokens: &[1; 8] }]),
        // 4 + 5 tokens > max_step_tokens 8.
        (
            Code::InvalidArgument,
            vec![SeqInput { slot: 0, tokens: &a[..4] }, SeqInput { slot: 1, tokens: &a }],
        ),
    ];
    for (code, work) in &bad {
        let e = b.step(work).unwrap_err();
        assert_eq!(e.code(), *code, "{work:?}: {e}");
        assert_eq!((b.position(0), b.position(1)), (5, 2), "{work:?} moved a position");
        assert_eq!(b.logits(0), l0.as_slice(), "{work:?} changed the logits");
        assert_eq!(b.logits(1), l1.as_slice(), "{work:?} changed the logits");
    }
    assert_eq!(b.rewind(2, 0).unwrap_err().code(), Code::OutOfRange);
    assert_eq!(b.rewind(1, 3).unwrap_err().code(), Code::OutOfRange);
    // Still good: slot 1 continues, slot 0 is rewound to 3 and continues from there.
    b.rewind(0, 3).unwrap();
    b.step(&[SeqInput { slot: 1, tokens: &a[2..] }, SeqInput { slot: 0, tokens: &[9] }]).unwrap();
    let mut alone = DecoderLM::new(c, &model, &pool, opts).unwrap();
    alone.prefill(&a).unwrap();
    assert_eq!(b.logits(0), alone.logits(), "slot 1 after bad steps");
    alone.reset();
    alone.prefill(&[1, 2, 3, 9]).unwrap();
    assert_eq!(b.logits(1), alone.logits(), "slot 0 after rewinding");
    b.reset(1);
    assert_eq!(b.position(1), 0);
    // Bad constructions.
    assert_eq!(
        DecoderBatch::new(c, &model, &pool, opts, 0).unwrap_err().code(),
        Code::InvalidArgument
    );
    // A step of one token per slot always fits, however small the prefill chunk.
    let tiny_chunk = DecoderOptions { prefill_chunk: 1, ..opts };
    let b = DecoderBatch::new(c, &model, &pool, tiny_chunk, 4).unwrap();
    assert_eq!(b.max_step_tokens(), 4);
}
