//! SentencePiece vocabularies stored in GGUF files (`tokenizer.ggml.model = "llama"`),
//! tokenized as llama.cpp's `llm_tokenizer_spm` does (Llama 1/2, Mistral v0.1, Gemma).
//!
//! The algorithm (llama.cpp `src/llama-vocab.cpp`):
//! 1. Special tokens (types control, user-defined and unknown) are cut out of the text first,
//!    the longest spelling first; what lies between them is raw text.
//! 2. Each raw fragment gets a leading space when `tokenizer.ggml.add_space_prefix` is set and it
//!    starts the text or follows a special token; every space becomes `▁` (U+2581).
//! 3. The fragment is split into UTF-8 characters; adjacent pairs whose concatenation is a
//!    vocabulary entry go into a queue ordered by that entry's score (ties: leftmost first);
//!    the best pair is merged, and the pairs around it are requeued, until none is left.
//! 4. A final symbol that is a vocabulary entry becomes its id; any other symbol is written byte
//!    by byte as the `<0xNN>` byte-fallback tokens (or the single-byte token); a character
//!    without them becomes the unknown token (where llama.cpp aborts).
//!
//! BOS is prepended when `tokenizer.ggml.add_bos_token` is true (default true, as llama.cpp),
//! EOS appended when `tokenizer.ggml.add_eos_token` is true (default false), both only when the
//! caller asks for special tokens. llama.cpp's per-model strip attributes (Phi-3, Jina) are
//! not reproduced: no family rml runs uses them.

use alloc::collections::BinaryHeap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Ordering;

use hashbrown::HashMap;

use crate::error::{Error, Result};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub(crate) mod token_type {
    /// An ordinary piece.
    pub const NORMAL: i32 = 1;
    /// The unknown token (`<unk>`).
    pub const UNKNOWN: i32 = 2;
    /// A control token (`<bos>`, `<|im_start|>`): special, never split, skipped when decoding.
    pub const CONTROL: i32 = 3;
    /// A user-defined token: matched before the model, kept when decoding.
    pub const USER_DEFINED: i32 = 4;
    /// An unused slot.
    pub const UNUSED: i32 = 5;
    /// A byte-fallback token `<0xNN>`.
    pub const BYTE: i32 = 6;
}

/// The SentencePiece space marker `▁` (U+2581).
const SPACE: &str = "\u{2581}";

/// What a GGUF file says about a SentencePiece vocabulary (borrowed from the file).
#[derive(Clone, Copy, Debug)]
pub struct SpmVocab<'a> {
    /// `tokenizer.ggml.tokens`, in id order.
    pub tokens: &'a [&'a str],
    /// `tokenizer.ggml.scores`, one per token (empty: all 0).
    pub scores: &'a [f32],
    /// `tokenizer.ggml.token_type`, one per token (empty: all normal).
    pub token_types: &'a [i32],
    /// `tokenizer.ggml.bos_token_id` (llama.cpp's default for this model: 1).
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id` (default 2).
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id` (default 0).
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (default true).
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token` (default false).
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (default true).
    pub add_space_prefix: Option<bool>,
}

/// A SentencePiece tokenizer rebuilt from a GGUF vocabulary.
#[derive(Clone, Debug)]
pub(crate) struct Spm {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
    ids: HashMap<String, u32>,
    /// Special tokens (control, user-defined, unknown), longest spelling first.
    specials: Vec<u32>,
    /// The token of each byte (`<0xNN>`, else the byte itself as a one-character token).
    bytes: [Option<u32>; 256],
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    unk: Option<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    add_space_prefix: bool,
}

/// A pair of adjacent symbols whose concatenation is a token, queued by the token's score.
#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair first (llama.cpp's comparator).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// One symbol of the merge: a byte range of the fragment and its neighbours in the live chain.
#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

fn check_id(what: &str, id: Option<u32>, n: usize) -> Result<Option<u32>> {
    match id {
        Some(i) if i as usize >= n => Err(Error::data_loss(format_args!(
            "tokenizer.ggml.{what}_token_id {i} is outside the vocabulary of {n} tokens"
        ))),
        other => Ok(other),
    }
}

impl Spm {
    /// Builds the tokenizer.
    ///
    /// # Errors
    ///
    /// [`crate::Code::DataLoss`] for an empty vocabulary, a score or type count that does not
    /// match the token count, a special token id outside the vocabulary or a token listed twice.
    pub(crate) fn new(v: &SpmVocab<'_>) -> Result<Self> {
        let n = v.tokens.len();
        if n == 0 {
            return Err(Error::data_loss("tokenizer.ggml.tokens is empty"));
        }
        if u32::try_from(n).is_err() {
            return Err(Error::data_loss(format_args!("tokenizer.ggml.tokens: {n} tokens")));
        }
        for (what, len) in [("scores", v.scores.len()), ("token_type", v.token_types.len())] {
            if len != 0 && len != n {
                return Err(Error::data_loss(format_args!(
                    "tokenizer.ggml.{what} has {len} entries for {n} tokens"
                )));
            }
        }
        let scores = if v.scores.is_empty() { alloc::vec![0.0; n] } else { v.scores.to_vec() };
        let types = if v.token_types.is_empty() {
            alloc::vec![token_type::NORMAL; n]
        } else {
            v.token_types.to_vec()
        };
        let mut ids = HashMap::with_capacity(n);
        for (id, t) in v.tokens.iter().enumerate() {
            if ids.insert((*t).to_string(), id as u32).is_some() {
                return Err(Error::data_loss(format_args!(
                    "tokenizer.ggml.tokens: token {t:?} appears twice (id {id})"
                )));
            }
        }
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                let ty = types[i as usize];
                (ty == token_type::CONTROL
                    || ty == token_type::USER_DEFINED
                    || ty == token_type::UNKNOWN)
                    && !v.tokens[i as usize].is_empty()
            })
            .collect();
        specials.sort_by_key(|&i| core::cmp::Reverse(v.tokens[i as usize].len()));
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = ids.get(hex.as_str()).copied().or_else(|| {
                let c = [b as u8];
                core::str::from_utf8(&c).ok().and_then(|s| ids.get(s).copied())
            });
        }
        // Ids the file names must exist; llama.cpp's defaults (1, 2, 0) may be absent.
        let bos = check_id("bos", v.bos, n)?.or(Some(1)).filter(|&i| (i as usize) < n);
        let eos = check_id("eos", v.eos, n)?.or(Some(2)).filter(|&i| (i as usize) < n);
        let unk = check_id("unknown", v.unk, n)?.or(Some(0)).filter(|&i| (i as usize) < n);
        let (add_bos, add_eos) = (v.add_bos.unwrap_or(true), v.add_eos.unwrap_or(false));
        if add_bos && bos.is_none() {
            return Err(Error::data_loss(
                "tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token",
            ));
        }
        if add_eos && eos.is_none() {
            return Err(Error::data_loss(
                "tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token",
            ));
        }
        Ok(Spm {
            tokens: v.tokens.iter().map(|t| (*t).to_string()).collect(),
            scores,
            types,
            ids,
            specials,
            bytes,
            bos,
            eos,
            unk,
            add_bos,
            add_eos,
            add_space_prefix: v.add_space_prefix.unwrap_or(true),
        })
    }

    /// The number of tokens.
    pub(crate) fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of the token spelled `token`.
    pub(crate) fn token_to_id(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    /// The spelling of token `id`.
    pub(crate) fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Whether `id` is a control or unknown token (skipped when decoding).
    pub(crate) fn is_control(&self, id: u32) -> bool {
        matches!(
            self.types.get(id as usize),
            Some(&token_type::CONTROL) | Some(&token_type::UNKNOWN)
        )
    }

    /// Whether `id` is a special token of the partition (control, user-defined, unknown).
    pub(crate) fn is_added(&self, id: u32) -> bool {
        matches!(
            self.types.get(id as usize),
            Some(&token_type::CONTROL)
                | Some(&token_type::UNKNOWN)
                | Some(&token_type::USER_DEFINED)
        )
    }

    /// Encodes `text`, recognising special tokens written in it; with `add_special`, BOS/EOS
    /// as the vocabulary's flags say (llama.cpp's `llama_tokenize(add_special, parse_special =
    /// true)`).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] when a character has no token, no byte-fallback token
    /// and the vocabulary has no unknown token.
    pub(crate) fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let mut prev_special = true;
        for frag in self.partition(text) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s) => {
                    let mut t = String::with_capacity(s.len() + 3);
                    if self.add_space_prefix && prev_special {
                        t.push(' ');
                    }
                    t.push_str(s);
                    let t = t.replace(' ', SPACE);
                    self.encode_fragment(&t, &mut out)?;
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        Ok(out)
    }

    /// Cuts the special tokens out of `text` (llama.cpp's `tokenizer_st_partition`).
    fn partition<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut frags = Vec::new();
        if !text.is_empty() {
            frags.push(Fragment::Text(text));
        }
        for &id in &self.specials {
            let pat = self.tokens[id as usize].as_str();
            if !frags.iter().any(|f| matches!(f, Fragment::Text(s) if s.contains(pat))) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut s) => {
                        while let Some(at) = s.find(pat) {
                            if at > 0 {
                                next.push(Fragment::Text(&s[..at]));
                            }
                            next.push(Fragment::Token(id));
                            s = &s[at + pat.len()..];
                        }
                        if !s.is_empty() {
                            next.push(Fragment::Text(s));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// The SentencePiece BPE on one fragment (spaces already `▁`), appending ids to `out`.
    fn encode_fragment(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            });
        }
        let Some(last) = symbols.last_mut() else { return Ok(()) };
        last.next = None;
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.try_add_bigram(text, &symbols, i - 1, i, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Skip pairs made stale by an earlier merge.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            if let Some(p) = l.prev {
                self.try_add_bigram(text, &symbols, p, b.left, &mut queue);
            }
            if let Some(n) = r.next {
                self.try_add_bigram(text, &symbols, b.left, n, &mut queue);
            }
        }
        // Every merge produced a vocabulary entry, so a final symbol is either an entry or a
        // single character: llama.cpp's re-segmentation of unknown merges never applies.
        let mut cur = Some(0);
        while let Some(i) = cur {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None if piece.bytes().all(|b| self.bytes[b as usize].is_some()) => {
                    out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize]));
                }
                // Without byte fallback llama.cpp aborts; rml writes one unknown token per
                // character, as SentencePiece does.
                None => out.push(self.unk.ok_or_else(|| {
                    Error::invalid_argument(format_args!(
                        "{piece:?} has no token, no byte-fallback tokens and the vocabulary \
                         has no unknown token"
                    ))
                })?),
            }
            cur = s.next;
        }
        Ok(())
    }

    fn try_add_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let (l, r) = (symbols[left], symbols[right]);
        let size = l.len + r.len;
        let Some(&id) = self.ids.get(&text[l.start..l.start + size]) else { return };
        queue.push(Bigram { left, right, score: self.scores[id as usize], size });
    }

    /// Decodes `ids` to bytes: control and unknown tokens are dropped (kept with
    /// `keep_special`), byte tokens give their byte, `▁` becomes a space, and the space the
    /// encoder put before the first piece (`add_space_prefix`) is removed.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] naming an id outside the vocabulary.
    pub(crate) fn decode(&self, ids: &[u32], keep_special: bool) -> Result<String> {
        let mut bytes: Vec<u8> = Vec::new();
        let mut first = true;
        for &id in ids {
            let Some(tok) = self.tokens.get(id as usize) else {
                return Err(Error::invalid_argument(format_args!(
                    "decode: token id {id} is outside the vocabulary of {} tokens",
                    self.tokens.len()
                )));
            };
            let ty = self.types[id as usize];
            let piece_start = bytes.len();
            match ty {
                token_type::CONTROL | token_type::UNKNOWN if !keep_special => continue,
                token_type::CONTROL | token_type::UNKNOWN | token_type::USER_DEFINED => {
                    bytes.extend_from_slice(tok.as_bytes())
                }
                token_type::BYTE => match byte_of(tok) {
                    Some(b) => bytes.push(b),
                    None => bytes.extend_from_slice(tok.as_bytes()),
                },
                token_type::UNUSED => continue,
                _ => bytes.extend_from_slice(tok.replace(SPACE, " ").as_bytes()),
            }
            if first && self.add_space_prefix && bytes.get(piece_start) == Some(&b' ') {
                bytes.remove(piece_start);
            }
            first = false;
        }
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }
}

/// The byte of a `<0xNN>` token.
fn byte_of(tok: &str) -> Option<u8> {
    let hex = tok.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A piece of the input after the special tokens were cut out.
#[derive(Debug)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}
