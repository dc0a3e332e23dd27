//! A kernel's preprocessor defines, as a C++ compiler takes them: each one
//! `-DNAME` or `-DNAME=VALUE` argument, checked by [`kiln_engine::define`]'s
//! rule before it reaches the compiler.
//!
//! A define is `(name, value)`, no value for a bare `-DNAME`, as the
//! backends' options hold them (`CudaOptions::defines`,
//! `HipOptions::defines`).

use kiln_engine::DefineProblem;
use kiln_engine::define;

/// A define that would not reach its compiler as one macro: its name and
/// why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedDefine {
    /// The define's name, as given.
    pub name: String,
    /// Why it is refused.
    pub problem: DefineProblem,
}

/// Checks every define of `defines`, in order, by [`define::check`], for
/// `compiler` (`"NVRTC"`, `"hipRTC"`: the name a problem gives).
///
/// # Errors
///
/// The first define whose name is not a C identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`), or whose value holds a NUL byte or a line
/// break.
pub fn check(
    defines: &[(String, Option<String>)],
    compiler: &'static str,
) -> Result<(), RefusedDefine> {
    for (name, value) in defines {
        define::check(name, value.as_deref(), compiler).map_err(|problem| RefusedDefine {
            name: name.clone(),
            problem,
        })?;
    }
    Ok(())
}

/// The compiler's arguments for `defines`, in order: one argument per
/// define, whatever its value holds. Unchecked; [`check`] checks.
pub fn arguments(defines: &[(String, Option<String>)]) -> impl Iterator<Item = String> + '_ {
    defines.iter().map(|(name, value)| match value {
        Some(value) => format!("-D{name}={value}"),
        None => format!("-D{name}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defines(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn each_define_is_one_argument_in_order() {
        let defines = defines(&[("TILE", Some("16")), ("FAST", None), ("P", Some("1 -x"))]);
        assert_eq!(
            arguments(&defines).collect::<Vec<_>>(),
            ["-DTILE=16", "-DFAST", "-DP=1 -x"]
        );
    }

    #[test]
    fn the_first_refused_define_is_named_with_its_problem() {
        let defines = defines(&[("A", Some("1")), ("B C", None), ("D", Some("\0"))]);
        assert_eq!(
            check(&defines, "NVRTC"),
            Err(RefusedDefine {
                name: "B C".to_owned(),
                problem: DefineProblem::NotAnIdentifier { compiler: "NVRTC" },
            })
        );
        assert_eq!(check(&defines[..1], "NVRTC"), Ok(()));
    }
}
