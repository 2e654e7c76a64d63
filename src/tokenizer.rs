//! Text ↔ token ids for the `rml` command line (feature `cli`), on top of Hugging Face's
//! `tokenizers` crate.
//!
//! Two sources: a `tokenizer.json` beside the weights (any model `tokenizers` reads), or, for
//! a `.gguf` file without one, the vocabulary stored in the file itself
//! (`tokenizer.ggml.tokens` / `merges` / `token_type`, model `gpt2`): a byte-level BPE is
//! rebuilt from it ([`Tokenizer::from_gguf_vocab`]). The pre-tokenizer follows
//! `tokenizer.ggml.pre` as llama.cpp interprets it: `smollm` (and the StarCoder family)
//! splits every digit on its own before the GPT-2 regex; `gpt2` / `default` use the GPT-2 regex
//! alone.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

use crate::error::{Error, Result};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
mod token_type {
    /// A control token (`<|im_start|>`): special, never split, skipped when decoding.
    pub const CONTROL: i32 = 3;
    /// A user-defined token: matched before the BPE, kept when decoding.
    pub const USER_DEFINED: i32 = 4;
}

/// A tokenizer: encodes text to ids and decodes ids back to text.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl core::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tokenizer").field("vocab", &self.vocab_size()).finish()
    }
}

fn tk_err(what: &str) -> impl FnOnce(tokenizers::Error) -> Error + '_ {
    move |e| Error::invalid_argument(format_args!("{what}: {e}"))
}

impl Tokenizer {
    /// Reads a Hugging Face `tokenizer.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] naming the file if it cannot be read or parsed.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::data_loss(format_args!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner })
    }

    /// Parses the bytes of a `tokenizer.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] if they are not a tokenizer `tokenizers` can read.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes)
            .map_err(|e| Error::data_loss(format_args!("tokenizer.json: {e}")))?;
        Ok(Tokenizer { inner })
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
    /// of the above; [`crate::Code::DataLoss`] for a merge without a space, a token type count
    /// that does not match, duplicate tokens, or a merge naming an unknown token.
    pub fn from_gguf_vocab(
        model: &str,
        pre: Option<&str>,
        tokens: &[&str],
        merges: &[&str],
        token_types: &[i32],
    ) -> Result<Self> {
        if model != "gpt2" {
            return Err(Error::unimplemented(format_args!(
                "tokenizer.ggml.model {model:?}: only the byte-level BPE \"gpt2\" is built from \
                 GGUF metadata; put the model's tokenizer.json beside the file"
            )));
        }
        let split_digits = match pre.unwrap_or("default") {
            "default" | "gpt2" | "mpt" | "olmo" | "jais" => false,
            "smollm" | "starcoder" | "refact" | "codeshell" | "command-r" => true,
            other => {
                return Err(Error::unimplemented(format_args!(
                    "tokenizer.ggml.pre {other:?} is not supported; put the model's \
                     tokenizer.json beside the file"
                )))
            }
        };
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
            .build()
            .map_err(|e| Error::data_loss(format_args!("GGUF tokenizer: {e}")))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let byte_level = ByteLevel::new(false, true, true);
        if split_digits {
            let seq: Vec<PreTokenizerWrapper> = vec![Digits::new(true).into(), byte_level.into()];
            inner.with_pre_tokenizer(Some(Sequence::new(seq)));
        } else {
            inner.with_pre_tokenizer(Some(byte_level));
        }
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(token_types)
            .filter(|(_, &ty)| ty == token_type::CONTROL || ty == token_type::USER_DEFINED)
            .map(|(t, &ty)| {
                AddedToken::from(String::from(*t), ty == token_type::CONTROL).normalized(false)
            })
            .collect();
        inner.add_special_tokens(&added);
        Ok(Tokenizer { inner })
    }

    /// Writes the tokenizer as a `tokenizer.json`.
    ///
    /// # Errors
    ///
    /// [`crate::Code::Io`]-style failures are reported as [`crate::Code::InvalidArgument`]
    /// naming the file.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        self.inner
            .save(path, false)
            .map_err(|e| Error::invalid_argument(format_args!("{}: {e}", path.display())))
    }

    /// The number of tokens, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of the token spelled exactly `token` (e.g. `"<|im_end|>"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Encodes `text`; special tokens written in the text (`<|im_start|>`) are recognised.
    /// No BOS is added (the post-processor of the tokenizer, if any, is not applied).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the tokenizer's message.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(tk_err("encode"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes `ids` to text, dropping special tokens.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the tokenizer's message (e.g. an unknown id).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(tk_err("decode"))
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
            let piece = text[self.printed..].to_string();
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
        let piece = text.get(self.printed..).unwrap_or("").to_string();
        self.printed = text.len();
        Ok(piece)
    }
}

/// SmolLM2's chat template (ChatML, as stored in its GGUF's `tokenizer.chat_template`) for one
/// user turn, ready for the assistant's reply: the template's default system turn, then
/// `<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n`.
pub fn chat_prompt(prompt: &str) -> String {
    format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
}
