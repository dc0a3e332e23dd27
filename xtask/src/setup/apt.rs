//! Debian packages as system parts: checked with `dpkg-query`, installed
//! with `apt-get`.
//!
//! The package index is refreshed once per run of xtask, before the first
//! install, however many parts install packages: `apt-get update` is the
//! slow step, and one refresh serves them all.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};

/// Whether this run of xtask already refreshed the package index.
static INDEX_REFRESHED: AtomicBool = AtomicBool::new(false);

/// The packages of `packages` that are not installed. A machine without
/// `dpkg-query` (not Debian-based) has none of them.
pub fn missing(packages: &[&str]) -> Vec<String> {
    packages
        .iter()
        .filter(|package| !is_installed(package))
        .map(|package| (*package).to_owned())
        .collect()
}

/// Whether every package of `packages` is installed.
pub fn are_installed(packages: &[&str]) -> bool {
    missing(packages).is_empty()
}

fn is_installed(package: &str) -> bool {
    // `ii` is dpkg's "wanted: install, state: installed"; a package removed
    // but not purged reads `rc` and is missing.
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${db:Status-Abbrev}", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success() && output.stdout.starts_with(b"ii"))
}

/// Installs the packages of `packages` that are missing: `apt-get update`
/// once per run, then `apt-get install -y`. Runs through `sudo -n` when
/// xtask is not root.
///
/// # Errors
///
/// `apt-get` is missing or fails, or xtask is neither root nor allowed to
/// use `sudo` without a password.
pub fn install(packages: &[&str]) -> Result<()> {
    let missing = missing(packages);
    if missing.is_empty() {
        return Ok(());
    }
    if !INDEX_REFRESHED.load(Ordering::SeqCst) {
        apt_get(&["update"])?;
        INDEX_REFRESHED.store(true, Ordering::SeqCst);
    }
    let mut arguments = vec!["install", "-y", "--no-install-recommends"];
    arguments.extend(missing.iter().map(String::as_str));
    apt_get(&arguments)
}

/// Runs `apt-get` with `arguments`, as root.
fn apt_get(arguments: &[&str]) -> Result<()> {
    let mut command = if is_root() {
        Command::new("apt-get")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["-n", "apt-get"]);
        sudo
    };
    command
        .args(arguments)
        .env("DEBIAN_FRONTEND", "noninteractive");
    let shown = format!("apt-get {}", arguments.join(" "));
    eprintln!("xtask: {shown}");
    let status = command
        .status()
        .with_context(|| format!("could not start {shown} (is this a Debian-based system?)"))?;
    if !status.success() {
        bail!("{shown} failed ({status}); install the packages by hand and run again");
    }
    Ok(())
}

/// Whether xtask runs as root (then it installs without `sudo`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}
