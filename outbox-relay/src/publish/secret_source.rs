//! Where a broker sink takes a secret (a password, a token, an nkey seed) from, besides the URL's user info:
//! `NAME_file=PATH` (the file's content, a trailing line break removed) or `NAME_env=VAR` (an environment
//! variable). A secret never goes into the query itself, where it would show in logs: `password=...` is refused.
//! A secret is read once, when the publisher is built, and never printed: errors name the option, the file or
//! the variable, never the value.

use std::fmt;

use super::url_options::Query;
use crate::error::Result;

/// A secret value: its `Debug` and `Display` print `[REDACTED]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    /// A secret from a value (the URL's user info, a builder call).
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, to hand to the client library.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Takes secret `name` from `NAME_file=PATH` or `NAME_env=VAR`; `None` when neither is given.
///
/// # Errors
///
/// [`Error::InvalidSink`](crate::Error::InvalidSink) when `NAME=...` itself is in the query, both sources are
/// given, the file cannot be read or is empty, or the variable is not set or empty.
pub(crate) fn take_secret(query: &mut Query<'_>, name: &str) -> Result<Option<Secret>> {
    if query.take(name).is_some() {
        return Err(query.invalid(&format!(
            "a secret never goes into the URL's query: use `{name}_file=PATH` or `{name}_env=VARIABLE`"
        )));
    }
    let (file_option, env_option) = (format!("{name}_file"), format!("{name}_env"));
    match (query.take(&file_option), query.take(&env_option)) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(query.invalid(&format!("give `{file_option}` or `{env_option}`, not both"))),
        (Some(path), None) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|error| query.invalid(&format!("`{file_option}`: cannot read {path}: {}", error.kind())))?;
            let value = text.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&text);
            if value.is_empty() {
                return Err(query.invalid(&format!("`{file_option}`: {path} is empty")));
            }
            Ok(Some(Secret::new(value)))
        }
        (None, Some(variable)) => match std::env::var(&variable) {
            Ok(value) if !value.is_empty() => Ok(Some(Secret::new(value))),
            _ => Err(query.invalid(&format!("`{env_option}`: the environment variable {variable} is not set"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::take_secret;
    use crate::publish::url_options::Query;

    #[test]
    fn secrets_come_from_files_or_the_environment_and_are_never_shown() {
        let dir = tempfile::Builder::new().prefix("outbox-secret-").tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "hunter2\n").unwrap();
        let url: url::Url = format!("nats://h?password_file={}", file.display()).parse().unwrap();
        let secret = take_secret(&mut Query::new(&url).unwrap(), "password").unwrap().unwrap();
        assert_eq!(secret.expose(), "hunter2", "the trailing line break is removed");
        assert_eq!(format!("{secret:?} {secret}"), "[REDACTED] [REDACTED]");

        std::env::set_var("OUTBOX_TEST_SECRET_SOURCE", "hunter3");
        let url: url::Url = "nats://h?token_env=OUTBOX_TEST_SECRET_SOURCE".parse().unwrap();
        assert_eq!(take_secret(&mut Query::new(&url).unwrap(), "token").unwrap().unwrap().expose(), "hunter3");

        for (url, reason) in [
            ("nats://h?password=hunter2", "never goes into the URL"),
            ("nats://h?password_env=OUTBOX_TEST_UNSET_VARIABLE", "OUTBOX_TEST_UNSET_VARIABLE is not set"),
            ("nats://h?password_file=/nonexistent/pw", "cannot read /nonexistent/pw"),
            ("nats://h?password_file=/x&password_env=Y", "not both"),
        ] {
            let url: url::Url = url.parse().unwrap();
            let error = take_secret(&mut Query::new(&url).unwrap(), "password").unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
