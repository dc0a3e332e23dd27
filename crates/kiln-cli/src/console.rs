//! Where the command's text goes: results to standard output, notes and
//! progress to standard error.
//!
//! Every line goes through here rather than `println!`, which panics when
//! its reader has gone: `kiln ls | head` closes the pipe after ten lines,
//! and the rest of the listing has nowhere to go. A closed standard output
//! (`EPIPE`) is the end of the output, not an error: what follows is
//! dropped and the command ends as it would have, its exit status
//! unchanged. Any other failure to write (a full disk under a redirection)
//! is kept and reported once, at the end, by [`finish`]. Standard error is
//! best effort: a message that cannot be shown is dropped.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether standard output's reader has gone.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// The first failure to write standard output other than its reader going.
static FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

/// Prints a line of results, as `println!` does.
macro_rules! outln {
    () => {
        $crate::console::write_out(format_args!("\n"))
    };
    ($($argument:tt)*) => {
        $crate::console::write_out(format_args!("{}\n", format_args!($($argument)*)))
    };
}

/// Prints a line to standard error, as `eprintln!` does, dropping it when
/// standard error cannot take it.
macro_rules! errln {
    ($($argument:tt)*) => {
        $crate::console::write_error(format_args!("{}\n", format_args!($($argument)*)))
    };
}

pub(crate) use {errln, outln};

/// Writes `text` to standard output, unless it is closed.
pub fn write_out(text: fmt::Arguments<'_>) {
    if is_closed() {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(error) = stdout.write_fmt(text) {
        failed(error);
    }
}

/// Writes `text` to standard error and flushes it (progress bars redraw in
/// place); a failure is dropped, as there is nowhere left to report it.
pub fn write_error(text: fmt::Arguments<'_>) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_fmt(text).and_then(|()| stderr.flush());
}

/// Whether standard output's reader has gone, so a long listing can stop
/// doing work nobody will read.
pub fn is_closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

fn failed(error: io::Error) {
    if error.kind() == io::ErrorKind::BrokenPipe {
        CLOSED.store(true, Ordering::Relaxed);
        return;
    }
    let mut failure = FAILURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if failure.is_none() {
        *failure = Some(error);
    }
    // After a failure the output is incomplete whatever follows: stop
    // writing rather than leave a listing with holes.
    CLOSED.store(true, Ordering::Relaxed);
}

/// Flushes standard output.
///
/// # Errors
///
/// The first failure to write standard output other than its reader
/// going: the output is incomplete.
pub fn finish() -> io::Result<()> {
    if !is_closed()
        && let Err(error) = io::stdout().lock().flush()
    {
        failed(error);
    }
    let mut failure = FAILURE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    failure.take().map_or(Ok(()), Err)
}
