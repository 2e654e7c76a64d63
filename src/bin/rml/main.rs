//! `rml`: run, inspect, tune, benchmark and convert Llama-family models.
//!
//! ```text
//! rml generate [--model PATH] [--prompt TEXT] [-n N] [--threads N] [--schedule P]
//!              [--temperature T] [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S]
//!              [--activations f32|int8] [--context N] [--chat]
//! rml chat [--model PATH] [--system TEXT] [--chat-template FILE] [--stop S]... [-v]
//! rml inspect PATH
//! rml tune [--model PATH]
//! rml bench [--model PATH]
//! rml convert IN OUT --dtype f32|bf16
//! ```
//!
//! `--model` takes a Hugging Face folder (`config.json`, `model.safetensors`,
//! `tokenizer.json`) or a `.gguf` file; without it the default model (SmolLM2-135M-Instruct,
//! see `fetch.rs`) is used. Errors print one line naming the problem and exit with status 1.

mod bench;
mod chat;
mod convert;
mod fetch;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use rml::exec::tune::{TuneMode, TuneOptions};
use rml::exec::{Schedule, ThreadPool};
use rml::load::{Model, ModelFormat};
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions, Sampler, SamplerConfig};
use rml::ops::Activations;
use rml::tokenizer::{TextStream, Tokenizer};
use rml::{Error, Result};

/// The schedule `generate` uses when neither `--schedule` nor a tuned winner is given.
const DEFAULT_SCHEDULE: Schedule = Schedule::Proportional2;

#[derive(Parser)]
#[command(
    name = "rml",
    version,
    about = "Run Llama-family models on the CPU (GGUF or safetensors)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt, streaming it, then print one summary line.
    Generate(GenerateArgs),
    /// A multi-turn conversation using the model's chat template (one message per stdin line
    /// when piped).
    Chat(chat::ChatArgs),
    /// List a model file's metadata and tensors.
    Inspect {
        /// A .gguf file or a Hugging Face folder.
        path: PathBuf,
    },
    /// Find the fastest thread count and schedule for one decode step and cache it.
    Tune(ModelArg),
    /// Prefill and decode speed at 1..=cores threads, against the machine's read bandwidth.
    Bench(ModelArg),
    /// Convert a GGUF file or Hugging Face folder to a Hugging Face safetensors folder.
    Convert {
        /// Input: a .gguf file or a Hugging Face folder.
        input: PathBuf,
        /// Output folder (created): config.json, model.safetensors, tokenizer.json.
        output: PathBuf,
        /// Element type of the written weights.
        #[arg(long, value_enum)]
        dtype: convert::OutDType,
    },
}

#[derive(clap::Args)]
struct ModelArg {
    /// A .gguf file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Activations for quantized weights.
    #[arg(long, value_enum, default_value_t = Act::F32)]
    activations: Act,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Act {
    /// f32 activations: exact.
    F32,
    /// int8 activations (quantized weights only): fastest.
    Int8,
}

impl From<Act> for Activations {
    fn from(a: Act) -> Self {
        match a {
            Act::F32 => Activations::F32,
            Act::Int8 => Activations::Int8,
        }
    }
}

#[derive(clap::Args)]
struct GenerateArgs {
    /// A .gguf file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt.
    #[arg(long, default_value = "Once upon a time")]
    prompt: String,
    /// Tokens to generate at most (stops earlier at end of sequence).
    #[arg(short = 'n', long = "max-tokens", default_value_t = 64)]
    n: usize,
    /// Threads (default: the tuned winner, else the performance cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Matmul schedule: grain:G, static, fixed8, fixed16, fixed32, proportional2,
    /// proportional4, adaptive, owned (default: the tuned winner, else proportional2).
    #[arg(long, value_parser = parse_schedule)]
    schedule: Option<Schedule>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Activations for quantized weights.
    #[arg(long, value_enum, default_value_t = Act::F32)]
    activations: Act,
    /// Context length (default: min(the model's, 4096)).
    #[arg(long)]
    context: Option<usize>,
    /// Wrap the prompt in the model's own chat template as one user turn.
    #[arg(long)]
    chat: bool,
}

fn main() -> ExitCode {
    // A panic is a bug in rml: one line, no backtrace, exit status 101.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rml: internal error (a bug in rml): {info}");
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => generate(&args),
        Command::Chat(args) => chat::run(&args),
        Command::Inspect { path } => inspect(&path),
        Command::Tune(args) => tune(&args),
        Command::Bench(args) => resolve_model(args.model.as_deref())
            .and_then(|p| bench::run(&p, args.activations.into())),
        Command::Convert { input, output, dtype } => convert::run(&input, &output, dtype),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("rml: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--model`, or the default model.
fn resolve_model(model: Option<&Path>) -> Result<PathBuf> {
    match model {
        Some(p) => Ok(p.to_path_buf()),
        None => fetch::default_model(),
    }
}

/// The tokenizer for a model: `tokenizer.json` in the folder (or beside the .gguf), else
/// the GGUF's own vocabulary.
pub fn load_tokenizer(model: &Model) -> Result<Tokenizer> {
    let path = model.path();
    let beside = match model.format() {
        ModelFormat::Safetensors => path.join("tokenizer.json"),
        ModelFormat::Gguf => path.with_file_name("tokenizer.json"),
    };
    if beside.is_file() {
        return Tokenizer::from_file(&beside);
    }
    let Some(gguf) = model.gguf() else {
        return Err(Error::not_found(format_args!(
            "{}: no tokenizer.json in the model folder",
            beside.display()
        )));
    };
    Tokenizer::from_gguf(&gguf?).map_err(|e| e.context(path.display()))
}

/// A thread pool for `threads` (or the default count) with `schedule` (or the default).
fn make_pool(threads: Option<usize>, schedule: Schedule) -> Result<ThreadPool> {
    let threads = threads.unwrap_or_else(ThreadPool::default_threads);
    if threads == 0 {
        return Err(Error::invalid_argument("--threads must be at least 1"));
    }
    ThreadPool::builder().threads(threads).schedule(schedule).build()
}

/// The auto-tuner's cache key for one decode step of `path` with `act`.
fn tune_key(path: &Path, act: Activations) -> String {
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    format!("decode:{name}:{act:?}")
}

fn peak_rss_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: `getrusage` fills the zeroed struct we own; RUSAGE_SELF is always valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
            let v = usage.ru_maxrss.max(0) as u64;
            return Some(if cfg!(target_os = "macos") { v } else { v * 1024 });
        }
    }
    None
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::open(&path)?;
    let tok = load_tokenizer(&model)?;
    let act: Activations = args.activations.into();
    let tuned = (args.threads.is_none() && args.schedule.is_none())
        .then(|| rml::exec::tune::cached(&tune_key(&path, act), &TuneOptions::default()))
        .flatten();
    let (threads, schedule) = match (args.threads, args.schedule, tuned) {
        (None, None, Some(report)) => (Some(report.best.threads), report.best.schedule),
        (t, s, _) => (t, s.unwrap_or(DEFAULT_SCHEDULE)),
    };
    let mut stop: Vec<u32> = model.config().eos_token_ids.clone();
    let ids = if args.chat {
        let template = chat::template_for(&model, &tok, None)?;
        stop.extend(chat::stop_ids(&template, &tok, &model));
        tok.encode(&template.render(&[rml::tokenizer::Message::new("user", &args.prompt)], true)?)?
    } else {
        tok.encode_with_special(&args.prompt, true)?
    };
    if ids.is_empty() {
        return Err(Error::invalid_argument("the prompt is empty: give --prompt TEXT"));
    }
    let max_ctx = args.context.unwrap_or_else(|| {
        model.config().max_position_embeddings.min(rml::model::decoder::DEFAULT_MAX_CONTEXT)
    });
    if ids.len() + args.n > max_ctx {
        return Err(Error::out_of_range(format_args!(
            "-n {}: the prompt's {} tokens + {} new tokens exceed the context of {max_ctx} tokens \
             (lower -n or raise --context)",
            args.n,
            ids.len(),
            args.n
        )));
    }
    // Without --context, the KV cache holds just what this run needs.
    let ctx = if args.context.is_some() { max_ctx } else { ids.len() + args.n };
    let pool = make_pool(threads, schedule)?;
    let opts =
        DecoderOptions { context_len: Some(ctx), activations: act, ..DecoderOptions::default() };
    let mut dec = DecoderLM::new(model.config(), &PackedSource::new(&model)?, &pool, opts)
        .map_err(|e| e.context(path.display()))?;
    let sc = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
    };
    let mut sampler = Sampler::new(sc, model.config().vocab_size)?;
    sampler.record(&ids)?;

    let mut out = std::io::stdout().lock();
    if !args.chat {
        write!(out, "{}", args.prompt)?;
        out.flush()?;
    }
    let t0 = Instant::now();
    let first = sampler.sample(dec.prefill(&ids)?)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut stream = TextStream::new();
    let (mut next, mut produced, mut decode_steps) = (first, 0usize, 0usize);
    let t1 = Instant::now();
    while produced < args.n && !stop.contains(&next) {
        let piece = stream.push(&tok, next)?;
        write!(out, "{piece}")?;
        out.flush()?;
        produced += 1;
        if produced == args.n {
            break;
        }
        next = sampler.sample(dec.decode(next)?)?;
        decode_steps += 1;
    }
    let decode_s = t1.elapsed().as_secs_f64();
    writeln!(out, "{}", stream.finish(&tok)?)?;
    drop(out);
    let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let peak = peak_rss_bytes().map_or_else(|| "n/a".to_string(), |b| format!("{:.0} MiB", mib(b)));
    eprintln!(
        "rml: {} prompt tokens, prefill {:.1} tok/s, decode {:.1} tok/s ({} tokens), {} threads, \
         schedule {}, kernels {}, activations {}, peak memory {peak} (rml buffers {:.0} MiB)",
        ids.len(),
        rate(ids.len(), prefill_s),
        rate(decode_steps, decode_s),
        produced,
        pool.threads(),
        pool.schedule(),
        kernels_isa(),
        match act {
            Activations::F32 => "f32",
            Activations::Int8 => "int8",
        },
        mib(rml::mem::stats().peak_bytes as u64),
    );
    Ok(())
}

/// The name of the kernel set in use.
fn kernels_isa() -> &'static str {
    rml::kernels::active().map_or("unavailable", |k| k.isa().name())
}

fn inspect(path: &Path) -> Result<()> {
    let model = Model::open(path)?;
    let mut out = std::io::stdout().lock();
    let c = model.config();
    writeln!(out, "{} ({:?})", model.path().display(), model.format())?;
    writeln!(
        out,
        "config: {} layers, hidden {}, intermediate {}, heads {} (kv {}), head_dim {}, vocab {}, \
         context {}, rope_theta {}, rope_scaling {:?}, rms_norm_eps {:e}, tied embeddings {}",
        c.num_hidden_layers,
        c.hidden_size,
        c.intermediate_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.vocab_size,
        c.max_position_embeddings,
        c.rope_theta,
        c.rope_scaling,
        c.rms_norm_eps,
        c.tie_word_embeddings
    )?;
    let meta = model.metadata_listing()?;
    writeln!(out, "metadata ({} entries):", meta.len())?;
    for (k, v) in &meta {
        writeln!(out, "  {k} = {v}")?;
    }
    let infos = model.tensor_infos();
    let total: usize = infos.iter().map(|t| t.bytes).sum();
    writeln!(out, "tensors ({}, {:.1} MiB):", infos.len(), mib(total as u64))?;
    for t in infos {
        writeln!(
            out,
            "  {:<40} {:<6} {:?} {} bytes",
            t.name,
            t.dtype.name(),
            t.shape.dims(),
            t.bytes
        )?;
    }
    Ok(())
}

fn parse_schedule(s: &str) -> std::result::Result<Schedule, String> {
    s.parse::<Schedule>().map_err(|e| e.message().to_string())
}

fn tune(args: &ModelArg) -> Result<()> {
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::open(&path)?;
    let act: Activations = args.activations.into();
    let inline = rml::InlineExecutor;
    let opts =
        DecoderOptions { context_len: Some(64), activations: act, ..DecoderOptions::default() };
    let mut dec = DecoderLM::new(model.config(), &PackedSource::new(&model)?, &inline, opts)?;
    let vocab = model.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..16u32).map(|i| (i * 7919 + 13) % vocab).collect();
    dec.prefill(&prompt)?;
    let key = tune_key(&path, act);
    let mode = match TuneMode::from_env() {
        TuneMode::Off => TuneMode::Off,
        _ => TuneMode::Refresh,
    };
    let options = TuneOptions { mode, ..TuneOptions::default() };
    eprintln!(
        "rml: timing one decode step of {} at 1..={} threads x {} schedules",
        path.display(),
        options.max_threads,
        options.schedules.len()
    );
    let mut failure = None;
    let report = rml::exec::tune::tune(&key, &options, |pool| {
        let step = dec.rewind(prompt.len()).and_then(|()| dec.decode_with(pool, 1).map(|_| ()));
        if let Err(e) = step {
            failure.get_or_insert(e);
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    match report {
        Some(r) => {
            println!("{r}");
            match &r.cache_file {
                Some(f) => println!(
                    "cached in {} (generate uses it unless --threads or --schedule is given)",
                    f.display()
                ),
                None => {
                    println!("not cached (the sweep was cut short or the cache is not writable)")
                }
            }
        }
        None => println!("tuning is off (RML_TUNE=off)"),
    }
    Ok(())
}
