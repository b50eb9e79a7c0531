//! The commands' output on stdout. A reader that goes away (`outbox events list | head -1`) ends the command
//! quietly with exit 0, as it ends other Unix tools ([`Failure::OutputClosed`]); any other failure to write (a full
//! disk) is a one-line error with exit 1. `println!` panicked on both.

use crate::{Failure, Outcome};

/// `println!` for a command's output, through [`line()`]; returns from the calling function (`?`) when stdout cannot
/// take it.
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))?
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))?
    };
}

/// Writes `text` and a line break to stdout.
///
/// # Errors
///
/// [`Failure::OutputClosed`] when the reader went away, [`Failure::Runtime`] for any other failure to write.
pub(crate) fn line(text: std::fmt::Arguments<'_>) -> Outcome {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(text).and_then(|()| stdout.write_all(b"\n")).and_then(|()| stdout.flush());
    written.map_err(|error| match error.kind() {
        std::io::ErrorKind::BrokenPipe => Failure::OutputClosed,
        _ => Failure::Runtime(format!("cannot write to stdout: {error}")),
    })
}
