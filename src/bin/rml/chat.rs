//! `rml chat`: a multi-turn conversation rendered with the model's own chat template.
//!
//! On a terminal each turn is read after a `> ` prompt; with piped stdin every line is one
//! user message. `/reset` forgets the conversation, `/exit` (or end of input) ends it. The
//! conversation stays in the KV cache: each turn renders the whole conversation, tokenizes
//! it, keeps the cached tokens it shares with it and prefills only the rest (rewinding the
//! cache first where the two differ, e.g. when the template rewrites an earlier turn). A reply
//! ends at the template's end-of-turn token(s), at EOS, at a `--stop` string, after
//! `--max-tokens`, on Ctrl-C (which ends the reply, not the session) or when the context is
//! full.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rml::load::{Model, ModelFormat};
use rml::model::packed::PackedSource;
use rml::model::{DecoderLM, DecoderOptions, Sampler, SamplerConfig};
use rml::tokenizer::chat::family_template;
use rml::tokenizer::{ChatTemplate, Message, TextStream, Tokenizer};
use rml::{Error, Result};

/// `rml chat` arguments.
#[derive(clap::Args)]
pub struct ChatArgs {
    /// A .gguf file or a Hugging Face folder (default: SmolLM2-135M-Instruct, fetched once).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// A system message put first in the conversation (the template decides how).
    #[arg(long)]
    pub system: Option<String>,
    /// A Jinja chat template file used instead of the model's own.
    #[arg(long = "chat-template")]
    pub chat_template: Option<PathBuf>,
    /// Tokens per reply at most.
    #[arg(short = 'n', long = "max-tokens", default_value_t = 512)]
    pub n: usize,
    /// Ends a reply when its text contains this string (repeatable).
    #[arg(long = "stop", value_parser = non_empty)]
    pub stop: Vec<String>,
    /// Context length in tokens: the whole conversation must fit (default: min(the model's,
    /// 4096)).
    #[arg(short = 'c', long, allow_negative_numbers = true, value_parser = crate::at_least_one)]
    pub context: Option<usize>,
    /// Threads (default: the performance cores).
    #[arg(short = 't', long, allow_negative_numbers = true, value_parser = crate::thread_count)]
    pub threads: Option<usize>,
    /// Sampling temperature, >= 0; 0 is greedy.
    #[arg(
        long,
        default_value_t = 0.0,
        allow_negative_numbers = true,
        value_parser = crate::non_negative
    )]
    pub temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass, in (0, 1].
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = crate::probability)]
    pub top_p: f32,
    /// Repetition penalty, > 0 (1: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = crate::positive)]
    pub repeat_penalty: f32,
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Activations for quantized weights. f32 by default here (int8 in `generate`): a chat
    /// reply follows its first tokens, and on SmolLM2 Q4_1 int8 flips the near-tie first token
    /// of "What is the capital of France?" ("The" / "L'") into a French ramble.
    #[arg(long, value_enum, default_value_t = crate::Act::F32)]
    pub activations: crate::Act,
    /// Use the matrices as stored instead of repacking them at load for the kernels (int8: Q5_0
    /// pairs on AVX-512, row-interleaved Q4_0/Q4_1/Q5_0/Q8_0/Q4_K on AVX2; f32: Q5_0 and
    /// IQ4_NL widened to Q8_0 on AVX2; same results; repacking costs a copy and runs those
    /// products faster).
    #[arg(long)]
    pub no_repack: bool,
    /// Element type of the KV cache.
    #[arg(long = "kv-cache", value_enum, default_value_t = crate::KvCacheArg::F32)]
    pub kv_cache: crate::KvCacheArg,
    /// After each reply, print on stderr how many tokens were prefilled and reused.
    #[arg(short, long)]
    pub verbose: bool,
}

/// A `--stop` string: an empty one would end every reply at its first token.
fn non_empty(s: &str) -> core::result::Result<String, String> {
    if s.is_empty() {
        Err(String::from("a stop string must not be empty"))
    } else {
        Ok(String::from(s))
    }
}

/// The chat template for `model`: `override_file` if given, else the model's own
/// (`tokenizer.chat_template` in a GGUF, `chat_template` in tokenizer_config.json or
/// `chat_template.jinja`), else the family's known template with a notice on stderr.
///
/// # Errors
///
/// [`rml::Code::NotFound`] when there is none of these (the message says to pass
/// `--chat-template`); a template that does not compile, as [`ChatTemplate::new`].
pub fn template_for(
    model: &Model,
    tok: &Tokenizer,
    override_file: Option<&Path>,
) -> Result<ChatTemplate> {
    if let Some(f) = override_file {
        let src = std::fs::read_to_string(f)
            .map_err(|e| Error::not_found(format_args!("{}: {e}", f.display())))?;
        return ChatTemplate::for_tokenizer(src, tok).map_err(|e| e.context(f.display()));
    }
    if let Some(src) = tok.chat_template() {
        return ChatTemplate::for_tokenizer(src, tok);
    }
    let mut arch = String::new();
    if let Some(g) = model.gguf() {
        let g = g?;
        if let Some(src) = g.chat_template()? {
            return ChatTemplate::for_tokenizer(src, tok)
                .map_err(|e| e.context("tokenizer.chat_template"));
        }
        arch = g.architecture()?.to_string();
    } else if let Ok(bytes) = std::fs::read(model.path().join("config.json")) {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            arch = v.get("model_type").and_then(|m| m.as_str()).unwrap_or("").to_string();
        }
    }
    match family_template(&arch) {
        Some(src) => {
            eprintln!(
                "rml: {} carries no chat template; using the {arch} family's turn format \
                 (--chat-template FILE to change it)",
                model.path().display()
            );
            ChatTemplate::for_tokenizer(src, tok)
        }
        None => Err(Error::not_found(format_args!(
            "{}: the model carries no chat template and rml knows none for architecture \
             {arch:?}: give one with --chat-template FILE",
            model.path().display()
        ))),
    }
}

/// The tokens that end a reply: the template's end-of-turn token(s), EOS and the model
/// config's EOS ids.
pub fn stop_ids(template: &ChatTemplate, tok: &Tokenizer, model: &Model) -> Vec<u32> {
    let mut ids = template.end_of_turn_ids(tok);
    ids.extend(tok.eos_id());
    ids.extend(model.config().eos_token_ids.iter().copied());
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Set by the SIGINT handler while a reply is being generated.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Whether a reply is being generated (Ctrl-C then ends the reply, otherwise the process).
static GENERATING: AtomicBool = AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_sigint(_: libc::c_int) {
    if GENERATING.load(Ordering::SeqCst) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    } else {
        // SAFETY: `_exit` is async-signal-safe; 130 is the shell's status for SIGINT.
        unsafe { libc::_exit(130) };
    }
}

fn install_sigint_handler() {
    #[cfg(unix)]
    {
        let handler: extern "C" fn(libc::c_int) = on_sigint;
        // SAFETY: the handler only touches atomics and calls `_exit`, both async-signal-safe.
        unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    }
}

/// Marks a reply in progress (for the SIGINT handler) until dropped, also on an error.
struct Generating;

impl Generating {
    fn start() -> Self {
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        Generating
    }
}

impl Drop for Generating {
    fn drop(&mut self) {
        GENERATING.store(false, Ordering::SeqCst);
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of a stop string: that
/// much is held back from printing until the next piece says whether a stop string begins.
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

/// Why a reply ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    EndOfTurn,
    Stop,
    Length,
    Interrupted,
    ContextFull,
}

/// The running conversation.
struct Session<'m, 'a> {
    tok: &'m Tokenizer,
    template: ChatTemplate,
    dec: DecoderLM<'a>,
    sampler: Sampler,
    stop_ids: Vec<u32>,
    system: Option<String>,
    messages: Vec<Message>,
    /// The tokens in the KV cache, position by position.
    cached: Vec<u32>,
}

impl Session<'_, '_> {
    fn reset(&mut self) {
        self.messages.clear();
        if let Some(s) = &self.system {
            self.messages.push(Message::new("system", s.clone()));
        }
        self.dec.reset();
        self.cached.clear();
        self.sampler.reset();
    }

    /// One user turn: prefill what the cache lacks, then stream the reply to `out`.
    fn turn(&mut self, user: &str, args: &ChatArgs, out: &mut impl Write) -> Result<()> {
        self.messages.push(Message::new("user", user));
        let text = match self.template.render(&self.messages, true) {
            Ok(t) => t,
            Err(e) => {
                self.messages.pop();
                return Err(e);
            }
        };
        let ids = self.tok.encode(&text)?;
        let ctx = self.dec.context_len();
        if ids.len() >= ctx {
            self.messages.pop();
            eprintln!(
                "rml: context full: the conversation with this message is {} tokens, the \
                 context holds {ctx} (/reset to start over, or raise --context)",
                ids.len()
            );
            return Ok(());
        }
        let mut common = self.cached.iter().zip(&ids).take_while(|(a, b)| a == b).count();
        // Prefill at least one token: its logits choose the first reply token.
        common = common.min(ids.len() - 1);
        if common < self.cached.len() {
            self.dec.rewind(common)?;
            self.cached.truncate(common);
        }
        let new = &ids[common..];
        self.sampler.record(new)?;
        let t0 = std::time::Instant::now();
        let mut next = self.sampler.sample(self.dec.prefill(new)?)?;
        let prefill_s = t0.elapsed().as_secs_f64();
        self.cached.extend_from_slice(new);

        let mut reply_ids = Vec::new();
        let mut reply = String::new();
        let mut printed = 0usize;
        let mut stream = TextStream::new();
        let generating = Generating::start();
        let t1 = std::time::Instant::now();
        let ended = loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break Ended::Interrupted;
            }
            if self.stop_ids.contains(&next) {
                break Ended::EndOfTurn;
            }
            if reply_ids.len() == args.n {
                break Ended::Length;
            }
            reply_ids.push(next);
            reply.push_str(&stream.push(self.tok, next)?);
            if let Some(at) = args.stop.iter().filter_map(|s| reply.find(s.as_str())).min() {
                reply.truncate(at);
                break Ended::Stop;
            }
            let upto = reply.len() - held_back(&reply, &args.stop);
            if upto > printed {
                write!(out, "{}", &reply[printed..upto])?;
                out.flush()?;
                printed = upto;
            }
            if self.dec.position() + 1 > ctx {
                break Ended::ContextFull;
            }
            let fed = next;
            next = self.sampler.sample(self.dec.decode(fed)?)?;
            self.cached.push(fed);
        };
        drop(generating);
        let decode_s = t1.elapsed().as_secs_f64();
        if matches!(ended, Ended::EndOfTurn | Ended::Length | Ended::ContextFull) {
            reply.push_str(&stream.finish(self.tok)?);
        }
        write!(out, "{}", reply.get(printed..).unwrap_or(""))?;
        writeln!(out)?;
        out.flush()?;
        match ended {
            Ended::Interrupted => eprintln!("rml: reply interrupted"),
            Ended::ContextFull => eprintln!(
                "rml: context full ({ctx} tokens): the reply was cut; /reset to start over, or \
                 raise --context"
            ),
            _ => {}
        }
        if args.verbose {
            let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
            eprintln!(
                "rml: prefilled {} tokens ({} reused from the KV cache), {:.1} tok/s; reply {} \
                 tokens, {:.1} tok/s, ended by {}",
                new.len(),
                common,
                rate(new.len(), prefill_s),
                reply_ids.len(),
                rate(reply_ids.len().saturating_sub(1), decode_s),
                match ended {
                    Ended::EndOfTurn => "end of turn",
                    Ended::Stop => "stop string",
                    Ended::Length => "--max-tokens",
                    Ended::Interrupted => "Ctrl-C",
                    Ended::ContextFull => "full context",
                }
            );
        }
        self.messages.push(Message::new("assistant", reply));
        Ok(())
    }
}

/// Runs `rml chat`.
///
/// # Errors
///
/// A model, tokenizer or template that cannot be loaded, an unreadable stdin, or a failing
/// forward pass.
pub fn run(args: &ChatArgs) -> Result<()> {
    let path = crate::resolve_model(args.model.as_deref())?;
    let model = Model::open(&path)?;
    let tok = Tokenizer::for_container(&model)?;
    let template = template_for(&model, &tok, args.chat_template.as_deref())?;
    let stop_ids = stop_ids(&template, &tok, &model);
    let max_ctx = args.context.unwrap_or_else(|| {
        model.config().max_position_embeddings.min(rml::model::decoder::DEFAULT_MAX_CONTEXT)
    });
    let pool = crate::make_pool(args.threads, rml::exec::Schedule::default())?;
    let opts = DecoderOptions {
        context_len: Some(max_ctx),
        activations: args.activations.into(),
        repack_weights: !args.no_repack,
        kv_dtype: args.kv_cache.into(),
        ..DecoderOptions::default()
    };
    let dec = DecoderLM::new(model.config(), &PackedSource::new(&model)?, &pool, opts)
        .map_err(|e| e.context(path.display()))?;
    let sc = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        repetition_penalty: args.repeat_penalty,
        seed: args.seed,
    };
    let sampler = Sampler::new(sc, model.config().vocab_size)?;
    let mut s = Session {
        tok: &tok,
        template,
        dec,
        sampler,
        stop_ids,
        system: args.system.clone(),
        messages: Vec::new(),
        cached: Vec::new(),
    };
    s.reset();
    install_sigint_handler();
    let tty = std::io::stdin().is_terminal();
    if tty {
        eprintln!(
            "rml chat with {} ({} context tokens). /reset clears the conversation, /exit or \
             Ctrl-D ends it, Ctrl-C ends a reply.",
            path.display(),
            max_ctx
        );
        if matches!(model.format(), ModelFormat::Gguf) && args.verbose {
            eprintln!("rml: end-of-turn tokens {:?}", s.stop_ids);
        }
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock();
    let mut out = crate::out::stdout();
    let mut line = String::new();
    loop {
        if tty {
            write!(out, "> ")?;
            out.flush()?;
        }
        line.clear();
        let read = lines.read_line(&mut line);
        if read.map_err(|e| Error::from(e).context("reading a message from standard input"))? == 0 {
            break;
        }
        let msg = line.trim_end_matches(['\n', '\r']);
        match msg.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                s.reset();
                eprintln!("rml: conversation cleared");
                continue;
            }
            _ => {}
        }
        s.turn(msg, args, &mut out)?;
    }
    Ok(())
}
