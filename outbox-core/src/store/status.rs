//! The statuses of an event in the outbox table.

use std::fmt;
use std::str::FromStr;

/// The status of an event in the outbox table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventStatus {
    /// Committed, waiting to be published (possibly after a backoff delay).
    Pending,
    /// Claimed by a relay, which holds a lease on it.
    InFlight,
    /// Published; kept until retention deletes it.
    Published,
    /// Failed permanently or ran out of attempts (dead letter): waits for `retry` or `cancel`.
    Failed,
    /// Cancelled by an operator; never published.
    Cancelled,
}

impl EventStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 5] = [Self::Pending, Self::InFlight, Self::Published, Self::Failed, Self::Cancelled];

    /// The name stored in the `status` column (`pending`, `in_flight`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InFlight => "in_flight",
            Self::Published => "published",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an [`EventStatus`] from a name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status `{0}`: expected one of pending, in_flight, published, failed, cancelled")]
pub struct UnknownStatus(pub String);

impl FromStr for EventStatus {
    type Err = UnknownStatus;

    /// Parses a status name; `in-flight` is accepted for `in_flight`.
    fn from_str(s: &str) -> Result<Self, UnknownStatus> {
        match s {
            "pending" => Ok(Self::Pending),
            "in_flight" | "in-flight" => Ok(Self::InFlight),
            "published" => Ok(Self::Published),
            "failed" => Ok(Self::Failed),
            "cancelled" | "canceled" => Ok(Self::Cancelled),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EventStatus;

    #[test]
    fn status_names_round_trip() {
        for status in EventStatus::ALL {
            assert_eq!(status.as_str().parse::<EventStatus>().unwrap(), status);
        }
        assert!("done".parse::<EventStatus>().is_err());
    }
}
