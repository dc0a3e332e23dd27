//! The fleet's remote tier as every command opens it, and the copies
//! between it and the disk store (`kiln push`, `kiln pull`): one reading of
//! `--remote`, `KILN_REMOTE_URL` and the keys for all of them.

use anyhow::{Result, anyhow};
use clap::Args;
use kiln_engine::KeyComponents;
use kiln_engine::store::BlobKey;
use kiln_remote::{BlobTransferReport, Keys, RemoteStore, TransferReport};
use kiln_store::{DiskStore, Progress};

use crate::output::Output;
use crate::progress::ProgressBar;
use crate::table::print_pairs;

/// The remote tier `url` (else `KILN_REMOTE_URL`) names with the
/// configured keys, or `None` when neither names one.
///
/// # Errors
///
/// A setting or key that cannot be read, or no key at all; the message
/// says how to make keys and never shows one.
pub fn open_remote(url: Option<&str>) -> Result<Option<RemoteStore>> {
    // The facade's reading, which a program's default store uses too.
    Ok(kiln::Store::fleet_from_env(url)?)
}

/// The remote tier a copy works with: one must be named.
pub fn required_remote(url: Option<&str>) -> Result<RemoteStore> {
    open_remote(url)?.ok_or_else(|| {
        anyhow!("no remote tier: pass --remote redis://HOST:PORT or set KILN_REMOTE_URL")
    })
}

/// The remote tier's keys configured here, for bundles: none at all is no
/// error (an export is then unsigned, an import trusts nothing signed).
///
/// # Errors
///
/// A key is set and cannot be read; the message names the variable, never
/// the key.
pub fn configured_keys() -> Result<Keys> {
    match Keys::from_env() {
        Ok(keys) => Ok(keys),
        Err(kiln_remote::Error::NoKey) => Ok(Keys::default()),
        Err(error) => Err(anyhow!("reading the signing keys: {error}")),
    }
}

/// Picks one of the compilers a store holds entries of, by any of its
/// components.
#[derive(Debug, Clone, Args)]
pub struct CompilerChoice {
    /// The backend: cuda, hip, wgpu.
    #[arg(long)]
    pub backend: Option<String>,
    /// The compiler identity and version.
    #[arg(long)]
    pub compiler: Option<String>,
    /// The architecture.
    #[arg(long = "arch")]
    pub architecture: Option<String>,
}

impl CompilerChoice {
    /// Whether any component was given.
    pub fn is_given(&self) -> bool {
        self.backend.is_some() || self.compiler.is_some() || self.architecture.is_some()
    }

    /// Whether `components` agrees with every component given.
    pub fn matches(&self, components: &KeyComponents) -> bool {
        let agrees = |given: &Option<String>, actual: &str| {
            given.as_deref().is_none_or(|given| given == actual)
        };
        agrees(&self.backend, &components.backend)
            && agrees(&self.compiler, &components.compiler)
            && agrees(&self.architecture, &components.architecture)
    }

    /// Whether the named blob `key` is chosen: every blob when no component
    /// was given, else only a blob whose key names each given component
    /// with the value given (a warm-start profile of that compiler).
    pub fn matches_blob(&self, key: &BlobKey) -> bool {
        let named = |name: &str| {
            key.components
                .iter()
                .find(|(component, _)| component == name)
                .map(|(_, value)| value.as_str())
        };
        let agrees = |given: &Option<String>, name: &str| {
            given
                .as_deref()
                .is_none_or(|given| named(name) == Some(given))
        };
        agrees(&self.backend, "backend")
            && agrees(&self.compiler, "compiler")
            && agrees(&self.architecture, "architecture")
    }
}

/// `--remote URL`, else `KILN_REMOTE_URL`: the remote tier of `kiln warm`,
/// `push`, `pull` and `stats`; its value never shown in help, as a URL
/// may hold a password.
#[derive(Debug, Args)]
pub struct RemoteUrl {
    /// The fleet's shared remote tier: `redis://HOST:PORT` or
    /// `redis+cluster://HOST:PORT,...`. Its keys come from
    /// KILN_REMOTE_KEY, KILN_REMOTE_SIGNING_KEY and
    /// KILN_REMOTE_TRUSTED_KEYS (`kiln keygen --help`): a command that
    /// needs them and finds none stops before it starts.
    #[arg(
        long = "remote",
        id = "remote",
        value_name = "URL",
        env = "KILN_REMOTE_URL",
        hide_env_values = true
    )]
    pub url: Option<String>,
}

/// `kiln push` and `kiln pull` options.
#[derive(Debug, Args)]
pub struct TransferArguments {
    #[command(flatten)]
    pub remote: crate::remote::RemoteUrl,
    /// Copy only the entries of this compiler (any of its components).
    #[command(flatten)]
    pub compiler: CompilerChoice,
}

/// A copy between `store` and the remote tier `arguments` name, of the
/// entries they choose, with a progress bar labelled `label`.
pub type Copy = fn(
    &DiskStore,
    &RemoteStore,
    &dyn Fn(&kiln_engine::StoreKey) -> bool,
    &mut dyn FnMut(&Progress),
) -> kiln_remote::Result<TransferReport>;

/// Runs `copy` between `store` and the remote tier `arguments` name, with
/// a progress bar labelled `label`.
pub fn transfer(
    store: &DiskStore,
    arguments: &TransferArguments,
    label: &'static str,
    copy: Copy,
) -> Result<(TransferReport, RemoteStore)> {
    let remote = required_remote(arguments.remote.url.as_deref())?;
    let mut bar = ProgressBar::new(label);
    let report = copy(
        store,
        &remote,
        &|key| arguments.compiler.matches(&key.components),
        &mut |progress| bar.update(progress),
    )?;
    drop(bar);
    Ok((report, remote))
}

/// A copy of named blobs between a disk store and the remote tier.
pub type BlobCopy = fn(
    &DiskStore,
    &RemoteStore,
    &dyn Fn(&BlobKey) -> bool,
    &mut dyn FnMut(&Progress),
) -> kiln_remote::Result<BlobTransferReport>;

/// Runs `copy` of the named blobs (profiles, tuning answers, pipeline
/// caches) `arguments` choose between `store` and `remote`, with a progress
/// bar labelled `label`: after the kernels, so a node that pulls starts
/// warm (P15).
pub fn transfer_blobs(
    store: &DiskStore,
    remote: &RemoteStore,
    arguments: &TransferArguments,
    label: &'static str,
    copy: BlobCopy,
) -> Result<BlobTransferReport> {
    let mut bar = ProgressBar::new(label);
    let report = copy(
        store,
        remote,
        &|key| arguments.compiler.matches_blob(key),
        &mut |progress| bar.update(progress),
    )?;
    drop(bar);
    Ok(report)
}

/// Prints what a copy did: its kernels' entries and its named blobs.
pub fn print_transfer(
    report: &TransferReport,
    blobs: &BlobTransferReport,
    direction: &str,
    remote: &RemoteStore,
    output: &Output,
) -> Result<()> {
    #[derive(serde::Serialize)]
    struct Shown<'a> {
        remote: String,
        #[serde(flatten)]
        report: &'a TransferReport,
        blobs: &'a BlobTransferReport,
    }
    let shown = Shown {
        remote: remote.config().url_for_display(),
        report,
        blobs,
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
            (
                "named blobs",
                format!(
                    "{} of {} {direction} ({}), {} already held, {} refused, {} failed",
                    blobs.copied,
                    blobs.entries,
                    crate::format::bytes(blobs.bytes),
                    blobs.already_held,
                    blobs.refused,
                    blobs.failed + blobs.gone
                ),
            ),
        ]);
    })
}
