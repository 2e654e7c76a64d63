//! Chat templates (feature `tokenizer`) rendered with minijinja equal what transformers'
//! `apply_chat_template` renders with jinja2. The expected strings are the output of
//! `python3 tests/data/chat/render_expected.py` (jinja2 3.1.6, the environment transformers
//! builds), pasted unchanged.
#![cfg(feature = "tokenizer")]

mod decoder_common;

use decoder_common::{data, smollm2_gguf};
use rml::format::gguf::Gguf;
use rml::tokenizer::chat::{family_template, GEMMA_TEMPLATE};
use rml::tokenizer::{ChatTemplate, Message, Tokenizer};

fn two_turns() -> Vec<Message> {
    vec![
        Message::new("user", "What is the capital of France?"),
        Message::new("assistant", "The capital of France is Paris."),
        Message::new("user", "And of Italy?"),
    ]
}

fn with_system() -> Vec<Message> {
    let mut m = vec![Message::new("system", "You answer in one word.")];
    m.extend(two_turns());
    m
}

const SMOL_TWO_TURNS: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n";
const SMOL_WITH_SYSTEM: &str = "<|im_start|>system\nYou answer in one word.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nThe capital of France is Paris.<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n";
const GEMMA_TWO_TURNS: &str = "<bos><start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\nThe capital of France is Paris.<end_of_turn>\n<start_of_turn>user\nAnd of Italy?<end_of_turn>\n<start_of_turn>model\n";
const GEMMA_WITH_SYSTEM: &str = "<bos><start_of_turn>user\nYou answer in one word.\n\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\nThe capital of France is Paris.<end_of_turn>\n<start_of_turn>user\nAnd of Italy?<end_of_turn>\n<start_of_turn>model\n";
const PYCOMPAT: &str = "<s>\n[USER] Hi there?\n[ASSISTANT] Hello.\nturns=2\n[ASSISTANT]\n";

fn smol_tokenizer() -> Tokenizer {
    Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap()
}

#[test]
fn smollm2_template_renders_as_transformers() {
    // tokenizer.json + tokenizer_config.json + chat_template.jinja (extracted from the GGUF's
    // tokenizer.chat_template).
    let tok = smol_tokenizer();
    let t = ChatTemplate::for_tokenizer(tok.chat_template().unwrap(), &tok).unwrap();
    assert_eq!(t.render(&two_turns(), true).unwrap(), SMOL_TWO_TURNS);
    assert_eq!(t.render(&with_system(), true).unwrap(), SMOL_WITH_SYSTEM);
    // Without the generation prompt the text ends after the last user turn.
    let no_gen = t.render(&two_turns(), false).unwrap();
    assert_eq!(no_gen, SMOL_TWO_TURNS.strip_suffix("<|im_start|>assistant\n").unwrap());
    // The end of an assistant turn is <|im_end|> (id 2), found from the template itself.
    assert_eq!(t.end_of_turn_ids(&tok), [2]);
}

#[test]
fn smollm2_gguf_template_renders_as_transformers() {
    let path = smollm2_gguf();
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let src = g.chat_template().unwrap().unwrap();
    assert_eq!(src, std::fs::read_to_string(data("smollm2-135m/chat_template.jinja")).unwrap());
    let t = ChatTemplate::for_tokenizer(src, &tok).unwrap();
    assert_eq!(t.render(&two_turns(), true).unwrap(), SMOL_TWO_TURNS);
    assert_eq!(t.render(&with_system(), true).unwrap(), SMOL_WITH_SYSTEM);
    assert_eq!(t.end_of_turn_ids(&tok), [2]);
}

#[test]
fn gemma_fallback_renders_the_gemma_turn_format() {
    assert_eq!(family_template("gemma3"), Some(GEMMA_TEMPLATE));
    assert_eq!(family_template("llama"), None);
    let t = ChatTemplate::new(GEMMA_TEMPLATE, "<bos>", "<eos>").unwrap();
    assert_eq!(t.render(&two_turns(), true).unwrap(), GEMMA_TWO_TURNS);
    assert_eq!(t.render(&with_system(), true).unwrap(), GEMMA_WITH_SYSTEM);
    // Turns that do not alternate: the template's own message.
    let bad = [Message::new("user", "a"), Message::new("user", "b")];
    let e = t.render(&bad, true).unwrap_err();
    assert!(e.to_string().contains("alternate user and assistant"), "{e}");
    // With the tiny Gemma 3 GGUF's vocabulary the end of turn is <end_of_turn> (id 5), and the
    // rendered text tokenizes to the turn markers' ids.
    let bytes = std::fs::read(data("tiny-gemma3/gguf/tiny-gemma3-Q4_K_M.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let t = ChatTemplate::for_tokenizer(GEMMA_TEMPLATE, &tok).unwrap();
    assert_eq!(t.end_of_turn_ids(&tok), [5]);
    let ids = tok.encode(&t.render(&[Message::new("user", "hi")], true).unwrap()).unwrap();
    assert_eq!(&ids[..2], [2, 4], "{ids:?}");
    // The same from Gemma's tokenizer.json, where <end_of_turn> is an added but not a
    // "special" token.
    let json = Tokenizer::from_file(&data("tiny-gemma3/tokenizer.json")).unwrap();
    let t = ChatTemplate::for_tokenizer(GEMMA_TEMPLATE, &json).unwrap();
    assert_eq!(t.end_of_turn_ids(&json), [5]);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 1, "one BOS: {ids:?}");
}

#[test]
fn python_methods_loop_controls_and_raise_exception_work_as_in_transformers() {
    let src = std::fs::read_to_string(data("chat/pycompat.jinja")).unwrap();
    let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
    let msgs = [Message::new("user", "  Hi there?  "), Message::new("assistant", "Hello.")];
    assert_eq!(t.render(&msgs, true).unwrap(), PYCOMPAT);
    let e = t.render(&[Message::new("user", "/reset")], true).unwrap_err();
    assert!(e.to_string().contains("commands are not messages: /reset"), "{e}");
}

#[test]
fn a_broken_template_is_an_error_with_its_cause() {
    let e = ChatTemplate::new("{% for m in messages %}{{ m.content }}", "", "").unwrap_err();
    assert_eq!(e.code(), rml::Code::InvalidArgument);
    assert!(e.to_string().contains("chat template"), "{e}");
}
