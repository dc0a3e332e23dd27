//! A preprocessor define: the rule that keeps it one macro.
//!
//! A define reaches a compiler (NVRTC, hipRTC) as one `-DNAME=VALUE`
//! argument, and a WGSL constant or a manifest's specialization is named
//! the same way. [`check`] refuses a name that is not a C identifier
//! (`-include /etc/passwd`, `X -DY`, `A=B`), so that no part of it reaches
//! the compiler as an option of its own, and a value holding a NUL byte (a
//! compiler's options are C strings) or a line break (a macro defined
//! outside the source is one line). Anything else in a value, spaces and
//! dashes included, is the macro's text.

/// Why a define would not reach its compiler as one macro. Its text
/// follows the define's name: "the define \"A=B\" is not an identifier ...".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DefineProblem {
    /// The name is not a C identifier (see [`is_identifier`]).
    #[error(
        "is not an identifier ([A-Za-z_][A-Za-z0-9_]*): a define's name must be one, so that \
         no part of it reaches {compiler} as an option of its own"
    )]
    NotAnIdentifier {
        /// The compiler the define was for, as its users know it.
        compiler: &'static str,
    },
    /// The value holds a NUL byte.
    #[error("has a NUL byte in its value, which {compiler}'s options (C strings) cannot carry")]
    NulInValue {
        /// The compiler the define was for, as its users know it.
        compiler: &'static str,
    },
    /// The value holds a line break (`\n` or `\r`).
    #[error("has a line break in its value; a macro defined outside the source is one line")]
    LineBreakInValue,
}

/// Checks that the define `name`, with `value` when it has one, reaches
/// `compiler` (`"NVRTC"`, `"hipRTC"`: the name its problem gives) as one
/// macro.
///
/// ```
/// use kiln_engine::define::{self, DefineProblem};
///
/// assert_eq!(define::check("TILE", Some("16 -include x.h"), "NVRTC"), Ok(()));
/// assert_eq!(
///     define::check("A=B", None, "NVRTC"),
///     Err(DefineProblem::NotAnIdentifier { compiler: "NVRTC" }),
/// );
/// ```
///
/// # Errors
///
/// The [`DefineProblem`] of a name that is not an identifier, else of a
/// value holding a NUL byte, else of one holding a line break.
pub fn check(name: &str, value: Option<&str>, compiler: &'static str) -> Result<(), DefineProblem> {
    if !is_identifier(name) {
        Err(DefineProblem::NotAnIdentifier { compiler })
    } else if value.is_some_and(|value| value.contains('\0')) {
        Err(DefineProblem::NulInValue { compiler })
    } else if value.is_some_and(|value| value.contains(['\n', '\r'])) {
        Err(DefineProblem::LineBreakInValue)
    } else {
        Ok(())
    }
}

/// Whether `name` is a C identifier, and so can be a macro or constant
/// name: a letter or `_`, then letters, digits and `_`
/// (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn is_identifier(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && characters.all(|rest| rest.is_ascii_alphanumeric() || rest == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_identifiers_are_define_names() {
        for name in ["A", "_a", "a_1", "__CUDA", "__HIP"] {
            assert!(is_identifier(name), "{name:?}");
            assert_eq!(check(name, None, "NVRTC"), Ok(()), "{name:?}");
        }
        for name in ["", "1A", "A B", "-O3", "A=B", "A-B", "X\nY", "é"] {
            assert!(!is_identifier(name), "{name:?}");
            assert_eq!(
                check(name, None, "NVRTC"),
                Err(DefineProblem::NotAnIdentifier { compiler: "NVRTC" }),
                "{name:?}"
            );
        }
    }

    #[test]
    fn a_value_is_macro_text_whatever_it_holds_but_a_nul_or_a_line_break() {
        for value in ["1", "", "1 -include /etc/passwd", "a--b \"c\" \t'd'"] {
            assert_eq!(check("PROBE", Some(value), "hipRTC"), Ok(()), "{value:?}");
        }
        assert_eq!(
            check("PROBE", Some("1\0"), "hipRTC"),
            Err(DefineProblem::NulInValue { compiler: "hipRTC" })
        );
        for value in ["1\n2", "1\r2", "1\r\n"] {
            assert_eq!(
                check("PROBE", Some(value), "hipRTC"),
                Err(DefineProblem::LineBreakInValue),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_bad_name_is_reported_before_a_bad_value() {
        assert_eq!(
            check("A B", Some("1\0\n"), "NVRTC"),
            Err(DefineProblem::NotAnIdentifier { compiler: "NVRTC" })
        );
        assert_eq!(
            check("A", Some("1\0\n"), "NVRTC"),
            Err(DefineProblem::NulInValue { compiler: "NVRTC" })
        );
    }

    #[test]
    fn a_problem_names_the_compiler_the_define_was_for() {
        assert_eq!(
            DefineProblem::NotAnIdentifier { compiler: "NVRTC" }.to_string(),
            "is not an identifier ([A-Za-z_][A-Za-z0-9_]*): a define's name must be one, so \
             that no part of it reaches NVRTC as an option of its own"
        );
        assert_eq!(
            DefineProblem::NulInValue { compiler: "hipRTC" }.to_string(),
            "has a NUL byte in its value, which hipRTC's options (C strings) cannot carry"
        );
        assert_eq!(
            DefineProblem::LineBreakInValue.to_string(),
            "has a line break in its value; a macro defined outside the source is one line"
        );
    }
}
