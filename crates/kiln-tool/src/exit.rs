//! The command's exit codes, and the error that carries one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | everything asked was done |
//! | 1 | the command could not do its work: the store cannot be opened, a file cannot be read or written, a value is wrong |
//! | 2 | the command line is wrong: an unknown option, a missing or malformed value |
//! | 3 | `warm`: a kernel or a kernel file failed (every other kernel was compiled and stored); `verify --recompile`: a kernel compiled again to other bytes than stored |
//! | 4 | `warm`: a backend named by `--require` is unavailable |
//! | 5 | `coverage`: less of what the program needs is present than `--require` asks |
//!
//! Where several apply, the larger code is given.

use std::fmt;

/// Everything asked was done.
pub const SUCCESS: i32 = 0;
/// The command could not do its work.
pub const ERROR: i32 = 1;
/// The command line is wrong.
pub const USAGE: i32 = 2;
/// A kernel or kernel file failed; or compiled again to other bytes.
pub const KERNELS_FAILED: i32 = 3;
/// A backend named by `--require` is unavailable.
pub const REQUIRED_UNAVAILABLE: i32 = 4;
/// Less of what a program needs is present than `coverage --require` asks.
pub const COVERAGE_SHORT: i32 = 5;

/// The table above, for `kiln --help`.
pub const TABLE: &str = "\
Exit codes:
  0  everything asked was done
  1  the command could not do its work: the store cannot be opened, a file
     cannot be read or written, a value is wrong
  2  the command line is wrong: an unknown option, a missing or malformed value
  3  warm: a kernel or a kernel file failed (every other kernel was compiled
     and stored); verify --recompile: a kernel compiled again to other bytes
     than stored
  4  warm: a backend named by --require is unavailable
  5  coverage: less of what the program needs is present than --require asks
Where several apply, the larger code is given.";

/// An error that ends the command with `code` rather than [`ERROR`].
#[derive(Debug)]
pub struct Exit {
    /// The exit code.
    pub code: i32,
    /// What to tell the user.
    pub message: String,
    /// Whether the command's output already says it (`warm`'s report
    /// lists the failed kernels): under `--json`, no error object follows
    /// it, so standard output stays one JSON value.
    pub reported: bool,
}

impl Exit {
    /// An error ending the command with `code`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            reported: false,
        }
    }

    /// The same error, said already by the command's output.
    pub fn reported(self) -> Self {
        Self {
            reported: true,
            ..self
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// Whether the command's output already says `error`.
pub fn is_reported(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<Exit>()
        .is_some_and(|exit| exit.reported)
}

/// The exit code `error` ends the command with.
pub fn code_of(error: &anyhow::Error) -> i32 {
    error.downcast_ref::<Exit>().map_or(ERROR, |exit| exit.code)
}
