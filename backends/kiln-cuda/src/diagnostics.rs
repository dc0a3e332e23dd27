//! Reading NVRTC's log into kiln's diagnostics.
//!
//! NVRTC prints each diagnostic as `name(line): severity: message`, then
//! the offending source line indented by two spaces, then a line holding
//! `^` under the column:
//!
//! ```text
//! saxpy.cu(3): error: expected a ";"
//!       y[i] = a * x[i]
//!       ^
//! ```
//!
//! Messages without a place come as `nvrtc: error: ...` (a bad option) or
//! from the assembler as `ptxas error   : ...`. Everything else in the log
//! (the closing count of errors, the remark on how to silence warnings) is
//! not a diagnostic, and neither are ptxas's `info` lines: they are its
//! resource report, which kiln-cuda asks for on every compile and reads
//! into figures (`resources`, D4) rather than passing on as remarks. A severity word the parser does not know becomes an
//! error (D1): a message is never dropped or ranked lower for being new.

use kiln_engine::{Diagnostic, Location, Severity};

/// The file NVRTC gives diagnostics about name expressions (entry points).
pub const NAME_EXPRESSION_FILE: &str = "__nv_name_map";

/// Every diagnostic in `log`, in order.
pub fn parse(log: &str) -> Vec<Diagnostic> {
    let lines: Vec<&str> = log.lines().collect();
    let mut diagnostics = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        index += 1;
        if let Some((file, line_number, severity, message)) = located(line) {
            // The echoed source line, then the caret under the column.
            let column = match (lines.get(index), lines.get(index + 1)) {
                (Some(echo), Some(caret)) if !echo.trim().is_empty() => {
                    caret_column(caret).inspect(|_| index += 2)
                }
                _ => None,
            };
            diagnostics.push(Diagnostic {
                severity,
                message: message.to_owned(),
                location: Some(Location {
                    file: Some(file.to_owned()),
                    line: line_number,
                    column,
                }),
            });
        } else if let Some((severity, message)) = unlocated(line) {
            let mut message = message.to_owned();
            // NVRTC continues some messages on indented lines.
            while let Some(next) = lines.get(index) {
                if next.starts_with("  ") && !next.trim().is_empty() && caret_column(next).is_none()
                {
                    message.push(' ');
                    message.push_str(next.trim());
                    index += 1;
                } else {
                    break;
                }
            }
            diagnostics.push(Diagnostic {
                severity,
                message,
                location: None,
            });
        }
    }
    diagnostics
}

/// `name(line): severity: message`.
fn located(line: &str) -> Option<(&str, u32, Severity, &str)> {
    let close = line.find("): ")?;
    let open = line[..close].rfind('(')?;
    let file = &line[..open];
    let line_number: u32 = line[open + 1..close].parse().ok()?;
    if file.is_empty() || file.starts_with(' ') {
        return None;
    }
    let rest = &line[close + 3..];
    let (word, message) = rest.split_once(": ")?;
    Some((file, line_number, severity(word), message.trim_end()))
}

/// `nvrtc: error: message` or `ptxas error   : message`.
fn unlocated(line: &str) -> Option<(Severity, &str)> {
    if let Some(rest) = line.strip_prefix("nvrtc: ") {
        let (word, message) = rest.split_once(": ")?;
        return Some((severity(word), message.trim_end()));
    }
    if line.starts_with("ptxas") {
        let (label, message) = line.split_once(':')?;
        let label = label.split_whitespace().collect::<Vec<_>>().join(" ");
        if label == "ptxas info" {
            return None;
        }
        return Some((Severity::from_native(&label), message.trim()));
    }
    None
}

/// NVRTC's severity word, without the warning number (`warning #177-D`).
fn severity(word: &str) -> Severity {
    let word = word.split('#').next().unwrap_or(word);
    Severity::from_native(word)
}

/// The one-based source column a caret line points at: NVRTC indents the
/// echoed source line by two spaces, and the caret by as much.
fn caret_column(line: &str) -> Option<u32> {
    let trimmed = line.trim_end();
    if !trimmed.ends_with('^') || trimmed[..trimmed.len() - 1].trim() != "" {
        return None;
    }
    let offset = trimmed.chars().count() - 1;
    u32::try_from(offset.saturating_sub(2) + 1).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // A log NVRTC 13.0 printed for a kernel with two syntax errors and an
    // unused variable: the parser's subject is its format.
    const LOG: &str = r#"kernel.cu(3): error: expected a ";"
      y[0] = x + undefined_thing;
      ^

kernel.cu(4): error: expected an expression
      int z = ;
              ^

kernel.cu(2): warning #177-D: variable "x" was declared but never referenced
      float x = 1.0f
            ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

2 errors detected in the compilation of "kernel.cu".
"#;

    // D1, D2
    #[test]
    fn nvrtc_diagnostics_are_read_with_severity_line_and_column() {
        let diagnostics = parse(LOG);
        assert_eq!(diagnostics.len(), 3, "{diagnostics:#?}");
        assert_eq!(diagnostics[0].severity, Severity::Error);
        assert_eq!(diagnostics[0].message, r#"expected a ";""#);
        assert_eq!(
            diagnostics[0].location,
            Some(Location {
                file: Some("kernel.cu".into()),
                line: 3,
                column: Some(5),
            })
        );
        assert_eq!(
            diagnostics[1].location.as_ref().map(|at| at.column),
            Some(Some(13))
        );
        assert_eq!(diagnostics[2].severity, Severity::Warning);
        assert_eq!(
            diagnostics[2].message,
            r#"variable "x" was declared but never referenced"#
        );
    }

    // D1
    #[test]
    fn an_unlocated_nvrtc_error_and_an_unknown_severity_are_errors() {
        let diagnostics = parse(
            "nvrtc: error: invalid value for --gpu-architecture (-arch)\n\
             kernel.cu(1): catastrophic error: cannot open source file \"missing.h\"\n\
             ptxas warning : Registers are spilled to local memory\n",
        );
        assert_eq!(diagnostics.len(), 3, "{diagnostics:#?}");
        assert_eq!(diagnostics[0].severity, Severity::Error);
        assert!(diagnostics[0].location.is_none());
        assert_eq!(diagnostics[1].severity, Severity::Error);
        assert_eq!(diagnostics[2].severity, Severity::Warning);
    }

    // D3, D4
    #[test]
    fn d4_ptxas_report_lines_are_no_diagnostics_and_its_warnings_are() {
        let diagnostics = parse(
            "ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24\n\
             ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
             ptxas info    : Function properties for k\n\
             ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
             ptxas info    : Used 24 registers, 1024 bytes smem\n",
        );
        assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
        assert_eq!(diagnostics[0].severity, Severity::Warning);
        assert!(diagnostics[0].message.starts_with("For profile sm_90"));
    }

    #[test]
    fn a_continued_message_is_joined() {
        let diagnostics = parse(
            "nvrtc: error: failed to open libnvrtc-builtins.so.13.0.\n  Make sure that libnvrtc-builtins.so.13.0 is installed correctly.",
        );
        assert_eq!(diagnostics.len(), 1);
        assert!(diagnostics[0].message.ends_with("installed correctly."));
    }
}
