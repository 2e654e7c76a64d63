//! Text ↔ token ids (feature `tokenizer`), and chat templates ([`chat`]).
//!
//! Sources:
//! - a Hugging Face `tokenizer.json` (any model the `tokenizers` crate reads), with the
//!   `tokenizer_config.json` beside it for the BOS/EOS spellings and the chat template
//!   ([`Tokenizer::from_file`]);
//! - the vocabulary inside a GGUF file ([`Tokenizer::from_gguf`]):
//!   - `tokenizer.ggml.model = "gpt2"`: a byte-level BPE rebuilt from `tokenizer.ggml.tokens`
//!     / `merges` / `token_type` ([`Tokenizer::from_gguf_vocab`]), pre-tokenized as llama.cpp
//!     reads `tokenizer.ggml.pre`: `smollm` (and the StarCoder family) splits every digit on its
//!     own before the GPT-2 regex; `gpt2` / `default` use the GPT-2 regex alone; `qwen2` and
//!     `llama-bpe` use their own regexes (one digit, resp. up to three digits, per piece);
//!   - `tokenizer.ggml.model = "llama"`: SentencePiece with scores and byte fallback, tokenized
//!     exactly as llama.cpp's `llm_tokenizer_spm` (see `spm.rs`).
//!
//! [`Tokenizer::for_model`] finds a model's tokenizer among these sources (`find.rs`).
//!
//! [`Tokenizer::encode_with_special`] adds BOS/EOS as the model asks (llama.cpp's
//! `add_special`, transformers' `add_special_tokens`); [`Tokenizer::encode`] never does.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PostProcessorWrapper,
    TokenizerImpl,
};

use crate::error::{Error, Result};
use crate::format::gguf::Gguf;

pub mod chat;
mod find;
mod pretok;
mod spm;

pub use chat::{ChatTemplate, Message};
use pretok::RegexBpePre;
pub use spm::SpmVocab;
use spm::{token_type, Spm};

/// A byte-level BPE from a Qwen2 / Llama 3 GGUF vocabulary, pre-tokenized by rml's own
/// splitter for their regexes (see `pretok.rs`).
type RegexBpe = TokenizerImpl<
    ModelWrapper,
    NormalizerWrapper,
    RegexBpePre,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// The model behind a [`Tokenizer`].
enum Backend {
    /// Hugging Face `tokenizers` (a tokenizer.json, or a byte-level BPE rebuilt from GGUF).
    Hf(alloc::boxed::Box<tokenizers::Tokenizer>),
    /// A byte-level BPE rebuilt from a Qwen2 / Llama 3 GGUF vocabulary.
    RegexBpe(alloc::boxed::Box<RegexBpe>),
    /// SentencePiece from a GGUF vocabulary.
    Spm(alloc::boxed::Box<Spm>),
}

/// A tokenizer: encodes text to ids and decodes ids back to text.
pub struct Tokenizer {
    backend: Backend,
    bos: Option<u32>,
    eos: Option<u32>,
    /// BOS/EOS are added by rml (GGUF vocabularies) rather than by the tokenizer.json's
    /// post-processor; then `add_bos` / `add_eos` say whether.
    manual_special: bool,
    add_bos: bool,
    add_eos: bool,
    /// `tokenizer_config.json`'s `chat_template` when loaded from a file.
    chat_template: Option<String>,
}

impl core::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.vocab_size())
            .field("sentencepiece", &matches!(self.backend, Backend::Spm(_)))
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

/// `$body` with `$t` bound to the `tokenizers` tokenizer of either kind, or `$spm` for
/// SentencePiece.
macro_rules! on_backend {
    ($backend:expr, $t:ident => $body:expr, $s:ident => $spm:expr) => {
        match $backend {
            Backend::Hf($t) => $body,
            Backend::RegexBpe($t) => $body,
            Backend::Spm($s) => $spm,
        }
    };
}

fn tk_err(what: &str) -> impl FnOnce(tokenizers::Error) -> Error + '_ {
    move |e| Error::invalid_argument(format_args!("{what}: {e}"))
}

/// A special token in tokenizer_config.json: a string or `{"content": "..."}`.
fn config_token(cfg: &serde_json::Value, key: &str) -> Option<String> {
    match cfg.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(String::from),
        _ => None,
    }
}

impl Tokenizer {
    fn from_hf(mut inner: tokenizers::Tokenizer) -> Self {
        // A tokenizer.json may carry truncation and fixed padding (all-MiniLM-L6-v2's: 128
        // tokens); transformers' `tokenizer(text)` applies neither unless asked, nor does rml
        // (see `encode_truncated`). Setting `None` cannot fail.
        let _ = inner.with_truncation(None);
        inner.with_padding(None);
        Self::from_backend(Backend::Hf(alloc::boxed::Box::new(inner)))
    }

    fn from_backend(backend: Backend) -> Self {
        Tokenizer {
            backend,
            bos: None,
            eos: None,
            manual_special: false,
            add_bos: false,
            add_eos: false,
            chat_template: None,
        }
    }

    /// Reads a Hugging Face `tokenizer.json`, and the `tokenizer_config.json` beside it when
    /// there is one (its `bos_token`, `eos_token` and `chat_template`).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] naming the file if either cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::data_loss(format_args!("{}: {e}", path.display())))?;
        let mut tok = Self::from_hf(inner);
        let cfg_path = path.with_file_name("tokenizer_config.json");
        if cfg_path.is_file() {
            let ctx = |e: &dyn core::fmt::Display| {
                Error::data_loss(format_args!("{}: {e}", cfg_path.display()))
            };
            let bytes = std::fs::read(&cfg_path).map_err(|e| ctx(&e))?;
            let cfg: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| ctx(&e))?;
            tok.bos = config_token(&cfg, "bos_token").and_then(|t| tok.token_to_id(&t));
            tok.eos = config_token(&cfg, "eos_token").and_then(|t| tok.token_to_id(&t));
            tok.chat_template = match cfg.get("chat_template") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                _ => None,
            };
        }
        let jinja = path.with_file_name("chat_template.jinja");
        if tok.chat_template.is_none() && jinja.is_file() {
            tok.chat_template = Some(
                std::fs::read_to_string(&jinja)
                    .map_err(|e| Error::data_loss(format_args!("{}: {e}", jinja.display())))?,
            );
        }
        Ok(tok)
    }

    /// Parses the bytes of a `tokenizer.json` (no tokenizer_config.json: no BOS/EOS ids).
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if they are not a tokenizer `tokenizers` can read.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| Error::data_loss(format_args!("tokenizer.json: {e}")))?;
        Ok(Self::from_hf(inner))
    }

    /// The tokenizer stored in a GGUF file's `tokenizer.ggml.*` metadata: `gpt2` (byte-level
    /// BPE, see [`Tokenizer::from_gguf_vocab`]) or `llama` (SentencePiece, see
    /// [`Tokenizer::from_spm_vocab`]), with its BOS/EOS ids and add-BOS/EOS flags.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] naming another `tokenizer.ggml.model` (or none);
    /// [`crate::Code::DataLoss`] for malformed metadata, as the two builders say.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self> {
        let kind = g.tokenizer_model()?.unwrap_or("none");
        let tokens = g.tokens()?;
        let types = match g.get("tokenizer.ggml.token_type") {
            Some(_) => g.token_types()?,
            None => Vec::new(),
        };
        let bos = g.bos_token_id()?;
        let eos = g.eos_token_id()?;
        match kind {
            "llama" => {
                let scores = g.scores()?.unwrap_or_default();
                Self::from_spm_vocab(&SpmVocab {
                    tokens: &tokens,
                    scores: &scores,
                    token_types: &types,
                    bos,
                    eos,
                    unk: g.get_u32("tokenizer.ggml.unknown_token_id")?,
                    add_bos: g.add_bos_token()?,
                    add_eos: g.get_bool("tokenizer.ggml.add_eos_token")?,
                    add_space_prefix: g.get_bool("tokenizer.ggml.add_space_prefix")?,
                })
            }
            _ => {
                let merges = match g.get("tokenizer.ggml.merges") {
                    Some(_) => g.merges()?,
                    None => Vec::new(),
                };
                let mut tok =
                    Self::from_gguf_vocab(kind, g.tokenizer_pre()?, &tokens, &merges, &types)?;
                let n = tok.vocab_size();
                for (what, id) in [("bos", bos), ("eos", eos)] {
                    if let Some(i) = id.filter(|&i| i as usize >= n) {
                        return Err(Error::data_loss(format_args!(
                            "tokenizer.ggml.{what}_token_id {i} is outside the vocabulary of \
                             {n} tokens"
                        )));
                    }
                }
                tok.bos = bos;
                tok.eos = eos;
                tok.manual_special = true;
                tok.add_bos = g.add_bos_token()?.unwrap_or(false) && bos.is_some();
                tok.add_eos =
                    g.get_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false) && eos.is_some();
                Ok(tok)
            }
        }
    }

    /// A SentencePiece tokenizer from a GGUF vocabulary (`tokenizer.ggml.model = "llama"`),
    /// tokenizing as llama.cpp does.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for an empty vocabulary, score or type counts that differ
    /// from the token count, a special token id outside the vocabulary, a token listed twice,
    /// or an add-BOS/EOS flag without that token.
    pub fn from_spm_vocab(v: &SpmVocab<'_>) -> Result<Self> {
        let spm = Spm::new(v)?;
        Ok(Tokenizer {
            bos: spm.bos,
            eos: spm.eos,
            manual_special: true,
            add_bos: spm.add_bos,
            add_eos: spm.add_eos,
            backend: Backend::Spm(alloc::boxed::Box::new(spm)),
            chat_template: None,
        })
    }

    /// Rebuilds a GPT-2 style byte-level BPE from a GGUF file's vocabulary.
    ///
    /// `model` is `tokenizer.ggml.model` (must be `gpt2`), `pre` is `tokenizer.ggml.pre`
    /// (`None` for absent), `tokens` the vocabulary in id order (already in GPT-2's
    /// byte-to-unicode alphabet), `merges` the merge rules `"a b"` by priority and
    /// `token_types` one `tokenizer.ggml.token_type` per token (control tokens become special
    /// added tokens, user-defined ones plain added tokens); an empty `token_types` means all
    /// normal.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Unimplemented`] naming the model or pre-tokenizer type if it is not one
    /// of the above; [`crate::Code::DataLoss`] for an empty vocabulary, a merge without a space,
    /// a token type count that does not match, duplicate tokens, or a merge naming an unknown
    /// token.
    pub fn from_gguf_vocab(
        model: &str,
        pre: Option<&str>,
        tokens: &[&str],
        merges: &[&str],
        token_types: &[i32],
    ) -> Result<Self> {
        if model != "gpt2" {
            return Err(Error::unimplemented(format_args!(
                "tokenizer.ggml.model {model:?}: rml reads the byte-level BPE \"gpt2\" and \
                 SentencePiece \"llama\" vocabularies from GGUF metadata; put the model's \
                 tokenizer.json beside the file"
            )));
        }
        /// How the text is cut before the byte-level BPE.
        enum Pre {
            Gpt2,
            DigitsThenGpt2,
            Regex(RegexBpePre),
        }
        let pre_name = pre.unwrap_or("default");
        let pre = match pre_name {
            "default" | "gpt2" | "mpt" | "olmo" | "jais" => Pre::Gpt2,
            "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" => Pre::DigitsThenGpt2,
            "qwen2" => Pre::Regex(RegexBpePre::QWEN2),
            "llama-bpe" | "llama3" => Pre::Regex(RegexBpePre::LLAMA3),
            other => {
                return Err(Error::unimplemented(format_args!(
                    "tokenizer.ggml.pre {other:?} is not supported; put the model's \
                     tokenizer.json beside the file"
                )))
            }
        };
        if tokens.is_empty() {
            return Err(Error::data_loss("tokenizer.ggml.tokens is empty"));
        }
        if !token_types.is_empty() && token_types.len() != tokens.len() {
            return Err(Error::data_loss(format_args!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                token_types.len(),
                tokens.len()
            )));
        }
        let mut vocab = Vocab::default();
        for (id, t) in tokens.iter().enumerate() {
            if vocab.insert((*t).into(), id as u32).is_some() {
                return Err(Error::data_loss(format_args!(
                    "tokenizer.ggml.tokens: token {t:?} appears twice (id {id})"
                )));
            }
        }
        let mut pairs = Vec::with_capacity(merges.len());
        for (i, m) in merges.iter().enumerate() {
            let (a, b) = m.split_once(' ').ok_or_else(|| {
                Error::data_loss(format_args!("tokenizer.ggml.merges[{i}] {m:?} has no space"))
            })?;
            pairs.push((String::from(a), String::from(b)));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, pairs)
            // llama.cpp takes a whole pre-token that is in the vocabulary as is for Llama 3.
            .ignore_merges(matches!(pre_name, "llama-bpe" | "llama3"))
            .build()
            .map_err(|e| Error::data_loss(format_args!("GGUF tokenizer: {e}")))?;
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(token_types)
            .filter(|(_, &ty)| ty == token_type::CONTROL || ty == token_type::USER_DEFINED)
            .map(|(t, &ty)| {
                AddedToken::from(String::from(*t), ty == token_type::CONTROL).normalized(false)
            })
            .collect();
        let pre = match pre {
            Pre::Gpt2 => PreTokenizerWrapper::from(ByteLevel::new(false, true, true)),
            Pre::DigitsThenGpt2 => {
                let seq: Vec<PreTokenizerWrapper> =
                    vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()];
                Sequence::new(seq).into()
            }
            Pre::Regex(pre) => {
                let mut inner = RegexBpe::new(bpe.into());
                inner.with_pre_tokenizer(Some(pre));
                inner.with_decoder(Some(ByteLevelDecoder::default()));
                inner.add_special_tokens(&added);
                return Ok(Self::from_backend(Backend::RegexBpe(alloc::boxed::Box::new(inner))));
            }
        };
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        inner.add_special_tokens(&added);
        Ok(Self::from_hf(inner))
    }

    /// Writes the tokenizer as a `tokenizer.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] naming the file if it cannot be written;
    /// [`crate::Code::Unimplemented`] for a SentencePiece vocabulary (rml has no tokenizer.json
    /// form of it).
    pub fn save(&self, path: &Path) -> Result<()> {
        on_backend!(&self.backend,
            inner => inner
                .save(path, false)
                .map_err(|e| Error::invalid_argument(format_args!("{}: {e}", path.display()))),
            _spm => Err(Error::unimplemented(format_args!(
                "{}: a SentencePiece vocabulary from GGUF (tokenizer.ggml.model \"llama\": \
                 tokenizer.ggml.tokens, .scores, .token_type, .add_space_prefix) is not written \
                 as tokenizer.json: rml has no writer for Hugging Face's SentencePiece form",
                path.display()
            )))
        )
    }

    /// The number of tokens, added tokens included.
    pub fn vocab_size(&self) -> usize {
        on_backend!(&self.backend, inner => inner.get_vocab_size(true), spm => spm.vocab_size())
    }

    /// The id of the token spelled exactly `token` (e.g. `"<|im_end|>"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        on_backend!(&self.backend, inner => inner.token_to_id(token), spm => spm.token_to_id(token))
    }

    /// The spelling of token `id` as the vocabulary stores it (`▁` and byte-level characters
    /// included), or `None` outside the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        on_backend!(&self.backend, inner => inner.id_to_token(id), spm => spm.id_to_token(id).map(String::from))
    }

    /// Whether `id` is a special (control) token, dropped by [`Tokenizer::decode`].
    pub fn is_special(&self, id: u32) -> bool {
        on_backend!(&self.backend,
            inner => {
                let added = inner.get_added_vocabulary();
                added.simple_id_to_token(id).is_some_and(|t| added.is_special_token(&t))
            },
            spm => spm.is_control(id)
        )
    }

    /// Whether `id` is matched whole before the model runs: an added token of a
    /// tokenizer.json (special or not, e.g. Gemma's `<end_of_turn>`), or a control,
    /// user-defined or unknown token of a GGUF vocabulary.
    pub fn is_added(&self, id: u32) -> bool {
        on_backend!(&self.backend, inner => inner.get_added_vocabulary().simple_id_to_token(id).is_some(), spm => spm.is_added(id))
    }

    /// The BOS token's id, if the model has one (GGUF `tokenizer.ggml.bos_token_id`,
    /// tokenizer_config.json `bos_token`).
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS token's id, if known (GGUF `tokenizer.ggml.eos_token_id`,
    /// tokenizer_config.json `eos_token`).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The chat template of tokenizer_config.json (`chat_template`) or of a
    /// `chat_template.jinja` beside it, when loaded with [`Tokenizer::from_file`].
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Encodes `text`; special tokens written in the text (`<|im_start|>`) are recognised.
    /// No BOS or EOS is added (see [`Tokenizer::encode_with_special`]).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the tokenizer's message.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with_special(text, false)
    }

    /// Encodes `text`, recognising special tokens written in it; with `add_special`, adds
    /// BOS/EOS as the model asks: the tokenizer.json's post-processor, or a GGUF's
    /// `tokenizer.ggml.add_bos_token` / `add_eos_token`. Equals transformers'
    /// `tokenizer(text, add_special_tokens=add_special).input_ids` and llama.cpp's
    /// `llama_tokenize(text, add_special, parse_special = true)`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the tokenizer's message, or for a character a
    /// SentencePiece vocabulary cannot spell (no byte fallback, no unknown token).
    pub fn encode_with_special(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        on_backend!(&self.backend,
            inner => {
                let post = add_special && !self.manual_special;
                let enc = inner.encode_fast(text, post).map_err(tk_err("encode"))?;
                let ids = enc.get_ids();
                if !(add_special && self.manual_special) {
                    return Ok(ids.to_vec());
                }
                let mut out = Vec::with_capacity(ids.len() + 2);
                if self.add_bos {
                    out.extend(self.bos);
                }
                out.extend_from_slice(ids);
                if self.add_eos {
                    out.extend(self.eos);
                }
                Ok(out)
            },
            spm => spm.encode(text, add_special)
        )
    }

    /// Encodes `text` with the special tokens the model adds (as
    /// [`Tokenizer::encode_with_special`] with `add_special`), keeping at most `max_tokens` ids
    /// in all: the text's own tokens are cut at the end and the special tokens kept, as
    /// transformers' `tokenizer(text, truncation=True, max_length=max_tokens)` does (and
    /// sentence-transformers at `max_seq_length`). Returns the ids and the length before
    /// truncation (special tokens included), so a caller can say that it cut.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] if `max_tokens` leaves no room beside the special
    /// tokens, or as [`Tokenizer::encode_with_special`].
    pub fn encode_truncated(&self, text: &str, max_tokens: usize) -> Result<(Vec<u32>, usize)> {
        // BOS/EOS that rml adds itself (GGUF vocabularies)
        let manual = usize::from(self.add_bos && self.bos.is_some())
            + usize::from(self.add_eos && self.eos.is_some());
        let room = |added: usize| {
            max_tokens.checked_sub(added).filter(|r| *r > 0).ok_or_else(|| {
                Error::invalid_argument(format_args!(
                    "a limit of {max_tokens} tokens leaves no room beside the model's {added} \
                     special tokens"
                ))
            })
        };
        let with_manual = |body: &[u32]| {
            let mut out = Vec::with_capacity(body.len() + 2);
            if self.add_bos {
                out.extend(self.bos);
            }
            out.extend_from_slice(body);
            if self.add_eos {
                out.extend(self.eos);
            }
            out
        };
        on_backend!(&self.backend,
            inner => {
                use tokenizers::PostProcessor as _;
                let mut enc = inner.encode_fast(text, false).map_err(tk_err("encode"))?;
                let added = if self.manual_special {
                    manual
                } else {
                    inner.get_post_processor().map_or(0, |p| p.added_tokens(false))
                };
                let full = enc.len() + added;
                let keep = room(added)?;
                if enc.len() > keep {
                    enc.truncate(keep, 0, tokenizers::TruncationDirection::Right);
                }
                if self.manual_special {
                    return Ok((with_manual(enc.get_ids()), full));
                }
                let enc = inner.post_process(enc, None, true).map_err(tk_err("encode"))?;
                Ok((enc.get_ids().to_vec(), full))
            },
            spm => {
                let mut ids = spm.encode(text, false)?;
                let full = ids.len() + manual;
                ids.truncate(room(manual)?);
                Ok((with_manual(&ids), full))
            }
        )
    }

    /// Decodes `ids` to text, dropping special tokens. For SentencePiece, `▁` becomes a space
    /// and the space the encoder adds in front of the text (`add_space_prefix`) is removed, so
    /// that `decode(encode(text)) == text`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the tokenizer's message (e.g. an unknown id).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        on_backend!(&self.backend, inner => inner.decode(ids, true).map_err(tk_err("decode")), spm => spm.decode(ids, false))
    }
}

/// Turns a stream of ids into text pieces as they become printable: a byte-level token can
/// end inside a UTF-8 character, so text is released only once it decodes without a
/// replacement character at its end.
#[derive(Debug, Default)]
pub struct TextStream {
    ids: Vec<u32>,
    /// `ids[..prev]` is context already printed; `ids[prev..]` decode to what is pending.
    prev: usize,
    /// Bytes of `decode(ids[prev..])` already printed.
    printed: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `id` and returns the text it completes (possibly empty).
    ///
    /// # Errors
    ///
    /// As [`Tokenizer::decode`].
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = tok.decode(&self.ids[self.prev..])?;
        if text.len() > self.printed && !text.ends_with('\u{FFFD}') {
            let piece = text[resume_at(&text, self.printed)..].to_string();
            // Keep a short window of context: decoding a token alone can lose a leading
            // space that depends on what came before.
            if self.ids.len() - self.prev > 8 {
                let keep = self.ids.len() - 4;
                self.printed = tok.decode(&self.ids[keep..])?.len();
                self.prev = keep;
            } else {
                self.printed = text.len();
            }
            Ok(piece)
        } else {
            Ok(String::new())
        }
    }

    /// Returns whatever is still pending (an incomplete character is printed as U+FFFD).
    ///
    /// # Errors
    ///
    /// As [`Tokenizer::decode`].
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String> {
        let text = tok.decode(&self.ids[self.prev..])?;
        let piece = text[resume_at(&text, self.printed)..].to_string();
        self.printed = text.len();
        Ok(piece)
    }
}

/// The first char boundary of `text` at or after `printed` (or its end). The window's text
/// after a shift is decoded alone, and an incomplete UTF-8 sequence at its start can decode to
/// a different number of U+FFFD bytes than it did there, so `printed` may fall inside one;
/// the rest of that replacement character was already printed or stands for bytes that were.
fn resume_at(text: &str, printed: usize) -> usize {
    (printed..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len())
}
