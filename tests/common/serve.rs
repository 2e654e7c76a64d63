// Shared by `serve.rs` and `serve_openai.rs`: a running `rml serve` on SmolLM2 and a minimal
// HTTP/1.1 client over `TcpStream` (Content-Length and chunked bodies, SSE events).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::decoder_common::smollm2_gguf;

/// Polls `poll` every `every` until it gives `Some`, and returns that. A hang guard, not a
/// speed bound: past `limit` (minutes, far beyond any normal wait on a loaded machine) the
/// test fails with `what()` instead of hanging CI.
pub fn wait_for<T>(
    limit: Duration,
    every: Duration,
    mut poll: impl FnMut() -> Option<T>,
    what: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = poll() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("gave up after {limit:?}: {}", what());
        }
        std::thread::sleep(every);
    }
}

/// A running `rml serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `rml serve` on SmolLM2 with `args` and waits until /health says ready.
    pub fn start(args: &[&str]) -> Server {
        Server::start_model(&smollm2_gguf(), args)
    }

    /// Starts `rml serve` on `model` with `args` and waits until /health says ready.
    pub fn start_model(model: &std::path::Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rml"))
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args(["--port", "0", "-t", "1"])
            .args(args)
            .env("RML_TUNE", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut addr = None;
        let mut first = String::new();
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap() > 0 {
            first.push_str(&line);
            if let Some(rest) = line.trim().strip_prefix("rml: listening on http://") {
                addr = Some(rest.split(' ').next().unwrap().to_string());
                break;
            }
            line.clear();
        }
        let addr = addr.unwrap_or_else(|| panic!("rml serve did not start: {first}"));
        let log = Arc::new(Mutex::new(first));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = lines.read_to_string(&mut rest);
            sink.lock().unwrap().push_str(&rest);
        });
        let server = Server { child, addr, log };
        let ready = || {
            let r = server.get("/health");
            if r.status == 200 {
                assert_eq!(r.json(), json!({"status": "ok"}));
                return Some(());
            }
            assert_eq!(r.status, 503, "{}", r.text());
            assert_eq!(r.json()["error"]["message"], "Loading model");
            None
        };
        let not_ready = || format!("not ready: {}", server.log());
        wait_for(Duration::from_secs(120), Duration::from_millis(50), ready, not_ready);
        server
    }

    /// Waits for the process to exit (after a signal) and returns its status; fails the test
    /// with the server's log after `limit` (a hang guard, see [`wait_for`]).
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let (child, log) = (&mut self.child, &self.log);
        let exited = || child.try_wait().unwrap();
        let running = || format!("still running: {}", log.lock().unwrap());
        wait_for(limit, Duration::from_millis(50), exited, running)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str) -> Reply {
        http(&self.addr, "GET", path, &[], b"")
    }

    /// POSTs `body` (JSON) with the API key `k`.
    pub fn post(&self, path: &str, body: &Value) -> Reply {
        http(
            &self.addr,
            "POST",
            path,
            &[("Authorization", "Bearer k")],
            body.to_string().as_bytes(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The `data:` events of an SSE body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s
}

pub fn write_request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
}

/// Splits a whole response into status, headers and (de-chunked) body.
pub fn parse_reply(raw: &[u8]) -> Reply {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("no header end");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        let mut body = Vec::new();
        // A body cut short (the server went away) keeps what arrived.
        while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap().trim(), 16)
                .unwrap();
            rest = &rest[nl + 2..];
            if size == 0 || rest.len() < size {
                break;
            }
            body.extend_from_slice(&rest[..size]);
            rest = rest.get(size + 2..).unwrap_or(&[]);
        }
        body
    } else {
        rest.to_vec()
    };
    Reply { status, headers, body }
}

/// One request on a fresh connection, read to its end.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut s = connect(addr);
    write_request(&mut s, method, path, headers, body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_reply(&raw)
}

/// `rml generate`'s reply to `prompt`, greedy, `n` tokens (chat template when `chat`).
pub fn generate(prompt: &str, n: usize, chat: bool) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rml"));
    cmd.arg("generate")
        .arg("-m")
        .arg(smollm2_gguf())
        .args(["-p", prompt, "-n", &n.to_string(), "--temperature", "0", "-t", "1"])
        .env("RML_TUNE", "off");
    if chat {
        cmd.arg("--chat");
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let out = out.strip_suffix('\n').unwrap();
    if chat {
        out.to_string()
    } else {
        out.strip_prefix(prompt).unwrap().to_string()
    }
}
