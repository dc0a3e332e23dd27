//! naga's errors as kiln's diagnostics (D1, D2).
//!
//! naga stops at the first error it finds, so a failure carries one error
//! diagnostic, placed at the line and column of its primary span; the other
//! labelled spans and the notes become notes, and naga's own rendering of
//! the error (with the source excerpt) is the failure's log.

use kiln_engine::{CompileFailure, Diagnostic, Location, Severity};
use naga::back::pipeline_constants::PipelineConstantError;
use naga::front::wgsl::ParseError;
use naga::valid::ValidationError;
use naga::{Span, WithSpan};

/// A diagnostic of `severity` saying `message` at `span` of `source`.
fn located(
    severity: Severity,
    message: String,
    span: Option<Span>,
    source: &str,
    file: &str,
) -> Diagnostic {
    let location = span.filter(Span::is_defined).map(|span| {
        let at = span.location(source);
        Location {
            file: Some(file.to_owned()),
            line: at.line_number,
            column: Some(at.line_position),
        }
    });
    Diagnostic {
        severity,
        message,
        location,
    }
}

/// The failure of WGSL that does not parse.
pub fn parse_failure(error: &ParseError, source: &str, file: &str) -> CompileFailure {
    let mut labels = error.labels();
    let primary = labels.next();
    let mut message = error.message().to_owned();
    if let Some((_, label)) =
        primary.filter(|(_, label)| !label.is_empty() && !message.contains(label))
    {
        message = format!("{message}: {label}");
    }
    let mut diagnostics = vec![located(
        Severity::Error,
        message,
        primary.map(|(span, _)| span),
        source,
        file,
    )];
    for (span, label) in labels {
        diagnostics.push(located(
            Severity::Note,
            label.to_owned(),
            Some(span),
            source,
            file,
        ));
    }
    for note in error.notes() {
        diagnostics.push(Diagnostic {
            severity: Severity::Note,
            message: note.to_owned(),
            location: None,
        });
    }
    CompileFailure::new(diagnostics).with_log(error.emit_to_string_with_path(source, file))
}

/// The error and each error it wraps, joined: naga's validation errors
/// nest ("function `main` is invalid: expression [3] is invalid: ...").
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        cause = inner.source();
    }
    text
}

/// The failure of WGSL that parses and does not validate.
pub fn validation_failure(
    error: &WithSpan<ValidationError>,
    source: &str,
    file: &str,
) -> CompileFailure {
    let mut spans = error.spans();
    // The innermost span is the most precise place: naga lists the
    // function first and the offending expression after it.
    let all: Vec<_> = spans.by_ref().collect();
    let primary = all.iter().rev().find(|(span, _)| span.is_defined());
    let mut diagnostics = vec![located(
        Severity::Error,
        chain(error.as_inner()),
        primary.map(|(span, _)| *span),
        source,
        file,
    )];
    for (span, label) in &all {
        if !label.is_empty() {
            diagnostics.push(located(
                Severity::Note,
                label.clone(),
                Some(*span),
                source,
                file,
            ));
        }
    }
    CompileFailure::new(diagnostics).with_log(error.emit_to_string_with_path(source, file))
}

/// The failure of a SPIR-V module that naga read and does not validate: a
/// module has no lines, so the failure names the file and the entry point.
pub fn spirv_validation_failure(
    error: &WithSpan<ValidationError>,
    file: &str,
    entry: &str,
) -> CompileFailure {
    CompileFailure::message(format!(
        "{file}: naga refused the SPIR-V module of entry `{entry}`: {}",
        chain(error.as_inner())
    ))
    .with_hint(
        "naga validates the SPIR-V that wgpu can run; spirv-val says whether the module is \
         valid SPIR-V at all",
    )
}

/// The failure of constants that do not fit the shader's overrides.
pub fn constant_failure(
    error: &PipelineConstantError,
    module: &naga::Module,
    source: &str,
) -> CompileFailure {
    let declared = crate::constants::declared(module);
    let message = chain(error);
    match error {
        PipelineConstantError::NotFound(_) => CompileFailure::message(message).with_hint(format!(
            "set only constants the shader declares; {declared}"
        )),
        PipelineConstantError::MissingValue(_) => CompileFailure::message(message).with_hint(
            format!("an `override` without a default needs a value from the kernel; {declared}"),
        ),
        PipelineConstantError::ValidationError(inner) => {
            validation_failure(inner, source, "constants")
        }
        _ => CompileFailure::message(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // D1, D2
    #[test]
    fn a_parse_error_leads_with_its_line_and_column() {
        let source = "fn main() {\n    let x = 1\n    let y = 2;\n}\n";
        let error = naga::front::wgsl::parse_str(source).expect_err("a missing semicolon");
        let failure = parse_failure(&error, source, "broken.wgsl");
        let first = failure.first_error().expect("an error");
        assert_eq!(first.severity, Severity::Error);
        let location = first.location.as_ref().expect("a place");
        assert_eq!(location.line, 3, "{failure:?}");
        assert!(location.column.is_some());
        assert!(failure.log.contains("broken.wgsl"), "{}", failure.log);
    }

    // D2
    #[test]
    fn a_validation_error_names_the_nested_cause_at_its_place() {
        let source = "@compute @workgroup_size(1)\nfn main() {\n    let x: f32 = 1.0;\n    let y = x + 1u;\n}\n";
        let module = naga::front::wgsl::parse_str(source);
        let failure = match module {
            Err(error) => parse_failure(&error, source, "mixed.wgsl"),
            Ok(module) => {
                let error = naga::valid::Validator::new(
                    naga::valid::ValidationFlags::all(),
                    naga::valid::Capabilities::all(),
                )
                .validate(&module)
                .expect_err("f32 + u32 does not validate");
                validation_failure(&error, source, "mixed.wgsl")
            }
        };
        let first = failure.first_error().expect("an error");
        assert_eq!(
            first.location.as_ref().map(|at| at.line),
            Some(4),
            "{failure:?}"
        );
    }
}
