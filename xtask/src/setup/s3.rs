//! A real S3 server for the object-store tier's tests: Garage, built from
//! crates.io with `cargo install` into the target directory (so a machine
//! builds it once, and `cargo clean` removes it), and started by the tests
//! themselves as a single node on loopback ports.
//!
//! Garage is the S3 implementation that builds from a registry reachable
//! here with nothing but cargo; its build is long (12 minutes or more on two
//! cores), so it runs at the lowest priority and only when the binary is
//! missing.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Garage release the tests are written against.
pub const VERSION: &str = "2.5.0";

/// Where `cargo install` puts it: `kiln-s3` in the target directory.
pub fn root() -> PathBuf {
    super::target_directory().join("kiln-s3")
}

/// The `garage` binary.
pub fn binary() -> PathBuf {
    root().join("bin").join("garage")
}

/// Whether the binary is there.
pub fn is_present() -> bool {
    binary().is_file()
}

/// `nice -n 19 cargo install garage --version VERSION --locked --root
/// ROOT`: the lowest priority, so that a machine shared by other builds
/// stays usable while it compiles.
pub fn install() -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new("nice")
        .args(["-n", "19"])
        .arg(&cargo)
        .args([
            "install",
            "garage",
            "--version",
            VERSION,
            "--locked",
            "--root",
        ])
        .arg(root())
        .status()
        .context("cannot run `nice cargo install garage`")?;
    if !status.success() {
        bail!("`cargo install garage --version {VERSION} --locked` failed ({status})");
    }
    Ok(())
}

/// The environment the tests need: the binary's path, and the skip turned
/// into a failure, since setup installed it.
pub fn environment() -> Vec<(String, String)> {
    vec![
        ("KILN_GARAGE".to_owned(), binary().display().to_string()),
        ("KILN_REQUIRE_S3".to_owned(), "1".to_owned()),
    ]
}
