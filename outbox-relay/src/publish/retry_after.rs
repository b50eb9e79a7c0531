//! The `Retry-After` of an HTTP answer (RFC 9110: a number of seconds or an HTTP date), which webhook receivers
//! send with `429` and `503` and SQS-compatible endpoints may send when they throttle.

use std::time::{Duration, SystemTime};

/// The longest wait a publisher passes on (the relay caps it again at its backoff's maximum).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Reads a `Retry-After` value at time `now`: a date in the past is no wait; waits are capped at a day. `None`
/// for a malformed value.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let delay = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value).ok()?.duration_since(now).unwrap_or(Duration::ZERO),
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::parse_retry_after;

    #[test]
    fn retry_after_is_read_in_seconds_or_as_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(90)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO), "a past date is no wait");
        assert_eq!(parse_retry_after("99999999", now), Some(Duration::from_secs(24 * 60 * 60)), "capped");
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
