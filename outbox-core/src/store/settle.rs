//! Settling a published batch: one statement, fenced by the epochs of the partitions it belongs to.

use std::time::Duration;

use uuid::Uuid;

use super::read::RowVersion;

/// What happened to an event the relay attempted.
#[derive(Debug, Clone, PartialEq)]
pub enum SettleOutcome {
    /// Published: mark it so (or delete it, with immediate retention).
    Published,
    /// A transient failure: count the attempt (unless `counted` is false), record the error, try again after
    /// `delay`.
    Retry {
        /// A short description of the failure; never the payload.
        error: String,
        /// How long to wait before the next attempt.
        delay: Duration,
        /// Whether the failure counts as an attempt: false when the destination could not be reached at all (the
        /// event itself was never tried), so an outage does not use up the attempts that lead to `failed`.
        counted: bool,
    },
    /// A permanent failure or the last allowed attempt: count the attempt, record the error, mark it `failed`.
    Failed {
        /// A short description of the failure; never the payload.
        error: String,
    },
}

/// The outcome of one event, to be written back by [`Store::settle`](super::Store::settle).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Settlement {
    /// The event id.
    pub id: Uuid,
    /// What happened.
    pub outcome: SettleOutcome,
    /// Where the row version that was read lives ([`ReadRow::version`](super::ReadRow)), if the backend gave one.
    pub version: Option<RowVersion>,
}

impl Settlement {
    /// The outcome of the event `id`.
    #[must_use]
    pub fn new(id: Uuid, outcome: SettleOutcome) -> Self {
        Self { id, outcome, version: None }
    }

    /// `id` was published.
    #[must_use]
    pub fn published(id: Uuid) -> Self {
        Self { id, outcome: SettleOutcome::Published, version: None }
    }

    /// The row version that was read ([`ReadRow::version`](super::ReadRow)): a published event that has one is
    /// settled where it was read, without a lookup by primary key.
    #[must_use]
    pub fn at(mut self, version: Option<RowVersion>) -> Self {
        self.version = version;
        self
    }
}

/// A batch to settle: its outcomes, and the partition leases that prove the relay may write them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SettleBatch {
    /// The relay.
    pub relay: Uuid,
    /// The batch, as recorded by [`Store::start_batch`](super::Store::start_batch): its record is deleted.
    pub batch: Uuid,
    /// `(partition, epoch)` of every partition the batch's events belong to.
    pub leases: Vec<(u16, i64)>,
    /// The outcomes.
    pub settlements: Vec<Settlement>,
    /// Delete published rows instead of marking them (`--retention 0s`).
    pub delete_published: bool,
}

impl SettleBatch {
    /// The outcomes of `batch` of `relay`, which holds `leases`.
    #[must_use]
    pub fn new(relay: Uuid, batch: Uuid, leases: Vec<(u16, i64)>, settlements: Vec<Settlement>) -> Self {
        Self { relay, batch, leases, settlements, delete_published: false }
    }

    /// Deletes published rows instead of marking them.
    #[must_use]
    pub fn delete_published(mut self, delete: bool) -> Self {
        self.delete_published = delete;
        self
    }
}

/// How many settlements were applied, by outcome. Settlements of rows in a partition the relay no longer holds at
/// the same epoch (another relay took it over), or of rows an operator changed meanwhile, are not applied and
/// count as `fenced`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleReport {
    /// Rows marked published (or deleted on publish).
    pub published: u64,
    /// Rows rescheduled after a transient failure.
    pub retried: u64,
    /// Rows moved to `failed`.
    pub failed: u64,
    /// Settlements not applied because the partition changed owner (or the row changed).
    pub fenced: u64,
}

/// Errors are stored short: enough to diagnose, never a payload dump.
pub(crate) const MAX_ERROR_CHARS: usize = 500;

/// The outcome name of a retry, as the settle statements read it: `postponed` counts no attempt.
pub(crate) fn retry_name(counted: bool) -> &'static str {
    if counted {
        "retry"
    } else {
        "postponed"
    }
}

/// `error`, cut to [`MAX_ERROR_CHARS`] characters on a character boundary, with each NUL character replaced by
/// U+FFFD: PostgreSQL's `text` refuses NUL, and a settle refused for it would publish its batch again, for ever.
pub(crate) fn short_error(error: &str) -> String {
    let error = match error.char_indices().nth(MAX_ERROR_CHARS) {
        Some((end, _)) => format!("{}...", &error[..end]),
        None => error.to_owned(),
    };
    if error.contains('\0') {
        error.replace('\0', "\u{fffd}")
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_errors_are_cut_on_a_char_boundary() {
        let long = "é".repeat(600);
        let cut = super::short_error(&long);
        assert_eq!(cut.chars().count(), super::MAX_ERROR_CHARS + 3);
        assert_eq!(super::short_error("boom"), "boom");
        assert_eq!(super::short_error("bad\0byte"), "bad\u{fffd}byte");
    }
}
