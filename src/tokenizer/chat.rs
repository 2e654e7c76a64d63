//! Chat templates: the Jinja template a model ships (`tokenizer.chat_template` in GGUF,
//! `chat_template` in tokenizer_config.json) rendered with minijinja the way transformers'
//! `apply_chat_template` renders it with jinja2.
//!
//! transformers' environment, reproduced here: `trim_blocks` and `lstrip_blocks` on, trailing
//! newline of the template dropped, loop controls (`{% break %}`), the globals
//! `raise_exception(msg)` (an error carrying `msg`) and `strftime_now(format)` (UTC here), and
//! the variables `messages` (a list of `{"role", "content"}` maps), `add_generation_prompt`,
//! `bos_token`, `eos_token`, `tools` and `documents` (both none). Python string and dict methods
//! the templates call (`.strip()`, `.startswith()`, `.items()`, …) come from minijinja-contrib's
//! pycompat layer. Differences left: `tojson` is minijinja's (compact, HTML-safe escapes) rather
//! than Python's `json.dumps`; only tool-calling templates use it.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use super::Tokenizer;
use crate::error::{Error, Result};

/// One turn of a conversation: `role` is `system`, `user` or `assistant` (or whatever the
/// template knows), `content` the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Who speaks: `system`, `user`, `assistant`.
    pub role: String,
    /// What is said.
    pub content: String,
}

impl Message {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into() }
    }
}

/// Gemma's turn format (Gemma 1-3 instruction-tuned models), for GGUF files of the Gemma
/// families that carry no template (the base models): an optional system message is put in
/// front of the first user turn, as Gemma's own template does.
///
/// `<bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{reply}
/// <end_of_turn>\n…<start_of_turn>model\n` (`src/tokenizer/gemma.jinja`).
pub const GEMMA_TEMPLATE: &str = include_str!("gemma.jinja");

/// The template a model family uses when its file carries none (`general.architecture` of a
/// GGUF): Gemma's for `gemma`, `gemma2`, `gemma3`; `None` for the others.
pub fn family_template(architecture: &str) -> Option<&'static str> {
    matches!(architecture, "gemma" | "gemma2" | "gemma3" | "gemma3_text").then_some(GEMMA_TEMPLATE)
}

/// A compiled chat template with the special-token spellings it is rendered with.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

fn render_err(e: minijinja::Error) -> Error {
    let mut msg = e.to_string();
    let mut src = core::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    Error::invalid_argument(format_args!("chat template: {msg}"))
}

/// `strftime_now(format)`: the current UTC time formatted with `%d %m %Y %y %b %B %H %M %S %%`
/// (what chat templates use for "today's date"); other directives are kept as written.
fn strftime_now(fmt: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(fmt, secs)
}

/// [`strftime_now`] at `secs` seconds after the Unix epoch.
fn strftime(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    // Days to civil date (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let tod = secs % 86_400;
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&format!("{year}")),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&name[..3]),
            Some('B') => out.push_str(name),
            Some('H') => out.push_str(&format!("{:02}", tod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", tod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", tod % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token` / `eos_token` are the spellings the template sees (empty
    /// when the model has none).
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with minijinja's message (line and cause) for a
    /// template that does not parse.
    pub fn new(source: impl Into<String>, bos_token: &str, eos_token: &str) -> Result<Self> {
        let t = ChatTemplate {
            source: source.into(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        };
        t.env().template_from_str(&t.source).map_err(render_err)?;
        Ok(t)
    }

    /// `source` with the BOS/EOS spellings of `tok` (empty for a token it lacks).
    ///
    /// # Errors
    ///
    /// As [`ChatTemplate::new`].
    pub fn for_tokenizer(source: impl Into<String>, tok: &Tokenizer) -> Result<Self> {
        let spell = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).unwrap_or_default();
        Self::new(source, &spell(tok.bos_id()), &spell(tok.eos_id()))
    }

    /// The template's Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn env(&self) -> Environment<'static> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> core::result::Result<Value, _> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
        env
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends with the header of the
    /// assistant's next turn.
    ///
    /// # Errors
    ///
    /// [`crate::Code::InvalidArgument`] with the template's own message for a
    /// `raise_exception` (e.g. roles that do not alternate) or minijinja's for an evaluation
    /// error.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let env = self.env();
        let ctx = minijinja::context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            tools => Value::from(()),
            documents => Value::from(()),
        };
        env.render_str(&self.source, ctx).map_err(render_err)
    }

    /// The token(s) that end an assistant turn in this template, found by rendering a
    /// conversation whose reply is a marker and tokenizing what the template writes right
    /// after it: the leading added (special) tokens of that text (`<|im_end|>` for ChatML,
    /// `<end_of_turn>` for Gemma, `<|eot_id|>` for Llama 3). Empty when the template writes
    /// no special token there or cannot render such a conversation.
    pub fn end_of_turn_ids(&self, tok: &Tokenizer) -> Vec<u32> {
        const MARK: &str = "rml-end-of-turn-probe";
        let msgs = [Message::new("user", "hi"), Message::new("assistant", MARK)];
        let Ok(text) = self.render(&msgs, false) else { return Vec::new() };
        let Some(at) = text.find(MARK) else { return Vec::new() };
        let Ok(ids) = tok.encode(&text[at + MARK.len()..]) else { return Vec::new() };
        ids.into_iter().take_while(|&id| tok.is_added(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::strftime;

    #[test]
    fn strftime_formats_a_known_instant() {
        // 2024-02-29 13:05:09 UTC.
        assert_eq!(
            strftime("%d %b %Y %H:%M:%S %B %m %y %%", 1_709_211_909),
            "29 Feb 2024 13:05:09 February 02 24 %"
        );
        assert_eq!(strftime("%d %b %Y", 0), "01 Jan 1970");
    }
}
