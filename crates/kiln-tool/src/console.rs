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
//!
//! Progress bars are indicatif's, drawn by indicatif on standard error. A
//! message written while a bar is on screen ([`write_note`]) is written
//! inside the bar's `suspend`: indicatif clears the bar, the message stands
//! on a line of its own, and the bar is drawn again below it.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether standard output's reader has gone.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// The first failure to write standard output other than its reader going.
static FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

/// The progress bar on standard error now, if any.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

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
/// standard error cannot take it; a progress bar on screen is cleared
/// first.
macro_rules! errln {
    ($($argument:tt)*) => {
        $crate::console::write_note(format_args!($($argument)*))
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

/// Makes `bar` the one on screen: notes suspend it while they are written.
pub fn show_bar(bar: &indicatif::ProgressBar) {
    *lock(&BAR) = Some(bar.clone());
}

/// The bar is no longer on screen (the command has one at a time).
pub fn hide_bar() {
    *lock(&BAR) = None;
}

/// Writes a message line to standard error; a progress bar on screen is
/// cleared while it is written and drawn again below it, so the two never
/// share a line.
pub fn write_note(text: fmt::Arguments<'_>) {
    let write = || {
        let mut stderr = io::stderr().lock();
        let _ = writeln!(stderr, "{text}").and_then(|()| stderr.flush());
    };
    // Cloned out of the lock: the bar's own lock is taken in `suspend`.
    let bar = lock(&BAR).clone();
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
