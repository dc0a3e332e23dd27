//! What compilers say: diagnostics with a severity and a place, and the
//! summary a failed compile carries.
//!
//! A compile that fails often prints dozens of errors that all follow from
//! the first one. A failure therefore leads with that first error, where it
//! is, adds a hint when the cause is a configuration mistake rather than the
//! source, and counts the rest instead of printing them; every diagnostic
//! stays on the value for whoever wants them all.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How serious a diagnostic is, ordered `Note < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// A remark: register use, a spill, where a template was instantiated.
    Note,
    /// Something that compiled but may not do what was meant.
    Warning,
    /// Something that stops the compile.
    Error,
}

impl Severity {
    /// Reads a compiler's own word for a severity.
    ///
    /// A word this does not know is an error: a message a compiler thought
    /// worth printing with an unfamiliar label must never be dropped or
    /// ranked below the ones it knows.
    pub fn from_native(word: &str) -> Self {
        match word.trim().to_ascii_lowercase().as_str() {
            "note" | "remark" | "info" | "information" | "ptxas info" => Self::Note,
            "warning" | "warn" | "ptxas warning" => Self::Warning,
            _ => Self::Error,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Note => "note",
            Self::Warning => "warning",
            Self::Error => "error",
        })
    }
}

/// Where in the source a diagnostic points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The file or source name, when the compiler gave one.
    pub file: Option<String>,
    /// One-based line.
    pub line: u32,
    /// One-based column, when the compiler gave one.
    pub column: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
        }
        write!(f, "{}", self.line)?;
        if let Some(column) = self.column {
            write!(f, ":{column}")?;
        }
        Ok(())
    }
}

/// One message from a compiler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// How serious it is.
    pub severity: Severity,
    /// The compiler's message, without its location or severity prefix.
    pub message: String,
    /// Where it points, when known.
    pub location: Option<Location>,
}

impl Diagnostic {
    /// An error with no location.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Error,
            message: message.into(),
            location: None,
        }
    }

    /// A warning with no location.
    pub fn warning(message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            message: message.into(),
            location: None,
        }
    }

    /// The same diagnostic, pointing at `line` and `column` (one-based).
    pub fn at(mut self, line: u32, column: Option<u32>) -> Self {
        let file = self.location.take().and_then(|location| location.file);
        self.location = Some(Location { file, line, column });
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            write!(f, "{location}: ")?;
        }
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// Why a lower or finalize step failed: every diagnostic the compiler gave,
/// a hint when the cause is configuration, and the compiler's raw log.
///
/// Its message follows one shape whatever the backend:
/// `3:14: error: expected ';' (2 more errors suppressed; hint: ...)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileFailure {
    /// Every diagnostic, in the order the compiler gave them.
    pub diagnostics: Vec<Diagnostic>,
    /// What to change when the failure comes from configuration (an unknown
    /// architecture, a missing entry point) rather than from the source.
    pub hint: Option<String>,
    /// The compiler's log as it printed it, kept for whoever needs more.
    pub log: String,
    /// Whether the failure is the machine's rather than the kernel's (the
    /// compiler ran out of memory, a library call failed): such a failure
    /// is never remembered (P11), and the kernel compiles again next time.
    #[serde(default)]
    pub transient: bool,
}

impl CompileFailure {
    /// A failure made of `diagnostics`, with no hint and no raw log.
    pub fn new(diagnostics: Vec<Diagnostic>) -> Self {
        Self {
            diagnostics,
            hint: None,
            log: String::new(),
            transient: false,
        }
    }

    /// A failure with one error message and no location.
    pub fn message(message: impl Into<String>) -> Self {
        Self::new(vec![Diagnostic::error(message)])
    }

    /// The same failure with a configuration hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The same failure, marked as the machine's rather than the kernel's
    /// (see [`transient`](Self::transient)).
    pub fn not_the_kernels(mut self) -> Self {
        self.transient = true;
        self
    }

    /// The same failure with the compiler's raw log kept.
    pub fn with_log(mut self, log: impl Into<String>) -> Self {
        self.log = log.into();
        self
    }

    /// The first error, which every later one usually follows from.
    pub fn first_error(&self) -> Option<&Diagnostic> {
        self.diagnostics
            .iter()
            .find(|diagnostic| diagnostic.severity == Severity::Error)
    }

    /// How many errors come after the first one.
    pub fn suppressed_errors(&self) -> usize {
        self.errors().count().saturating_sub(1)
    }

    /// Every error.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|diagnostic| diagnostic.severity == Severity::Error)
    }
}

impl fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first_error() {
            Some(first) => write!(f, "{first}")?,
            None => match self.log.lines().find(|line| !line.trim().is_empty()) {
                // A compiler that failed without an error we could parse still
                // said something: its first line beats saying nothing.
                Some(line) => write!(f, "error: {}", line.trim())?,
                None => f.write_str("error: the compiler failed without a message")?,
            },
        }
        let suppressed = self.suppressed_errors();
        let mut notes = Vec::new();
        if suppressed > 0 {
            let plural = if suppressed == 1 { "" } else { "s" };
            notes.push(format!("{suppressed} more error{plural} suppressed"));
        }
        if let Some(hint) = &self.hint {
            notes.push(format!("hint: {hint}"));
        }
        if !notes.is_empty() {
            write!(f, " ({})", notes.join("; "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // D1
    #[test]
    fn severities_are_ordered_note_warning_error() {
        assert!(Severity::Note < Severity::Warning);
        assert!(Severity::Warning < Severity::Error);
    }

    // D1
    #[test]
    fn an_unknown_native_severity_is_an_error() {
        assert_eq!(Severity::from_native("catastrophe"), Severity::Error);
        assert_eq!(Severity::from_native("Warning"), Severity::Warning);
        assert_eq!(Severity::from_native("remark"), Severity::Note);
    }

    // D2
    #[test]
    fn a_failure_leads_with_its_first_error_and_counts_the_cascade() {
        let failure = CompileFailure::new(vec![
            Diagnostic::warning("unused variable").at(1, Some(3)),
            Diagnostic::error("expected ';'").at(3, Some(14)),
            Diagnostic::error("undeclared identifier").at(4, Some(1)),
            Diagnostic::error("undeclared identifier").at(5, Some(1)),
        ]);
        assert_eq!(
            failure.to_string(),
            "3:14: error: expected ';' (2 more errors suppressed)"
        );
        assert_eq!(
            failure.diagnostics.len(),
            4,
            "every diagnostic stays on the value"
        );
    }

    // D2
    #[test]
    fn a_configuration_mistake_carries_a_hint() {
        let failure = CompileFailure::message("unknown architecture sm_1")
            .with_hint("pass an architecture the compiler lists, such as sm_90");
        assert_eq!(
            failure.to_string(),
            "error: unknown architecture sm_1 (hint: pass an architecture the compiler lists, such as sm_90)"
        );
    }

    // D2
    #[test]
    fn a_failure_without_parsed_errors_shows_the_log() {
        let failure = CompileFailure::new(Vec::new()).with_log("\n  segfault in backend\nmore");
        assert_eq!(failure.to_string(), "error: segfault in backend");
    }
}
