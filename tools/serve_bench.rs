//! Load generator for OpenAI-compatible servers (`rml serve`, llama-server): for each stream
//! count, that many concurrent streaming `/v1/completions` requests (different prompts, greedy,
//! `--tokens` new tokens each), and per count the aggregate generated tokens/s, the median
//! time to first token and the p50 / p99 time between tokens.
//!
//! ```text
//! cargo run --release --features server --example serve_bench -- http://127.0.0.1:8080 \
//!     [--streams 1,2,4,8] [--tokens 128] [--model ID] [--rounds R]
//! ```
//!
//! The client is std only (HTTP/1.1 over `TcpStream`, one connection per request); the token
//! count of a request is its usage chunk's `completion_tokens` when the server sends one, else
//! its number of content events. Run it with the server alone on the machine: figures taken
//! while other work runs are ratios at best (compare two servers in the same run).

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

fn request(addr: &str, model: &str, prompt: &str, tokens: usize) -> Trace {
    // Without --model the field is left out (rml serve takes its one model; llama-server any).
    let model = if model.is_empty() { String::new() } else { format!(r#""model":"{model}","#) };
    let body = format!(
        r#"{{{model}"prompt":"{prompt}","max_tokens":{tokens},"temperature":0,"stream":true,"stream_options":{{"include_usage":true}}}}"#
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
            if event.starts_with("[DONE]") {
                continue;
            }
            if let Some(u) = event.find("\"completion_tokens\":") {
                let rest = &event[u + 20..];
                usage_tokens =
                    rest.split(|c: char| !c.is_ascii_digit()).next().and_then(|d| d.parse().ok());
            }
            if event.contains("\"text\":\"") && !event.contains("\"text\":\"\"") {
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
    let model = opt("--model").unwrap_or_default();
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
