//! The system parts kiln's tests use for real — compilers, drivers,
//! servers — each checked for and installed when missing.
//!
//! Every part says how to tell it is present and how to install it. `test`
//! runs the installs before any test, and checks again afterwards, so a
//! missing install step fails here with the part's name rather than later as
//! a skipped or failing test.

use anyhow::{Result, bail};

/// One system part the tests need.
pub struct SystemPart {
    /// What it is, for messages.
    pub name: &'static str,
    /// Which tests need it.
    pub needed_by: &'static str,
    /// Whether it is installed.
    pub is_present: fn() -> bool,
    /// Installs it.
    pub install: fn() -> Result<()>,
    /// Environment variables the tests need to find it, once present.
    pub environment: fn() -> Vec<(String, String)>,
}

/// Every part the tests need. The backends add theirs as they land.
pub fn parts() -> Vec<SystemPart> {
    Vec::new()
}

/// Installs every missing part, checks each is present afterwards, and
/// returns the environment the tests need.
pub fn ensure_all() -> Result<Vec<(String, String)>> {
    let parts = parts();
    if parts.is_empty() {
        eprintln!("xtask: setup: no system parts are needed yet");
    }
    let mut environment = Vec::new();
    for part in parts {
        if (part.is_present)() {
            eprintln!("xtask: setup: {} is present", part.name);
        } else {
            eprintln!(
                "xtask: setup: installing {} (for {})",
                part.name, part.needed_by
            );
            (part.install)()?;
            if !(part.is_present)() {
                bail!(
                    "{} is still missing after its install step; the {} cannot run",
                    part.name,
                    part.needed_by
                );
            }
        }
        environment.extend((part.environment)());
    }
    Ok(environment)
}
