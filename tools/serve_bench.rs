//! Load generator for OpenAI-compatible servers (`rml serve`, llama-server), in two modes.
//!
//! Streams (the default): for each stream count, that many concurrent streaming
//! `/v1/completions` requests (different prompts, greedy, `--tokens` new tokens each), and per
//! count the aggregate generated tokens/s, the median time to first token and the p50 / p99
//! time between tokens.
//!
//! Overhead (`--overhead N`): N sequential non-streaming 1-token `/v1/completions` requests
//! (the same prompt each time, over one keep-alive connection, after one warm-up request), and
//! the median round trip, the median model time the server reports in its llama-server-style
//! `timings` object (`prompt_ms + predicted_ms`), and the median of the per-request
//! differences: what the server adds to the model's own time (HTTP, JSON, tokenizing, the
//! scheduler's hand-offs).
//!
//! ```text
//! cargo run --release --features server --example serve_bench -- http://127.0.0.1:8080 \
//!     [--streams 1,2,4,8] [--tokens 128] [--rounds R] [--model ID] [--overhead N] [--wait S]
//! ```
//!
//! Before the first request it waits (up to `--wait` seconds, default 600) for `GET /health`
//! to answer 200: both servers answer 503 while they load the model. The client is std only
//! (HTTP/1.1 over `TcpStream`; the streams mode opens one connection per request); the token
//! count of a stream is its usage chunk's `completion_tokens` when the server sends one, else
//! its number of content events. Without `--model` the request names no model (rml serve and
//! llama-server each serve the one they loaded). Run it with the server alone on the machine:
//! figures taken while other work runs are ratios at best (compare two servers in the same run).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// What one request saw.
struct Trace {
    start: Instant,
    first: Option<Instant>,
    arrivals: Vec<Instant>,
    end: Instant,
    tokens: usize,
}

/// `"model":"ID",` or nothing.
fn model_field(model: &str) -> String {
    if model.is_empty() {
        String::new()
    } else {
        format!(r#""model":{},"#, serde_json::Value::from(model))
    }
}

fn request(addr: &str, model: &str, prompt: &str, tokens: usize) -> Trace {
    let body = format!(
        r#"{{{}"prompt":{},"max_tokens":{tokens},"temperature":0,"stream":true,"stream_options":{{"include_usage":true}}}}"#,
        model_field(model),
        serde_json::Value::from(prompt)
    );
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(600))).ok();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write");
    s.write_all(body.as_bytes()).expect("write");
    let mut raw: Vec<u8> = Vec::new();
    let mut scanned = 0usize;
    let mut arrivals = Vec::new();
    let mut usage_tokens = None;
    let mut buf = [0u8; 8192];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        raw.extend_from_slice(&buf[..n]);
        // Events are found by their `data: ` prefix (chunk-size lines in between are skipped).
        while let Some(at) = find(&raw[scanned..], b"data: ") {
            let from = scanned + at + 6;
            let Some(len) = find(&raw[from..], b"\n\n") else { break };
            let event = String::from_utf8_lossy(&raw[from..from + len]).into_owned();
            scanned = from + len + 2;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&event) else { continue };
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                usage_tokens = Some(n as usize);
            }
            let texts = v["choices"].as_array().into_iter().flatten();
            if texts.filter_map(|c| c["text"].as_str()).any(|t| !t.is_empty()) {
                arrivals.push(now);
            }
        }
    }
    let end = Instant::now();
    Trace {
        start,
        first: arrivals.first().copied(),
        tokens: usage_tokens.unwrap_or(arrivals.len()),
        arrivals,
        end,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A response: status, whether the server keeps the connection open, body.
struct Response {
    status: u16,
    keep_alive: bool,
    body: Vec<u8>,
}

/// Sends one request on `s` and reads its response (a `Content-Length` or chunked body, else
/// the bytes up to the close).
fn exchange(s: &mut TcpStream, method: &str, path: &str, body: &[u8]) -> std::io::Result<Response> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let head_end = loop {
        if let Some(at) = find(&raw, b"\r\n\r\n") {
            break at + 4;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let header = |name: &str| {
        head.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim_start_matches(':').trim()))
    };
    let keep_alive = header("connection") != Some("close");
    let mut body = raw.split_off(head_end);
    let mut fill = |body: &mut Vec<u8>, want: usize| -> std::io::Result<()> {
        while body.len() < want {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            body.extend_from_slice(&buf[..n]);
        }
        Ok(())
    };
    if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        fill(&mut body, len)?;
        body.truncate(len);
        return Ok(Response { status, keep_alive, body });
    }
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let line_end = loop {
                if let Some(e) = find(&body[at..], b"\r\n") {
                    break at + e;
                }
                let want = body.len() + 1;
                fill(&mut body, want)?;
            };
            let size_text = String::from_utf8_lossy(&body[at..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| std::io::Error::other("bad chunk size"))?;
            fill(&mut body, line_end + 2 + size + 2)?;
            out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
            at = line_end + 2 + size + 2;
            if size == 0 {
                return Ok(Response { status, keep_alive, body: out });
            }
        }
    }
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(Response { status, keep_alive: false, body });
        }
        body.extend_from_slice(&buf[..n]);
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(Duration::from_secs(600))).ok();
    s
}

/// Waits until `GET /health` answers 200 (the server has loaded its model).
fn wait_ready(addr: &str, limit: Duration) {
    let t0 = Instant::now();
    let mut said = false;
    loop {
        let status = TcpStream::connect(addr)
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                exchange(&mut s, "GET", "/health", b"")
            })
            .map(|r| r.status);
        if let Ok(200) = status {
            if said {
                eprintln!("serve_bench: ready after {:.1} s", t0.elapsed().as_secs_f64());
            }
            return;
        }
        if !said {
            eprintln!("serve_bench: waiting for {addr}/health to answer 200 ({status:?})");
            said = true;
        }
        assert!(t0.elapsed() < limit, "{addr}/health not 200 after {limit:?}: {status:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--overhead N`: sequential 1-token completions; round trip against the reported model time.
fn overhead(addr: &str, model: &str, n: usize) {
    let body = format!(
        r#"{{{}"prompt":"The capital of France is","max_tokens":1,"temperature":0}}"#,
        model_field(model)
    );
    let mut conn = connect(addr);
    // (round trip, model time) in ms; a connection the server closed is replaced.
    let mut one = || -> (f64, f64) {
        let t0 = Instant::now();
        let r = match exchange(&mut conn, "POST", "/v1/completions", body.as_bytes()) {
            Ok(r) => r,
            Err(_) => {
                conn = connect(addr);
                return (f64::NAN, f64::NAN);
            }
        };
        let rtt = t0.elapsed().as_secs_f64() * 1e3;
        if !r.keep_alive {
            conn = connect(addr);
        }
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("a JSON answer");
        let t = &v["timings"];
        let (Some(p), Some(g)) = (t["prompt_ms"].as_f64(), t["predicted_ms"].as_f64()) else {
            panic!("the answer has no timings.prompt_ms / predicted_ms: {text}");
        };
        (rtt, p + g)
    };
    let _warm = one();
    let (mut rtts, mut models, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    let mut lost = 0;
    while rtts.len() < n {
        let (rtt, model_ms) = one();
        // NaN: the kept-alive connection had been closed; that request does not count.
        if rtt.is_nan() {
            lost += 1;
            assert!(lost < 3 + n / 10, "{lost} requests failed on {addr}");
            continue;
        }
        rtts.push(rtt);
        models.push(model_ms);
        diffs.push(rtt - model_ms);
    }
    let min = diffs.iter().copied().fold(f64::INFINITY, f64::min);
    println!("requests  rtt_p50_ms  model_p50_ms  overhead_p50_ms  overhead_min_ms");
    println!(
        "{n:>8}  {:>10.3}  {:>12.3}  {:>15.3}  {min:>15.3}",
        percentile(&mut rtts, 0.5),
        percentile(&mut models, 0.5),
        percentile(&mut diffs, 0.5),
    );
}

const TOPICS: [&str; 8] = [
    "a dragon",
    "the sea",
    "a robot",
    "a small town",
    "winter",
    "a lost key",
    "the moon",
    "a baker",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().cloned().unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let opt =
        |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let streams: Vec<usize> = opt("--streams")
        .unwrap_or_else(|| "1,2,4,8".into())
        .split(',')
        .map(|s| s.parse().expect("--streams"))
        .collect();
    let tokens: usize = opt("--tokens").map_or(128, |t| t.parse().expect("--tokens"));
    let rounds: usize = opt("--rounds").map_or(1, |t| t.parse().expect("--rounds"));
    let wait: u64 = opt("--wait").map_or(600, |t| t.parse().expect("--wait"));
    let model = opt("--model").unwrap_or_default();
    wait_ready(&addr, Duration::from_secs(wait));
    if let Some(n) = opt("--overhead") {
        overhead(&addr, &model, n.parse().expect("--overhead"));
        return;
    }
    println!("streams  tok/s  ttft_p50_ms  itl_p50_ms  itl_p99_ms  tokens");
    for &n in &streams {
        let mut traces = Vec::new();
        let t0 = Instant::now();
        for round in 0..rounds {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (addr, model) = (addr.clone(), model.clone());
                    let prompt = format!(
                        "Once upon a time, a story about {} (number {}) began like this:",
                        TOPICS[i % TOPICS.len()],
                        round * n + i
                    );
                    std::thread::spawn(move || request(&addr, &model, &prompt, tokens))
                })
                .collect();
            traces.extend(handles.into_iter().map(|h| h.join().expect("request thread")));
        }
        let wall = traces.iter().map(|t| t.end).max().unwrap().duration_since(t0).as_secs_f64();
        let total: usize = traces.iter().map(|t| t.tokens).sum();
        let mut ttft: Vec<f64> = traces
            .iter()
            .filter_map(|t| t.first.map(|f| f.duration_since(t.start).as_secs_f64() * 1e3))
            .collect();
        let mut gaps: Vec<f64> = traces
            .iter()
            .flat_map(|t| {
                t.arrivals.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e3)
            })
            .collect();
        let p99 = percentile(&mut gaps, 0.99);
        println!(
            "{n:>7}  {:>5.1}  {:>11.1}  {:>10.1}  {:>10.1}  {total}",
            total as f64 / wall,
            percentile(&mut ttft, 0.5),
            percentile(&mut gaps, 0.5),
            p99
        );
    }
}
