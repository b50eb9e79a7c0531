//! Time on SQLite: UTC text in one fixed format, so text order is time order.

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::error::{Error, Result};

/// The current time as the tables store it, e.g. `2026-12-02T13:45:01.123Z`.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
    ($modifier:literal) => {
        concat!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ", $modifier, ")")
    };
}
pub(super) use now;

/// A `strftime` modifier that moves a time `by` into the future (`+1.500 seconds`).
pub(super) fn later(by: Duration) -> String {
    format!("+{:.3} seconds", by.as_secs_f64())
}

/// A `strftime` modifier that moves a time `by` into the past (`-1.500 seconds`).
pub(super) fn earlier(by: Duration) -> String {
    format!("-{:.3} seconds", by.as_secs_f64())
}

/// Parses a stored timestamp.
pub(super) fn parse(text: &str) -> Result<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339)
        .map_err(|error| Error::Database(sqlx::Error::Decode(format!("timestamp `{text}`: {error}").into())))
}

/// Parses a stored timestamp that may be absent.
pub(super) fn parse_optional(text: Option<&str>) -> Result<Option<OffsetDateTime>> {
    text.map(parse).transpose()
}

/// Parses a stored UUID.
pub(super) fn uuid(text: &str) -> Result<uuid::Uuid> {
    uuid::Uuid::parse_str(text)
        .map_err(|error| Error::Database(sqlx::Error::Decode(format!("uuid `{text}`: {error}").into())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn stored_timestamps_parse() {
        let parsed = super::parse("2026-12-02T13:45:01.123Z").unwrap();
        assert_eq!(parsed.unix_timestamp(), 1_796_219_101);
        assert_eq!(super::later(std::time::Duration::from_millis(1500)), "+1.500 seconds");
    }
}
