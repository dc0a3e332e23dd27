//! Tests that need hardware, a library or a privilege say so: they skip
//! with a printed reason, unless a `KILN_REQUIRE_*` variable turns the
//! skip into a failure.

pub use kiln_core::conformance::skip;

/// Whether any of `variables` is set to `1`: the missing part must then
/// fail the test rather than skip it.
pub fn is_required(variables: &[&str]) -> bool {
    variables
        .iter()
        .any(|variable| std::env::var(variable).is_ok_and(|value| value == "1"))
}

/// Whether this process runs as root, which mounts, changes users and
/// lifts limits; tests that need it skip without it.
pub fn is_root() -> bool {
    // SAFETY: `geteuid` reads this process's effective user id and has no
    // preconditions.
    unsafe { libc::geteuid() == 0 }
}
