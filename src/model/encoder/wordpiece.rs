//! The WordPiece tokenizer of a llama.cpp BERT GGUF ([`wordpiece_from_gguf`]), rebuilt as the
//! `tokenizers` crate's `tokenizer.json` from the GGUF's `tokenizer.ggml.*` vocabulary.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::format::gguf::Gguf;
use crate::tokenizer::Tokenizer;

/// A `tokenizer.json` (the `tokenizers` crate's WordPiece) rebuilt from the vocabulary of a
/// llama.cpp BERT GGUF.
///
/// llama.cpp's converter stores each WordPiece token in its "phantom space" form: a
/// word-initial piece `w` as `▁w`, a continuation `##w` as `w`, control tokens (`[CLS]`...,
/// `tokenizer.ggml.token_type` 3) unchanged; this undoes that. The text is normalized as
/// BERT's `BertNormalizer` does (clean-up, CJK characters split, lowercased and accents
/// stripped when `tokenizer.ggml.normalizer.lowercase` is true or absent, as llama.cpp's
/// WordPiece tokenizer does), split by `BertPreTokenizer`, and framed as
/// `bos $A eos` (`tokenizer.ggml.bos_token_id` / `eos_token_id`: the converter's `[CLS]` /
/// `[SEP]`) when `tokenizer.ggml.add_bos_token` / `add_eos_token` are true or absent.
///
/// # Errors
///
/// [`crate::Code::DataLoss`] for a vocabulary that is missing, empty, has a type count that
/// differs from its token count, or special token ids outside it;
/// [`crate::Code::Unimplemented`] for a `tokenizer.ggml.model` other than `bert`.
pub fn wordpiece_from_gguf(g: &Gguf<'_>) -> Result<Tokenizer> {
    use serde_json::json;
    match g.tokenizer_model()? {
        Some("bert") | None => {}
        Some(other) => {
            return Err(Error::unimplemented(format_args!(
                "tokenizer.ggml.model {other:?} in a BERT GGUF (supported: bert, WordPiece)"
            )))
        }
    }
    let tokens = g.tokens()?;
    if tokens.is_empty() {
        return Err(Error::data_loss("GGUF: an empty tokenizer.ggml.tokens"));
    }
    let types = match g.get("tokenizer.ggml.token_type") {
        Some(_) => g.token_types()?,
        None => Vec::new(),
    };
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(Error::data_loss(format_args!(
            "GGUF: {} token types for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    const CONTROL: i32 = 3;
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, tok) in tokens.iter().enumerate() {
        let control = types.get(id) == Some(&CONTROL);
        let piece = if control {
            String::from(*tok)
        } else if let Some(rest) = tok.strip_prefix('\u{2581}').filter(|r| !r.is_empty()) {
            String::from(rest)
        } else {
            format!("##{tok}")
        };
        if control {
            added.push(json!({"id": id, "content": piece, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
        }
        vocab.entry(piece).or_insert(json!(id));
    }
    let name = |id: Option<u32>, what: &str| -> Result<Option<String>> {
        match id {
            None => Ok(None),
            Some(i) => tokens.get(i as usize).map(|t| Some(String::from(*t))).ok_or_else(|| {
                Error::data_loss(format_args!(
                    "GGUF: {what} {i} is outside the vocabulary of {} tokens",
                    tokens.len()
                ))
            }),
        }
    };
    let unk = name(g.get_u32("tokenizer.ggml.unknown_token_id")?, "unknown_token_id")?
        .unwrap_or_else(|| String::from("[UNK]"));
    let bos_id = g.bos_token_id()?;
    let eos_id = g.eos_token_id()?;
    let bos =
        name(bos_id, "bos_token_id")?.filter(|_| g.add_bos_token().ok().flatten().unwrap_or(true));
    let eos = name(eos_id, "eos_token_id")?
        .filter(|_| g.get_bool("tokenizer.ggml.add_eos_token").ok().flatten().unwrap_or(true));
    let lowercase = g.get_bool("tokenizer.ggml.normalizer.lowercase")?.unwrap_or(true);
    let mut single = Vec::new();
    let mut specials = serde_json::Map::new();
    if let (Some(b), Some(id)) = (&bos, bos_id) {
        single.push(json!({"SpecialToken": {"id": b, "type_id": 0}}));
        specials.insert(b.clone(), json!({"id": b, "ids": [id], "tokens": [b]}));
    }
    single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
    if let (Some(e), Some(id)) = (&eos, eos_id) {
        single.push(json!({"SpecialToken": {"id": e, "type_id": 0}}));
        specials.insert(e.clone(), json!({"id": e, "ids": [id], "tokens": [e]}));
    }
    let mut pair = single.clone();
    pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
    if let Some(e) = &eos {
        pair.push(json!({"SpecialToken": {"id": e, "type_id": 1}}));
    }
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
            "handle_chinese_chars": true, "strip_accents": null, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing", "single": single, "pair": pair,
            "special_tokens": specials},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab},
    });
    let bytes = serde_json::to_vec(&doc)
        .map_err(|e| Error::internal(format_args!("tokenizer JSON: {e}")))?;
    Tokenizer::from_json_bytes(&bytes).map_err(|e| e.context("the GGUF's WordPiece vocabulary"))
}
