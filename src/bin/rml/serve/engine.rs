//! The scheduler of `rml serve`: one thread owns the model and its slots and runs ticks.
//!
//! A request ([`Job`]) waits in a bounded queue until a slot is free; it then takes the free
//! slot whose KV cache shares the longest token prefix with its prompt (a multi-turn chat
//! resends its history: that prefix is not run again and is reported as `cached_tokens`).
//! Every tick is one [`Batch::step`] (one [`DecoderBatch`] forward pass: one GEMM per weight
//! matrix over all rows) over all active slots: one token of each slot that is generating,
//! plus, within the step's token budget, the prompt (or the next chunk of it) of each slot
//! that is prefilling. Each slot's logits are the bits `DecoderLM` gives for that sequence
//! alone, so what a request gets does not depend on what else runs. Then
//! each generating slot samples its next token from its own logits and sends what it produced
//! to its client. A client that went away (its event receiver dropped) frees its slot at the
//! next tick; a panic inside a tick ends the requests of that tick with a 500 and clears their
//! slots, and the thread goes on.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rml::model::encoder::Encoder;
use rml::model::{DecoderBatch, Sampler, SamplerConfig, SeqInput};
use rml::tokenizer::{ChatTemplate, Message, TextStream, Tokenizer};
use rml::Result;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::request::{ApiError, Prompt, Request};
use super::Shared;

/// Several sequences, each with its own KV cache (a slot), stepped together: the methods of
/// [`DecoderBatch`] the scheduler uses, as a trait so that its tests can drive it with a fake
/// model (one that panics, say).
pub trait Batch {
    /// Number of slots.
    fn slots(&self) -> usize;
    /// Positions each slot's KV cache holds.
    fn context_len(&self) -> usize;
    /// The most tokens (all entries together) one step takes.
    fn max_step_tokens(&self) -> usize;
    /// Tokens cached in `slot`.
    fn position(&self, slot: usize) -> usize;
    /// Forgets `slot`'s positions from `pos` on.
    fn rewind(&mut self, slot: usize, pos: usize) -> Result<()>;
    /// Empties `slot`.
    fn reset(&mut self, slot: usize);
    /// One forward pass: appends each entry's tokens to its slot.
    fn step(&mut self, inputs: &[SeqInput<'_>]) -> Result<()>;
    /// The last token's logits of entry `i` of the last step.
    fn logits(&self, i: usize) -> &[f32];
}

impl Batch for DecoderBatch<'_> {
    fn slots(&self) -> usize {
        DecoderBatch::slots(self)
    }

    fn context_len(&self) -> usize {
        DecoderBatch::context_len(self)
    }

    fn max_step_tokens(&self) -> usize {
        DecoderBatch::max_step_tokens(self)
    }

    fn position(&self, slot: usize) -> usize {
        DecoderBatch::position(self, slot)
    }

    fn rewind(&mut self, slot: usize, pos: usize) -> Result<()> {
        DecoderBatch::rewind(self, slot, pos)
    }

    fn reset(&mut self, slot: usize) {
        DecoderBatch::reset(self, slot);
    }

    fn step(&mut self, inputs: &[SeqInput<'_>]) -> Result<()> {
        DecoderBatch::step(self, inputs)
    }

    fn logits(&self, i: usize) -> &[f32] {
        DecoderBatch::logits(self, i)
    }
}

/// The log-probability of one token and, on request, of the most likely ones.
#[derive(Clone, Debug)]
pub struct TokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its natural-log probability under the model (before sampling settings).
    pub logprob: f32,
    /// The `top_logprobs` most likely tokens with theirs, most likely first.
    pub top: Vec<(String, f32)>,
}

/// Token counts of a finished request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// Prompt tokens (cached ones included).
    pub prompt_tokens: usize,
    /// Of those, reused from the slot's KV cache.
    pub cached_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
}

/// Where a finished request's time went inside the scheduler: the model's own time, as
/// llama-server's `timings` object reports it (same field meanings; measured here, not taken
/// from llama.cpp). A forward pass that carried this request counts whole, also when it ran
/// other slots' tokens in the same step; what the time excludes (HTTP, JSON, tokenizing the
/// prompt, waiting for a slot or for the scheduler's next tick) is the server's overhead.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Prompt tokens run through the model (the prompt less `cache_n`).
    pub prompt_n: usize,
    /// Prompt tokens reused from the slot's KV cache.
    pub cache_n: usize,
    /// Milliseconds of the forward passes that ran the prompt's tokens.
    pub prompt_ms: f64,
    /// Tokens generated (`usage.completion_tokens`).
    pub predicted_n: usize,
    /// Milliseconds of the forward passes that ran generated tokens, plus sampling (and
    /// decoding the text of) every token this request drew, the first one included.
    pub predicted_ms: f64,
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// The request was refused before it started (answered with this status and body).
    Refused(ApiError),
    /// The request has a slot and its prompt is being run.
    Started,
    /// New text (possibly empty when only logprobs are new).
    Delta {
        /// The text.
        text: String,
        /// One entry per token whose text this completes (when logprobs were asked).
        logprobs: Vec<TokenLogprob>,
    },
    /// The end: `finish_reason` is `stop` or `length`.
    Done {
        /// OpenAI's finish reason.
        finish_reason: &'static str,
        /// Token counts.
        usage: Usage,
        /// The model's own time.
        timings: Timings,
    },
    /// Failed after it started (500, or 503 when the server is shutting down).
    Failed(ApiError),
}

/// A request handed to the scheduler.
pub struct Job {
    /// The validated request.
    pub req: Request,
    /// Where its events go; dropped by the handler when the client disconnects.
    pub events: UnboundedSender<Event>,
}

/// The model-side context the scheduler needs to turn requests into tokens and tokens into
/// text.
pub struct Model<'m> {
    /// The tokenizer.
    pub tok: &'m Tokenizer,
    /// The chat template, if the model has one.
    pub template: Option<ChatTemplate>,
    /// Tokens that end a chat reply (end-of-turn and EOS).
    pub chat_stop_ids: Vec<u32>,
    /// Tokens that end a raw completion (EOS).
    pub eos_ids: Vec<u32>,
    /// The vocabulary size of the logits.
    pub vocab: usize,
}

/// A request in a slot.
struct Active {
    job: Job,
    ids: Vec<u32>,
    /// Prompt tokens in the KV cache so far.
    fed: usize,
    cached: usize,
    max_new: usize,
    stop_ids: Arc<[u32]>,
    sampler: Sampler,
    /// How often each generated token came (presence / frequency penalties).
    counts: HashMap<u32, u32>,
    penalised: Vec<f32>,
    /// The token sampled last, to run next tick.
    next: Option<u32>,
    generated: usize,
    stream: TextStream,
    text: String,
    sent: usize,
    pending_logprobs: Vec<TokenLogprob>,
    /// Seconds of the forward passes that ran this request's prompt tokens.
    prompt_secs: f64,
    /// Seconds of the forward passes that ran its generated tokens, plus its sampling.
    predicted_secs: f64,
}

struct Slot {
    /// The tokens in this slot's KV cache, position by position.
    cached: Vec<u32>,
    active: Option<Active>,
    last_used: u64,
}

/// The length of the longest suffix of `text` that is a proper prefix of a stop string: that
/// much is held back until the next token says whether a stop string begins there.
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut keep = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                keep = keep.max(i);
            }
        }
    }
    keep
}

/// `log_softmax(logits)[id]` and the `top` most likely (id, logprob), most likely first
/// (ties to the lower id).
fn logprobs_of(logits: &[f32], id: u32, top: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().filter(|x| !x.is_nan()).map(|&x| f64::from(x - max).exp()).sum();
    let lse = max + sum.ln() as f32;
    let lp = |x: f32| if x.is_nan() { f32::NEG_INFINITY } else { x - lse };
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (i, &x) in logits.iter().enumerate() {
            let v = lp(x);
            if best.len() < top || v > best[best.len() - 1].1 {
                let at = best.partition_point(|&(_, b)| b >= v);
                best.insert(at, (i as u32, v));
                best.truncate(top);
            }
        }
    }
    (lp(logits.get(id as usize).copied().unwrap_or(f32::NAN)), best)
}

fn internal(message: impl Into<String>) -> ApiError {
    ApiError::new(500, "server_error", Value::Null, message)
}

/// The scheduler: runs until `shared.shutdown` is set and its grace period has passed (or the
/// job channel closes), then answers what is left with 503.
pub fn run(shared: &Shared, jobs: &Receiver<Job>, model: &Model<'_>, batch: &mut dyn Batch) {
    let ctx = batch.context_len();
    let chat_stops: Arc<[u32]> = model.chat_stop_ids.clone().into();
    let eos: Arc<[u32]> = model.eos_ids.clone().into();
    let mut slots: Vec<Slot> = (0..batch.slots())
        .map(|_| Slot { cached: Vec::new(), active: None, last_used: 0 })
        .collect();
    let mut pending: VecDeque<Job> = VecDeque::new();
    let mut clock = 0u64;
    let mut disconnected = false;
    loop {
        // Intake: block when idle, else take what has arrived.
        let idle = pending.is_empty() && slots.iter().all(|s| s.active.is_none());
        if idle {
            if disconnected || shared.shutdown_expired() {
                break;
            }
            match jobs.recv_timeout(Duration::from_millis(50)) {
                Ok(j) => pending.push_back(j),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => disconnected = true,
            }
        }
        while let Ok(j) = jobs.try_recv() {
            pending.push_back(j);
        }
        if shared.shutdown_expired() {
            let gone =
                ApiError::new(503, "unavailable_error", Value::Null, "the server is shutting down");
            for j in pending.drain(..) {
                shared.queued.fetch_sub(1, Ordering::SeqCst);
                let _ = j.events.send(Event::Refused(gone.clone()));
            }
            for s in &mut slots {
                if let Some(a) = s.active.take() {
                    let _ = a.job.events.send(Event::Failed(gone.clone()));
                }
            }
            shared.busy.store(0, Ordering::SeqCst);
            continue;
        }
        // Clients that went away free their slots (what was run stays cached).
        for s in &mut slots {
            if s.active.as_ref().is_some_and(|a| a.job.events.is_closed()) {
                s.active = None;
                shared.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        pending.retain(|j| {
            let keep = !j.events.is_closed();
            if !keep {
                shared.queued.fetch_sub(1, Ordering::SeqCst);
            }
            keep
        });
        // Free slots take waiting requests.
        while let Some(free) = slots.iter().position(|s| s.active.is_none()) {
            let Some(job) = pending.pop_front() else { break };
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            let prepared = catch_unwind(AssertUnwindSafe(|| prepare(&job.req, model, ctx)))
                .unwrap_or_else(|_| Err(internal("internal error while reading the prompt")));
            let (ids, max_new) = match prepared {
                Ok(p) => p,
                Err(e) => {
                    let _ = job.events.send(Event::Refused(e));
                    continue;
                }
            };
            // The free slot sharing the longest prefix; ties to the least recently used.
            let common = |s: &Slot| s.cached.iter().zip(&ids).take_while(|(a, b)| a == b).count();
            let best = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .max_by_key(|(_, s)| (common(s), core::cmp::Reverse(s.last_used)))
                .map_or(free, |(i, _)| i);
            // Run at least the last prompt token: its logits pick the first new token.
            let reuse = common(&slots[best]).min(ids.len() - 1);
            let s = &mut slots[best];
            if batch.rewind(best, reuse).is_err() {
                batch.reset(best);
                s.cached.clear();
            } else {
                s.cached.truncate(reuse);
            }
            let cached = s.cached.len();
            let sp = job.req.sampling;
            let config = SamplerConfig {
                temperature: sp.temperature,
                top_k: sp.top_k,
                top_p: sp.top_p,
                repetition_penalty: sp.repeat_penalty,
                seed: sp.seed.unwrap_or_else(crate::random_seed),
            };
            let mut sampler = match Sampler::new(config, model.vocab) {
                Ok(s) => s,
                Err(e) => {
                    let _ = job.events.send(Event::Refused(ApiError::bad_body(e.message())));
                    continue;
                }
            };
            if sampler.record(&ids).is_err() {
                let _ = job.events.send(Event::Refused(ApiError::invalid(
                    "prompt",
                    "the prompt holds a token id past the vocabulary",
                )));
                continue;
            }
            if job.events.send(Event::Started).is_err() {
                continue;
            }
            clock += 1;
            s.last_used = clock;
            let stop_ids =
                if matches!(job.req.prompt, Prompt::Chat(_)) { &chat_stops } else { &eos };
            s.active = Some(Active {
                stop_ids: Arc::clone(stop_ids),
                ids,
                fed: cached,
                cached,
                max_new,
                sampler,
                counts: HashMap::new(),
                penalised: Vec::new(),
                next: None,
                generated: 0,
                stream: TextStream::new(),
                text: String::new(),
                sent: 0,
                pending_logprobs: Vec::new(),
                prompt_secs: 0.0,
                predicted_secs: 0.0,
                job,
            });
        }
        publish(shared, &slots, &pending);

        // One step over the active slots: decode tokens first, then prompts within the budget.
        let mut budget = batch.max_step_tokens();
        let mut order: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, s) in slots.iter().enumerate() {
            if let Some(a) = &s.active {
                if let Some(t) = a.next {
                    order.push((i, vec![t]));
                    budget = budget.saturating_sub(1);
                }
            }
        }
        for (i, s) in slots.iter().enumerate() {
            if let Some(a) = &s.active {
                if a.next.is_none() && budget > 0 {
                    let n = (a.ids.len() - a.fed).min(budget);
                    order.push((i, a.ids[a.fed..a.fed + n].to_vec()));
                    budget -= n;
                }
            }
        }
        if order.is_empty() {
            publish(shared, &slots, &pending);
            continue;
        }
        let inputs: Vec<SeqInput<'_>> =
            order.iter().map(|(slot, t)| SeqInput { slot: *slot, tokens: t }).collect();
        let t0 = Instant::now();
        let stepped = catch_unwind(AssertUnwindSafe(|| batch.step(&inputs)));
        let secs = t0.elapsed().as_secs_f64();
        let failure = match stepped {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(internal(format!("the forward pass failed: {e}"))),
            Err(_) => Some(internal("internal error in the forward pass (a bug in rml)")),
        };
        if let Some(e) = failure {
            for (slot, _) in &order {
                batch.reset(*slot);
                let s = &mut slots[*slot];
                s.cached.clear();
                if let Some(a) = s.active.take() {
                    let _ = a.job.events.send(Event::Failed(e.clone()));
                }
            }
            continue;
        }
        let total: usize = order.iter().map(|(_, t)| t.len()).sum();
        let prompt_tokens: usize = order
            .iter()
            .filter(|(i, _)| slots[*i].active.as_ref().is_some_and(|a| a.next.is_none()))
            .map(|(_, t)| t.len())
            .sum();
        shared.add_prompt(prompt_tokens, secs * prompt_tokens as f64 / total as f64);
        shared.add_decode(0, secs * (total - prompt_tokens) as f64 / total as f64);
        for (entry, (slot, tokens)) in order.iter().enumerate() {
            let s = &mut slots[*slot];
            s.cached.extend_from_slice(tokens);
            let Some(a) = s.active.as_mut() else { continue };
            if a.next.is_none() {
                a.prompt_secs += secs;
                a.fed += tokens.len();
                if a.fed < a.ids.len() {
                    continue;
                }
            } else {
                a.predicted_secs += secs;
            }
            let generated_before = a.generated;
            let logits = batch.logits(entry);
            let position = batch.position(*slot);
            let t1 = Instant::now();
            let done = catch_unwind(AssertUnwindSafe(|| advance(a, logits, position, ctx, model)))
                .unwrap_or_else(|_| Err(internal("internal error while sampling (a bug in rml)")));
            a.predicted_secs += t1.elapsed().as_secs_f64();
            if a.generated > generated_before {
                shared.add_decode(1, 0.0);
            }
            match done {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    let a = s.active.take().expect("active");
                    // Before the answer leaves: /metrics read after it shows the slot free.
                    let _ = shared.busy.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                        Some(b.saturating_sub(1))
                    });
                    let usage = Usage {
                        prompt_tokens: a.ids.len(),
                        cached_tokens: a.cached,
                        completion_tokens: a.generated,
                    };
                    let timings = Timings {
                        prompt_n: a.ids.len() - a.cached,
                        cache_n: a.cached,
                        prompt_ms: a.prompt_secs * 1e3,
                        predicted_n: a.generated,
                        predicted_ms: a.predicted_secs * 1e3,
                    };
                    shared.requests.fetch_add(1, Ordering::Relaxed);
                    let _ =
                        a.job.events.send(Event::Done { finish_reason: reason, usage, timings });
                }
                Err(e) => {
                    let a = s.active.take().expect("active");
                    let _ = a.job.events.send(Event::Failed(e));
                }
            }
        }
        publish(shared, &slots, &pending);
    }
}

/// Publishes the busy slots and waiting requests for `/metrics`.
fn publish(shared: &Shared, slots: &[Slot], pending: &VecDeque<Job>) {
    shared.deferred.store(pending.len(), Ordering::SeqCst);
    shared.busy.store(slots.iter().filter(|s| s.active.is_some()).count(), Ordering::SeqCst);
}

/// The prompt's tokens and the most tokens to generate, or the 400 that refuses it.
fn prepare(
    req: &Request,
    model: &Model<'_>,
    ctx: usize,
) -> core::result::Result<(Vec<u32>, usize), ApiError> {
    let ids = match &req.prompt {
        Prompt::Chat(messages) => {
            let Some(template) = &model.template else {
                return Err(ApiError::invalid(
                    "messages",
                    "this model has no chat template: use /v1/completions",
                ));
            };
            let msgs: Vec<Message> =
                messages.iter().map(|m| Message::new(m.role.clone(), m.content.clone())).collect();
            let text = template.render(&msgs, true).map_err(|e| {
                ApiError::invalid(
                    "messages",
                    format!("the chat template refused these messages: {}", e.message()),
                )
            })?;
            model.tok.encode(&text)
        }
        Prompt::Text(t) => model.tok.encode_with_special(t, true),
        Prompt::Tokens(ids) => {
            if let Some((i, t)) = ids.iter().enumerate().find(|(_, &t)| t as usize >= model.vocab) {
                return Err(ApiError::invalid(
                    format!("prompt[{i}]"),
                    format!("token id {t} is past the vocabulary of {} tokens", model.vocab),
                ));
            }
            Ok(ids.clone())
        }
    }
    .map_err(|e| {
        ApiError::invalid("prompt", format!("the prompt cannot be tokenized: {}", e.message()))
    })?;
    if ids.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt is empty once tokenized"));
    }
    if ids.len() >= ctx {
        return Err(ApiError {
            code: Value::String("context_length_exceeded".into()),
            ..ApiError::invalid(
                if req.endpoint == super::request::Endpoint::Chat { "messages" } else { "prompt" },
                format!(
                    "the prompt is {} tokens, the context holds {ctx} (leave room for at least \
                     one new token)",
                    ids.len()
                ),
            )
        });
    }
    let room = ctx - ids.len();
    let max_new = match req.max_tokens {
        Some(n) if n > room => {
            return Err(ApiError {
                code: Value::String("context_length_exceeded".into()),
                ..ApiError::invalid(
                    "max_tokens",
                    format!(
                        "the prompt's {} tokens + max_tokens {n} exceed the context of {ctx} \
                         tokens",
                        ids.len()
                    ),
                )
            })
        }
        Some(n) => n,
        None => room,
    };
    Ok((ids, max_new))
}

/// Samples the next token of `a` from `logits` and sends what it adds; `Some(reason)` when
/// the request is finished.
fn advance(
    a: &mut Active,
    logits: &[f32],
    position: usize,
    ctx: usize,
    model: &Model<'_>,
) -> core::result::Result<Option<&'static str>, ApiError> {
    let sp = a.job.req.sampling;
    let err = |e: rml::Error| internal(format!("sampling failed: {e}"));
    let t = if sp.presence_penalty != 0.0 || sp.frequency_penalty != 0.0 {
        a.penalised.clear();
        a.penalised.extend_from_slice(logits);
        for (&id, &n) in &a.counts {
            if let Some(l) = a.penalised.get_mut(id as usize) {
                *l -= sp.presence_penalty + sp.frequency_penalty * n as f32;
            }
        }
        a.sampler.sample(&a.penalised).map_err(err)?
    } else {
        a.sampler.sample(logits).map_err(err)?
    };
    if a.stop_ids.contains(&t) {
        return finish(a, "stop", model).map(Some);
    }
    a.generated += 1;
    *a.counts.entry(t).or_insert(0) += 1;
    if a.job.req.logprobs {
        let (lp, top) = logprobs_of(logits, t, a.job.req.top_logprobs);
        let text = |id: u32| model.tok.decode(&[id]).unwrap_or_default();
        a.pending_logprobs.push(TokenLogprob {
            token: text(t),
            logprob: lp,
            top: top.into_iter().map(|(id, v)| (text(id), v)).collect(),
        });
    }
    let piece = a.stream.push(model.tok, t).map_err(err)?;
    a.text.push_str(&piece);
    let stops = &a.job.req.stop;
    if let Some(at) = stops.iter().filter_map(|s| a.text.find(s.as_str())).min() {
        a.text.truncate(at);
        let upto = at.max(a.sent);
        send_delta(a, upto)?;
        return Ok(Some("stop"));
    }
    let upto = a.text.len() - held_back(&a.text, stops);
    send_delta(a, upto)?;
    if a.generated == a.max_new || position + 1 > ctx {
        return finish(a, "length", model).map(Some);
    }
    a.next = Some(t);
    Ok(None)
}

/// Sends `text[sent..upto]` (and the logprobs gathered) when there is something new.
fn send_delta(a: &mut Active, upto: usize) -> core::result::Result<(), ApiError> {
    let upto = upto.max(a.sent);
    if upto == a.sent && a.pending_logprobs.is_empty() {
        return Ok(());
    }
    let text = a.text.get(a.sent..upto).unwrap_or("").to_string();
    a.sent = upto;
    let logprobs = core::mem::take(&mut a.pending_logprobs);
    // A closed receiver is noticed at the next tick.
    let _ = a.job.events.send(Event::Delta { text, logprobs });
    Ok(())
}

/// Flushes the text still held back or pending in the stream before a `reason` end.
fn finish(
    a: &mut Active,
    reason: &'static str,
    model: &Model<'_>,
) -> core::result::Result<&'static str, ApiError> {
    let rest = a.stream.finish(model.tok).map_err(|e| internal(format!("decoding failed: {e}")))?;
    a.text.push_str(&rest);
    let len = a.text.len();
    send_delta(a, len)?;
    Ok(reason)
}

/// An embeddings request handed to the encoder thread.
pub struct EmbedJob {
    /// The texts.
    pub input: Vec<String>,
    /// Where the vectors (and the tokens run) or the error go.
    pub reply: tokio::sync::oneshot::Sender<core::result::Result<Embeddings, ApiError>>,
}

/// The answer to an [`EmbedJob`].
pub struct Embeddings {
    /// One vector per text.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens run over all texts (special tokens included).
    pub tokens: usize,
}

/// The encoder thread of a server started on an encoder (`EncoderFiles`): one embeddings
/// request at a time (its texts run in the encoder's batches), until the channel closes or
/// the shutdown's grace period is over.
pub fn run_encoder(shared: &Shared, jobs: &Receiver<EmbedJob>, enc: &Encoder<'_>) {
    loop {
        match jobs.recv_timeout(Duration::from_millis(50)) {
            Ok(job) => {
                let refs: Vec<&str> = job.input.iter().map(String::as_str).collect();
                let t0 = Instant::now();
                let done = catch_unwind(AssertUnwindSafe(|| enc.embed_detailed(&refs)));
                let answer = match done {
                    Ok(Ok(e)) => {
                        let tokens = e.tokens.iter().sum();
                        shared.add_prompt(tokens, t0.elapsed().as_secs_f64());
                        shared.requests.fetch_add(1, Ordering::Relaxed);
                        Ok(Embeddings { vectors: e.vectors, tokens })
                    }
                    Ok(Err(e)) if e.code() == rml::Code::InvalidArgument => {
                        Err(ApiError::invalid("input", e.message()))
                    }
                    Ok(Err(e)) => Err(internal(format!("the encoder failed: {e}"))),
                    Err(_) => Err(internal("internal error in the encoder (a bug in rml)")),
                };
                let _ = job.reply.send(answer);
            }
            Err(RecvTimeoutError::Timeout) => {
                if shared.shutdown_expired() {
                    break;
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::request::{parse, Endpoint};

    /// A [`Batch`] that panics on a step holding token [`FakeBatch::PANIC`] and otherwise
    /// makes token `100 + position` the most likely next one.
    struct FakeBatch {
        positions: Vec<usize>,
        logits: Vec<Vec<f32>>,
        vocab: usize,
    }

    impl FakeBatch {
        const PANIC: u32 = 7;
    }

    impl Batch for FakeBatch {
        fn slots(&self) -> usize {
            self.positions.len()
        }
        fn context_len(&self) -> usize {
            64
        }
        fn max_step_tokens(&self) -> usize {
            16
        }
        fn position(&self, slot: usize) -> usize {
            self.positions[slot]
        }
        fn rewind(&mut self, slot: usize, pos: usize) -> Result<()> {
            self.positions[slot] = pos.min(self.positions[slot]);
            Ok(())
        }
        fn reset(&mut self, slot: usize) {
            self.positions[slot] = 0;
        }
        fn step(&mut self, inputs: &[SeqInput<'_>]) -> Result<()> {
            assert!(inputs.iter().all(|i| !i.tokens.contains(&Self::PANIC)), "injected panic");
            self.logits.clear();
            for i in inputs {
                self.positions[i.slot] += i.tokens.len();
                let mut row = vec![0.0; self.vocab];
                row[100 + self.positions[i.slot]] = 1.0;
                self.logits.push(row);
            }
            Ok(())
        }
        fn logits(&self, i: usize) -> &[f32] {
            &self.logits[i]
        }
    }

    #[test]
    fn a_panic_in_a_step_ends_its_request_with_500_and_the_scheduler_goes_on() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/smollm2-135m/tokenizer.json");
        let tok = Tokenizer::from_file(std::path::Path::new(path)).unwrap();
        let vocab = tok.vocab_size();
        let model =
            Model { tok: &tok, template: None, chat_stop_ids: vec![], eos_ids: vec![], vocab };
        let shared = &Shared::new("m".into(), 2, 4);
        let model = &model;
        let (tx, rx) = std::sync::mpsc::channel();
        let job = |prompt: &str| {
            let body = format!(r#"{{"prompt":{prompt},"max_tokens":3,"temperature":0}}"#);
            let req = parse(Endpoint::Completion, body.as_bytes(), "m").unwrap();
            let (etx, erx) = tokio::sync::mpsc::unbounded_channel();
            shared.queued.fetch_add(1, Ordering::SeqCst);
            (Job { req, events: etx }, erx)
        };
        std::thread::scope(|scope| {
            let runner = scope.spawn(move || {
                let mut batch = FakeBatch { positions: vec![0; 2], logits: Vec::new(), vocab };
                run(shared, &rx, model, &mut batch);
            });
            let (bad, mut bad_rx) = job("[1,7,3]");
            tx.send(bad).unwrap();
            assert!(matches!(bad_rx.blocking_recv(), Some(Event::Started)));
            match bad_rx.blocking_recv() {
                Some(Event::Failed(e)) => assert_eq!(e.status, 500, "{e:?}"),
                other => panic!("{other:?}"),
            }
            for _ in 0..2 {
                let (good, mut good_rx) = job("[1,2,3]");
                tx.send(good).unwrap();
                let mut events = Vec::new();
                while let Some(e) = good_rx.blocking_recv() {
                    let end =
                        matches!(e, Event::Done { .. } | Event::Failed(_) | Event::Refused(_));
                    events.push(e);
                    if end {
                        break;
                    }
                }
                match events.last() {
                    Some(Event::Done { finish_reason, usage, timings }) => {
                        assert_eq!(*finish_reason, "length");
                        assert_eq!(usage.completion_tokens, 3);
                        assert_eq!(timings.predicted_n, 3);
                        assert_eq!(timings.prompt_n + timings.cache_n, 3);
                        assert!(timings.prompt_ms >= 0.0 && timings.predicted_ms >= 0.0);
                    }
                    other => panic!("{other:?}"),
                }
            }
            drop(tx);
            runner.join().unwrap();
        });
        assert_eq!(shared.requests.load(Ordering::SeqCst), 2);
        assert_eq!(shared.queued.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn logprobs_are_a_log_softmax() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let (lp, top) = logprobs_of(&logits, 2, 3);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((lp - (2.0f32.exp() / z).ln()).abs() < 1e-6);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3, 2]);
        let sum: f32 = (0..4).map(|i| logprobs_of(&logits, i, 0).0.exp()).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{sum}");
    }

    #[test]
    fn held_back_keeps_a_stop_prefix() {
        let stops = vec!["</end>".to_string()];
        assert_eq!(held_back("abc</e", &stops), 3);
        assert_eq!(held_back("abc", &stops), 0);
        assert_eq!(held_back("abc<", &stops), 1);
    }
}
