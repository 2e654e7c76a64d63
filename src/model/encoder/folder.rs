//! [`EncoderFiles`]: a sentence-transformers folder opened from disk, and [`Encoder`]: text in,
//! one embedding per text out.
//!
//! The folder (sentence-transformers' layout, e.g. all-MiniLM-L6-v2):
//! - `config.json`, `model.safetensors` (or shards): the transformer ([`EncoderConfig`]);
//! - `tokenizer.json`: WordPiece (or any tokenizer the `tokenizers` crate reads); its own
//!   truncation and padding settings are ignored, as sentence-transformers overrides them;
//! - `modules.json`: the pipeline. `Transformer`, `Pooling` and `Normalize` are run; any other
//!   module (`Dense`, ...) is refused. Without it: Transformer + mean pooling, no Normalize
//!   (what sentence-transformers builds for a plain transformers folder);
//! - `1_Pooling/config.json` (the Pooling module's folder): [`Pooling`]; absent: mean pooling;
//! - `sentence_bert_config.json`: `max_seq_length` (texts are cut to it, special tokens
//!   included, and [`Embedded::truncated`] says which were) and `do_lower_case` (the text is
//!   lowercased before tokenizing). Absent: `max_position_embeddings`.
//!
//! Or llama.cpp's BERT GGUF (one file, `general.architecture` `bert` or `nomic-bert`, as its
//! `convert_hf_to_gguf.py` writes it): the config from its metadata
//! ([`EncoderConfig::from_gguf`]), the pooling from `{arch}.pooling_type`, and the WordPiece
//! vocabulary from `tokenizer.ggml.tokens` / `token_type` ([`wordpiece_from_gguf`]). A GGUF
//! does not record sentence-transformers' `Normalize` module nor `max_seq_length`: embeddings
//! are L2-normalized (llama.cpp's default) and texts cut at `{arch}.context_length`; both
//! are listed in [`EncoderFiles::notes`].
//!
//! Every default taken because a file is missing is listed in [`EncoderFiles::notes`] (the
//! `rml embed` command prints them once on stderr).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{wordpiece_from_gguf, EncoderConfig, EncoderMemoryPlan, EncoderWeights, Pooling};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::load::Container;
use crate::model::WeightFormat;
use crate::ops::Activations;
use crate::tokenizer::Tokenizer;

/// How an [`Encoder`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderOptions {
    /// Texts per batch: each batch is one GEMM per weight over all its tokens. Default 32.
    pub batch_size: usize,
    /// Keep the matrices as stored (default) or quantize f32 / f16 / bf16 ones to Q8_0 at
    /// load ([`WeightFormat::Q8_0`]: a quarter of f32's bytes, int8 products).
    pub weight_format: WeightFormat,
    /// How activations meet quantized weights ([`Activations::F32`] by default, the exact
    /// path; [`Activations::Int8`] quantizes them to int8 as the decoder does). Matters only
    /// for quantized matrices (a quantized GGUF, or [`WeightFormat::Q8_0`]).
    pub activations: Activations,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        EncoderOptions {
            batch_size: 32,
            weight_format: WeightFormat::AsStored,
            activations: Activations::F32,
        }
    }
}

impl EncoderOptions {
    /// int8 end to end: matrices quantized to Q8_0 at load and activations quantized to int8
    /// with the outlier correction ([`Activations::Int8`]); the rest as [`Default`].
    /// all-MiniLM-L6-v2: cosine ≥ 0.999 to the f32 references (tests/encoder.rs).
    pub fn int8() -> Self {
        EncoderOptions {
            weight_format: WeightFormat::Q8_0,
            activations: Activations::Int8,
            ..EncoderOptions::default()
        }
    }
}

/// A sentence-transformers folder: weights (memory-mapped), configuration, tokenizer and the
/// sentence-level settings.
pub struct EncoderFiles {
    container: Container,
    config: EncoderConfig,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    max_seq_length: usize,
    lowercase: bool,
    notes: Vec<String>,
}

impl core::fmt::Debug for EncoderFiles {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EncoderFiles")
            .field("path", &self.container.path())
            .field("config", &self.config)
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .field("max_seq_length", &self.max_seq_length)
            .finish()
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let ctx =
        |e: &dyn core::fmt::Display| Error::data_loss(format_args!("{}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(|e| ctx(&e))?.len();
    if len > super::config::MAX_CONFIG_BYTES as u64 {
        return Err(ctx(&"larger than a configuration file can be"));
    }
    let bytes = std::fs::read(path).map_err(|e| ctx(&e))?;
    serde_json::from_slice(&bytes).map(Some).map_err(|e| ctx(&e))
}

impl EncoderFiles {
    /// Opens a sentence-transformers folder or a llama.cpp BERT GGUF (see the module
    /// documentation for the files).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] for a file that is not a GGUF, a decoder GGUF (named by
    /// its architecture) or a decoder's `config.json` (naming its architecture);
    /// [`crate::Code::Unimplemented`] for an encoder family rml does not run, a
    /// module other than Transformer / Pooling / Normalize, or an unsupported pooling;
    /// [`crate::Code::NotFound`] for a missing `config.json`, weights or `tokenizer.json`;
    /// [`crate::Code::DataLoss`] for malformed files. Messages name the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let dir = path.as_ref();
        if !dir.is_dir() {
            if dir.is_file() {
                return Self::open_gguf(dir);
            }
            return Err(Error::not_found(format_args!("{}: no such folder", dir.display())));
        }
        let cfg_path = dir.join("config.json");
        let cfg_text = std::fs::read_to_string(&cfg_path)
            .map_err(|e| Error::not_found(format_args!("{}: {e}", cfg_path.display())))?;
        let config =
            EncoderConfig::from_json(&cfg_text).map_err(|e| e.context(cfg_path.display()))?;
        let tok_path = dir.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(Error::not_found(format_args!("{}: no tokenizer.json", dir.display())));
        }
        let tokenizer = Tokenizer::from_file(&tok_path)?;
        let container = Container::open(dir)?;
        let mut notes = Vec::new();

        // modules.json: the pipeline
        let modules_path = dir.join("modules.json");
        let (pooling_dir, normalize) = match read_json(&modules_path)? {
            None => {
                notes.push(format!(
                    "{}: no modules.json: mean pooling, not normalized (sentence-transformers' \
                     defaults for a plain transformers folder)",
                    dir.display()
                ));
                (PathBuf::from("1_Pooling"), false)
            }
            Some(v) => {
                let list = v.as_array().ok_or_else(|| {
                    Error::data_loss(format_args!("{}: not a list", modules_path.display()))
                })?;
                let (mut pooling_dir, mut normalize) = (None, false);
                for m in list {
                    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
                    let sub = m.get("path").and_then(Value::as_str).unwrap_or("");
                    match ty.rsplit('.').next().unwrap_or("") {
                        "Transformer" => {}
                        "Pooling" => pooling_dir = Some(PathBuf::from(sub)),
                        "Normalize" => normalize = true,
                        other => {
                            return Err(Error::unimplemented(format_args!(
                                "{}: module {other:?} ({ty}) is not supported (supported: \
                                 Transformer, Pooling, Normalize)",
                                modules_path.display()
                            )))
                        }
                    }
                }
                (pooling_dir.unwrap_or_else(|| PathBuf::from("1_Pooling")), normalize)
            }
        };
        if pooling_dir.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(Error::data_loss(format_args!(
                "{}: the Pooling module's path {} leaves the folder",
                modules_path.display(),
                pooling_dir.display()
            )));
        }
        let pool_cfg = dir.join(&pooling_dir).join("config.json");
        let pooling = match std::fs::read_to_string(&pool_cfg) {
            Ok(text) => Pooling::from_json(&text).map_err(|e| e.context(pool_cfg.display()))?,
            Err(_) => {
                notes.push(format!(
                    "{}: no pooling config ({}): mean pooling",
                    dir.display(),
                    pool_cfg.display()
                ));
                Pooling::Mean
            }
        };

        // sentence_bert_config.json: max_seq_length, do_lower_case
        let sb_path = dir.join("sentence_bert_config.json");
        let sb = read_json(&sb_path)?;
        let max_seq_length = match sb.as_ref().and_then(|v| v.get("max_seq_length")) {
            Some(v) => {
                v.as_u64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v > 0).ok_or_else(
                    || {
                        Error::data_loss(format_args!(
                            "{}: max_seq_length is {v}, not a positive whole number",
                            sb_path.display()
                        ))
                    },
                )?
            }
            None => {
                notes.push(format!(
                    "{}: no max_seq_length in sentence_bert_config.json: texts are cut at \
                     max_position_embeddings = {} tokens",
                    dir.display(),
                    config.max_position_embeddings
                ));
                config.max_position_embeddings
            }
        };
        if max_seq_length > config.max_position_embeddings {
            return Err(Error::data_loss(format_args!(
                "{}: max_seq_length {max_seq_length} is above the model's \
                 max_position_embeddings {}",
                sb_path.display(),
                config.max_position_embeddings
            )));
        }
        let lowercase = sb
            .as_ref()
            .and_then(|v| v.get("do_lower_case"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(EncoderFiles {
            container,
            config,
            tokenizer,
            pooling,
            normalize,
            max_seq_length,
            lowercase,
            notes,
        })
    }

    /// A llama.cpp BERT GGUF (see the module docs).
    fn open_gguf(path: &Path) -> Result<Self> {
        let not_folder = || {
            Error::invalid_argument(format_args!(
                "{}: neither a sentence-transformers folder (config.json, model.safetensors, \
                 tokenizer.json) nor a BERT GGUF",
                path.display()
            ))
        };
        let container = Container::open(path).map_err(|_| not_folder())?;
        let ctx = |e: Error| e.context(path.display());
        let (config, tokenizer, pooling) = {
            let g = container.gguf().ok_or_else(not_folder)?.map_err(ctx)?;
            let config = EncoderConfig::from_gguf(&g).map_err(ctx)?;
            let tokenizer = wordpiece_from_gguf(&g).map_err(ctx)?;
            if tokenizer.vocab_size() < config.vocab_size {
                return Err(ctx(Error::data_loss(format_args!(
                    "the WordPiece vocabulary has {} distinct tokens, the model {}",
                    tokenizer.vocab_size(),
                    config.vocab_size
                ))));
            }
            (config, tokenizer, Pooling::from_gguf(&g).map_err(ctx)?)
        };
        let mut notes = Vec::new();
        let pooling = pooling.unwrap_or_else(|| {
            notes.push(format!("{}: no pooling_type: mean pooling", path.display()));
            Pooling::Mean
        });
        notes.push(format!(
            "{}: a GGUF records neither Normalize nor max_seq_length: embeddings are \
             L2-normalized and texts cut at context_length = {} tokens",
            path.display(),
            config.max_position_embeddings
        ));
        Ok(EncoderFiles {
            container,
            max_seq_length: config.max_position_embeddings,
            config,
            tokenizer,
            pooling,
            normalize: true,
            lowercase: false,
            notes,
        })
    }

    /// The transformer's configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The pooling.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Whether embeddings are scaled to unit L2 norm (a `Normalize` module).
    pub fn normalize(&self) -> bool {
        self.normalize
    }

    /// The most tokens a text keeps, special tokens included.
    pub fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// The defaults taken for missing files, one sentence each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The opened weights.
    pub fn container(&self) -> &Container {
        &self.container
    }

    /// The memory an [`Encoder`] over these files with `options` keeps, before it is built:
    /// its weights and one full batch (`batch_size` texts of `max_seq_length` tokens), as
    /// [`EncoderWeights::memory_plan`] counts them.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::memory_plan`].
    pub fn memory_plan(&self, options: EncoderOptions) -> Result<EncoderMemoryPlan> {
        EncoderWeights::memory_plan(
            &self.config,
            &&self.container,
            options.weight_format,
            options.activations,
            options.batch_size,
            self.max_seq_length,
        )
    }

    /// Token ids of `text` as the model sees them: lowercased first when the folder says
    /// `do_lower_case`, special tokens added, cut to [`EncoderFiles::max_seq_length`]. Also
    /// returns the length before cutting.
    ///
    /// # Errors
    ///
    /// As [`Tokenizer::encode_truncated`].
    pub fn tokenize(&self, text: &str) -> Result<(Vec<u32>, usize)> {
        if self.lowercase {
            self.tokenizer.encode_truncated(&text.to_lowercase(), self.max_seq_length)
        } else {
            self.tokenizer.encode_truncated(text, self.max_seq_length)
        }
    }
}

/// What [`Encoder::embed_detailed`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedded {
    /// One vector per text, `hidden_size` floats each.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens each text was run with (special tokens included).
    pub tokens: Vec<usize>,
    /// `(text index, tokens before cutting)` for each text longer than `max_seq_length`.
    pub truncated: Vec<(usize, usize)>,
}

/// Text in, one embedding per text out: the weights of an [`EncoderFiles`] run on an
/// executor.
///
/// ```no_run
/// # fn main() -> rml::Result<()> {
/// use rml::exec::InlineExecutor;
/// use rml::model::encoder::{Encoder, EncoderFiles, EncoderOptions};
/// let files = EncoderFiles::open("target/models/all-MiniLM-L6-v2")?;
/// let enc = Encoder::new(&files, &InlineExecutor, EncoderOptions::default())?;
/// let v = enc.embed(&["A man is playing a guitar.", "Someone strums a guitar."])?;
/// let cosine: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
/// # let _ = cosine;
/// # Ok(())
/// # }
/// ```
pub struct Encoder<'a> {
    files: &'a EncoderFiles,
    weights: EncoderWeights<'a>,
    exec: &'a dyn Executor,
    options: EncoderOptions,
}

impl core::fmt::Debug for Encoder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Encoder")
            .field("files", self.files)
            .field("threads", &self.exec.threads())
            .field("options", &self.options)
            .finish()
    }
}

impl<'a> Encoder<'a> {
    /// Loads the weights of `files` (borrowed from its memory maps) to run on `exec`.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::load`]; [`crate::Code::InvalidArgument`] for a batch size of 0.
    pub fn new(
        files: &'a EncoderFiles,
        exec: &'a dyn Executor,
        options: EncoderOptions,
    ) -> Result<Self> {
        if options.batch_size == 0 {
            return Err(Error::invalid_argument("batch size 0"));
        }
        let weights = EncoderWeights::load_with(
            files.config.clone(),
            &&files.container,
            options.weight_format,
        )
        .map_err(|e| e.context(files.container.path().display()))?
        .with_activations(options.activations);
        Ok(Encoder { files, weights, exec, options })
    }

    /// The files.
    pub fn files(&self) -> &'a EncoderFiles {
        self.files
    }

    /// One embedding per text (`hidden_size` floats), in order: tokenized (cut to
    /// `max_seq_length`), run in batches of [`EncoderOptions::batch_size`], pooled and, when
    /// the folder has a `Normalize` module, scaled to unit length. An empty text gives the
    /// embedding of the special tokens alone (`[CLS] [SEP]`), as sentence-transformers does.
    ///
    /// # Errors
    ///
    /// As [`Encoder::embed_detailed`].
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_detailed(texts)?.vectors)
    }

    /// [`Encoder::embed`], also saying how many tokens each text had and which were cut.
    ///
    /// # Errors
    ///
    /// The tokenizer's errors; [`crate::Code::InvalidArgument`] for a text that tokenizes to
    /// nothing (a tokenizer without special tokens given an empty text); the errors of the
    /// forward pass ([`EncoderWeights::hidden_states`]).
    pub fn embed_detailed(&self, texts: &[&str]) -> Result<Embedded> {
        let mut out = Embedded {
            vectors: Vec::with_capacity(texts.len()),
            tokens: Vec::new(),
            truncated: Vec::new(),
        };
        for (b, batch) in texts.chunks(self.options.batch_size).enumerate() {
            let mut ids = Vec::with_capacity(batch.len());
            for (i, text) in batch.iter().enumerate() {
                let index = b * self.options.batch_size + i;
                let (t, full) = self
                    .files
                    .tokenize(text)
                    .map_err(|e| e.context(format_args!("text {index}")))?;
                if t.is_empty() {
                    return Err(Error::invalid_argument(format_args!(
                        "text {index} has no tokens (the tokenizer adds no special tokens)"
                    )));
                }
                if full > t.len() {
                    out.truncated.push((index, full));
                }
                out.tokens.push(t.len());
                ids.push(t);
            }
            let seqs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
            let v = self.weights.embed_ids(
                self.exec,
                &seqs,
                self.files.pooling,
                self.files.normalize,
            )?;
            out.vectors.extend(v);
        }
        Ok(out)
    }

    /// The weights and their forward pass.
    pub fn weights(&self) -> &EncoderWeights<'a> {
        &self.weights
    }

    /// [`EncoderFiles::memory_plan`] for this encoder's files and options.
    ///
    /// # Errors
    ///
    /// As [`EncoderWeights::memory_plan`].
    pub fn memory_plan(&self) -> Result<EncoderMemoryPlan> {
        self.files.memory_plan(self.options)
    }
}
