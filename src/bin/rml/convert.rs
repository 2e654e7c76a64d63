//! `rml convert IN OUT --dtype D [--format safetensors|gguf]`: any model rml reads (a GGUF
//! file, a Hugging Face folder, also `convert`'s own output in every dtype) in; a Hugging Face
//! folder (`config.json`, `model.safetensors`, `tokenizer.json`) or a GGUF file out.
//!
//! `--dtype`:
//! - `f32`: IEEE binary32, every tensor.
//! - `f16`: IEEE binary16, rounded to nearest even (GGUF: 1-D tensors stay f32, as llama.cpp
//!   writes them).
//! - `bf16`: bfloat16, rounded to nearest even (GGUF: 1-D tensors stay f32).
//! - `q8_0`, `q4_0`, `q4_1`, `q5_0`, `q5_1`: ggml's blocks of 32 (`block_q8_0`, `block_q4_0`,
//!   `block_q4_1`, `block_q5_0`, `block_q5_1`) for every matrix whose rows split into
//!   32-blocks, quantized by ggml's reference arithmetic (`quantize_row_*_ref`: the quantizers
//!   of [`rml::quant`]'s table, which write the bytes the `gguf` Python package writes); other
//!   tensors f32. A source tensor already in the target type is copied as it is (rows moved,
//!   not requantized).
//!
//! In safetensors, which has no block dtypes, a quantized matrix `[rows, k]` is stored packed
//! ([`rml::model::packed`]: a `U8` tensor `[rows, row_bytes]` marked in `__metadata__`). In
//! GGUF every tensor has its ggml type; a GGUF input's metadata (architecture, tokenizer,
//! chat template, ...) is carried over with `general.file_type` set to the new type, and a
//! Hugging Face input gets the `{arch}.*` keys of its config
//! ([`rml::model::config::gguf_metadata`]) and no tokenizer (rml finds a `tokenizer.json`
//! beside a .gguf: a folder with one converts to a GGUF written inside that folder, and is
//! refused elsewhere). A folder output from a folder keeps the input's `config.json` (with
//! `torch_dtype` set); from a GGUF it gets one written from the GGUF's config
//! ([`rml::model::config::config_json`]).
//!
//! Tensor names, q/k row order and norm weights follow the container, as the family's
//! [`rml::model::arch::ArchSpec`] says: Hugging Face names and rotate-half rows in
//! safetensors, llama.cpp names and (for Llama and Mistral) interleaved rows in GGUF
//! ([`rml::model::arch::llama::permute_qk_rows`] and its inverse); Gemma's RMSNorm weights
//! are `w` in safetensors and `1 + w` in GGUF ([`rml::model::arch::ArchSpec::norm_offset`]).
//!
//! Every tensor the family's loader may ask for is carried, renamed by the family's
//! [`rml::model::arch::ArchSpec::map_name`] (q/k norms, biases, Gemma's norms after
//! attention and after the MLP, `rope_freqs`); tensors no loader reads are left out and
//! listed on stderr.
//!
//! Llama 3's `llama3` rope scaling: into a GGUF, the `rope_freqs.weight` divisors llama.cpp
//! writes ([`rml::model::config::write::gguf_rope_freqs`]) plus the four parameters under
//! rml's own keys ([`rml::model::config::write::LLAMA3_KEYS`]); from a GGUF into a folder, the
//! parameters go back into `config.json` and the tensor is dropped after checking that they
//! give it bit for bit. A GGUF with the tensor but not the keys (llama.cpp's own) is refused
//! into a folder: the divisors alone do not determine the parameters.
//!
//! Every family converts both ways. What cannot be written is refused before any tensor is
//! converted, with exit 1: a config GGUF metadata cannot express (a Gemma layer pattern or
//! `query_pre_attn_scalar` other than llama.cpp's rule; Mistral's sliding window is dropped,
//! as llama.cpp does), a tensor the output container has no name for (`rope_freqs.weight`
//! without rml's keys), a folder with a `tokenizer.json` into a GGUF elsewhere (which would
//! have no tokenizer), a SentencePiece vocabulary from GGUF into a folder (its
//! `tokenizer.ggml.*` keys have no `tokenizer.json` form here), an output whose folder does
//! not exist.
//! Errors name OUT, never the temporary.
//!
//! The output is atomic: it is written under a hidden temporary name beside OUT and renamed to
//! OUT at the end; on an error or Ctrl-C the temporary is removed and OUT does not appear.
//! Files are created 0644 (less the umask). The bytes are the same on every run (metadata
//! sorted, tensors in a fixed order). Buffers come from a [`BufferPool`]: one tensor is
//! converted at a time and the layers' equal shapes reuse the same blocks (the summary line
//! counts them).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::ValueEnum;
use rml::format::write::{safetensors_header, GgufWriter, SafetensorsEntry, Value};
use rml::format::TensorSource;
use rml::load::{Container, ModelFormat};
use rml::mem::BufferPool;
use rml::model::arch::llama::{permute_qk_rows, unpermute_qk_rows};
use rml::model::arch::TensorKind;
use rml::model::config::gguf::llama3_scaling;
use rml::model::config::write::{gguf_rope_freqs, LLAMA3_KEYS};
use rml::model::config::{config_json, gguf_metadata, ModelConfig};
use rml::model::packed::{self, PackedSource};
use rml::{DType, Error, Result};

use crate::interrupt;

/// The element type `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutDType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16, rounded to nearest even.
    F16,
    /// bfloat16, rounded to nearest even.
    Bf16,
    /// ggml Q8_0 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q8_0")]
    Q8_0,
    /// ggml Q4_0 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q4_0")]
    Q4_0,
    /// ggml Q4_1 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q4_1")]
    Q4_1,
    /// ggml Q5_0 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q5_0")]
    Q5_0,
    /// ggml Q5_1 blocks for matrices (rows a multiple of 32), f32 for the rest.
    #[value(name = "q5_1")]
    Q5_1,
}

impl OutDType {
    fn dtype(self) -> DType {
        match self {
            OutDType::F32 => DType::F32,
            OutDType::F16 => DType::F16,
            OutDType::Bf16 => DType::BF16,
            OutDType::Q8_0 => DType::Q8_0,
            OutDType::Q4_0 => DType::Q4_0,
            OutDType::Q4_1 => DType::Q4_1,
            OutDType::Q5_0 => DType::Q5_0,
            OutDType::Q5_1 => DType::Q5_1,
        }
    }

    /// llama.cpp's `general.file_type` (`LLAMA_FTYPE_*`).
    fn gguf_file_type(self) -> u32 {
        match self {
            OutDType::F32 => 0,
            OutDType::F16 => 1,
            OutDType::Q4_0 => 2,
            OutDType::Q4_1 => 3,
            OutDType::Q8_0 => 7,
            OutDType::Q5_0 => 8,
            OutDType::Q5_1 => 9,
            OutDType::Bf16 => 32,
        }
    }
}

/// The container `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    /// A Hugging Face folder: config.json, model.safetensors, tokenizer.json.
    Safetensors,
    /// One GGUF file.
    Gguf,
}

/// How the q/k rows move between the input's order and the output's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rows {
    Keep,
    /// GGUF (interleaved) → Hugging Face (rotate-half).
    ToHf(usize),
    /// Hugging Face → GGUF.
    ToGguf(usize),
}

/// One tensor to write.
struct Job {
    /// The input tensor's name; empty for a tensor `convert` computes (`values`).
    source: String,
    /// The values of a computed tensor (a Llama 3 GGUF's `rope_freqs.weight`).
    values: Option<Vec<f32>>,
    name: String,
    shape: Vec<usize>,
    out: DType,
    rows: Rows,
    bytes: usize,
    /// Added to every value (an RMSNorm weight between containers that store it with
    /// different offsets: Gemma's `w` in safetensors, `1 + w` in GGUF).
    add: f32,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::from(e).context(path.display())
}

/// A path removed on drop unless [`Temp::keep`] was called: the output while it is written.
struct Temp {
    path: PathBuf,
    dir: bool,
    keep: bool,
}

impl Temp {
    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep {
            let _ =
                if self.dir { fs::remove_dir_all(&self.path) } else { fs::remove_file(&self.path) };
        }
    }
}

/// A new file, mode 0644 (less the umask) on Unix.
fn create(path: &Path) -> Result<BufWriter<File>> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o644);
    Ok(BufWriter::with_capacity(1 << 20, o.open(path).map_err(io(path))?))
}

/// The hidden temporary beside `output`: `.NAME.rml-tmp-PID`.
fn temp_beside(output: &Path) -> Result<PathBuf> {
    let name = output.file_name().ok_or_else(|| {
        Error::invalid_argument(format_args!("{}: not a file or folder name", output.display()))
    })?;
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok(dir.join(format!(".{}.rml-tmp-{}", name.to_string_lossy(), std::process::id())))
}

/// transformers' `torch_dtype` for the tensors `convert` writes in `dtype`.
fn torch_dtype(dtype: OutDType) -> &'static str {
    match dtype {
        OutDType::Bf16 => "bfloat16",
        OutDType::F16 => "float16",
        _ => "float32",
    }
}

/// The input folder's own `config.json` with `torch_dtype` (and `dtype`, transformers 5's
/// name, if present) set for `dtype`: a folder keeps every key its config class reads.
fn carried_config_json(model: &Container, dtype: OutDType) -> Result<serde_json::Value> {
    let p = model.path().join("config.json");
    let text = fs::read_to_string(&p).map_err(io(&p))?;
    let mut v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::data_loss(format_args!("{}: {e}", p.display())))?;
    let o = v
        .as_object_mut()
        .ok_or_else(|| Error::data_loss(format_args!("{}: not a JSON object", p.display())))?;
    let t = serde_json::Value::from(torch_dtype(dtype));
    if o.contains_key("dtype") {
        o.insert("dtype".into(), t.clone());
    }
    o.insert("torch_dtype".into(), t);
    Ok(v)
}

/// Converts `input` into `output` (see the module docs).
///
/// # Errors
///
/// The input's open errors; [`rml::Code::InvalidArgument`] if `output` exists (a folder
/// must be empty) or its parent is not a folder, [`rml::Code::NotFound`] if that parent does
/// not exist; [`rml::Code::Unimplemented`] for what cannot be written (see the module docs);
/// a tensor that cannot be converted (named); I/O errors naming the file;
/// "interrupted" after Ctrl-C. Nothing is left at `output` or beside it on error.
pub fn run(input: &Path, output: &Path, dtype: OutDType, format: Option<OutFormat>) -> Result<()> {
    let format = format.unwrap_or_else(|| {
        if output.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            OutFormat::Gguf
        } else {
            OutFormat::Safetensors
        }
    });
    let model = Container::open(input)?;
    let mut config = model.model_config()?;
    check_parent(output)?;
    if format == OutFormat::Gguf && output.as_os_str().to_string_lossy().ends_with('/') {
        return Err(Error::invalid_argument(format_args!(
            "{}: a GGUF output is a file, but the name ends with '/'",
            output.display()
        )));
    }
    match (format, fs::symlink_metadata(output)) {
        (_, Err(_)) => {}
        (OutFormat::Safetensors, Ok(m))
            if m.is_dir() && fs::read_dir(output).map_err(io(output))?.next().is_none() => {}
        (_, Ok(_)) => {
            return Err(Error::invalid_argument(format_args!(
                "{}: exists{}; remove it or choose another name",
                output.display(),
                if format == OutFormat::Safetensors { " and is not empty" } else { "" }
            )))
        }
    }
    let from_gguf = model.format() == ModelFormat::Gguf;
    let to_gguf = format == OutFormat::Gguf;
    // A Llama 3 GGUF runs its rope scaling through `rope_freqs.weight`; into a folder, the
    // scaling's parameters go back into config.json when rml wrote them (checked in `plan`).
    if let (Some(g), false) = (model.gguf(), to_gguf) {
        if let Some(s) = llama3_scaling(&g?)? {
            config.rope_scaling = s;
        }
    }
    // rml finds a tokenizer.json beside a GGUF: only a GGUF written into the folder itself
    // keeps it.
    let beside_input = || {
        let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        matches!((dir.canonicalize(), model.path().canonicalize()), (Ok(a), Ok(b)) if a == b)
    };
    if !from_gguf && to_gguf && model.path().join("tokenizer.json").is_file() && !beside_input() {
        return Err(Error::unimplemented(format_args!(
            "{} -> {}: a GGUF written from a Hugging Face folder would have no tokenizer (rml \
             does not write tokenizer.json into GGUF metadata), so rml could not run it; write \
             a folder instead (an output name without .gguf, or --format safetensors), put \
             the GGUF in the input folder beside its tokenizer.json, or convert from a GGUF \
             input",
            input.display(),
            output.display()
        )));
    }
    let source = PackedSource::new(&model)?;
    // What cannot be written names both paths, before any warning or work.
    let paths = |e: Error| e.context(format_args!("{} -> {}", input.display(), output.display()));
    let (jobs, skipped) =
        plan(&model, &source, &config, dtype, from_gguf, to_gguf).map_err(paths)?;
    if to_gguf && !from_gguf {
        gguf_metadata(&config).map_err(paths)?;
    }
    let tokenizer = if to_gguf {
        if !from_gguf && !model.path().join("tokenizer.json").is_file() {
            eprintln!(
                "rml: warning: {} has no tokenizer.json, so {} has no tokenizer either",
                input.display(),
                output.display()
            );
        }
        None
    } else {
        match rml::tokenizer::Tokenizer::for_container(&model) {
            Ok(tok) => Some(tok),
            Err(e) => {
                eprintln!("rml: warning: no tokenizer written: {e}");
                None
            }
        }
    };
    let _catch = interrupt::catch();
    let tmp = temp_beside(output)?;
    let pool = BufferPool::new();
    let write = || -> Result<()> {
        if to_gguf {
            write_gguf(&model, &source, &config, dtype, &jobs, &pool, &tmp, output)
        } else {
            let j = (&jobs[..], &pool);
            write_folder(&model, &source, &config, dtype, j, tokenizer.as_ref(), &tmp, output)
        }
    };
    // Errors name the path the user gave, not the temporary.
    write().map_err(|e| {
        let t = tmp.display().to_string();
        if e.message().contains(&t) {
            Error::new(e.code(), e.message().replace(&t, &output.display().to_string()))
        } else {
            e
        }
    })?;
    if !skipped.is_empty() {
        eprintln!(
            "rml: skipped {} tensors that rml's {} loader does not use: {}",
            skipped.len(),
            config.arch.name,
            skipped.join(", ")
        );
    }
    let s = pool.stats();
    eprintln!(
        "rml: wrote {} ({} tensors, {}; buffers: {} allocated, {} reused)",
        output.display(),
        jobs.len(),
        dtype.dtype().name(),
        s.misses,
        s.hits
    );
    Ok(())
}

/// Fails unless the folder `output` goes into exists and is a folder.
fn check_parent(output: &Path) -> Result<()> {
    let dir = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::invalid_argument(format_args!(
            "{}: {} is not a folder",
            output.display(),
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::not_found(format_args!(
            "{}: the folder {} does not exist; create it first",
            output.display(),
            dir.display()
        ))),
        Err(e) => {
            Err(Error::from(e).context(format_args!("{}: {}", output.display(), dir.display())))
        }
    }
}

/// Writes the GGUF file `tmp` and renames it to `output`.
#[allow(clippy::too_many_arguments)]
fn write_gguf(
    model: &Container,
    source: &PackedSource<'_>,
    config: &ModelConfig,
    dtype: OutDType,
    jobs: &[Job],
    pool: &Arc<BufferPool>,
    tmp: &Path,
    output: &Path,
) -> Result<()> {
    let guard = Temp { path: tmp.to_path_buf(), dir: false, keep: false };
    let mut w = GgufWriter::new();
    match model.gguf() {
        Some(g) => {
            for (k, v) in g?.metadata() {
                w.set(k, Value::from_meta(v))?;
            }
        }
        None => {
            for (k, v) in gguf_metadata(config)? {
                w.set(&k, v)?;
            }
        }
    }
    w.set("general.file_type", Value::U32(dtype.gguf_file_type()))?;
    if dtype.dtype().block_size() > 1 {
        w.set("general.quantization_version", Value::U32(2))?;
    }
    for j in jobs {
        w.add_tensor(&j.name, &j.shape, rml::quant::info(j.out).ggml_id, j.bytes)?;
    }
    let mut f = create(tmp)?;
    f.write_all(&w.header()?).map_err(io(tmp))?;
    for (i, j) in jobs.iter().enumerate() {
        interrupt::check()?;
        write_tensor(source, j, pool, &mut f, tmp)?;
        f.write_all(&vec![0u8; w.padding_after(i)]).map_err(io(tmp))?;
    }
    finish(f, tmp)?;
    fs::rename(tmp, output).map_err(io(output))?;
    guard.keep();
    Ok(())
}

/// Writes the Hugging Face folder `tmp` and renames it to `output`. The tokenizer goes first:
/// a vocabulary that cannot be written fails before any tensor is converted.
#[allow(clippy::too_many_arguments)]
fn write_folder(
    model: &Container,
    source: &PackedSource<'_>,
    config: &ModelConfig,
    dtype: OutDType,
    (jobs, pool): (&[Job], &Arc<BufferPool>),
    tokenizer: Option<&rml::tokenizer::Tokenizer>,
    tmp: &Path,
    output: &Path,
) -> Result<()> {
    let guard = Temp { path: tmp.to_path_buf(), dir: true, keep: false };
    fs::create_dir(tmp).map_err(io(tmp))?;
    let tok_path = tmp.join("tokenizer.json");
    if let Some(tok) = tokenizer {
        tok.save(&tok_path).map_err(|e| {
            if e.code() == rml::Code::Unimplemented {
                Error::new(
                    e.code(),
                    format_args!("{}; write a .gguf instead, which keeps it", e.message()),
                )
            } else {
                e
            }
        })?;
    }
    if let Some(tok) = tokenizer {
        write_tokenizer_config(model, tok, tmp)?;
    }
    let weights = tmp.join("model.safetensors");
    let mut meta = vec![("format".to_string(), "pt".to_string())];
    let mut entries = Vec::with_capacity(jobs.len());
    for j in jobs {
        let (st_dtype, shape) = match j.out {
            DType::F32 => ("F32", j.shape.clone()),
            DType::F16 => ("F16", j.shape.clone()),
            DType::BF16 => ("BF16", j.shape.clone()),
            q => {
                meta.push(packed::metadata_entry(&j.name, q));
                ("U8", vec![j.shape[0], j.bytes / j.shape[0].max(1)])
            }
        };
        entries.push(SafetensorsEntry {
            name: j.name.clone(),
            dtype: st_dtype,
            shape,
            bytes: j.bytes,
        });
    }
    let mut f = create(&weights)?;
    f.write_all(&safetensors_header(&meta, &entries)?).map_err(io(&weights))?;
    for j in jobs {
        interrupt::check()?;
        write_tensor(source, j, pool, &mut f, &weights)?;
    }
    finish(f, &weights)?;
    let cfg_path = tmp.join("config.json");
    let cfg = if model.format() == ModelFormat::Gguf {
        config_json(config, torch_dtype(dtype))
    } else {
        carried_config_json(model, dtype)?
    };
    let text = serde_json::to_string_pretty(&cfg)
        .map_err(|e| Error::internal(format_args!("config.json: {e}")))?;
    let mut f = create(&cfg_path)?;
    f.write_all(text.as_bytes()).map_err(io(&cfg_path))?;
    finish(f, &cfg_path)?;
    #[cfg(unix)]
    if tokenizer.is_some() {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&cfg_path).map_err(io(&cfg_path))?.permissions();
        fs::set_permissions(&tok_path, fs::Permissions::from_mode(mode.mode()))
            .map_err(io(&tok_path))?;
    }
    interrupt::check()?;
    if output.exists() {
        // An empty folder (checked above): rename(2) replaces it.
        fs::remove_dir(output).map_err(io(output))?;
    }
    fs::rename(tmp, output).map_err(io(output))?;
    guard.keep();
    Ok(())
}

/// The tokenizer's companions in a folder output: a folder input's `tokenizer_config.json`,
/// `special_tokens_map.json` and `chat_template.jinja` copied as they are (BOS/EOS spellings,
/// the chat template, special-token settings); for a GGUF input a `tokenizer_config.json`
/// with the BOS and EOS spellings and `tokenizer.chat_template`, which is where
/// [`rml::tokenizer::Tokenizer::from_file`] and `rml chat` look for them.
fn write_tokenizer_config(
    model: &Container,
    tok: &rml::tokenizer::Tokenizer,
    tmp: &Path,
) -> Result<()> {
    let Some(g) = model.gguf() else {
        for name in ["tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"] {
            let from = model.path().join(name);
            if from.is_file() {
                let to = tmp.join(name);
                fs::copy(&from, &to).map_err(io(&from))?;
            }
        }
        return Ok(());
    };
    let g = g?;
    let mut cfg = serde_json::Map::new();
    let spell = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
    if let Some(b) = spell(tok.bos_id()) {
        cfg.insert("bos_token".into(), b.into());
    }
    if let Some(e) = spell(tok.eos_id()) {
        cfg.insert("eos_token".into(), e.into());
    }
    if let Some(t) = g.chat_template()? {
        cfg.insert("chat_template".into(), t.into());
    }
    let path = tmp.join("tokenizer_config.json");
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(cfg))
        .map_err(|e| Error::internal(format_args!("tokenizer_config.json: {e}")))?;
    let mut f = create(&path)?;
    f.write_all(text.as_bytes()).map_err(io(&path))?;
    finish(f, &path)
}

/// Flushes, syncs and closes a written file.
fn finish(f: BufWriter<File>, path: &Path) -> Result<()> {
    let f = f.into_inner().map_err(|e| io(path)(e.into_error()))?;
    f.sync_all().map_err(io(path))
}

/// The tensors to write, in output order, and the input tensors left out.
fn plan(
    model: &Container,
    source: &PackedSource<'_>,
    c: &ModelConfig,
    dtype: OutDType,
    from_gguf: bool,
    to_gguf: bool,
) -> Result<(Vec<Job>, Vec<String>)> {
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    let mut skipped_rope = false;
    let side = |gguf: bool| if gguf { ModelFormat::Gguf } else { ModelFormat::Safetensors };
    let (from, to) = (side(from_gguf), side(to_gguf));
    // Llama 3's rope scaling in a GGUF from a folder: the divisors tensor llama.cpp writes,
    // first (where llama.cpp's converter puts it).
    if let (Some(values), false, true) = (gguf_rope_freqs(c), from_gguf, to_gguf) {
        let name = c.arch.names(to).rope_freqs.ok_or_else(|| Error::internal("rope_freqs"))?;
        jobs.push(Job {
            source: String::new(),
            name: name.to_string(),
            shape: vec![values.len()],
            out: DType::F32,
            rows: Rows::Keep,
            bytes: values.len() * 4,
            add: 0.0,
            values: Some(values),
        });
    }
    for info in model.tensor_infos() {
        let (kind, name) = match c.arch.map_name(from, to, &info.name) {
            None => {
                skipped.push(info.name.clone());
                continue;
            }
            Some((TensorKind::RopeFreqs, None)) => {
                rope_freqs_into_config(source, c, &info.name)?;
                skipped_rope = true;
                continue;
            }
            Some((_, None)) => {
                return Err(Error::unimplemented(format_args!(
                    "tensor {:?}: rml's {} loader uses it and a {} has no place for it; \
                     write a {} instead",
                    info.name,
                    c.arch.name,
                    if to_gguf { "GGUF file" } else { "Hugging Face folder" },
                    if from_gguf { "GGUF file" } else { "Hugging Face folder" },
                )))
            }
            Some((kind, Some(n))) => (kind, n.as_str().to_string()),
        };
        if c.tie_word_embeddings && kind == TensorKind::Output {
            continue;
        }
        let add =
            if kind.is_norm() { c.arch.norm_offset(from) - c.arch.norm_offset(to) } else { 0.0 };
        let rows = match (kind.is_qk() && c.arch.gguf_qk_permuted, from_gguf, to_gguf) {
            (true, true, false) => Rows::ToHf(c.head_dim),
            (true, false, true) => Rows::ToGguf(c.head_dim),
            _ => Rows::Keep,
        };
        // The logical shape (a packed tensor's, not its stored bytes).
        let shape = source
            .tensor(&info.name)
            .map(|v| v.shape.dims().to_vec())
            .unwrap_or_else(|_| info.shape.dims().to_vec());
        let want = dtype.dtype();
        let out = if want.block_size() > 1 {
            match shape[..] {
                [_, k] if k % want.block_size() == 0 => want,
                _ => DType::F32,
            }
        } else if to_gguf && shape.len() < 2 {
            DType::F32
        } else {
            want
        };
        let numel: usize = shape.iter().product();
        let bytes = match (&shape[..], out.block_size()) {
            ([rows, k], b) if b > 1 => rows * out.row_bytes(*k)?,
            _ => numel * out.block_bytes(),
        };
        jobs.push(Job {
            source: info.name.clone(),
            values: None,
            name,
            shape,
            out,
            rows,
            bytes,
            add,
        });
    }
    if gguf_rope_freqs(c).is_some() && from_gguf && !to_gguf && !skipped_rope {
        return Err(Error::data_loss(format_args!(
            "the GGUF has rml's llama3 rope-scaling keys ({}, ...) but no rope_freqs.weight",
            LLAMA3_KEYS[0]
        )));
    }
    // safetensors: sorted by name (the order does not depend on the input's); GGUF: the
    // input's order (llama.cpp keeps it).
    if !to_gguf {
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
    }
    Ok((jobs, skipped))
}

/// Checks that a GGUF's `rope_freqs.weight` (`name`) is what `c`'s `llama3` rope scaling
/// gives ([`gguf_rope_freqs`]), so that a folder with that scaling in its config.json runs
/// the same model without the tensor.
///
/// # Errors
///
/// [`rml::Code::Unimplemented`] naming the tensor when the file does not say the scaling's
/// parameters (llama.cpp's own Llama 3 files: the divisors alone do not determine them) or
/// when the divisors differ from the parameters'.
fn rope_freqs_into_config(source: &PackedSource<'_>, c: &ModelConfig, name: &str) -> Result<()> {
    let Some(want) = gguf_rope_freqs(c) else {
        return Err(Error::unimplemented(format_args!(
            "tensor {name:?} (Llama 3 rope scaling as llama.cpp writes it: one divisor per \
             frequency) has no config.json form without the scaling's parameters (factor, \
             low_freq_factor, high_freq_factor, original_max_position_embeddings), and this \
             GGUF does not carry them ({}..., which rml writes); convert it to a GGUF instead",
            LLAMA3_KEYS[0].trim_end_matches("factor")
        )));
    };
    let view = source.tensor(name)?;
    let mut have = vec![0f32; view.shape.numel()];
    view.dequantize_into(&mut have).map_err(|e| e.context(format_args!("tensor {name:?}")))?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if bits(&have) != bits(&want) {
        return Err(Error::unimplemented(format_args!(
            "tensor {name:?}: its divisors differ from those of the file's llama3 rope \
             scaling keys ({:?}), so config.json could not say them; convert it to a GGUF \
             instead",
            c.rope_scaling
        )));
    }
    Ok(())
}

/// Moves whole rows of a q/k matrix between GGUF and Hugging Face order.
fn move_rows(rows: Rows, data: &[u8], out: &mut [u8], n_rows: usize) -> Result<()> {
    let row_bytes = data.len() / n_rows.max(1);
    match rows {
        Rows::Keep => out.copy_from_slice(data),
        Rows::ToHf(hd) => unpermute_qk_rows(data, out, n_rows, row_bytes, hd)?,
        Rows::ToGguf(hd) => permute_qk_rows(data, out, n_rows, row_bytes, hd)?,
    }
    Ok(())
}

/// The f32s of a 64-byte aligned buffer (a [`BufferPool`] block) of `4 * n` bytes.
fn f32s(b: &[u8]) -> &[f32] {
    assert!(b.as_ptr().align_offset(4) == 0 && b.len() % 4 == 0);
    // SAFETY: aligned for f32 and a whole number of them (asserted); every bit pattern is a
    // valid f32; the borrow keeps the bytes alive and unaliased by writers.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<f32>(), b.len() / 4) }
}

/// As [`f32s`], mutable.
fn f32s_mut(b: &mut [u8]) -> &mut [f32] {
    assert!(b.as_ptr().align_offset(4) == 0 && b.len() % 4 == 0);
    // SAFETY: as in `f32s`, and the unique borrow of `b` makes this the only access.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<f32>(), b.len() / 4) }
}

/// Converts one tensor and writes it to `f`.
fn write_tensor(
    source: &PackedSource<'_>,
    j: &Job,
    pool: &Arc<BufferPool>,
    f: &mut impl Write,
    path: &Path,
) -> Result<()> {
    if let Some(v) = &j.values {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        return f.write_all(&bytes).map_err(io(path));
    }
    let ctx = |e: Error| e.context(format_args!("tensor {:?}", j.source));
    let view = source.tensor(&j.source).map_err(ctx)?;
    let n_rows = j.shape.first().copied().unwrap_or(1);
    let mut out = pool.take(j.bytes).map_err(ctx)?;
    if view.dtype == j.out && j.add == 0.0 {
        move_rows(j.rows, view.data, out.block_mut().as_mut_slice(), n_rows).map_err(ctx)?;
    } else {
        let n = view.shape.numel();
        let mut wide = pool.take(n * 4).map_err(ctx)?;
        let mut moved = pool.take(n * 4).map_err(ctx)?;
        {
            let w = f32s_mut(wide.block_mut().as_mut_slice());
            view.dequantize_into(w).map_err(ctx)?;
            if j.add != 0.0 {
                w.iter_mut().for_each(|v| *v += j.add);
            }
        }
        move_rows(j.rows, wide.block().as_slice(), moved.block_mut().as_mut_slice(), n_rows)
            .map_err(ctx)?;
        let x = f32s(moved.block().as_slice());
        let o = out.block_mut().as_mut_slice();
        match j.out {
            DType::F32 => o.copy_from_slice(moved.block().as_slice()),
            DType::F16 => {
                for (v, b) in x.iter().zip(o.chunks_exact_mut(2)) {
                    b.copy_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
                }
            }
            DType::BF16 => {
                for (v, b) in x.iter().zip(o.chunks_exact_mut(2)) {
                    b.copy_from_slice(&half::bf16::from_f32(*v).to_bits().to_le_bytes());
                }
            }
            q => {
                let k = j.shape[1];
                let rb = q.row_bytes(k)?;
                let quantize = rml::quant::info(q).quantize.ok_or_else(|| {
                    Error::unimplemented(format_args!("rml has no {} quantizer", q.name()))
                })?;
                for (row, qrow) in x.chunks_exact(k).zip(o.chunks_exact_mut(rb)) {
                    quantize(row, qrow).map_err(ctx)?;
                }
            }
        }
    }
    f.write_all(out.block().as_slice()).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qk_rows_round_trip() {
        let (hd, heads, rb) = (8, 3, 5);
        let n = hd * heads;
        let data: Vec<u8> = (0..n * rb).map(|i| i as u8).collect();
        let (mut g, mut back) = (vec![0u8; data.len()], vec![0u8; data.len()]);
        move_rows(Rows::ToGguf(hd), &data, &mut g, n).unwrap();
        assert_ne!(g, data);
        move_rows(Rows::ToHf(hd), &g, &mut back, n).unwrap();
        assert_eq!(back, data);
    }
}
