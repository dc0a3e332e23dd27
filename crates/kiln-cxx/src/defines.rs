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

/// The compiler's arguments for `defines`, in canonical order (by name;
/// defines of one name keep their order, so the last still wins): one
/// argument per define, whatever its value holds. A program that gives
/// the same defines in another order compiles the same arguments, and
/// shares the artifact. Unchecked; [`check`] checks.
pub fn arguments(defines: &[(String, Option<String>)]) -> impl Iterator<Item = String> + '_ {
    let mut sorted: Vec<&(String, Option<String>)> = defines.iter().collect();
    sorted.sort_by(|left, right| left.0.cmp(&right.0));
    sorted.into_iter().map(|(name, value)| match value {
        Some(value) => format!("-D{name}={value}"),
        None => format!("-D{name}"),
    })
}

/// Adds `define` to `defines` in canonical order: after every define whose
/// name sorts before it or equals it. Options kept this way hash alike
/// whatever order a program gave them in, so kernel ids agree too.
pub fn insert(defines: &mut Vec<(String, Option<String>)>, define: (String, Option<String>)) {
    let at = defines.partition_point(|(name, _)| *name <= define.0);
    defines.insert(at, define);
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
    fn each_define_is_one_argument_in_canonical_order() {
        let defines = defines(&[
            ("TILE", Some("16")),
            ("FAST", None),
            ("P", Some("1 -x")),
            ("FAST", Some("2")),
        ]);
        assert_eq!(
            arguments(&defines).collect::<Vec<_>>(),
            ["-DFAST", "-DFAST=2", "-DP=1 -x", "-DTILE=16"]
        );
    }

    #[test]
    fn defines_inserted_in_any_order_are_kept_alike() {
        let mut one = Vec::new();
        let mut other = Vec::new();
        for define in [("B", "1"), ("A", "2"), ("C", "3")] {
            insert(&mut one, (define.0.to_owned(), Some(define.1.to_owned())));
        }
        for define in [("C", "3"), ("B", "1"), ("A", "2")] {
            insert(&mut other, (define.0.to_owned(), Some(define.1.to_owned())));
        }
        assert_eq!(one, other);
        insert(&mut one, ("A".to_owned(), None));
        assert_eq!(one[1], ("A".to_owned(), None), "the later A stays later");
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
