//! The `stdout` sink: one JSON line per event on standard output.

use std::io::Write;

use super::{Message, Outcome, Publisher};

/// Writes each message as a JSON line ([`Message::to_json_line`]) to standard output, flushing after every
/// batch. A write error (closed pipe) is a transient failure of the whole batch.
///
/// # Example
///
/// ```
/// let publisher = outbox_relay::StdoutPublisher::new();
/// # let _ = publisher;
/// ```
#[derive(Debug, Clone, Default)]
pub struct StdoutPublisher {
    _private: (),
}

impl StdoutPublisher {
    /// A publisher to standard output.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl Publisher for StdoutPublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let buffer = super::json_lines(batch);
        // On a thread for blocking work: a reader that stops reading blocks the write (and, on the stdout lock, the
        // other lanes' writes), which must not hold a runtime thread that heartbeats and shutdown need.
        let written = tokio::task::spawn_blocking(move || {
            let mut out = std::io::stdout().lock();
            out.write_all(&buffer).and_then(|()| out.flush())
        })
        .await;
        match written {
            Ok(Ok(())) => vec![Outcome::Published; batch.len()],
            Ok(Err(error)) => vec![Outcome::transient(format!("writing to stdout: {error}")); batch.len()],
            Err(error) => vec![Outcome::transient(format!("writing to stdout: {error}")); batch.len()],
        }
    }

    /// Each call is one write of the whole batch, in order; on an error it fails whole and is written again (what
    /// went out before the error stays: a reader may see a line cut short, then the batch again).
    fn keeps_order(&self) -> bool {
        true
    }
}
