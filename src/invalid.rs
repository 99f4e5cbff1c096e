//! [`Invalid`]: a value refused, with the reason in the operator's words.
//!
//! The parsers of configuration values (a listen address, a cookie key, a Redis URL, an
//! access-log target, a grant's lifetime) know what is wrong with a value but not where it
//! came from; their caller adds the key and the line (`config::ConfigError::Invalid`) or
//! the flag. This is what they return, so that no function answers with a bare `String`
//! and a reason cannot be mistaken for a value.

/// Why a value was refused: a sentence for the operator, without the key (the caller's to
/// add).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    /// A refusal for `reason`.
    pub fn new(reason: impl Into<String>) -> Invalid {
        Invalid(reason.into())
    }
}

impl From<Invalid> for String {
    fn from(invalid: Invalid) -> String {
        invalid.0
    }
}
