//! Tests that need hardware, a library or a privilege say so: they skip
//! with a printed reason, unless a `KILN_REQUIRE_*` variable turns the
//! skip into a failure.
//!
//! Every skip goes through [`skip`] or [`skip_unless`], which print past
//! the test harness's capture: libtest shows what `eprintln!` printed only
//! for failing tests, so a skip printed that way is hidden in a passing
//! run, and a run that skipped everything reads as one that proved it.

use std::io::Write;

pub use kiln_engine::conformance::skip;

/// The variable that makes the tests which need root (a tmpfs mount, a
/// change of user, a limit only root may set) fail rather than skip:
/// `cargo xtask test` sets it when it runs as root, as CI does.
pub const REQUIRE_ROOT: &str = "KILN_REQUIRE_ROOT";

/// Whether any of `variables` is set to `1`: the missing part must then
/// fail the test rather than skip it.
pub fn is_required(variables: &[&str]) -> bool {
    first_required(variables, |variable| std::env::var(variable).ok()).is_some()
}

/// The first of `variables` whose value, as `value_of` reads it, is `1`.
fn first_required<'a>(
    variables: &[&'a str],
    value_of: impl Fn(&str) -> Option<String>,
) -> Option<&'a str> {
    variables
        .iter()
        .copied()
        .find(|variable| value_of(variable).is_some_and(|value| value == "1"))
}

/// Prints that `what` is skipped and why, or panics when one of
/// `variables` is `1`: the skip for a part other than a device, such as
/// root ([`REQUIRE_ROOT`]) or a compiler's report. ([`skip`] is the one
/// for a device, failing under `KILN_REQUIRE_DEVICE=1`.)
pub fn skip_unless(variables: &[&str], what: &str, reason: &str) {
    if let Some(variable) = first_required(variables, |variable| std::env::var(variable).ok()) {
        panic!("{what} cannot run and {variable}=1: {reason}");
    }
    skipped(what, reason);
}

/// Prints that `what` is skipped and why, for a skip that no variable
/// makes a failure (a second GPU, say, which the caller requires in its
/// own way).
pub fn skipped(what: &str, reason: &str) {
    say(&format!("skipped {what}: {reason}"));
}

/// As [`skip_unless`] for a test that needs root: it fails instead when
/// `KILN_REQUIRE_ROOT=1`.
pub fn skip_without_root(what: &str, reason: &str) {
    skip_unless(&[REQUIRE_ROOT], what, reason);
}

/// Prints `line` to the process's standard error, past the test harness's
/// capture, for what a passing run must show too (which GPU a test ran
/// on, what it fell back to).
pub fn say(line: &str) {
    // A closed standard error leaves nowhere to say it: nothing to do.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Whether this process runs as root, which mounts, changes users and
/// lifts limits; tests that need it skip without it.
pub fn is_root() -> bool {
    // SAFETY: `geteuid` reads this process's effective user id and has no
    // preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::first_required;

    #[test]
    fn only_a_variable_set_to_one_requires_the_test() {
        let environment = |variable: &str| match variable {
            "KILN_REQUIRE_ROOT" => Some("1".to_owned()),
            "KILN_REQUIRE_DEVICE" => Some("0".to_owned()),
            _ => None,
        };
        assert_eq!(
            first_required(&["KILN_REQUIRE_DEVICE", "KILN_REQUIRE_ROOT"], environment),
            Some("KILN_REQUIRE_ROOT")
        );
        assert_eq!(first_required(&["KILN_REQUIRE_DEVICE"], environment), None);
        assert_eq!(first_required(&["KILN_REQUIRE_REDIS"], environment), None);
    }
}
