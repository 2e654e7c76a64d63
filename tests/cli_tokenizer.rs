//! The tokenizer (feature `tokenizer`): SmolLM2's byte-level BPE rebuilt from the GGUF vocabulary
//! agrees with the tokenizer.json transformers wrote, and with the reference prompt ids.
#![cfg(feature = "tokenizer")]

mod decoder_common;

use decoder_common::{data, smollm2_gguf};
use rml::load::Model;
use rml::tokenizer::{TextStream, Tokenizer};

const PROMPT: &str = "Once upon a time, there was a little";
const IDS: [u32; 9] = [6403, 1980, 253, 655, 28, 665, 436, 253, 1838];

fn from_gguf(model: &Model) -> Tokenizer {
    let g = model.gguf().unwrap().unwrap();
    Tokenizer::from_gguf_vocab(
        g.tokenizer_model().unwrap().unwrap(),
        g.tokenizer_pre().unwrap(),
        &g.tokens().unwrap(),
        &g.merges().unwrap(),
        &g.token_types().unwrap(),
    )
    .unwrap()
}

#[test]
fn tokenizer_json_reproduces_the_reference_prompt() {
    let tok = Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap();
    assert_eq!(tok.encode(PROMPT).unwrap(), IDS);
    assert_eq!(tok.decode(&IDS).unwrap(), PROMPT);
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
}

#[test]
fn gguf_vocabulary_builds_the_same_tokenizer() {
    let path = smollm2_gguf();
    let model = Model::open(&path).unwrap();
    let tok = from_gguf(&model);
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.encode(PROMPT).unwrap(), IDS);
    assert_eq!(tok.decode(&IDS).unwrap(), PROMPT);
    // Special tokens are recognised in text and dropped when decoding.
    let chat = tok.encode("<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n").unwrap();
    assert_eq!(chat[0], 1, "{chat:?}");
    assert!(chat.contains(&2), "{chat:?}");
    assert!(tok.decode(&chat).unwrap().contains("user\nHi!"));
    // Same ids as transformers' tokenizer.json on text without digits (SmolLM2's GGUF
    // pre-tokenizer, "smollm", also splits digits one by one, as the original tokenizer did).
    let json = Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap();
    for text in [
        "Hello, world!  How are   you?\n\nFine.",
        "naïve café — 東京 😀",
        "    indented code() {}",
        "<|im_start|>user\nWhat's up?<|im_end|>",
    ] {
        assert_eq!(tok.encode(text).unwrap(), json.encode(text).unwrap(), "{text:?}");
        assert_eq!(
            tok.decode(&tok.encode(text).unwrap())
                .unwrap()
                .replace("<|im_start|>", "")
                .replace("<|im_end|>", ""),
            text.replace("<|im_start|>", "").replace("<|im_end|>", "")
        );
    }
    let digits = tok.encode("year 2024").unwrap();
    assert_eq!(tok.decode(&digits).unwrap(), "year 2024");
    // "year", " ", then one token per digit (the digit split leaves the space on its own).
    assert_eq!(digits.len(), 6, "{digits:?}");
    assert_eq!(
        digits[2..].iter().map(|&d| tok.decode(&[d]).unwrap()).collect::<Vec<_>>(),
        ["2", "0", "2", "4"]
    );
}

#[test]
fn text_stream_releases_whole_characters() {
    let tok = Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap();
    let text = "Emoji 😀 and ümlauts, then a long tail of words to pass the window.";
    let ids = tok.encode(text).unwrap();
    let mut stream = TextStream::new();
    let mut out = String::new();
    for &id in &ids {
        let piece = stream.push(&tok, id).unwrap();
        assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
        out.push_str(&piece);
    }
    out.push_str(&stream.finish(&tok).unwrap());
    assert_eq!(out, text);
}

#[test]
fn unsupported_gguf_tokenizers_are_named() {
    let e = Tokenizer::from_gguf_vocab("llama", None, &["a"], &[], &[]).unwrap_err();
    assert_eq!(e.code(), rml::Code::Unimplemented);
    assert!(e.to_string().contains("\"llama\""), "{e}");
    let e = Tokenizer::from_gguf_vocab("gpt2", Some("deepseek-llm"), &["a"], &[], &[]).unwrap_err();
    assert!(e.to_string().contains("deepseek-llm"), "{e}");
    let e = Tokenizer::from_gguf_vocab("gpt2", None, &["a", "b"], &["ab"], &[]).unwrap_err();
    assert_eq!(e.code(), rml::Code::DataLoss, "{e}");
    let e = Tokenizer::from_gguf_vocab("gpt2", None, &["a", "a"], &[], &[]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
}

/// Found by the `gguf_tokenizer` fuzz target: a `gpt2` vocabulary with no tokens gave a
/// tokenizer of 0 tokens (the SentencePiece path already refused it).
#[test]
fn empty_gguf_vocabulary_is_refused() {
    let e = Tokenizer::from_gguf_vocab("gpt2", Some("qwen2"), &[], &[], &[]).unwrap_err();
    assert_eq!(e.code(), rml::Code::DataLoss, "{e}");
    assert!(e.to_string().contains("tokenizer.ggml.tokens is empty"), "{e}");
    // The same through GGUF metadata (an empty `tokenizer.ggml.tokens` array), both paths.
    use rml::format::write::{GgufWriter, Value};
    for model in ["gpt2", "llama"] {
        let mut w = GgufWriter::new();
        w.set("general.architecture", Value::Str("llama".into())).unwrap();
        w.set("tokenizer.ggml.model", Value::Str(model.into())).unwrap();
        let empty = Value::Array(rml::format::gguf::MetaType::String, Vec::new());
        w.set("tokenizer.ggml.tokens", empty).unwrap();
        let file = w.header().unwrap();
        let g = rml::format::gguf::Gguf::parse(&file).unwrap();
        let e = Tokenizer::from_gguf(&g).unwrap_err();
        assert_eq!(e.code(), rml::Code::DataLoss, "{model}: {e}");
        assert!(e.to_string().contains("tokenizer.ggml.tokens is empty"), "{model}: {e}");
    }
}
