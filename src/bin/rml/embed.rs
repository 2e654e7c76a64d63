//! `rml embed`: sentence embeddings from a sentence-transformers folder or a llama.cpp BERT
//! GGUF (BERT family, nomic-bert), one JSON array per text on standard output, in input order;
//! or with `--format npy` one NumPy `.npy` array (`<f4`, shape `(texts, hidden_size)`,
//! C order: NumPy's format 1.0, `numpy.lib.format`).
//!
//! Texts come from the arguments, else `-f FILE` (one text per line; `-` = standard input),
//! else standard input (one per line). Notes go to standard error, once each: a default taken
//! for a missing file (no pooling config: mean pooling), and every text cut at the model's
//! `max_seq_length`.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use rml::exec::Schedule;
use rml::model::encoder::{Encoder, EncoderFiles, EncoderOptions};
use rml::{Error, Result};

use crate::{make_pool, out};

/// `rml embed`'s arguments.
#[derive(clap::Args)]
pub struct EmbedArgs {
    /// A sentence-transformers folder (config.json, model.safetensors, tokenizer.json,
    /// modules.json, 1_Pooling/config.json, sentence_bert_config.json), or a llama.cpp BERT
    /// GGUF (general.architecture bert / nomic-bert).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Texts to embed, one vector each (none: read --file, else standard input).
    texts: Vec<String>,
    /// Read the texts from FILE, one per line (`-`: standard input).
    #[arg(short = 'f', long, conflicts_with = "texts")]
    file: Option<PathBuf>,
    /// Threads (default: the machine's cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Texts per batch (each batch is one matrix product per weight).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// int8: matrices quantized to Q8_0 at load, activations to int8 (faster, a quarter of the
    /// weight memory; cosine ≥ 0.999 to the f32 vectors on all-MiniLM-L6-v2).
    #[arg(long)]
    int8: bool,
    /// Output: `json` (one array per line) or `npy` (one float32 array, texts × dimensions).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// Print on stderr how long loading and embedding took (embedding: best of N runs over
    /// all texts, N = --repeat), with texts/s and tokens/s.
    #[arg(long)]
    timing: bool,
    /// With --timing: embed the texts this many times and report the fastest.
    #[arg(long, default_value_t = 1, requires = "timing")]
    repeat: usize,
}

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON array per text, one per line.
    Json,
    /// A NumPy `.npy` file: little-endian float32, shape (texts, dimensions).
    Npy,
}

/// `vectors` (each `dim` long) as a NumPy `.npy` file, format version 1.0: the magic
/// `\x93NUMPY`, version 1 0, the header length (u16 LE) and a Python dict literal naming dtype
/// `<f4`, C order and the shape, padded with spaces and a newline so the data starts on a
/// 64-byte boundary; then the values row by row, little-endian.
fn npy(vectors: &[Vec<f32>], dim: usize) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {dim}), }}",
        vectors.len()
    );
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + vectors.len() * dim * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    // the header is at most a few hundred bytes
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in vectors {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

fn lines(r: impl BufRead, what: &str) -> Result<Vec<String>> {
    r.lines()
        .map(|l| l.map_err(|e| Error::from(e).context(format_args!("reading {what}"))))
        .collect()
}

/// Runs `rml embed`.
pub fn run(args: &EmbedArgs) -> Result<()> {
    if args.batch == 0 {
        return Err(Error::invalid_argument("--batch 0: give at least 1"));
    }
    let texts = if !args.texts.is_empty() {
        args.texts.clone()
    } else {
        match &args.file {
            Some(f) if f.as_os_str() == "-" => lines(std::io::stdin().lock(), "standard input")?,
            Some(f) => {
                let file =
                    std::fs::File::open(f).map_err(|e| Error::from(e).context(f.display()))?;
                lines(std::io::BufReader::new(file), &f.display().to_string())?
            }
            None => lines(std::io::stdin().lock(), "standard input")?,
        }
    };
    if args.repeat == 0 {
        return Err(Error::invalid_argument("--repeat 0: give at least 1"));
    }
    let t0 = std::time::Instant::now();
    let files = EncoderFiles::open(&args.model)?;
    for note in files.notes() {
        eprintln!("rml: {note}");
    }
    let pool = make_pool(args.threads, Schedule::default())?;
    let base = if args.int8 { EncoderOptions::int8() } else { EncoderOptions::default() };
    let enc = Encoder::new(&files, &pool, EncoderOptions { batch_size: args.batch, ..base })?;
    let load = t0.elapsed();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut best = std::time::Duration::MAX;
    let mut done = None;
    for _ in 0..args.repeat {
        let t = std::time::Instant::now();
        let d = enc.embed_detailed(&refs)?;
        best = best.min(t.elapsed());
        done = Some(d);
    }
    let done = done.ok_or_else(|| Error::internal("no run"))?;
    if args.timing {
        let tokens: usize = done.tokens.iter().sum();
        let s = best.as_secs_f64();
        eprintln!(
            "rml: load {:.3} s; embed {} texts ({tokens} tokens, batch {}, {} threads, {}): \
             {:.3} ms, {:.1} texts/s, {:.0} tokens/s (best of {})",
            load.as_secs_f64(),
            refs.len(),
            args.batch,
            rml::exec::Executor::threads(&pool),
            if args.int8 { "int8" } else { "f32" },
            s * 1e3,
            refs.len() as f64 / s,
            tokens as f64 / s,
            args.repeat
        );
    }
    for &(i, full) in &done.truncated {
        eprintln!(
            "rml: text {} has {full} tokens; cut to max_seq_length = {}",
            i + 1,
            files.max_seq_length()
        );
    }
    let mut out = out::stdout();
    if args.format == Format::Npy {
        out.write_all(&npy(&done.vectors, files.config().hidden_size))?;
        out.flush()?;
        return Ok(());
    }
    let mut line = String::new();
    for v in &done.vectors {
        line.clear();
        line.push('[');
        for (j, x) in v.iter().enumerate() {
            if j > 0 {
                line.push(',');
            }
            // Rust prints the shortest decimal that reads back to the same f32
            line.push_str(&x.to_string());
        }
        line.push_str("]\n");
        out.write_all(line.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}
