//! Tokenizers of the tiny fixtures (feature `tokenizer`) against the ids in each folder's
//! `tokenizer_tests.json`: transformers' (`ids`) and llama.cpp's (`llama_cpp_ids`, from the F32
//! GGUF with add_special and parse_special), for the tokenizer.json and for the vocabulary of
//! the shipped GGUF: tiny-gemma3 (SentencePiece, byte fallback, `tokenizer.ggml.model =
//! llama`) and tiny-qwen2 (byte-level BPE, pre-tokenizer `qwen2`; tiny-qwen3, tiny-llama3 and
//! tiny-mistral ship the identical tokenizer and tests). Also tiny-llama-gguf's SentencePiece
//! vocabulary without byte fallback, against ids llama.cpp's `llama-tokenize` printed.
#![cfg(feature = "tokenizer")]

mod decoder_common;

use decoder_common::data;
use rml::format::gguf::Gguf;
use rml::tokenizer::{SpmVocab, Tokenizer};

/// One case of a `tokenizer_tests.json`.
struct Case {
    text: String,
    ids: Vec<u32>,
    llama_cpp_ids: Vec<u32>,
}

fn cases(folder: &str) -> Vec<Case> {
    let bytes = std::fs::read(data(&format!("{folder}/tokenizer_tests.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let ids = |c: &serde_json::Value, k: &str| -> Vec<u32> {
        c[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    };
    let out: Vec<Case> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            ids: ids(c, "ids"),
            llama_cpp_ids: ids(c, "llama_cpp_ids"),
        })
        .collect();
    assert_eq!(out.len(), 9, "{folder}: the README lists 9 cases");
    out
}

fn gguf_tokenizer(file: &str) -> Tokenizer {
    let bytes = std::fs::read(data(file)).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    Tokenizer::from_gguf(&g).unwrap()
}

/// Every case encodes to llama.cpp's and transformers' ids (with special tokens) and decodes
/// back to its text with the special tokens written in it removed.
fn check(tok: &Tokenizer, folder: &str, specials: &[&str]) {
    for c in cases(folder) {
        let got = tok.encode_with_special(&c.text, true).unwrap();
        assert_eq!(got, c.llama_cpp_ids, "{folder}: {:?} (llama.cpp)", c.text);
        assert_eq!(got, c.ids, "{folder}: {:?} (transformers)", c.text);
        // Control tokens are dropped when decoding; Gemma's tokenizer.json keeps its turn
        // markers (not "special" there), so compare without them.
        let strip = |t: &str| specials.iter().fold(t.to_string(), |t, s| t.replace(s, ""));
        let back = tok.decode(&got).unwrap();
        assert_eq!(strip(&back), strip(&c.text), "{folder}: {:?} round trip", c.text);
    }
}

#[test]
fn gemma3_gguf_sentencepiece_matches_llama_cpp() {
    let tok = gguf_tokenizer("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf");
    assert_eq!(tok.vocab_size(), 512);
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
    assert_eq!(tok.token_to_id("<end_of_turn>"), Some(5));
    assert!(tok.is_special(5) && !tok.is_special(450));
    check(&tok, "tiny-gemma3", &["<start_of_turn>", "<end_of_turn>"]);
    // The README's chat example: special tokens in the text, "\n" through byte fallback.
    assert_eq!(
        tok.encode_with_special("<start_of_turn>user\nhi<end_of_turn>", true).unwrap(),
        [2, 4, 466, 457, 269, 16, 284, 5]
    );
    // Without special tokens: no BOS.
    assert_eq!(tok.encode("<start_of_turn>user").unwrap(), [4, 466, 457, 269]);
}

#[test]
fn gemma3_tokenizer_json_matches_transformers() {
    let tok = Tokenizer::from_file(&data("tiny-gemma3/tokenizer.json")).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
    check(&tok, "tiny-gemma3", &["<start_of_turn>", "<end_of_turn>"]);
}

#[test]
fn qwen2_gguf_bpe_matches_llama_cpp() {
    let tok = gguf_tokenizer("tiny-qwen2/gguf/tiny-qwen2-Q4_K_M.gguf");
    assert_eq!(tok.vocab_size(), 512);
    assert_eq!(tok.eos_id(), Some(509));
    check(&tok, "tiny-qwen2", &["<|im_start|>", "<|im_end|>"]);
}

/// The Qwen2 GGUF vocabulary (pre-tokenized by rml's own splitter) written as a
/// tokenizer.json names the regex it implements, and `tokenizers` reading that file back
/// (compiling the regex) encodes every case to the same ids.
#[test]
fn qwen2_gguf_bpe_saved_as_tokenizer_json_reads_back() {
    let tok = gguf_tokenizer("tiny-qwen2/gguf/tiny-qwen2-Q4_K_M.gguf");
    let dir = std::env::temp_dir().join(format!("rml-qwen2-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    tok.save(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains(r#""type":"Split""#) && json.contains(r"\\p{N}|"), "{json:.400}");
    let back = Tokenizer::from_file(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    for c in cases("tiny-qwen2") {
        assert_eq!(back.encode(&c.text).unwrap(), tok.encode(&c.text).unwrap(), "{:?}", c.text);
    }
}

#[test]
fn qwen2_tokenizer_json_matches_transformers() {
    let tok = Tokenizer::from_file(&data("tiny-qwen2/tokenizer.json")).unwrap();
    assert_eq!(tok.eos_id(), Some(509));
    check(&tok, "tiny-qwen2", &["<|im_start|>", "<|im_end|>"]);
}

/// `llama-tokenize -m tests/data/tiny-llama-gguf/tiny-llama-Q4_0-pure.gguf -p TEXT --ids`
/// (llama.cpp 0c1e570, the peers build): a SentencePiece vocabulary without byte fallback,
/// with a space prefix (`add_space_prefix` absent, llama.cpp's default true) and BOS.
#[test]
fn llama_gguf_sentencepiece_without_byte_fallback_matches_llama_cpp() {
    let tok = gguf_tokenizer("tiny-llama-gguf/tiny-llama-Q4_0-pure.gguf");
    assert_eq!(tok.vocab_size(), 256);
    for (text, want) in LLAMA_CPP_TINY_LLAMA {
        let got = tok.encode_with_special(text, true).unwrap();
        assert_eq!(got, *want, "{text:?}");
        if !text.contains('<') {
            assert_eq!(tok.decode(&got).unwrap(), *text, "{text:?} round trip");
        }
    }
}

/// The cases of the test above, as llama.cpp tokenized them. (llama.cpp aborts on text with a
/// character outside this vocabulary, e.g. an apostrophe or a digit: `unordered_map::at`.)
const LLAMA_CPP_TINY_LLAMA: &[(&str, &[u32])] = &[
    (
        "the keeper counted ships, and the sea was calm.",
        &[1, 5, 102, 160, 126, 207, 12, 5, 101, 42, 11, 35, 209, 216],
    ),
    ("hello world", &[1, 60, 84, 200, 9, 22, 44]),
    ("  two  spaces", &[1, 194, 194, 116, 200, 194, 7, 214, 197, 208, 27]),
    (" leading space", &[1, 194, 16, 195, 49, 91, 7, 214, 197, 104]),
    ("trailing space ", &[1, 4, 202, 197, 63, 91, 7, 214, 197, 104, 194]),
    ("The sea", &[1, 55, 101]),
    ("x", &[1, 194, 254]),
    ("<s>x</s>", &[1, 1, 194, 254, 2]),
    ("the sea<s>was</s> calm", &[1, 5, 101, 1, 42, 2, 194, 11, 35, 209]),
];

#[test]
fn malformed_sentencepiece_vocabularies_are_named() {
    let toks = ["<unk>", "<s>", "</s>", "a"];
    let base = SpmVocab {
        tokens: &toks,
        scores: &[],
        token_types: &[],
        bos: None,
        eos: None,
        unk: None,
        add_bos: None,
        add_eos: None,
        add_space_prefix: None,
    };
    let ok = Tokenizer::from_spm_vocab(&base).unwrap();
    // No byte fallback: an unknown character becomes <unk> (id 0).
    assert_eq!(ok.encode_with_special("ab", true).unwrap(), [1, 0, 3, 0]);
    let e = Tokenizer::from_spm_vocab(&SpmVocab { scores: &[0.0], ..base }).unwrap_err();
    assert!(e.to_string().contains("scores has 1 entries for 4 tokens"), "{e}");
    let e = Tokenizer::from_spm_vocab(&SpmVocab { bos: Some(9), ..base }).unwrap_err();
    assert!(e.to_string().contains("bos_token_id 9"), "{e}");
    let e = Tokenizer::from_spm_vocab(&SpmVocab { tokens: &["a", "a"], ..base }).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let e = Tokenizer::from_spm_vocab(&SpmVocab { tokens: &[], ..base }).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    // No BOS token at all while the (default) add-BOS flag is on.
    let e = Tokenizer::from_spm_vocab(&SpmVocab { tokens: &["a"], ..base }).unwrap_err();
    assert!(e.to_string().contains("add_bos_token"), "{e}");
    // Without a space prefix; "z" (outside the vocabulary, no byte fallback) is <unk>.
    let t = Tokenizer::from_spm_vocab(&SpmVocab {
        tokens: &["<unk>", "a", "b", "ab", "<s>"],
        scores: &[0.0, 0.0, 0.0, 1.0, 0.0],
        token_types: &[2, 1, 1, 1, 3],
        bos: Some(4),
        add_space_prefix: Some(false),
        ..base
    })
    .unwrap();
    assert_eq!(t.encode_with_special("abz", true).unwrap(), [4, 3, 0]);
    assert_eq!(t.decode(&[4, 3, 1]).unwrap(), "aba");
}

/// `Tokenizer::for_model` finds `tokenizer.json` in a folder and beside a single safetensors
/// file, a GGUF's own vocabulary when nothing is beside it, and names the path it looked for
/// when there is neither.
#[test]
fn for_model_finds_each_source_and_names_what_it_looked_for() {
    let want = cases("tiny-qwen2");
    let check_ids = |tok: &Tokenizer| {
        for c in &want {
            assert_eq!(tok.encode_with_special(&c.text, true).unwrap(), c.ids, "{:?}", c.text);
        }
    };
    // A folder with its tokenizer.json, and its safetensors file alone (tokenizer.json beside).
    check_ids(&Tokenizer::for_model(data("tiny-qwen2")).unwrap());
    check_ids(&Tokenizer::for_model(data("tiny-qwen2/model.safetensors")).unwrap());
    // A GGUF with no tokenizer.json beside it: its own vocabulary (llama.cpp's ids).
    let g = Tokenizer::for_model(data("tiny-qwen2/gguf/tiny-qwen2-Q8_0.gguf")).unwrap();
    for c in &want {
        assert_eq!(g.encode_with_special(&c.text, true).unwrap(), c.llama_cpp_ids, "{:?}", c.text);
    }
    // A safetensors folder without one: NotFound, naming the file looked for.
    let e = Tokenizer::for_model(data("tiny-llama/f32")).unwrap_err();
    assert_eq!(e.code(), rml::Code::NotFound, "{e}");
    let looked = data("tiny-llama/f32").join("tokenizer.json");
    assert!(e.to_string().contains(&looked.display().to_string()), "{e}");
    // No model there at all: the open's own error.
    assert!(Tokenizer::for_model(data("tiny-qwen2/no-such-model")).is_err());
}
