//! The `file:PATH` sink: JSON lines appended to a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Message, Outcome, Publisher};

/// Appends each message as a JSON line ([`Message::to_json_line`]) to a file, one `write` and one `fsync` per
/// batch, so a line is on disk before its event is marked published. A write error is a transient failure of
/// the whole batch.
///
/// # Example
///
/// ```no_run
/// let publisher = outbox_relay::FilePublisher::open("/var/log/outbox/events.jsonl")?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FilePublisher {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl FilePublisher {
    /// Opens `path` for appending, creating it if needed.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or created.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_owned();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self { path, file: Arc::new(Mutex::new(file)) })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Publisher for FilePublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let mut buffer = String::new();
        for message in batch {
            buffer.push_str(&message.to_json_line());
            buffer.push('\n');
        }
        let file = Arc::clone(&self.file);
        let written = tokio::task::spawn_blocking(move || {
            let mut file = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            file.write_all(buffer.as_bytes())?;
            file.sync_data()
        })
        .await;
        match written {
            Ok(Ok(())) => vec![Outcome::Published; batch.len()],
            Ok(Err(error)) => {
                vec![Outcome::transient(format!("writing {}: {error}", self.path.display())); batch.len()]
            }
            Err(error) => vec![Outcome::transient(format!("writing {}: {error}", self.path.display())); batch.len()],
        }
    }

    /// Each call is one write of the whole batch: it lands in order, or (on an error) not at all.
    fn keeps_order(&self) -> bool {
        true
    }
}
