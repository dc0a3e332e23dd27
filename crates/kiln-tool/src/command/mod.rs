//! The subcommands, one module each, and what they share: the store they
//! work on and its named blobs; how they print is [`crate::output`].

pub mod coverage;
pub mod explain;
pub mod export;
pub mod forget;
pub mod gc;
pub mod import;
pub mod job_manifest;
pub mod keygen;
pub mod ls;
pub mod profiles;
pub mod pull;
pub mod push;
pub mod records;
pub mod show;
pub mod stats;
pub mod tunes;
pub mod verify;
pub mod warm;

use std::path::Path;

use crate::console::outln;
use crate::output::Output;
use anyhow::{Context, Result, bail};
use kiln_engine::store::BlobKey;
use kiln_engine::{Blobs, StoreOutcome};
use kiln_store::{DiskStore, StoreConfig};
use serde::Serialize;

/// Writes `nothing` (the empty form of what the blob holds) over the named
/// blob `key`: how `forget`, `tunes --forget` and `profiles --forget` make
/// the store forget a failure memory, a tuning answer or a profile, since
/// another process may be reading the entry a removal would take away.
/// `described` names what is forgotten in the error.
///
/// # Errors
///
/// The store is read-only, or the write failed.
pub fn forget_blob(
    store: &DiskStore,
    key: &BlobKey,
    nothing: &[u8],
    described: &str,
) -> Result<()> {
    match store.put_blob(key, nothing) {
        StoreOutcome::Stored { .. } => Ok(()),
        StoreOutcome::Skipped => bail!(
            "the store at {} is read-only: nothing can be forgotten there",
            store.root().display()
        ),
        StoreOutcome::Failed { detail } => bail!("could not forget {described}: {detail}"),
    }
}

/// What a `--forget` of `kiln tunes` or `kiln profiles` says: what each
/// entry is (`the profile of`), the line when nothing matched, and what
/// forgetting one changes.
pub struct ForgetWords {
    pub of: &'static str,
    pub none: &'static str,
    pub effect: &'static str,
}

/// What `kiln tunes --forget --json` and `kiln profiles --forget --json`
/// print.
#[derive(Debug, Serialize)]
struct Forgotten {
    /// What was forgotten, as `--forget` described each entry.
    forgotten: Vec<String>,
}

/// Forgets each `(key, nothing, described)` of `entries` by writing
/// `nothing` over its blob ([`forget_blob`]), then reports them in
/// `words`.
///
/// # Errors
///
/// The store is read-only, or a write failed.
pub fn forget_blobs(
    store: &DiskStore,
    entries: impl IntoIterator<Item = (BlobKey, Vec<u8>, String)>,
    words: &ForgetWords,
    output: &Output,
) -> Result<()> {
    let mut forgotten = Vec::new();
    for (key, nothing, described) in entries {
        forget_blob(store, &key, &nothing, &format!("{} {described}", words.of))?;
        forgotten.push(described);
    }
    output.print(
        &Forgotten {
            forgotten: forgotten.clone(),
        },
        || {
            if forgotten.is_empty() {
                outln!("{}", words.none);
            }
            for described in &forgotten {
                outln!("forgot {} {described}: {}", words.of, words.effect);
            }
        },
    )
}

/// Every named blob of `kind` the store holds, with what `decode` reads
/// from it (a profile, a tuning answer); a blob that is gone meanwhile, or
/// that `decode` does not read, is left out.
///
/// # Errors
///
/// The store's folders cannot be walked.
pub fn blobs_of_kind<T>(
    store: &DiskStore,
    kind: &str,
    decode: impl Fn(&[u8]) -> Option<T>,
) -> Result<Vec<(BlobKey, T)>> {
    let mut names = Vec::new();
    store.entries(&mut |entry| {
        if let kiln_store::Entry::Blob(record) = entry.entry
            && record.key.kind == kind
        {
            names.push(record.key);
        }
    })?;
    Ok(names
        .into_iter()
        .filter_map(|name| match store.lookup_blob(&name) {
            kiln_engine::Lookup::Hit { artifact, .. } => {
                decode(&artifact).map(|value| (name, value))
            }
            kiln_engine::Lookup::Miss(_) => None,
        })
        .collect())
}

/// The settings of the store at `dir`, else of the one the `KILN_CACHE_*`
/// variables name.
fn store_config(dir: Option<&Path>) -> Result<StoreConfig> {
    // The facade's reading, which a program's default store uses too.
    match kiln::Store::config_from_env(dir)? {
        Some(config) => Ok(config),
        None => bail!("the store is disabled (KILN_CACHE_DISABLE=1); pass --dir to work on one"),
    }
}

/// The store at `dir`, else the one the `KILN_CACHE_*` variables name, to
/// look after.
pub fn open_store(dir: Option<&Path>) -> Result<DiskStore> {
    // The command line evicts when asked (`gc`), never behind the user's
    // back in the middle of another command.
    let config = StoreConfig {
        collects_automatically: false,
        ..store_config(dir)?
    };
    let root = config.root.clone();
    DiskStore::open(config).with_context(|| format!("opening the store at {}", root.display()))
}

/// The store at `dir`, else the configured one, for a command that only
/// reports on it (`stats`, `ls`): `None` when no store is there yet, with
/// nothing created, as `ccache -s` creates nothing. The folder is first
/// looked at as a read-only open would, which writes nothing.
pub fn open_existing_store(dir: Option<&Path>) -> Result<Option<DiskStore>> {
    let config = StoreConfig {
        collects_automatically: false,
        ..store_config(dir)?
    };
    let root = config.root.clone();
    let probe = DiskStore::open(StoreConfig {
        read_only: true,
        ..config.clone()
    });
    match probe {
        Err(kiln_store::Error::ReadOnlyEmpty { .. }) => Ok(None),
        Err(error) => {
            Err(error).with_context(|| format!("opening the store at {}", root.display()))
        }
        Ok(store) if config.read_only => Ok(Some(store)),
        Ok(probe) => {
            drop(probe);
            DiskStore::open(config)
                .map(Some)
                .with_context(|| format!("opening the store at {}", root.display()))
        }
    }
}

/// What `stats` and `ls` print where there is no store yet.
#[derive(Debug, Serialize)]
struct NoStore {
    root: String,
    exists: bool,
}

/// Where the store at `dir`, else the configured one, is or would be.
pub fn store_root(dir: Option<&Path>) -> Result<std::path::PathBuf> {
    Ok(store_config(dir)?.root)
}

/// Says that there is no store at `root` yet.
pub fn report_no_store(root: &Path, output: &Output) -> Result<()> {
    output.print(
        &NoStore {
            root: root.display().to_string(),
            exists: false,
        },
        || outln!("{}", no_store_words(root)),
    )
}

/// That there is no store at `root` yet, in words; or, where something
/// that is not a folder is there, what it is.
fn no_store_words(root: &Path) -> String {
    if let Some(what) = not_a_folder(root) {
        return format!(
            "{} is {what}, not a store's folder: nothing is cached there (give --dir a folder)",
            root.display()
        );
    }
    format!(
        "no store at {} yet: nothing is cached there (`kiln warm` or a program using kiln makes one)",
        root.display()
    )
}

/// What is at `root` when it is there and is not a folder (a link is
/// followed, as the store's root is).
fn not_a_folder(root: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let found = std::fs::metadata(root).ok()?;
    let kind = found.file_type();
    Some(if kind.is_dir() {
        return None;
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_fifo() {
        "a pipe"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a folder"
    })
}

/// The store at `dir`, else the configured one, to fill as any program
/// using it would: it keeps to its size limit by evicting as it fills.
///
/// # Errors
///
/// The store cannot be opened. A store folder that is read-only and empty,
/// or a store too damaged to repair itself, is no error: it gives
/// `Ok(Err(reason))`, and the caller runs without a store (P5).
pub fn open_store_to_fill(dir: Option<&Path>) -> Result<Result<DiskStore, String>> {
    let config = store_config(dir)?;
    let root = config.root.clone();
    match DiskStore::open(config) {
        Ok(store) => Ok(Ok(store)),
        Err(
            error @ (kiln_store::Error::ReadOnlyEmpty { .. } | kiln_store::Error::Damaged { .. }),
        ) => Ok(Err(error.to_string())),
        Err(error) => {
            Err(error).with_context(|| format!("opening the store at {}", root.display()))
        }
    }
}
