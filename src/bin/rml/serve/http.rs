//! The HTTP side of `rml serve`: axum routes, authentication, the body limit, the bounded
//! queue, and OpenAI's response objects (`chat.completion`, `chat.completion.chunk`,
//! `text_completion`, `list` of `model`) as JSON or server-sent events.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use rml::{Error, Result};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::engine::{EmbedJob, Event, Job, Timings, TokenLogprob, Usage};
use super::request::{self, ApiError, Endpoint, Request};
use super::{Shared, GRACE};

type S = State<Arc<Shared>>;

/// An OpenAI error body with its status (and `Retry-After` on a 503 from a full queue).
fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], e.body()).into_response();
    if e.status == 503 {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

fn json_response(v: &Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Checks `Authorization: Bearer KEY` when `--api-key` is set.
fn authorize(s: &Shared, headers: &HeaderMap) -> core::result::Result<(), ApiError> {
    let Some(key) = &s.api_key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // Compare every byte, whatever the first difference.
    let same = given.is_some_and(|g| {
        g.len() == key.len() && g.bytes().zip(key.bytes()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    });
    if same {
        Ok(())
    } else {
        Err(ApiError::new(
            401,
            "authentication_error",
            Value::String("invalid_api_key".into()),
            if given.is_some() {
                "Incorrect API key provided"
            } else {
                "Missing API key: send the header 'Authorization: Bearer KEY'"
            },
        ))
    }
}

fn loading() -> ApiError {
    ApiError::new(503, "unavailable_error", json!(503), "Loading model")
}

/// The router of every endpoint.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(shared)
}

async fn not_found() -> Response {
    error_response(&ApiError::new(
        404,
        "not_found_error",
        Value::Null,
        "no such endpoint: rml serve answers /v1/chat/completions, /v1/completions, \
         /v1/models, /v1/embeddings, /health and /metrics",
    ))
}

async fn health(State(s): S) -> Response {
    if s.ready.load(Ordering::SeqCst) {
        json_response(&json!({"status": "ok"}))
    } else {
        error_response(&loading())
    }
}

async fn models(State(s): S, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&s, &headers) {
        return error_response(&e);
    }
    json_response(&json!({
        "object": "list",
        "data": [{
            "id": s.model_id,
            "object": "model",
            "created": unix_now(),
            "owned_by": "rml",
            "meta": {"context_length": s.context_len.load(Ordering::SeqCst), "slots": s.slots},
        }],
    }))
}

async fn embeddings(State(s): S, headers: HeaderMap, body: Body) -> Response {
    if let Err(e) = authorize(&s, &headers) {
        return error_response(&e);
    }
    if !s.ready.load(Ordering::SeqCst) {
        return error_response(&loading());
    }
    if !s.encoder.load(Ordering::SeqCst) {
        return error_response(&ApiError::invalid(
            "model",
            "this model does not produce embeddings (serve an encoder, a sentence-transformers \
             folder or a BERT GGUF, for /v1/embeddings)",
        ));
    }
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let req = match request::parse_embeddings(&bytes, &s.model_id) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = EmbedJob { input: req.input, reply: tx };
    let sent = s
        .embed_jobs
        .lock()
        .ok()
        .and_then(|j| j.as_ref().map(|j| j.send(job).is_ok()))
        .unwrap_or(false);
    if !sent {
        return error_response(&shutting_down());
    }
    let done = match rx.await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return error_response(&e),
        Err(_) => return error_response(&shutting_down()),
    };
    let data: Vec<Value> = done
        .vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let embedding = if req.base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    json_response(&json!({
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": done.tokens, "total_tokens": done.tokens},
    }))
}

fn shutting_down() -> ApiError {
    ApiError::new(503, "unavailable_error", Value::Null, "the server is shutting down")
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * k)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The body, at most `--max-body` bytes (413 past it).
async fn read_body(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> core::result::Result<axum::body::Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            413,
            "invalid_request_error",
            Value::Null,
            format!("the request body is over {} bytes (--max-body)", s.max_body),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body as u64) {
        return Err(too_big());
    }
    axum::body::to_bytes(body, s.max_body).await.map_err(|_| too_big())
}

async fn metrics(State(s): S) -> Response {
    if !s.metrics {
        return error_response(&ApiError::new(
            404,
            "not_found_error",
            Value::Null,
            "metrics are off: start rml serve with --metrics",
        ));
    }
    let secs = |us: u64| us as f64 / 1e6;
    let mut out = String::new();
    let mut put = |name: &str, kind: &str, help: &str, v: String| {
        out.push_str(&format!(
            "# HELP rml_{name} {help}\n# TYPE rml_{name} {kind}\nrml_{name} {v}\n"
        ));
    };
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    put(
        "prompt_tokens_total",
        "counter",
        "Prompt tokens run (KV-cache hits not counted).",
        l(&s.prompt_tokens).to_string(),
    );
    put(
        "prompt_seconds_total",
        "counter",
        "Seconds spent on prompt tokens.",
        secs(l(&s.prompt_us)).to_string(),
    );
    put("tokens_predicted_total", "counter", "Tokens generated.", l(&s.decode_tokens).to_string());
    put(
        "tokens_predicted_seconds_total",
        "counter",
        "Seconds spent generating.",
        secs(l(&s.decode_us)).to_string(),
    );
    put("requests_total", "counter", "Requests finished.", l(&s.requests).to_string());
    put(
        "requests_cancelled_total",
        "counter",
        "Requests whose client went away.",
        l(&s.cancelled).to_string(),
    );
    put(
        "requests_processing",
        "gauge",
        "Requests in a slot.",
        s.busy.load(Ordering::SeqCst).to_string(),
    );
    put(
        "requests_deferred",
        "gauge",
        "Requests waiting for a slot.",
        s.deferred.load(Ordering::SeqCst).to_string(),
    );
    put(
        "slots_busy",
        "gauge",
        "Slots serving a request.",
        s.busy.load(Ordering::SeqCst).to_string(),
    );
    put("slots_total", "gauge", "Slots (--parallel).", s.slots.to_string());
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn chat(state: S, headers: HeaderMap, body: Body) -> Response {
    complete(state, headers, body, Endpoint::Chat).await
}

async fn completions(state: S, headers: HeaderMap, body: Body) -> Response {
    complete(state, headers, body, Endpoint::Completion).await
}

/// What every chunk or answer of one request repeats.
struct Ids {
    id: String,
    created: u64,
    model: String,
    endpoint: Endpoint,
    include_usage: bool,
    logprobs: bool,
}

async fn complete(State(s): S, headers: HeaderMap, body: Body, endpoint: Endpoint) -> Response {
    if let Err(e) = authorize(&s, &headers) {
        return error_response(&e);
    }
    if !s.ready.load(Ordering::SeqCst) {
        return error_response(&loading());
    }
    if s.encoder.load(Ordering::SeqCst) {
        return error_response(&ApiError::invalid(
            "model",
            "this model is an encoder: it gives embeddings (/v1/embeddings), not text",
        ));
    }
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let req: Request = match request::parse(endpoint, &bytes, &s.model_id) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    // The queue: past --queue waiting requests (beyond the free slots) the answer is 503.
    let free = s.slots.saturating_sub(s.busy.load(Ordering::SeqCst));
    let waiting = s.queued.fetch_add(1, Ordering::SeqCst);
    if waiting >= s.queue_limit + free {
        s.queued.fetch_sub(1, Ordering::SeqCst);
        return error_response(&ApiError::new(
            503,
            "unavailable_error",
            Value::Null,
            format!(
                "the server is busy: {waiting} requests are waiting (--queue {})",
                s.queue_limit
            ),
        ));
    }
    let (tx, mut rx) = unbounded_channel();
    let ids = Ids {
        id: format!(
            "{}-{}",
            if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" },
            s.next_id.fetch_add(1, Ordering::Relaxed)
        ),
        created: unix_now(),
        model: req.model.clone(),
        endpoint,
        include_usage: req.include_usage,
        logprobs: req.logprobs,
    };
    let stream = req.stream;
    let sent = s
        .jobs
        .lock()
        .ok()
        .and_then(|j| j.as_ref().map(|j| j.send(Job { req, events: tx }).is_ok()))
        .unwrap_or(false);
    if !sent {
        s.queued.fetch_sub(1, Ordering::SeqCst);
        return error_response(&ApiError::new(
            503,
            "unavailable_error",
            Value::Null,
            "the server is shutting down",
        ));
    }
    match rx.recv().await {
        Some(Event::Started) => {}
        Some(Event::Refused(e) | Event::Failed(e)) => return error_response(&e),
        Some(_) | None => {
            return error_response(&ApiError::new(
                500,
                "server_error",
                Value::Null,
                "the scheduler ended the request",
            ))
        }
    }
    if stream {
        sse(rx, ids)
    } else {
        collect(rx, &ids).await
    }
}

/// The OpenAI `usage` object.
fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// llama-server's `timings` object (the field names its clients read): the model's own time
/// for the request (see [`Timings`]); rates are 0 where no time was measured.
fn timings_json(t: &Timings) -> Value {
    let per_second = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let per_token_ms = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
    json!({
        "cache_n": t.cache_n,
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": per_token_ms(t.prompt_n, t.prompt_ms),
        "prompt_per_second": per_second(t.prompt_n, t.prompt_ms),
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "predicted_per_token_ms": per_token_ms(t.predicted_n, t.predicted_ms),
        "predicted_per_second": per_second(t.predicted_n, t.predicted_ms),
    })
}

fn utf8_bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Chat logprobs: `{"content":[{"token","logprob","bytes","top_logprobs":[...]}]}`.
fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|t| {
            json!({
                "token": t.token,
                "logprob": t.logprob,
                "bytes": utf8_bytes(&t.token),
                "top_logprobs": t.top.iter().map(|(tok, lp)| json!({
                    "token": tok, "logprob": lp, "bytes": utf8_bytes(tok),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "content": content })
}

/// Completions logprobs: `{"tokens","token_logprobs","top_logprobs","text_offset"}`;
/// `offset` is the text length before these tokens.
fn completion_logprobs(lps: &[TokenLogprob], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(lps.len());
    for t in lps {
        text_offset.push(offset);
        offset += t.token.len();
    }
    json!({
        "tokens": lps.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|t| {
            t.top.iter().map(|(tok, lp)| (tok.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// The non-streaming answer: waits for the end and builds one object.
async fn collect(mut rx: UnboundedReceiver<Event>, ids: &Ids) -> Response {
    let mut text = String::new();
    let mut lps: Vec<TokenLogprob> = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Delta { text: t, logprobs }) => {
                text.push_str(&t);
                lps.extend(logprobs);
            }
            Some(Event::Done { finish_reason, usage, timings }) => {
                let choice = match ids.endpoint {
                    Endpoint::Chat => json!({
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": if ids.logprobs { chat_logprobs(&lps) } else { Value::Null },
                        "finish_reason": finish_reason,
                    }),
                    Endpoint::Completion => json!({
                        "index": 0,
                        "text": text,
                        "logprobs": if ids.logprobs { completion_logprobs(&lps, 0) } else { Value::Null },
                        "finish_reason": finish_reason,
                    }),
                };
                return json_response(&json!({
                    "id": ids.id,
                    "object": if ids.endpoint == Endpoint::Chat { "chat.completion" } else { "text_completion" },
                    "created": ids.created,
                    "model": ids.model,
                    "system_fingerprint": Value::Null,
                    "choices": [choice],
                    "usage": usage_json(&usage),
                    "timings": timings_json(&timings),
                }));
            }
            Some(Event::Failed(e) | Event::Refused(e)) => return error_response(&e),
            Some(Event::Started) => {}
            None => {
                return error_response(&ApiError::new(
                    500,
                    "server_error",
                    Value::Null,
                    "the scheduler ended the request",
                ))
            }
        }
    }
}

/// State of one SSE stream.
struct Sse {
    rx: UnboundedReceiver<Event>,
    ids: Ids,
    /// The first chunk (chat: the assistant role) is out.
    opened: bool,
    finished: bool,
    /// Text sent so far (completions' `text_offset`).
    offset: usize,
}

impl Sse {
    /// One `chat.completion.chunk` / `text_completion` chunk as an SSE event.
    fn chunk(
        &self,
        text: Option<&str>,
        lps: &[TokenLogprob],
        finish: Option<&str>,
        role: bool,
    ) -> String {
        format!("data: {}\n\n", self.chunk_value(text, lps, finish, role))
    }

    /// The JSON of one chunk.
    fn chunk_value(
        &self,
        text: Option<&str>,
        lps: &[TokenLogprob],
        finish: Option<&str>,
        role: bool,
    ) -> Value {
        let logprobs = if self.ids.logprobs && !lps.is_empty() {
            match self.ids.endpoint {
                Endpoint::Chat => chat_logprobs(lps),
                Endpoint::Completion => completion_logprobs(lps, self.offset),
            }
        } else {
            Value::Null
        };
        let choice = match self.ids.endpoint {
            Endpoint::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
            }
            Endpoint::Completion => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish,
            }),
        };
        let mut v = json!({
            "id": self.ids.id,
            "object": if self.ids.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.ids.created,
            "model": self.ids.model,
            "system_fingerprint": Value::Null,
            "choices": [choice],
        });
        if self.ids.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The frames for the next event (empty when it adds nothing).
    async fn next_frames(&mut self) -> String {
        let mut out = String::new();
        if !self.opened {
            self.opened = true;
            if self.ids.endpoint == Endpoint::Chat {
                out.push_str(&self.chunk(Some(""), &[], None, true));
                return out;
            }
        }
        match self.rx.recv().await {
            Some(Event::Delta { text, logprobs }) => {
                out.push_str(&self.chunk(Some(&text), &logprobs, None, false));
                self.offset += text.len();
            }
            Some(Event::Done { finish_reason, usage, timings }) => {
                // The last chunk before [DONE] (the usage chunk when asked) carries `timings`.
                let mut fin = self.chunk_value(None, &[], Some(finish_reason), false);
                if !self.ids.include_usage {
                    fin["timings"] = timings_json(&timings);
                }
                out.push_str(&format!("data: {fin}\n\n"));
                if self.ids.include_usage {
                    let v = json!({
                        "id": self.ids.id,
                        "object": if self.ids.endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" },
                        "created": self.ids.created,
                        "model": self.ids.model,
                        "system_fingerprint": Value::Null,
                        "choices": [],
                        "usage": usage_json(&usage),
                        "timings": timings_json(&timings),
                    });
                    out.push_str(&format!("data: {v}\n\n"));
                }
                out.push_str("data: [DONE]\n\n");
                self.finished = true;
            }
            Some(Event::Failed(e) | Event::Refused(e)) => {
                out.push_str(&format!("data: {}\n\n", e.body()));
                self.finished = true;
            }
            Some(Event::Started) => {}
            None => {
                let e = ApiError::new(
                    500,
                    "server_error",
                    Value::Null,
                    "the scheduler ended the request",
                );
                out.push_str(&format!("data: {}\n\n", e.body()));
                self.finished = true;
            }
        }
        out
    }
}

/// The streaming answer: `text/event-stream`, one `data:` event per new piece, the last chunk
/// with `finish_reason`, the usage chunk when asked, then `data: [DONE]`.
fn sse(rx: UnboundedReceiver<Event>, ids: Ids) -> Response {
    let st = Sse { rx, ids, opened: false, finished: false, offset: 0 };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        let frames = st.next_frames().await;
        Some((Ok::<_, Infallible>(frames.into_bytes()), st))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| {
            error_response(&ApiError::new(500, "server_error", Value::Null, "response"))
        })
}

/// Resolves on SIGINT or SIGTERM.
async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Serves `listener` until SIGINT / SIGTERM (or until the model fails to load, which is
/// returned).
///
/// # Errors
///
/// The model's load error, or an I/O error of the listener.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    loaded: tokio::sync::oneshot::Receiver<Result<()>>,
) -> Result<()> {
    let app = router(Arc::clone(&shared));
    let failure: Arc<std::sync::Mutex<Option<Error>>> = Arc::default();
    let stopping = Arc::new(tokio::sync::Notify::new());
    let stop = {
        let (shared, failure, stopping) =
            (Arc::clone(&shared), Arc::clone(&failure), Arc::clone(&stopping));
        async move {
            let load_failed = async {
                match loaded.await {
                    Ok(Ok(())) => std::future::pending::<()>().await,
                    Ok(Err(e)) => {
                        if let Ok(mut f) = failure.lock() {
                            *f = Some(e);
                        }
                    }
                    Err(_) => {
                        if let Ok(mut f) = failure.lock() {
                            *f = Some(Error::invalid_argument("the model failed to load"));
                        }
                    }
                }
            };
            tokio::select! {
                () = signal() => eprintln!("rml: shutting down (requests in flight get {} s)", GRACE.as_secs()),
                () = load_failed => {}
            }
            if let Ok(mut t) = shared.shutdown_at.lock() {
                t.get_or_insert_with(Instant::now);
            }
            stopping.notify_one();
        }
    };
    // Small writes (an SSE event per token, a short JSON answer) leave at once, not after the
    // client's delayed ACK of the previous one (Nagle's algorithm off).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(stop);
    let deadline = async {
        stopping.notified().await;
        tokio::time::sleep(GRACE + std::time::Duration::from_secs(2)).await;
    };
    tokio::select! {
        r = server => r.map_err(|e| Error::from(e).context("serving HTTP"))?,
        () = deadline => eprintln!("rml: connections still open after the grace period: closing them"),
    }
    let failed = failure.lock().ok().and_then(|mut f| f.take());
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_of_rfc4648_vectors() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(raw.as_bytes()), enc);
        }
    }
}
