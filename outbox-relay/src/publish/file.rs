//! The `file:PATH` sink: JSON lines appended to a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Message, Outcome, Publisher};

/// Appends each message as a JSON line ([`Message::to_json_line`]) to a file, one `write` and one `fsync` per
/// batch, so a line is on disk before its event is marked published. A write error is a transient failure of
/// the whole batch, and the file is cut back to its length before the write, so that no part of a line stays.
///
/// The path may also name a character device, a pipe or a socket (`/dev/null`, `/dev/stdout`, a named pipe):
/// these get the same `write` per batch and no `fsync`, which only a regular file has.
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
    /// Whether a batch is synced to disk after its write: only for regular files.
    sync: bool,
}

impl FilePublisher {
    /// Opens `path` for appending, creating it if needed, so that a destination that cannot work fails here and
    /// not at the first batch.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened for writing or created: a directory, a missing parent directory, no
    /// permission, a read-only file system.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_owned();
        let file = OpenOptions::new().create(true).append(true).open(&path).map_err(|error| explain(&path, error))?;
        let sync = file.metadata()?.file_type().is_file();
        Ok(Self { path, file: Arc::new(Mutex::new(file)), sync })
    }

    /// The file written to.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Publisher for FilePublisher {
    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let buffer = super::json_lines(batch);
        let file = Arc::clone(&self.file);
        let sync = self.sync;
        let written = tokio::task::spawn_blocking(move || {
            let mut file = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !sync {
                return file.write_all(&buffer);
            }
            // A write that fails part way (a full disk, a size limit) leaves part of a line behind; the batch is
            // written again, so the file is cut back to where it ended and the retry starts on a line of its own.
            let end = file.metadata()?.len();
            let written = file.write_all(&buffer).and_then(|()| file.sync_data());
            if let Err(error) = &written {
                if let Err(cut) = file.set_len(end) {
                    return Err(std::io::Error::new(
                        error.kind(),
                        format!("{error}; cutting the part written back failed too: {cut}"),
                    ));
                }
            }
            written
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

    /// Each call is one write of the whole batch, in order; on an error it fails whole and is written again (a
    /// regular file with `sync` is cut back to where the batch began; a pipe or device may keep the part written
    /// before the error, a line cut short).
    fn keeps_order(&self) -> bool {
        true
    }
}

/// The error of opening `path`, naming the cause when the system's message alone would mislead: "No such file or
/// directory" for a file that is to be created means that its directory is missing.
fn explain(path: &Path, error: std::io::Error) -> std::io::Error {
    match path.parent() {
        Some(parent)
            if error.kind() == std::io::ErrorKind::NotFound && !parent.as_os_str().is_empty() && !parent.exists() =>
        {
            std::io::Error::new(error.kind(), format!("the directory {} does not exist ({error})", parent.display()))
        }
        _ => error,
    }
}
