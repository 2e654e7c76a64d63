//! Errors: one [`Error`] type with a machine-readable [`Code`] and a human message.
//!
//! Codes follow the absl/gRPC canonical status codes, so callers can branch on the
//! category (`Code::DataLoss` for a malformed file, `Code::ResourceExhausted` for a failed
//! allocation) while the message names exactly what was wrong (tensor name, expected vs
//! found). Nothing in rml panics on bad input: every parser and loader returns an [`Error`].

use alloc::string::String;
use core::fmt;

/// The category of an [`Error`], in the style of absl/gRPC status codes.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// The caller passed a value that is wrong regardless of system state
    /// (a shape that does not fit, a block size that does not divide a row).
    InvalidArgument,
    /// A named thing (a tensor, a metadata key, a file) does not exist.
    NotFound,
    /// Input data is malformed or truncated (a corrupt model file).
    DataLoss,
    /// The input is valid but rml does not support it (an unknown dtype,
    /// an unsupported `rope_scaling` type).
    Unimplemented,
    /// An allocation failed or a request is over a limit (arena full, size overflow).
    ResourceExhausted,
    /// A position or index is past a valid range (context length exceeded).
    OutOfRange,
    /// An invariant inside rml broke; this is a bug in rml.
    Internal,
    /// An operating-system I/O error (only with the `std` feature).
    #[cfg(feature = "std")]
    Io,
}

impl Code {
    /// The code's name as used in messages, e.g. `"DATA_LOSS"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::NotFound => "NOT_FOUND",
            Code::DataLoss => "DATA_LOSS",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Internal => "INTERNAL",
            #[cfg(feature = "std")]
            Code::Io => "IO",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An rml error: a [`Code`] and a message naming what was wrong.
///
/// Build one with the per-code constructors, which take anything `Display`
/// (a `&str`, a `String`, or `format_args!`):
///
/// ```
/// use rml::{Code, Error};
/// let e = Error::data_loss(format_args!("tensor {:?}: offsets [{}, {}) past end {}", "w", 8, 16, 12));
/// assert_eq!(e.code(), Code::DataLoss);
/// assert_eq!(e.to_string(), "DATA_LOSS: tensor \"w\": offsets [8, 16) past end 12");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

/// `core::result::Result` with rml's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

macro_rules! ctor {
    ($(#[$doc:meta] $name:ident => $code:ident),* $(,)?) => {
        $(
            #[$doc]
            #[cold]
            pub fn $name(message: impl fmt::Display) -> Self {
                Self::new(Code::$code, message)
            }
        )*
    };
}

impl Error {
    /// Makes an error with `code` and `message`.
    #[cold]
    pub fn new(code: Code, message: impl fmt::Display) -> Self {
        use alloc::string::ToString;
        Error { code, message: message.to_string() }
    }

    ctor! {
        /// A [`Code::InvalidArgument`] error.
        invalid_argument => InvalidArgument,
        /// A [`Code::NotFound`] error.
        not_found => NotFound,
        /// A [`Code::DataLoss`] error (malformed or truncated input).
        data_loss => DataLoss,
        /// A [`Code::Unimplemented`] error (valid but unsupported input).
        unimplemented => Unimplemented,
        /// A [`Code::ResourceExhausted`] error (allocation failed, over a limit).
        resource_exhausted => ResourceExhausted,
        /// A [`Code::OutOfRange`] error.
        out_of_range => OutOfRange,
        /// A [`Code::Internal`] error (a bug in rml).
        internal => Internal,
    }

    /// The error's category.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The message, without the code prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with `context: `, keeping the code
    /// (e.g. a file name in front of a parser's message).
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        use alloc::format;
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({}: {:?})", self.code, self.message)
    }
}

impl core::error::Error for Error {}

#[cfg(feature = "std")]
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(Code::Io, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn display_and_context() {
        let e = Error::not_found("tensor \"x\"").context("model.safetensors");
        assert_eq!(e.code(), Code::NotFound);
        assert_eq!(e.to_string(), "NOT_FOUND: model.safetensors: tensor \"x\"");
        assert_eq!(e.message(), "model.safetensors: tensor \"x\"");
    }
}
