//! Request bodies of `rml serve`: JSON bytes → a validated [`Request`], or the OpenAI error
//! ([`ApiError`]) that answers them.
//!
//! Pure (no I/O, no model): the HTTP handlers call [`parse`] with the body and the served
//! model's id, and the fuzz target `serve_request` (fuzz/) includes this file as a module of
//! its own, so it depends on nothing but `std` and `serde_json`. What needs the model (the
//! prompt's length in tokens against the context, token ids against the vocabulary) is checked
//! by the server after tokenizing.
//!
//! The fields follow OpenAI's chat-completions and completions request bodies
//! (<https://platform.openai.com/docs/api-reference/chat/create>): `model`, `messages` /
//! `prompt`, `max_tokens` / `max_completion_tokens`, `temperature` (0..=2), `top_p` (0..=1),
//! `seed`, `stop` (a string or up to 4 strings), `presence_penalty` / `frequency_penalty`
//! (-2..=2), `n` (only 1), `stream`, `stream_options.include_usage`, `logprobs` /
//! `top_logprobs` (chat: a bool and 0..=20; completions: an integer 0..=5), plus two fields
//! llama-server also takes, `top_k` and `repeat_penalty`. Unknown fields are ignored (clients
//! send `user`, `metadata`, ...), as OpenAI does.

use serde_json::{Map, Value};

/// At most this many stop strings (OpenAI's limit).
pub const MAX_STOP: usize = 4;
/// `top_logprobs` of a chat request: at most 20 (OpenAI's limit).
pub const MAX_TOP_LOGPROBS_CHAT: usize = 20;
/// `logprobs` of a completions request: at most 5 (OpenAI's limit).
pub const MAX_LOGPROBS_COMPLETION: usize = 5;

/// An error answered with the OpenAI error body
/// `{"error":{"message","type","param","code"}}` and an HTTP status.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status (4xx for the client's mistakes, 5xx for the server's).
    pub status: u16,
    /// A sentence for a person: what is wrong and, where it helps, what was expected.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `server_error`, `unavailable_error`.
    pub kind: &'static str,
    /// The request field at fault, if one is (`messages[1].content`, `temperature`, ...).
    pub param: Option<String>,
    /// OpenAI's `code`: a string such as `model_not_found`, or (for `/health`, as
    /// llama-server) the status as a number; `null` when none.
    pub code: Value,
}

impl ApiError {
    /// A 400 `invalid_request_error` naming `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: Value::Null,
        }
    }

    /// A 400 `invalid_request_error` about the whole body.
    pub fn bad_body(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: Value::Null,
        }
    }

    /// An error of any status, type and code, without a param.
    pub fn new(status: u16, kind: &'static str, code: Value, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), kind, param: None, code }
    }

    /// The body: `{"error":{"message":..,"type":..,"param":..,"code":..}}`.
    pub fn body(&self) -> String {
        let mut e = Map::new();
        e.insert("message".into(), Value::String(self.message.clone()));
        e.insert("type".into(), Value::String(self.kind.into()));
        e.insert("param".into(), self.param.clone().map_or(Value::Null, Value::String));
        e.insert("code".into(), self.code.clone());
        let mut top = Map::new();
        top.insert("error".into(), Value::Object(e));
        Value::Object(top).to_string()
    }
}

/// Which endpoint a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`: `messages`.
    Chat,
    /// `POST /v1/completions`: `prompt`.
    Completion,
}

/// One chat message, its content flattened to text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant` (`developer` is read as `system`).
    pub role: String,
    /// The text (content parts of type `text` joined with no separator).
    pub content: String,
}

/// What the model continues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// A conversation, rendered with the model's chat template.
    Chat(Vec<ChatMessage>),
    /// Raw text (completions).
    Text(String),
    /// Token ids (completions; checked against the vocabulary by the server).
    Tokens(Vec<u32>),
}

/// Sampling settings, each within OpenAI's range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0..=2; 0 is greedy. Default 1 (OpenAI's).
    pub temperature: f32,
    /// (0, 1]: nucleus mass (0 is read as greedy's "keep the top token", i.e. top_k 1).
    pub top_p: f32,
    /// Keep the K most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Seed of the random stream; `None`: a random one.
    pub seed: Option<u64>,
    /// -2..=2: subtracted once from the logit of every token already generated.
    pub presence_penalty: f32,
    /// -2..=2: subtracted from a token's logit once per time it was generated.
    pub frequency_penalty: f32,
    /// Hugging Face's repetition penalty (> 0; 1 is off) over prompt and reply.
    pub repeat_penalty: f32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repeat_penalty: 1.0,
        }
    }
}

/// A validated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The endpoint it came to.
    pub endpoint: Endpoint,
    /// The model named (the served model's id when the body names none).
    pub model: String,
    /// What to continue.
    pub prompt: Prompt,
    /// Tokens to generate at most (`max_completion_tokens`, else `max_tokens`); `None`: until
    /// the end of the turn or a full context.
    pub max_tokens: Option<usize>,
    /// Sampling settings.
    pub sampling: Sampling,
    /// Stop strings (non-empty, at most [`MAX_STOP`]); the reply ends before the first one.
    pub stop: Vec<String>,
    /// Answer as server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` before `[DONE]`.
    pub include_usage: bool,
    /// Return the log-probability of each generated token.
    pub logprobs: bool,
    /// Also the `top_logprobs` most likely alternatives at each position.
    pub top_logprobs: usize,
}

/// Parses and validates a request body for `endpoint`; `model_id` is the served model's id
/// (a body naming another model gets 404 `model_not_found`).
///
/// # Errors
///
/// An [`ApiError`] (400 unless said otherwise) for: a body that is not JSON or not an object;
/// a field of the wrong type or out of range (its `param` names it); no `messages` /
/// `prompt`, or an empty one; a message without a known role or text content; `n` other
/// than 1; `stream_options` without `stream`; `top_logprobs` without `logprobs`; more than
/// [`MAX_STOP`] or empty stop strings; an unknown model (404).
pub fn parse(endpoint: Endpoint, body: &[u8], model_id: &str) -> Result<Request, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_body(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_body(format!(
            "the request body must be a JSON object, got {}",
            type_name(&value)
        )));
    };
    let f = Fields(&obj);

    let model = check_model(f.string("model")?, model_id)?;

    let prompt = match endpoint {
        Endpoint::Chat => {
            if obj.contains_key("prompt") && !obj.contains_key("messages") {
                return Err(ApiError::invalid(
                    "messages",
                    "'messages' is required (this is /v1/chat/completions; a raw 'prompt' goes \
                     to /v1/completions)",
                ));
            }
            Prompt::Chat(messages(obj.get("messages"))?)
        }
        Endpoint::Completion => prompt(obj.get("prompt"))?,
    };

    let max_completion = f.count("max_completion_tokens")?;
    let max_tokens = match max_completion {
        Some(n) => Some(n),
        None => f.count("max_tokens")?,
    };
    if max_tokens == Some(0) {
        let p = if max_completion.is_some() { "max_completion_tokens" } else { "max_tokens" };
        return Err(ApiError::invalid(p, format!("'{p}' must be at least 1, got 0")));
    }

    let mut sampling = Sampling::default();
    if let Some(t) = f.number("temperature", 0.0, 2.0)? {
        sampling.temperature = t;
    }
    if let Some(p) = f.number("top_p", 0.0, 1.0)? {
        sampling.top_p = p;
    }
    if let Some(k) = f.count("top_k")? {
        sampling.top_k = k;
    }
    if sampling.top_p == 0.0 {
        // The smallest set reaching mass 0 is the top token alone.
        sampling.top_p = 1.0;
        sampling.top_k = 1;
    }
    sampling.seed = f.seed("seed")?;
    if let Some(p) = f.number("presence_penalty", -2.0, 2.0)? {
        sampling.presence_penalty = p;
    }
    if let Some(p) = f.number("frequency_penalty", -2.0, 2.0)? {
        sampling.frequency_penalty = p;
    }
    if let Some(r) = f.number("repeat_penalty", 0.0, 100.0)? {
        if r == 0.0 {
            return Err(ApiError::invalid("repeat_penalty", "'repeat_penalty' must be > 0, got 0"));
        }
        sampling.repeat_penalty = r;
    }

    if let Some(n) = f.count("n")? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("'n' must be 1 (this server returns one choice per request), got {n}"),
            ));
        }
    }
    if let Some(b) = f.count("best_of")? {
        if b != 1 {
            return Err(ApiError::invalid("best_of", format!("'best_of' must be 1, got {b}")));
        }
    }
    if f.boolean("echo")? == Some(true) {
        return Err(ApiError::invalid("echo", "'echo' is not supported: set it to false"));
    }
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid("suffix", "'suffix' (fill-in-the-middle) is not supported"));
    }

    let stop = stops(obj.get("stop"))?;
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if !stream {
                return Err(ApiError::invalid(
                    "stream_options",
                    "'stream_options' is only allowed when 'stream' is true",
                ));
            }
            match o.get("include_usage") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(wrong_type("stream_options.include_usage", "a boolean", v)),
            }
        }
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };

    let (logprobs, top_logprobs) = match endpoint {
        Endpoint::Chat => {
            let on = f.boolean("logprobs")?.unwrap_or(false);
            let top = f.count("top_logprobs")?;
            match top {
                Some(t) if t > MAX_TOP_LOGPROBS_CHAT => {
                    return Err(ApiError::invalid(
                        "top_logprobs",
                        format!("'top_logprobs' must be at most {MAX_TOP_LOGPROBS_CHAT}, got {t}"),
                    ))
                }
                Some(_) if !on => {
                    return Err(ApiError::invalid(
                        "top_logprobs",
                        "'top_logprobs' needs 'logprobs': true",
                    ))
                }
                _ => {}
            }
            (on, top.unwrap_or(0))
        }
        Endpoint::Completion => match f.count("logprobs")? {
            Some(n) if n > MAX_LOGPROBS_COMPLETION => {
                return Err(ApiError::invalid(
                    "logprobs",
                    format!("'logprobs' must be at most {MAX_LOGPROBS_COMPLETION}, got {n}"),
                ))
            }
            Some(n) => (true, n),
            None => (false, 0),
        },
    };

    Ok(Request {
        endpoint,
        model,
        prompt,
        max_tokens,
        sampling,
        stop,
        stream,
        include_usage,
        logprobs,
        top_logprobs,
    })
}

/// At most this many texts in one embeddings request (OpenAI's limit).
pub const MAX_EMBED_INPUTS: usize = 2048;

/// A validated `POST /v1/embeddings` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddingRequest {
    /// The model named (the served model's id when the body names none).
    pub model: String,
    /// The texts, one embedding each, in order.
    pub input: Vec<String>,
    /// `encoding_format: "base64"`: each vector as the base64 of its little-endian f32 bytes.
    pub base64: bool,
}

/// Parses and validates an embeddings body
/// (<https://platform.openai.com/docs/api-reference/embeddings/create>): `input` (a string or
/// up to [`MAX_EMBED_INPUTS`] strings, none empty), `model`, `encoding_format` (`float` or
/// `base64`); `dimensions` is refused (the model's width is the only one), `user` ignored.
///
/// # Errors
///
/// As [`parse`]: a 400 naming the field, 404 `model_not_found` for another model.
pub fn parse_embeddings(body: &[u8], model_id: &str) -> Result<EmbeddingRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_body(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_body(format!(
            "the request body must be a JSON object, got {}",
            type_name(&value)
        )));
    };
    let f = Fields(&obj);
    let model = check_model(f.string("model")?, model_id)?;
    let list: Vec<&Value> = match f.get("input") {
        None => return Err(ApiError::invalid("input", "'input' is required")),
        Some(v @ Value::String(_)) => vec![v],
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid("input", "'input' must not be empty"))
        }
        Some(Value::Array(a)) if a.len() > MAX_EMBED_INPUTS => {
            return Err(ApiError::invalid(
                "input",
                format!("'input' holds {} texts: at most {MAX_EMBED_INPUTS}", a.len()),
            ))
        }
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => return Err(wrong_type("input", "a string or an array of strings", v)),
    };
    let mut input = Vec::with_capacity(list.len());
    for (i, v) in list.into_iter().enumerate() {
        match v {
            Value::String(s) if s.is_empty() => {
                return Err(ApiError::invalid("input", "'input' texts must not be empty"))
            }
            Value::String(s) => input.push(s.clone()),
            Value::Number(_) | Value::Array(_) => {
                return Err(ApiError::invalid(
                    "input",
                    "token ids as 'input' are not supported: send the text",
                ))
            }
            v => return Err(wrong_type(&format!("input[{i}]"), "a string", v)),
        }
    }
    let base64 = match f.string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("'encoding_format' must be \"float\" or \"base64\", got {other:?}"),
            ))
        }
    };
    if f.get("dimensions").is_some() {
        return Err(ApiError::invalid(
            "dimensions",
            "'dimensions' is not supported: the model's own width is returned",
        ));
    }
    Ok(EmbeddingRequest { model, input, base64 })
}

/// The request's `model`: absent or the served one, else 404 `model_not_found`.
fn check_model(named: Option<&str>, model_id: &str) -> Result<String, ApiError> {
    match named {
        Some(m) if m != model_id => Err(ApiError {
            status: 404,
            message: format!(
                "The model `{m}` does not exist: this server serves `{model_id}` (GET /v1/models)"
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Value::String("model_not_found".into()),
        }),
        Some(m) => Ok(m.to_string()),
        None => Ok(model_id.to_string()),
    }
}

/// The JSON type of `v`, for messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(param: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid(param, format!("'{param}' must be {expected}, got {}", type_name(got)))
}

/// Typed access to the top-level fields; `null` reads as absent (OpenAI's SDKs send it).
struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(key, "a string", v)),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong_type(key, "a boolean", v)),
        }
    }

    /// A whole number >= 0.
    fn count(&self, key: &str) -> Result<Option<usize>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => count_value(key, v).map(Some),
        }
    }

    /// A finite number within `lo..=hi`.
    fn number(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if x.is_finite() && (lo..=hi).contains(&x) {
                    Ok(Some(x as f32))
                } else {
                    Err(ApiError::invalid(
                        key,
                        format!("'{key}' must be between {lo} and {hi}, got {n}"),
                    ))
                }
            }
            Some(v) => Err(wrong_type(key, "a number", v)),
        }
    }

    /// Any whole number (a negative seed is taken as its two's-complement bits).
    fn seed(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Ok(Some(u)),
                (None, Some(i)) => Ok(Some(i as u64)),
                _ => Err(ApiError::invalid(
                    key,
                    format!("'{key}' must be a whole number within 64 bits, got {n}"),
                )),
            },
            Some(v) => Err(wrong_type(key, "an integer", v)),
        }
    }
}

fn count_value(key: &str, v: &Value) -> Result<usize, ApiError> {
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(u) => Ok(usize::try_from(u).unwrap_or(usize::MAX)),
            None if n.as_i64().is_some() => {
                Err(ApiError::invalid(key, format!("'{key}' must be >= 0, got {n}")))
            }
            None => Err(ApiError::invalid(key, format!("'{key}' must be a whole number, got {n}"))),
        },
        v => Err(wrong_type(key, "an integer", v)),
    }
}

/// `messages`: a non-empty array of `{role, content}`.
fn messages(v: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match v {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", "'messages' is required"))
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type("messages", "an array", v)),
    };
    if list.is_empty() {
        return Err(ApiError::invalid("messages", "'messages' must not be empty"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(wrong_type(&at, "an object", m));
        };
        let role = match m.get("role") {
            Some(Value::String(r)) => match r.as_str() {
                "system" | "developer" => "system",
                "user" => "user",
                "assistant" => "assistant",
                other => {
                    return Err(ApiError::invalid(
                        format!("{at}.role"),
                        format!(
                            "'{at}.role' must be system, developer, user or assistant, got \
                             {other:?} (tool calls are not supported)"
                        ),
                    ))
                }
            },
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    format!("'{at}.role' is required"),
                ))
            }
            Some(v) => return Err(wrong_type(&format!("{at}.role"), "a string", v)),
        };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    let pat = format!("{at}.content[{j}]");
                    let Value::Object(p) = p else {
                        return Err(wrong_type(&pat, "an object", p));
                    };
                    match (p.get("type"), p.get("text")) {
                        (Some(Value::String(t)), Some(Value::String(s))) if t == "text" => {
                            text.push_str(s)
                        }
                        (Some(Value::String(t)), _) if t != "text" => {
                            return Err(ApiError::invalid(
                                format!("{pat}.type"),
                                format!("'{pat}.type' {t:?} is not supported: text parts only"),
                            ))
                        }
                        _ => {
                            return Err(ApiError::invalid(
                                pat.clone(),
                                format!("'{pat}' must be {{\"type\":\"text\",\"text\":STRING}}"),
                            ))
                        }
                    }
                }
                text
            }
            // An assistant turn that only called tools has no content.
            None | Some(Value::Null) if role == "assistant" => String::new(),
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    format!("{at}.content"),
                    format!("'{at}.content' is required"),
                ))
            }
            Some(v) => {
                return Err(wrong_type(
                    &format!("{at}.content"),
                    "a string or an array of parts",
                    v,
                ))
            }
        };
        out.push(ChatMessage { role: role.to_string(), content });
    }
    Ok(out)
}

/// `prompt`: a string, a one-string array or an array of token ids.
fn prompt(v: Option<&Value>) -> Result<Prompt, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::invalid("prompt", "'prompt' is required")),
        Some(Value::String(s)) if s.is_empty() => {
            Err(ApiError::invalid("prompt", "'prompt' must not be empty"))
        }
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(ApiError::invalid("prompt", "'prompt' must not be empty"))
        }
        Some(Value::Array(a)) => match &a[0] {
            Value::String(_) if a.len() > 1 => Err(ApiError::invalid(
                "prompt",
                format!(
                    "'prompt' holds {} strings: this server takes one prompt per request",
                    a.len()
                ),
            )),
            Value::String(s) if s.is_empty() => {
                Err(ApiError::invalid("prompt", "'prompt' must not be empty"))
            }
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Number(_) => {
                let mut ids = Vec::with_capacity(a.len());
                for (i, t) in a.iter().enumerate() {
                    let at = format!("prompt[{i}]");
                    let id = count_value(&at, t)?;
                    let id = u32::try_from(id).map_err(|_| {
                        ApiError::invalid(at.clone(), format!("'{at}' is not a token id: {id}"))
                    })?;
                    ids.push(id);
                }
                Ok(Prompt::Tokens(ids))
            }
            Value::Array(_) => Err(ApiError::invalid(
                "prompt",
                "'prompt' holds several token lists: this server takes one prompt per request",
            )),
            other => Err(wrong_type("prompt[0]", "a string or a token id", other)),
        },
        Some(v) => Err(wrong_type("prompt", "a string or an array", v)),
    }
}

/// `stop`: absent, a string, or an array of up to [`MAX_STOP`] non-empty strings.
fn stops(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let list: Vec<&Value> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(s @ Value::String(_)) => vec![s],
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => return Err(wrong_type("stop", "a string or an array of strings", v)),
    };
    if list.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!("'stop' holds {} strings: at most {MAX_STOP}", list.len()),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.into_iter().enumerate() {
        match s {
            Value::String(s) if s.is_empty() => {
                return Err(ApiError::invalid("stop", "'stop' strings must not be empty"))
            }
            Value::String(s) => out.push(s.clone()),
            v => return Err(wrong_type(&format!("stop[{i}]"), "a string", v)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "smollm2";

    fn chat(body: &str) -> Result<Request, ApiError> {
        parse(Endpoint::Chat, body.as_bytes(), M)
    }

    fn comp(body: &str) -> Result<Request, ApiError> {
        parse(Endpoint::Completion, body.as_bytes(), M)
    }

    /// A 400 naming `param`, with a well-formed OpenAI error body.
    fn refused<T: core::fmt::Debug>(r: Result<T, ApiError>, param: Option<&str>) -> ApiError {
        let e = r.expect_err("accepted a bad request");
        assert_eq!(e.status, 400, "{e:?}");
        assert_eq!(e.param.as_deref(), param, "{e:?}");
        let body: Value = serde_json::from_str(&e.body()).unwrap();
        let err = &body["error"];
        assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(err["type"], "invalid_request_error");
        assert!(err.get("param").is_some() && err.get("code").is_some());
        e
    }

    #[test]
    fn a_full_chat_request() {
        let r = chat(
            r#"{"model":"smollm2","messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
            "max_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"seed":-1,"stop":["a","b"],
            "presence_penalty":1.5,"frequency_penalty":-2,"n":1,"stream":true,
            "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"user":"x"}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            Prompt::Chat(vec![
                ChatMessage { role: "system".into(), content: "be brief".into() },
                ChatMessage { role: "user".into(), content: "hi there".into() },
            ])
        );
        assert_eq!(r.max_tokens, Some(7));
        assert_eq!(r.sampling.temperature, 0.0);
        assert_eq!(r.sampling.top_p, 0.5);
        assert_eq!(r.sampling.top_k, 3);
        assert_eq!(r.sampling.seed, Some(u64::MAX));
        assert_eq!(r.sampling.presence_penalty, 1.5);
        assert_eq!(r.sampling.frequency_penalty, -2.0);
        assert_eq!(r.stop, ["a", "b"]);
        assert!(r.stream && r.include_usage && r.logprobs);
        assert_eq!(r.top_logprobs, 2);
    }

    #[test]
    fn defaults_and_nulls() {
        let r =
            chat(r#"{"messages":[{"role":"user","content":"x"}],"temperature":null,"stop":null}"#)
                .unwrap();
        assert_eq!(r.model, M);
        assert_eq!(r.sampling, Sampling::default());
        assert_eq!(r.max_tokens, None);
        assert!(!r.stream && !r.include_usage && !r.logprobs && r.stop.is_empty());
        // max_completion_tokens wins over max_tokens.
        let r = chat(
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"max_completion_tokens":5}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, Some(5));
        // An assistant turn without content, developer read as system.
        let r = chat(
            r#"{"messages":[{"role":"developer","content":"d"},{"role":"assistant","content":null}]}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            Prompt::Chat(vec![
                ChatMessage { role: "system".into(), content: "d".into() },
                ChatMessage { role: "assistant".into(), content: String::new() },
            ])
        );
        // top_p 0: the top token alone.
        let r = chat(r#"{"messages":[{"role":"user","content":"x"}],"top_p":0}"#).unwrap();
        assert_eq!((r.sampling.top_p, r.sampling.top_k), (1.0, 1));
    }

    #[test]
    fn completion_prompts() {
        assert_eq!(comp(r#"{"prompt":"hi"}"#).unwrap().prompt, Prompt::Text("hi".into()));
        assert_eq!(comp(r#"{"prompt":["hi"]}"#).unwrap().prompt, Prompt::Text("hi".into()));
        assert_eq!(comp(r#"{"prompt":[1,2,3]}"#).unwrap().prompt, Prompt::Tokens(vec![1, 2, 3]));
        let r = comp(r#"{"prompt":"x","logprobs":3,"stop":"\n"}"#).unwrap();
        assert!(r.logprobs);
        assert_eq!(r.top_logprobs, 3);
        assert_eq!(r.stop, ["\n"]);
        let r =
            comp(r#"{"prompt":"x","logprobs":0,"echo":false,"best_of":1,"suffix":""}"#).unwrap();
        assert!(r.logprobs);
        assert_eq!(r.top_logprobs, 0);
    }

    #[test]
    fn malformed_bodies() {
        for body in
            ["", "{", "nope", "{\"messages\":[}", "\u{0}", "[1,2]", "\"text\"", "null", "42"]
        {
            refused(chat(body), None);
            refused(comp(body), None);
        }
        // Not UTF-8.
        refused(parse(Endpoint::Chat, &[0x7b, 0xff, 0x7d], M), None);
        // Nesting deeper than serde_json's limit is an error, not a stack overflow.
        let deep = "[".repeat(100_000);
        refused(chat(&deep), None);
    }

    #[test]
    fn wrong_types() {
        let cases = [
            (r#"{"messages":"hi"}"#, "messages"),
            (r#"{"messages":[1]}"#, "messages[0]"),
            (r#"{"messages":[{"role":1,"content":"x"}]}"#, "messages[0].role"),
            (r#"{"messages":[{"content":"x"}]}"#, "messages[0].role"),
            (r#"{"messages":[{"role":"user","content":5}]}"#, "messages[0].content"),
            (r#"{"messages":[{"role":"user"}]}"#, "messages[0].content"),
            (r#"{"messages":[{"role":"user","content":[5]}]}"#, "messages[0].content[0]"),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
                "messages[0].content[0]",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}"#,
                "messages[0].content[0].type",
            ),
            (r#"{"messages":[{"role":"tool","content":"x"}]}"#, "messages[0].role"),
            (r#"{"model":5,"messages":[{"role":"user","content":"x"}]}"#, "model"),
            (r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"5"}"#, "max_tokens"),
            (r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}"#, "max_tokens"),
            (r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#, "max_tokens"),
            (r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#, "max_tokens"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0}"#,
                "max_completion_tokens",
            ),
            (r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#, "temperature"),
            (r#"{"messages":[{"role":"user","content":"x"}],"temperature":2.5}"#, "temperature"),
            (r#"{"messages":[{"role":"user","content":"x"}],"temperature":-0.1}"#, "temperature"),
            (r#"{"messages":[{"role":"user","content":"x"}],"top_p":1.01}"#, "top_p"),
            (r#"{"messages":[{"role":"user","content":"x"}],"top_k":-3}"#, "top_k"),
            (r#"{"messages":[{"role":"user","content":"x"}],"seed":1.5}"#, "seed"),
            (r#"{"messages":[{"role":"user","content":"x"}],"seed":"7"}"#, "seed"),
            (r#"{"messages":[{"role":"user","content":"x"}],"seed":1e30}"#, "seed"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"presence_penalty":3}"#,
                "presence_penalty",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"frequency_penalty":-2.1}"#,
                "frequency_penalty",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"repeat_penalty":0}"#,
                "repeat_penalty",
            ),
            (r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#, "stream"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":1}"#,
                "stream_options",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":1}}"#,
                "stream_options.include_usage",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}"#,
                "stream_options",
            ),
            (r#"{"messages":[{"role":"user","content":"x"}],"logprobs":1}"#, "logprobs"),
            (r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#, "top_logprobs"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}"#,
                "top_logprobs",
            ),
            (r#"{"messages":[{"role":"user","content":"x"}],"stop":5}"#, "stop"),
            (r#"{"messages":[{"role":"user","content":"x"}],"stop":[""]}"#, "stop"),
            (r#"{"messages":[{"role":"user","content":"x"}],"stop":""}"#, "stop"),
            (r#"{"messages":[{"role":"user","content":"x"}],"stop":["a",1]}"#, "stop[1]"),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}"#,
                "stop",
            ),
        ];
        for (body, param) in cases {
            let e = refused(chat(body), Some(param));
            assert!(e.message.contains(param.split('[').next().unwrap()), "{body}: {e:?}");
        }
    }

    #[test]
    fn missing_or_empty_prompts() {
        refused(chat("{}"), Some("messages"));
        refused(chat(r#"{"messages":[]}"#), Some("messages"));
        refused(chat(r#"{"messages":null}"#), Some("messages"));
        let e = refused(chat(r#"{"prompt":"x"}"#), Some("messages"));
        assert!(e.message.contains("/v1/completions"));
        refused(comp("{}"), Some("prompt"));
        refused(comp(r#"{"prompt":""}"#), Some("prompt"));
        refused(comp(r#"{"prompt":[]}"#), Some("prompt"));
        refused(comp(r#"{"prompt":[""]}"#), Some("prompt"));
        refused(comp(r#"{"prompt":["a","b"]}"#), Some("prompt"));
        refused(comp(r#"{"prompt":[[1],[2]]}"#), Some("prompt"));
        refused(comp(r#"{"prompt":[1,-2]}"#), Some("prompt[1]"));
        refused(comp(r#"{"prompt":[1,"a"]}"#), Some("prompt[1]"));
        refused(comp(r#"{"prompt":[1,4294967296]}"#), Some("prompt[1]"));
        refused(comp(r#"{"prompt":[true]}"#), Some("prompt[0]"));
        refused(comp(r#"{"prompt":{}}"#), Some("prompt"));
        refused(comp(r#"{"prompt":"x","logprobs":6}"#), Some("logprobs"));
        refused(comp(r#"{"prompt":"x","logprobs":true}"#), Some("logprobs"));
        refused(comp(r#"{"prompt":"x","echo":true}"#), Some("echo"));
        refused(comp(r#"{"prompt":"x","best_of":2}"#), Some("best_of"));
        refused(comp(r#"{"prompt":"x","suffix":"y"}"#), Some("suffix"));
    }

    #[test]
    fn n_other_than_one() {
        for n in ["0", "2", "100"] {
            let e = refused(
                chat(&format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"n":{n}}}"#)),
                Some("n"),
            );
            assert!(e.message.contains("must be 1"));
        }
    }

    #[test]
    fn unknown_model() {
        let e =
            chat(r#"{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}"#).unwrap_err();
        assert_eq!(e.status, 404);
        assert_eq!(e.code, Value::String("model_not_found".into()));
        assert_eq!(e.param.as_deref(), Some("model"));
        assert!(e.message.contains("gpt-4o") && e.message.contains(M));
    }

    #[test]
    fn embeddings_bodies() {
        let e = |b: &str| parse_embeddings(b.as_bytes(), M);
        let r = e(r#"{"input":"a","model":"smollm2"}"#).unwrap();
        assert_eq!((r.input, r.base64), (vec!["a".to_string()], false));
        let r = e(r#"{"input":["a","b"],"encoding_format":"base64","user":"u"}"#).unwrap();
        assert_eq!((r.input.len(), r.base64), (2, true));
        for (body, param) in [
            (r#"{}"#, Some("input")),
            (r#"{"input":""}"#, Some("input")),
            (r#"{"input":[]}"#, Some("input")),
            (r#"{"input":["a",""]}"#, Some("input")),
            (r#"{"input":[1,2]}"#, Some("input")),
            (r#"{"input":[[1]]}"#, Some("input")),
            (r#"{"input":["a",true]}"#, Some("input[1]")),
            (r#"{"input":5}"#, Some("input")),
            (r#"{"input":"a","encoding_format":"int8"}"#, Some("encoding_format")),
            (r#"{"input":"a","dimensions":3}"#, Some("dimensions")),
            ("[", None),
            ("7", None),
        ] {
            refused(e(body), param);
        }
        let many = format!(r#"{{"input":[{}]}}"#, vec!["\"x\""; MAX_EMBED_INPUTS + 1].join(","));
        refused(e(&many), Some("input"));
        assert_eq!(e(r#"{"input":"a","model":"other"}"#).unwrap_err().status, 404);
    }

    #[test]
    fn error_body_shape() {
        let e = ApiError::new(503, "unavailable_error", Value::from(503), "Loading model");
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["code"], 503);
        assert_eq!(v["error"]["message"], "Loading model");
        assert_eq!(v["error"]["param"], Value::Null);
    }
}
