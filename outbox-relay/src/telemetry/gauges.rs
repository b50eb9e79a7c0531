//! The backlog gauges: pending, oldest pending age and failed by event type, and the pause flag, refreshed from
//! [`Store::shared_backlog`] (one statement that reads the backlog, not the history, run by one relay of the
//! database at a time and read by the others) every [`BACKLOG_REFRESH`](super::BACKLOG_REFRESH), or less often
//! while the backlog is large. The first read also registers every other family
//! ([`describe_and_zero`](super::describe_and_zero)).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use outbox_core::store::{Backlog, Store};
use tokio_util::sync::CancellationToken;

use super::{names, BACKLOG_REFRESH};

/// The backlog statement reads every pending row (a backlog of a million rows takes about a second of the
/// database's time): it runs again only after this many times its last duration, so it never takes more than a
/// twentieth of one connection, however large the backlog, and however many relays share its counts.
const REFRESH_COST_SHARE: u32 = 20;

/// The wait before asking again while another relay counts.
const FIRST_COUNT_POLL: Duration = Duration::from_millis(200);

/// Refreshes the gauges until `shutdown`: at once, then as the counts the relays share come of age: every
/// [`BACKLOG_REFRESH`], or every [`REFRESH_COST_SHARE`] times the last count's duration if that is longer.
pub(crate) async fn refresh_backlog(store: Arc<dyn Store>, shutdown: CancellationToken) {
    let mut shown = Shown::default();
    let mut registered = false;
    let mut wait = Duration::ZERO;
    let mut max_age = BACKLOG_REFRESH;
    let mut counted = true;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let read = tokio::select! {
            () = shutdown.cancelled() => return,
            read = store.shared_backlog(max_age) => read,
        };
        wait = max_age;
        match read {
            Ok(Some(shared)) => {
                counted = true;
                max_age = BACKLOG_REFRESH.max(shared.took * REFRESH_COST_SHARE);
                // Again when these counts are as old as counts may be: then this relay or another counts anew
                // (counts older than that are another relay's count under way: soon again).
                wait = max_age.saturating_sub(shared.age).max(FIRST_COUNT_POLL);
                if !registered {
                    super::describe_and_zero(&shared.backlog);
                    registered = true;
                }
                shown.show(&shared.backlog);
            }
            Ok(None) => wait = FIRST_COUNT_POLL,
            // The gauges keep their last values meanwhile. The first failure after a count is a warning (a count
            // that fails alone, such as past a role's `statement_timeout`, would otherwise freeze them unseen); the
            // read loop reports a database that is down.
            Err(error) if counted => {
                counted = false;
                tracing::warn!(error = %error, "cannot refresh the backlog gauges; they keep their last values");
            }
            Err(error) => tracing::debug!(error = %error, "cannot refresh the backlog gauges"),
        }
    }
}

/// Sets the pause gauge (the read loop calls it as soon as it sees a change).
pub(crate) fn set_paused(paused: bool) {
    metrics::gauge!(names::RELAY_PAUSED).set(if paused { 1.0 } else { 0.0 });
}

/// The event types shown so far: a type whose backlog drained is set to 0, not left at its last value.
#[derive(Debug, Default)]
struct Shown {
    pending: BTreeSet<String>,
    failed: BTreeSet<String>,
}

impl Shown {
    /// Shows `backlog`, and 0 for the types shown before that are no longer in it.
    fn show(&mut self, backlog: &Backlog) {
        show_backlog(backlog);
        let pending: BTreeSet<String> = backlog.pending.iter().map(|p| p.event_type.clone()).collect();
        for gone in self.pending.difference(&pending) {
            metrics::gauge!(names::EVENTS_PENDING, names::LABEL_EVENT_TYPE => gone.clone()).set(0.0);
            metrics::gauge!(names::OLDEST_PENDING_AGE_SECONDS, names::LABEL_EVENT_TYPE => gone.clone()).set(0.0);
        }
        self.pending.extend(pending);
        let failed: BTreeSet<String> = backlog.failed.iter().map(|f| f.event_type.clone()).collect();
        for gone in self.failed.difference(&failed) {
            metrics::gauge!(names::EVENTS_FAILED, names::LABEL_EVENT_TYPE => gone.clone()).set(0.0);
        }
        self.failed.extend(failed);
    }
}

/// Sets the gauges of every event type in `backlog` and the pause flag.
#[allow(clippy::cast_precision_loss)] // counts far below 2^53
pub(super) fn show_backlog(backlog: &Backlog) {
    for by_type in &backlog.pending {
        let event_type = by_type.event_type.clone();
        metrics::gauge!(names::EVENTS_PENDING, names::LABEL_EVENT_TYPE => event_type.clone())
            .set(by_type.pending as f64);
        metrics::gauge!(names::OLDEST_PENDING_AGE_SECONDS, names::LABEL_EVENT_TYPE => event_type)
            .set(by_type.oldest_age.as_secs_f64());
    }
    for by_type in &backlog.failed {
        metrics::gauge!(names::EVENTS_FAILED, names::LABEL_EVENT_TYPE => by_type.event_type.clone())
            .set(by_type.failed as f64);
    }
    set_paused(backlog.paused);
}
