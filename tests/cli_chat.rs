//! `rml chat` (feature `cli`) with SmolLM2-135M-Instruct's GGUF and its own template, and with
//! the real Gemma 3 270M (a base model whose GGUF carries no template: rml says so in one line
//! and uses Gemma's turn format): scripted sessions through stdin, one message per line. The
//! second turn prefills only its own tokens (the first turn and the reply stay in the KV
//! cache), replies end at the template's end-of-turn token, `/reset` starts over, `--stop` cuts
//! a reply, a full context is a message. A model file that cannot be found fails the test with
//! the steps to fetch it (tests/common/smollm2.rs, tests/common/gemma3.rs).
#![cfg(feature = "cli")]

mod decoder_common;
#[path = "common/gemma3.rs"]
mod gemma3;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use decoder_common::{data, smollm2_gguf};
use rml::tokenizer::{ChatTemplate, Message, Tokenizer};

fn chat(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .arg("chat")
        .args(args)
        .env_remove("RML_MODEL")
        .env("RML_TUNE", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Per turn: (prefilled, reused, reply tokens, how the reply ended) from the `-v` lines.
fn turns(stderr: &str) -> Vec<(usize, usize, usize, String)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("rml: prefilled "))
        .map(|l| {
            let num = |after: &str| -> usize {
                let rest = &l[l.find(after).unwrap() + after.len()..];
                rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
            };
            let prefilled = l.split(' ').next().unwrap().parse().unwrap();
            let reused = num(" tokens (");
            let reply = num("reply ");
            let ended = l[l.find("ended by ").unwrap() + 9..].to_string();
            (prefilled, reused, reply, ended)
        })
        .collect()
}

const Q1: &str = "What is the capital of France?";
const Q2: &str = "And of Italy?";

#[test]
fn second_turn_prefills_only_its_own_tokens() {
    let gguf = smollm2_gguf();
    let o = chat(
        &["--model", gguf.to_str().unwrap(), "-v", "--context", "512", "-n", "64"],
        &format!("{Q1}\n{Q2}\n/reset\n{Q1}\n"),
    );
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let t = turns(&err);
    assert_eq!(t.len(), 3, "{err}");
    let replies: Vec<&str> = out.lines().collect();
    assert_eq!(replies.len(), 3, "{out}");

    // What the template adds for each turn, tokenized as the GGUF's vocabulary does (the
    // tokenizer.json transformers rebuilt from it gives the same ids).
    let tok = Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap();
    let tmpl = ChatTemplate::for_tokenizer(tok.chat_template().unwrap(), &tok).unwrap();
    let first = tok.encode(&tmpl.render(&[Message::new("user", Q1)], true).unwrap()).unwrap();
    let second_turn =
        format!("<|im_end|>\n<|im_start|>user\n{Q2}<|im_end|>\n<|im_start|>assistant\n");
    let second = tok.encode(&second_turn).unwrap();

    // Turn 1: the whole rendered conversation (SmolLM2's default system turn included).
    assert_eq!((t[0].0, t[0].1), (first.len(), 0), "{err}");
    // Turn 2: only the end of the reply's turn and the new user turn; the first turn and the
    // reply come from the KV cache.
    assert_eq!((t[1].0, t[1].1), (second.len(), first.len() + t[0].2), "{err}");
    // Every reply ended at <|im_end|>, which is not printed.
    for (i, turn) in t.iter().enumerate() {
        assert_eq!(turn.3, "end of turn", "turn {i}: {err}");
        assert!(!replies[i].contains("<|im_"), "{out}");
        assert!(!replies[i].trim().is_empty(), "{out}");
    }
    assert!(replies[0].contains("Paris"), "{out}");
    // After /reset the conversation starts over: same prefill, nothing reused, same reply.
    assert_eq!((t[2].0, t[2].1), (first.len(), 0), "{err}");
    assert_eq!(replies[2], replies[0]);
    assert!(err.contains("conversation cleared"), "{err}");
}

/// Gemma 3 270M Q4_K_M (no template in the file): the fallback template's notice, the rendered
/// format `<bos><start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`, and the same
/// two-turn checks as SmolLM2's.
#[test]
fn gemma3_270m_two_turns_with_the_fallback_template() {
    const G1: &str = "What is the capital of France?";
    const G2: &str = "What is the capital of Germany?";
    let path = gemma3::gemma3_gguf();
    let o = chat(
        &["--model", path.to_str().unwrap(), "-v", "--context", "512", "-n", "64"],
        &format!("{G1}\n{G2}\n"),
    );
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let notices: Vec<&str> =
        err.lines().filter(|l| l.contains("carries no chat template")).collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(notices[0].contains("gemma3"), "{err}");
    let t = turns(&err);
    assert_eq!(t.len(), 2, "{err}");
    let replies: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();

    // The GGUF's own SentencePiece vocabulary and Gemma's template, as rml chat uses them.
    let model = rml::load::Model::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.gguf().unwrap().unwrap()).unwrap();
    let tmpl =
        ChatTemplate::for_tokenizer(rml::tokenizer::chat::family_template("gemma3").unwrap(), &tok)
            .unwrap();
    let text = tmpl.render(&[Message::new("user", G1)], true).unwrap();
    assert_eq!(
        text,
        format!("<bos><start_of_turn>user\n{G1}<end_of_turn>\n<start_of_turn>model\n")
    );
    let first = tok.encode(&text).unwrap();
    let second = tok
        .encode(&format!(
            "<end_of_turn>\n<start_of_turn>user\n{G2}<end_of_turn>\n<start_of_turn>model\n"
        ))
        .unwrap();
    let eot = tok.token_to_id("<end_of_turn>").unwrap();
    assert_eq!(second[0], eot, "<end_of_turn> is one special token");

    // Turn 1: the whole rendered conversation.
    assert_eq!((t[0].0, t[0].1), (first.len(), 0), "{err}");
    // Turn 2: only the end of the reply's turn and the new user turn; the first turn and the
    // reply come from the KV cache.
    assert_eq!((t[1].0, t[1].1), (second.len(), first.len() + t[0].2), "{err}");
    for (i, turn) in t.iter().enumerate() {
        assert_eq!(turn.3, "end of turn", "turn {i}: {err}");
        assert!(turn.2 > 0, "turn {i}: empty reply: {err}");
    }
    assert!(!out.contains("<end_of_turn>") && !out.contains("<start_of_turn>"), "{out}");
    eprintln!("Gemma 3 270M replies: {replies:?}");
}

#[test]
fn system_stop_strings_and_a_full_context() {
    let gguf = smollm2_gguf();
    let g = gguf.to_str().unwrap();
    // --system replaces the template's default system turn: the prefill is the rendered
    // conversation with it.
    let o = chat(
        &[
            "--model",
            g,
            "-v",
            "--context",
            "512",
            "-n",
            "64",
            "--system",
            "Be brief.",
            "--stop",
            "Paris",
        ],
        &format!("{Q1}\n"),
    );
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    let tok = Tokenizer::from_file(&data("smollm2-135m/tokenizer.json")).unwrap();
    let tmpl = ChatTemplate::for_tokenizer(tok.chat_template().unwrap(), &tok).unwrap();
    let msgs = [Message::new("system", "Be brief."), Message::new("user", Q1)];
    let want = tok.encode(&tmpl.render(&msgs, true).unwrap()).unwrap().len();
    let t = turns(&err);
    assert_eq!(t.len(), 1, "{err}");
    assert_eq!(t[0].0, want, "{err}");
    assert_eq!(t[0].3, "stop string", "{err}");
    assert!(!out.contains("Paris"), "{out}");
    assert!(!out.contains("helpful AI assistant"), "{out}");

    // A message that cannot fit: a clear message, the session goes on and ends normally.
    let long = "word ".repeat(40);
    let o = chat(&["--model", g, "--context", "32"], &format!("{long}\n"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("context full"), "{err}");
    assert!(err.contains("the context holds 32"), "{err}");
}

/// Ctrl-C (SIGINT) while a reply streams ends that reply; the session goes on with the next
/// message, whose turn rewinds nothing it still shares with the cache.
#[cfg(unix)]
#[test]
fn ctrl_c_ends_the_reply_not_the_session() {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::Duration;

    let gguf = smollm2_gguf();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["chat", "--model", gguf.to_str().unwrap(), "-v", "--context", "1024", "-n", "900"])
        .env_remove("RML_MODEL")
        .env("RML_TUNE", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    stdin.write_all(b"Write a very long story about a dragon who learns to bake bread.\n").unwrap();
    stdin.flush().unwrap();
    // The reply is streaming: interrupt it.
    let mut out = rx.recv_timeout(Duration::from_secs(300)).expect("no reply within 300 s");
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    stdin.write_all(format!("{Q1}\n").as_bytes()).unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    reader.join().unwrap();
    out.extend(rx.try_iter().flatten());
    let out = String::from_utf8_lossy(&out);
    assert!(status.success(), "{status:?} {err}");
    assert!(err.contains("rml: reply interrupted"), "{err}");
    let t = turns(&err);
    assert_eq!(t.len(), 2, "{err}");
    assert_eq!(t[0].3, "Ctrl-C", "{err}");
    assert!(t[0].2 < 900, "{err}");
    assert_eq!(t[1].3, "end of turn", "{err}");
    assert!(out.lines().last().unwrap().contains("Paris"), "{out}");
}
