//! Reading hipRTC's log into diagnostics (D1, D2).
//!
//! hipRTC prints clang's diagnostics: `path:line:column: severity: message`,
//! each followed by the source line and a caret, plus lines without a place
//! for option errors and a closing count. The path is a file comgr wrote in
//! a temporary directory: `.../input/CompileSource` for the program and
//! `.../include/<name>` for a header, which becomes the header's include
//! name. hipRTC appends one line per name expression after the program
//! (`extern "C" constexpr auto __hiprtc_1 = <expression>;`), so an error
//! past the program's last line is about the entry point, not the source.

use kiln_engine::{CompileFailure, Diagnostic, Location, Severity};

/// What clang calls its severities, longest first so `fatal error` is not
/// read as `error`.
const SEVERITIES: [&str; 5] = ["fatal error", "error", "warning", "note", "remark"];

/// The names comgr and hipRTC give the program's own file.
const PROGRAM_FILES: [&str; 2] = ["CompileSource", crate::program::PROGRAM_NAME];

/// The diagnostics of `log`, for a program of `source_lines` lines whose
/// entry points are `entries`.
pub fn parse(log: &str, source_lines: usize, entries: &[&str]) -> Vec<Diagnostic> {
    log.lines()
        .filter_map(|line| parse_line(line, source_lines, entries))
        .collect()
}

/// The entry of `entries` that `message` names (`'scann'`), if any.
fn named_entry<'a>(message: &str, entries: &[&'a str]) -> Option<&'a str> {
    entries.iter().copied().find(|entry| {
        let name = entry.split('<').next().unwrap_or(entry).trim();
        let base = name.rsplit("::").next().unwrap_or(name);
        !base.is_empty() && (message.contains(&format!("'{base}'")) || message.contains(name))
    })
}

fn parse_line(line: &str, source_lines: usize, entries: &[&str]) -> Option<Diagnostic> {
    let (location, rest) = split_location(line)?;
    let (severity, message) = SEVERITIES.iter().find_map(|word| {
        let message = rest.strip_prefix(word)?.strip_prefix(": ")?;
        Some((Severity::from_native(word), message))
    })?;
    let mut diagnostic = Diagnostic {
        severity,
        message: message.trim_end().to_owned(),
        location,
    };
    if let Some(location) = &diagnostic.location
        && location.file.is_none()
        && location.line as usize > source_lines
    {
        // The line is one hipRTC appended for an entry point: pointing at
        // it would name a line the user never wrote. Which entry, the
        // message says; one that names none is the source's (a header's
        // unclosed brace reaches the appended lines too).
        diagnostic.location = None;
        diagnostic.message = match named_entry(&diagnostic.message, entries) {
            Some(entry) => format!("in the entry point `{entry}`: {}", diagnostic.message),
            None => format!("past the source's last line: {}", diagnostic.message),
        };
    }
    Some(diagnostic)
}

/// Splits `path:line:column: ` off a line; a line that starts with a
/// severity has no location. `None` when the line is not a diagnostic.
fn split_location(line: &str) -> Option<(Option<Location>, &str)> {
    if SEVERITIES
        .iter()
        .any(|word| line.starts_with(word) && line[word.len()..].starts_with(": "))
    {
        return Some((None, line));
    }
    for (at, _) in line.match_indices(": ") {
        let rest = &line[at + 2..];
        if !SEVERITIES.iter().any(|word| rest.starts_with(word)) {
            continue;
        }
        if let Some(location) = read_location(&line[..at]) {
            return Some((Some(location), rest));
        }
    }
    None
}

/// Reads `path:line:column` or `path:line`.
fn read_location(text: &str) -> Option<Location> {
    let mut parts = text.rsplitn(3, ':');
    let last = parts.next()?;
    let middle = parts.next()?;
    let (path, line, column) = match (parts.next(), middle.parse::<u32>()) {
        (Some(path), Ok(line)) => (path, line, Some(last.parse::<u32>().ok()?)),
        _ => {
            // `path:line`, where the path itself may hold a colon.
            let path = text.rsplit_once(':')?.0;
            (path, last.parse::<u32>().ok()?, None)
        }
    };
    Some(Location {
        file: file_name(path),
        line,
        column,
    })
}

/// The name a user knows a file by: none for the program itself, the
/// include name for a header.
fn file_name(path: &str) -> Option<String> {
    if PROGRAM_FILES
        .iter()
        .any(|program| path == *program || path.ends_with(&format!("/{program}")))
    {
        return None;
    }
    match path.rsplit_once("/include/") {
        Some((_, include_name)) => Some(include_name.to_owned()),
        None => Some(path.to_owned()),
    }
}

/// The failure of a compile whose log is `log`, with a hint when the cause
/// is configuration rather than source.
pub fn failure(log: &str, source_lines: usize, entries: &[&str]) -> CompileFailure {
    let diagnostics = parse(log, source_lines, entries);
    let first_error = diagnostics
        .iter()
        .find(|diagnostic| diagnostic.severity == Severity::Error);
    let hint = first_error.and_then(|first| {
        if let Some(entry) = first
            .message
            .strip_prefix("in the entry point `")
            .and_then(|rest| rest.split_once("`: "))
            .map(|(entry, _)| entry)
        {
            Some(format!(
                "the entry point `{entry}` must name a __global__ function, or an instantiation \
                 of a __global__ template, that the source declares"
            ))
        } else if log.contains("<inline asm>") {
            Some(
                "the source's inline assembly does not assemble for an AMD GPU (CUDA's PTX is \
                 NVIDIA's): keep CUDA-only code out of HIP"
                    .to_owned(),
            )
        } else if first.location.is_none() {
            Some(
                "hipRTC refused an option: check the kernel's HipOptions (std, defines, flags)"
                    .to_owned(),
            )
        } else {
            None
        }
    });
    let failure = CompileFailure::new(diagnostics).with_log(log);
    match hint {
        Some(hint) => failure.with_hint(hint),
        None => failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A log as ROCm 5.2's hipRTC printed it for a broken program.
    const SYNTAX_LOG: &str = "\
/tmp/comgr-0e3f26/input/CompileSource:1:52: error: expected ';' after expression
extern \"C\" __global__ void k(float* x){ x[0] = 1.0f int y = z; }
                                                   ^
                                                   ;
/tmp/comgr-0e3f26/input/CompileSource:1:61: error: use of undeclared identifier 'z'
extern \"C\" __global__ void k(float* x){ x[0] = 1.0f int y = z; }
                                                            ^
/tmp/comgr-0e3f26/input/CompileSource:3:2: warning: hello [-W#warnings]
#warning hello
 ^
1 warning and 2 errors generated when compiling for gfx90a.
";

    // D1, D2
    #[test]
    fn a_hiprtc_log_becomes_located_diagnostics() {
        let diagnostics = parse(SYNTAX_LOG, 3, &["k"]);
        assert_eq!(diagnostics.len(), 3, "{diagnostics:?}");
        assert_eq!(
            diagnostics[0].to_string(),
            "1:52: error: expected ';' after expression"
        );
        assert_eq!(diagnostics[1].severity, Severity::Error);
        assert_eq!(diagnostics[2].severity, Severity::Warning);
        let failure = failure(SYNTAX_LOG, 3, &["k"]);
        assert_eq!(
            failure.to_string(),
            "1:52: error: expected ';' after expression (1 more error suppressed)"
        );
        assert_eq!(failure.log, SYNTAX_LOG, "the raw log stays on the failure");
    }

    // D2
    #[test]
    fn an_error_in_a_header_names_the_header() {
        let log = "In file included from /tmp/comgr-5e999a/input/CompileSource:1:\n\
                   /tmp/comgr-5e999a/include/my/ops.h:1:45: error: expected ';' after return statement\n";
        let diagnostics = parse(log, 2, &["k"]);
        assert_eq!(
            diagnostics[0].to_string(),
            "my/ops.h:1:45: error: expected ';' after return statement"
        );
    }

    // D2
    #[test]
    fn an_unknown_entry_point_is_reported_as_one_with_a_hint() {
        let log = "/tmp/comgr-9d61b9/input/CompileSource:2:40: error: use of undeclared identifier 'missing'\n\
                   extern \"C\" constexpr auto __hiprtc_1 = missing;\n";
        let failure = failure(log, 1, &["missing"]);
        let message = failure.to_string();
        assert!(
            message
                .starts_with("error: in the entry point `missing`: use of undeclared identifier"),
            "{message}"
        );
        assert!(
            message.contains("hint: the entry point `missing`"),
            "{message}"
        );
    }

    // D2: the misspelt entry is named, not the first; and an error past
    // the source's end that names no entry gets no entry point hint.
    #[test]
    fn an_error_past_the_source_names_the_entry_it_is_about_or_none() {
        let log = "/tmp/comgr-9d61b9/input/CompileSource:3:40: error: use of undeclared identifier 'scann'\n";
        let message = failure(log, 1, &["reduce<64>", "scann"]).to_string();
        assert!(
            message.starts_with("error: in the entry point `scann`:"),
            "{message}"
        );
        assert!(
            message.contains("hint: the entry point `scann`"),
            "{message}"
        );
        let log = "/tmp/comgr-9d61b9/input/CompileSource:4:1: error: expected '}'\n";
        let message = failure(log, 2, &["k"]).to_string();
        assert!(message.contains("past the source's last line"), "{message}");
        assert!(!message.contains("entry point"), "{message}");
    }

    // D2: comgr's inline-assembly error is no option's.
    #[test]
    fn an_inline_assembly_error_says_so_rather_than_blaming_an_option() {
        let log = "error: cannot compile inline asm
                   <inline asm>:1:2: error: invalid instruction
";
        let message = failure(log, 1, &["k"]).to_string();
        assert!(message.contains("inline assembly"), "{message}");
        assert!(!message.contains("refused an option"), "{message}");
    }

    // D1, D2
    #[test]
    fn an_option_error_has_no_place_and_a_hint() {
        let log = "error: invalid value 'c++99x' in '-std=c++99x'\n\
                   note: use 'c++17' for 'ISO C++ 2017 with amendments' standard\n";
        let failure = failure(log, 1, &["k"]);
        assert_eq!(failure.diagnostics.len(), 2);
        assert_eq!(failure.diagnostics[1].severity, Severity::Note);
        assert!(
            failure
                .to_string()
                .contains("hint: hipRTC refused an option")
        );
    }

    // D1
    #[test]
    fn a_fatal_error_is_an_error() {
        let diagnostics = parse(
            "/x/input/CompileSource:1:10: fatal error: 'missing.h' file not found\n",
            1,
            &["k"],
        );
        assert_eq!(diagnostics[0].severity, Severity::Error);
        assert_eq!(diagnostics[0].message, "'missing.h' file not found");
    }

    #[test]
    fn source_lines_that_mention_errors_are_not_diagnostics() {
        let diagnostics = parse("    printf(\"error: %d\", x);\n  ^\n", 1, &["k"]);
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
    }
}
