//! `kiln push`: copies the disk store's artifacts to the fleet's remote
//! tier, each signed with this machine's key (P10, docs/FLEET.md). A node
//! that holds no signing key cannot push, and is told how to get one.

use anyhow::{Result, anyhow};
use clap::Args;
use kiln_remote::{RemoteConfig, RemoteStore, TransferReport};
use kiln_store::DiskStore;

use super::Output;
use super::export::CompilerChoice;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// `kiln push` and `kiln pull` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The remote tier: `redis://HOST:PORT` or
    /// `redis+cluster://HOST:PORT,...`; default: KILN_REMOTE_URL. Its keys
    /// come from KILN_REMOTE_KEY, KILN_REMOTE_SIGNING_KEY and
    /// KILN_REMOTE_TRUSTED_KEYS.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Copy only the entries of this compiler (any of its components).
    #[command(flatten)]
    pub compiler: CompilerChoice,
}

/// The remote tier `url` (else `KILN_REMOTE_URL`) names with the
/// configured keys, or `None` when neither names one.
///
/// # Errors
///
/// A setting or key that cannot be read, or no key at all; the message
/// says how to make keys and never shows one.
pub fn open_remote(url: Option<&str>) -> Result<Option<RemoteStore>> {
    let config = RemoteConfig::from_env_with_url(url)
        .map_err(|error| anyhow!("the remote tier cannot start: {error}"))?;
    config
        .map(RemoteStore::open)
        .transpose()
        .map_err(|error| anyhow!("the remote tier cannot start: {error}"))
}

/// The remote tier a copy works with: one must be named.
pub fn required_remote(url: Option<&str>) -> Result<RemoteStore> {
    open_remote(url)?.ok_or_else(|| {
        anyhow!("no remote tier: pass --remote redis://HOST:PORT or set KILN_REMOTE_URL")
    })
}

/// Prints what a copy did.
pub fn print_report(
    report: &TransferReport,
    direction: &str,
    remote: &RemoteStore,
    output: &Output,
) -> Result<()> {
    #[derive(serde::Serialize)]
    struct Shown<'a> {
        remote: String,
        #[serde(flatten)]
        report: &'a TransferReport,
    }
    let shown = Shown {
        remote: remote.config().url_for_display(),
        report,
    };
    output.print(&shown, || {
        print_pairs(&[
            ("remote", shown.remote.clone()),
            ("entries", report.entries.to_string()),
            (direction, report.copied.to_string()),
            ("bytes", crate::format::bytes(report.bytes)),
            ("already held", report.already_held.to_string()),
            ("refused, did not verify", report.refused.to_string()),
            ("gone meanwhile", report.gone.to_string()),
            ("failed", report.failed.to_string()),
            (
                "nondeterministic, kept theirs",
                report.conflicts.to_string(),
            ),
        ]);
    })
}

/// Pushes every chosen artifact of `store` to the remote.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let remote = required_remote(arguments.remote.as_deref())?;
    let mut bar = ProgressBar::new("push");
    let report = kiln_remote::push(
        store,
        &remote,
        &|key| arguments.compiler.matches(&key.components),
        &mut |progress| bar.update(progress),
    )?;
    drop(bar);
    print_report(&report, "pushed", &remote, output)
}
