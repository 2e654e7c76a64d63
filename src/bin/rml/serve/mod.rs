//! `rml serve`: an OpenAI-compatible HTTP server (feature `server`).
//!
//! ```text
//! rml serve --model FILE [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-size N]
//!           [--api-key KEY] [--queue N] [--max-body BYTES] [--metrics] [-t N]
//!           [--activations int8|int8-plain|mixed|f32] [--kv-cache f32|f16] [--no-repack]
//! ```
//!
//! Three parts: [`request`] turns a body into a validated request or an OpenAI error (pure;
//! fuzzed), [`engine`] is the scheduler thread that owns the model, its `--parallel` slots and
//! their KV caches (one [`DecoderBatch`]) and runs one forward pass over all active slots per
//! tick, and [`http`] is the axum
//! side (routes, authentication, body limit, the bounded queue, SSE). The two sides talk over
//! channels: a handler sends a [`engine::Job`] with the sender of its event channel and reads
//! [`engine::Event`]s; dropping the receiver (the client went away) frees the slot.
//!
//! The socket is bound first and the model loaded after, so `GET /health` answers 503
//! "Loading model" until it is ready. SIGINT / SIGTERM stop accepting connections; requests in
//! flight get [`GRACE`] to finish, then end with a 503 error, and the process exits 0.

pub mod engine;
pub mod http;
pub mod request;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rml::load::Model;
use rml::model::encoder::{Encoder, EncoderFiles, EncoderOptions};
use rml::model::packed::PackedSource;
use rml::model::{DecoderBatch, DecoderOptions};
use rml::tokenizer::Tokenizer;
use rml::{Error, Result};

/// How long requests in flight may run on after SIGINT / SIGTERM.
pub const GRACE: Duration = Duration::from_secs(3);

/// `rml serve` arguments.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A GGUF file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Address to listen on; anything but loopback exposes the model to the network.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// TCP port (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Sequences served at once, each with its own KV cache (a slot).
    #[arg(long, default_value_t = 4, value_parser = crate::at_least_one)]
    pub parallel: usize,
    /// Context length of each slot in tokens (default: min(the model's, 4096)).
    #[arg(short = 'c', long = "ctx-size", value_parser = crate::at_least_one)]
    pub ctx_size: Option<usize>,
    /// Require `Authorization: Bearer KEY` on /v1/ routes.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Requests that may wait for a slot; past that the answer is 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Largest request body in bytes (413 past it).
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body: usize,
    /// Serve Prometheus metrics at GET /metrics.
    #[arg(long)]
    pub metrics: bool,
    /// Threads of the forward pass (default: the performance cores).
    #[arg(short = 't', long, value_parser = crate::thread_count)]
    pub threads: Option<usize>,
    /// Activations for quantized weights (as `rml generate`).
    #[arg(long, value_enum, default_value_t = crate::Act::Int8)]
    pub activations: crate::Act,
    /// Element type of the KV caches.
    #[arg(long = "kv-cache", value_enum, default_value_t = crate::KvCacheArg::F32)]
    pub kv_cache: crate::KvCacheArg,
    /// Use the matrices as stored instead of repacking them at load for the int8 kernels.
    #[arg(long)]
    pub no_repack: bool,
}

/// State shared by the HTTP handlers and the scheduler thread.
pub struct Shared {
    /// The model's id in requests and `/v1/models` (the file name without `.gguf`).
    pub model_id: String,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// `--max-body`.
    pub max_body: usize,
    /// `--metrics`.
    pub metrics: bool,
    /// `--queue`.
    pub queue_limit: usize,
    /// `--parallel`.
    pub slots: usize,
    /// Set once the model is loaded.
    pub ready: AtomicBool,
    /// Context length per slot (set when ready).
    pub context_len: AtomicUsize,
    /// Jobs sent and not yet taken into a slot.
    pub queued: AtomicUsize,
    /// Jobs waiting for a slot (as the scheduler last counted).
    pub deferred: AtomicUsize,
    /// Slots serving a request.
    pub busy: AtomicUsize,
    /// Requests finished.
    pub requests: AtomicU64,
    /// Requests whose client went away.
    pub cancelled: AtomicU64,
    /// Prompt tokens run (cached ones not counted).
    pub prompt_tokens: AtomicU64,
    /// Microseconds spent on prompt tokens.
    pub prompt_us: AtomicU64,
    /// Tokens generated.
    pub decode_tokens: AtomicU64,
    /// Microseconds spent generating.
    pub decode_us: AtomicU64,
    /// When SIGINT / SIGTERM came.
    pub shutdown_at: Mutex<Option<Instant>>,
    /// Where handlers send jobs (taken at shutdown).
    pub jobs: Mutex<Option<std::sync::mpsc::Sender<engine::Job>>>,
    /// Where the embeddings handler sends its jobs (taken at shutdown).
    pub embed_jobs: Mutex<Option<std::sync::mpsc::Sender<engine::EmbedJob>>>,
    /// The model is an encoder (set when ready): embeddings only.
    pub encoder: AtomicBool,
    /// Request ids.
    pub next_id: AtomicU64,
}

impl Shared {
    /// A server's state before loading: no API key, 8 MiB bodies, no metrics, no channels.
    pub fn new(model_id: String, slots: usize, queue_limit: usize) -> Self {
        Shared {
            model_id,
            api_key: None,
            max_body: 8 << 20,
            metrics: false,
            queue_limit,
            slots,
            ready: AtomicBool::new(false),
            context_len: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            deferred: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            prompt_us: AtomicU64::new(0),
            decode_tokens: AtomicU64::new(0),
            decode_us: AtomicU64::new(0),
            shutdown_at: Mutex::new(None),
            jobs: Mutex::new(None),
            embed_jobs: Mutex::new(None),
            encoder: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// Whether the shutdown's grace period is over.
    pub fn shutdown_expired(&self) -> bool {
        self.shutdown_at.lock().map_or(true, |t| t.is_some_and(|t| t.elapsed() >= GRACE))
    }

    fn add_prompt(&self, tokens: usize, secs: f64) {
        self.prompt_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        self.prompt_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    fn add_decode(&self, tokens: usize, secs: f64) {
        self.decode_tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        self.decode_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }
}

/// The model id a path is served as: its file or folder name, less `.gguf`.
fn model_id(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    name.strip_suffix(".gguf").map(str::to_string).unwrap_or(name)
}

/// Runs `rml serve` until SIGINT / SIGTERM.
///
/// # Errors
///
/// An address that cannot be bound, a model that cannot be loaded, or a runtime that cannot
/// start.
pub fn run(args: &ServeArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.as_deref())?;
    let (tx, rx) = std::sync::mpsc::channel::<engine::Job>();
    let (embed_tx, embed_rx) = std::sync::mpsc::channel::<engine::EmbedJob>();
    let mut shared = Shared::new(model_id(&path), args.parallel, args.queue);
    shared.api_key = args.api_key.clone();
    shared.max_body = args.max_body;
    shared.metrics = args.metrics;
    shared.jobs = Mutex::new(Some(tx));
    shared.embed_jobs = Mutex::new(Some(embed_tx));
    let shared = Arc::new(shared);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::from(e).context("starting the HTTP runtime"))?;
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(args.host.as_str(), args.port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|()| {
            Error::invalid_argument(format_args!("--host {:?}: not an address", args.host))
        })?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| Error::from(e).context(format_args!("binding {addr}")))?;
    let bound = listener.local_addr().map_err(Error::from)?;
    eprintln!("rml: listening on http://{bound} (loading {})", path.display());

    // The scheduler thread loads the model, then serves jobs until the channel closes.
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<Result<()>>();
    let sched_shared = Arc::clone(&shared);
    let opts = LoadOptions {
        path,
        parallel: args.parallel,
        ctx_size: args.ctx_size,
        threads: args.threads,
        decoder: DecoderOptions {
            activations: args.activations.into(),
            kv_dtype: args.kv_cache.into(),
            repack_weights: !args.no_repack,
            ..DecoderOptions::default()
        },
    };
    let scheduler = std::thread::Builder::new()
        .name("rml-scheduler".into())
        .spawn(move || {
            if EncoderFiles::open(&opts.path).is_ok() {
                load_and_embed(&sched_shared, &embed_rx, &opts, loaded_tx);
            } else {
                load_and_serve(&sched_shared, &rx, &opts, loaded_tx);
            }
        })
        .map_err(|e| Error::from(e).context("starting the scheduler thread"))?;

    let served = runtime.block_on(http::serve(listener, Arc::clone(&shared), loaded_rx));
    // No new jobs; the scheduler ends once the ones it holds are answered.
    if let Ok(mut j) = shared.jobs.lock() {
        j.take();
    }
    if let Ok(mut j) = shared.embed_jobs.lock() {
        j.take();
    }
    if let Ok(mut t) = shared.shutdown_at.lock() {
        t.get_or_insert_with(Instant::now);
    }
    let _ = scheduler.join();
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

struct LoadOptions {
    path: PathBuf,
    parallel: usize,
    ctx_size: Option<usize>,
    threads: Option<usize>,
    decoder: DecoderOptions,
}

/// The scheduler thread's body: load, report, serve.
fn load_and_serve(
    shared: &Shared,
    jobs: &std::sync::mpsc::Receiver<engine::Job>,
    o: &LoadOptions,
    loaded: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let t0 = Instant::now();
    let setup = || -> Result<_> {
        let model = Model::open(&o.path)?;
        let tok = Tokenizer::for_container(&model)?;
        let pool = crate::make_pool(o.threads, rml::exec::Schedule::default())?;
        Ok((model, tok, pool))
    };
    let (model, tok, pool) = match setup() {
        Ok(x) => x,
        Err(e) => {
            let _ = loaded.send(Err(e.context(o.path.display())));
            return;
        }
    };
    let mut loaded = Some(loaded);
    let result = (|| -> Result<()> {
        let config = model.config();
        let ctx = o.ctx_size.unwrap_or_else(|| {
            config.max_position_embeddings.min(rml::model::decoder::DEFAULT_MAX_CONTEXT)
        });
        // A model without a chat template still serves /v1/completions.
        let template = crate::chat::template_for(&model, &tok, None).ok();
        let chat_stop_ids = match &template {
            Some(t) => crate::chat::stop_ids(t, &tok, &model),
            None => Vec::new(),
        };
        let mut eos_ids: Vec<u32> = config.eos_token_ids.clone();
        eos_ids.extend(tok.eos_id());
        eos_ids.sort_unstable();
        eos_ids.dedup();
        let src = PackedSource::new(&model)?;
        let options = DecoderOptions { context_len: Some(ctx), ..o.decoder };
        let mut batch = DecoderBatch::new(config, &src, &pool, options, o.parallel)
            .map_err(|e| e.context(o.path.display()))?;
        let m = engine::Model {
            tok: &tok,
            template,
            chat_stop_ids: if chat_stop_ids.is_empty() { eos_ids.clone() } else { chat_stop_ids },
            eos_ids,
            vocab: config.vocab_size,
        };
        shared.context_len.store(ctx, Ordering::SeqCst);
        shared.ready.store(true, Ordering::SeqCst);
        eprintln!(
            "rml: serving {} ({} slots x {ctx} tokens, {} threads) after {:.1} s",
            shared.model_id,
            o.parallel,
            pool.threads(),
            t0.elapsed().as_secs_f64()
        );
        if let Some(l) = loaded.take() {
            let _ = l.send(Ok(()));
        }
        engine::run(shared, jobs, &m, &mut batch);
        Ok(())
    })();
    if let Err(e) = result {
        match loaded.take() {
            Some(l) => {
                let _ = l.send(Err(e));
            }
            None => eprintln!("rml: error: {e}"),
        }
    }
}

/// The encoder thread's body for what `EncoderFiles::open` takes (a sentence-transformers
/// folder or a BERT GGUF): load, report, embed.
fn load_and_embed(
    shared: &Shared,
    jobs: &std::sync::mpsc::Receiver<engine::EmbedJob>,
    o: &LoadOptions,
    loaded: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let t0 = Instant::now();
    let files = match EncoderFiles::open(&o.path) {
        Ok(f) => f,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    for note in files.notes() {
        eprintln!("rml: {note}");
    }
    let pool = match crate::make_pool(o.threads, rml::exec::Schedule::default()) {
        Ok(p) => p,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    let enc = match Encoder::new(&files, &pool, EncoderOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            let _ = loaded.send(Err(e));
            return;
        }
    };
    shared.context_len.store(files.max_seq_length(), Ordering::SeqCst);
    shared.encoder.store(true, Ordering::SeqCst);
    shared.ready.store(true, Ordering::SeqCst);
    eprintln!(
        "rml: serving embeddings of {} ({} threads) after {:.1} s",
        shared.model_id,
        pool.threads(),
        t0.elapsed().as_secs_f64()
    );
    let _ = loaded.send(Ok(()));
    engine::run_encoder(shared, jobs, &enc);
}
