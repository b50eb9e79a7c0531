//! The totals of a relay's run.

use outbox_core::store::SettleReport;

/// Totals of one [`Relay::run`](crate::Relay::run), returned when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunSummary {
    /// Batches published.
    pub batches: u64,
    /// Events marked published.
    pub published: u64,
    /// Events rescheduled after a transient failure.
    pub retried: u64,
    /// Events moved to `failed`.
    pub failed: u64,
    /// Outcomes not written because the partition was taken over (another relay publishes those events).
    pub fenced: u64,
}

impl RunSummary {
    pub(crate) fn add(&mut self, report: SettleReport) {
        self.published += report.published;
        self.retried += report.retried;
        self.failed += report.failed;
        self.fenced += report.fenced;
    }
}
