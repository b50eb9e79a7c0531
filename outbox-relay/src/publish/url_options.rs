//! The query options of broker sink URLs (`?subject=...&ack_timeout_ms=...`), taken one by one so that a
//! misspelt option is an error.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::masked_url::masked_url as masked;

/// The query options of a broker sink URL, taken one by one; [`finish`](Self::finish) refuses any left over, so
/// a misspelt option is an error rather than silently ignored.
pub(crate) struct Query<'u> {
    url: &'u url::Url,
    options: BTreeMap<String, String>,
}

impl<'u> Query<'u> {
    /// The options of `url`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`] when an option is given twice.
    pub(crate) fn new(url: &'u url::Url) -> Result<Self> {
        let mut options = BTreeMap::new();
        for (name, value) in url.query_pairs() {
            if options.insert(name.to_string(), value.to_string()).is_some() {
                return Err(Error::InvalidSink { sink: masked(url), reason: format!("option `{name}` given twice") });
            }
        }
        Ok(Self { url, options })
    }

    /// Takes option `name`.
    pub(crate) fn take(&mut self, name: &str) -> Option<String> {
        self.options.remove(name)
    }

    /// Takes option `name` and parses it with `parse`; `what` describes a valid value.
    pub(crate) fn take_parsed<T>(
        &mut self,
        name: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.take(name) {
            None => Ok(None),
            Some(value) => parse(&value).map(Some).ok_or_else(|| self.invalid(&format!("`{name}` must be {what}"))),
        }
    }

    /// Takes a duration option in milliseconds (`timeout_ms=5000`), more than zero.
    pub(crate) fn take_millis(&mut self, name: &str) -> Result<Option<std::time::Duration>> {
        self.take_parsed(name, "a number of milliseconds above zero", |value| {
            value.parse::<u64>().ok().filter(|ms| *ms > 0).map(std::time::Duration::from_millis)
        })
    }

    /// An [`Error::InvalidSink`] for this URL, password masked.
    pub(crate) fn invalid(&self, reason: &str) -> Error {
        Error::InvalidSink { sink: masked(self.url), reason: reason.to_owned() }
    }

    /// Fails when options are left that nobody took; `known` lists the valid ones for the message.
    pub(crate) fn finish(self, known: &[&str]) -> Result<()> {
        match self.options.keys().next() {
            None => Ok(()),
            Some(name) => Err(self.invalid(&format!("unknown option `{name}` (known: {})", known.join(", ")))),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::masked_url::masked_url as masked;

    #[test]
    fn passwords_are_masked() {
        let url = "amqp://user:hunter2@host/vhost".parse().unwrap();
        assert_eq!(masked(&url), "amqp://user:***@host/vhost");
    }
}
