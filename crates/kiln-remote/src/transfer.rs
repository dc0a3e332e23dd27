//! `kiln push` and `kiln pull`: copies between a disk store and the
//! remote tier, every entry verified where it is read and signed where it
//! is written (P10).
//!
//! - **Push** reads every artifact of the disk store (each verified by the
//!   disk store's digests) and writes it to the remote, signed with this
//!   node's key, with the entry listing its key. A node that cannot sign is
//!   refused before anything is read.
//! - **Pull** lists the keys the remote holds (from their signed key
//!   entries), fetches what the disk store lacks in batches (one round trip
//!   each), verifies every entry, and writes what verifies to the disk
//!   store. An entry that does not verify is never written: it is counted
//!   and reported.

use kiln_engine::{ArtifactStore, ArtifactStoreExt, Lookup, Miss, StoreKey, StoreOutcome};
use kiln_store::{DiskStore, Entry, Progress};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::remote::RemoteStore;

/// How many entries one step of a copy reads at once.
const BATCH: usize = 64;

/// What a push or a pull did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferReport {
    /// Entries looked at: in the disk store (push) or listed by the remote
    /// (pull) and chosen.
    pub entries: u64,
    /// Entries copied.
    pub copied: u64,
    /// Bytes of artifacts copied.
    pub bytes: u64,
    /// Entries the destination already held (pull) or held with the same
    /// bytes (push, which writes them again to renew their time).
    pub already_held: u64,
    /// Entries that did not verify where they were read: never copied.
    pub refused: u64,
    /// Entries that went between listing and reading (expired, evicted).
    pub gone: u64,
    /// Entries the destination did not take (a failed write, over the
    /// remote's size limit, or an unreachable remote).
    pub failed: u64,
    /// Entries the remote holds with other bytes published by another host
    /// (a nondeterministic compile): the remote keeps its own.
    pub conflicts: u64,
}

/// Copies every artifact of `local` that `choose` accepts to `remote`,
/// signed with its key.
///
/// # Errors
///
/// [`Error::CannotWrite`] when this node cannot sign or is read-only,
/// [`Error::Unreachable`] when the remote does not answer at the start.
/// Entries that fail later are counted in the report.
pub fn push(
    local: &DiskStore,
    remote: &RemoteStore,
    choose: &dyn Fn(&StoreKey) -> bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<TransferReport> {
    writable(remote)?;
    let mut keys = Vec::new();
    local
        .entries(&mut |info| {
            if let Entry::Record(record) = info.entry
                && choose(&record.key)
            {
                keys.push(record.key);
            }
        })
        .map_err(|error| Error::Local(error.to_string()))?;
    let mut report = TransferReport {
        entries: keys.len() as u64,
        ..TransferReport::default()
    };
    for chunk in keys.chunks(BATCH) {
        for (key, found) in chunk.iter().zip(local.lookup_many(chunk)) {
            match found {
                Lookup::Hit { artifact, work, .. } => {
                    let before = remote.remote_statistics().nondeterministic;
                    match remote.put(key, None, &artifact, work) {
                        StoreOutcome::Stored { bytes } => {
                            report.copied += 1;
                            report.bytes += bytes;
                        }
                        StoreOutcome::Skipped
                            if remote.remote_statistics().nondeterministic > before =>
                        {
                            report.conflicts += 1;
                        }
                        StoreOutcome::Skipped | StoreOutcome::Failed { .. } => report.failed += 1,
                    }
                }
                Lookup::Miss(Miss::Absent) => report.gone += 1,
                Lookup::Miss(_) => report.refused += 1,
            }
        }
        progress(&Progress {
            phase: "push",
            done: report.copied + report.conflicts + report.failed + report.gone + report.refused,
            total: Some(report.entries),
            bytes: report.bytes,
        });
    }
    Ok(report)
}

/// Copies every artifact `remote` holds that `choose` accepts and `local`
/// lacks into `local`, each verified first.
///
/// # Errors
///
/// [`Error::Unreachable`] when the remote does not answer at the start,
/// [`Error::Local`] when the disk store is read-only. Entries that fail
/// later are counted in the report.
pub fn pull(
    local: &DiskStore,
    remote: &RemoteStore,
    choose: &dyn Fn(&StoreKey) -> bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<TransferReport> {
    pullable(local, remote)?;
    let url = remote.config().url_for_display();
    let listing = remote
        .stored_keys()
        .ok_or_else(|| Error::Unreachable { url: url.clone() })?;
    let keys: Vec<StoreKey> = listing.keys.into_iter().filter(|key| choose(key)).collect();
    let mut report = TransferReport {
        entries: keys.len() as u64,
        refused: listing.refused,
        ..TransferReport::default()
    };
    for chunk in keys.chunks(BATCH) {
        let held = local.lookup_many(chunk);
        let missing: Vec<StoreKey> = chunk
            .iter()
            .zip(&held)
            .filter(|(_, found)| matches!(found, Lookup::Miss(_)))
            .map(|(key, _)| key.clone())
            .collect();
        report.already_held += (chunk.len() - missing.len()) as u64;
        if missing.is_empty() {
            continue;
        }
        for (key, found) in missing.iter().zip(remote.lookup_many(&missing)) {
            match found {
                Lookup::Hit { artifact, work, .. } => match local.put_copy(key, &artifact, work) {
                    StoreOutcome::Stored { bytes } => {
                        report.copied += 1;
                        report.bytes += bytes;
                    }
                    StoreOutcome::Skipped | StoreOutcome::Failed { .. } => report.failed += 1,
                },
                Lookup::Miss(Miss::Absent) => report.gone += 1,
                Lookup::Miss(Miss::Corrupt { .. } | Miss::ForeignKey { .. }) => {
                    report.refused += 1;
                }
                Lookup::Miss(Miss::Unreadable { .. }) => report.failed += 1,
            }
        }
        progress(&Progress {
            phase: "pull",
            done: report.copied + report.already_held + report.failed + report.gone,
            total: Some(report.entries),
            bytes: report.bytes,
        });
    }
    local.parts().batch_finished();
    Ok(report)
}

/// Whether this node may write to `remote` and it answers: what a push
/// checks before it reads anything.
pub(crate) fn writable(remote: &RemoteStore) -> Result<()> {
    if !remote.writes() {
        return Err(Error::CannotWrite {
            read_only: if remote.config().read_only {
                " or KILN_REMOTE_READ_ONLY is set"
            } else {
                ""
            },
        });
    }
    reachable(remote)
}

/// Whether `local` may be written to and `remote` answers: what a pull
/// checks before it reads anything.
pub(crate) fn pullable(local: &DiskStore, remote: &RemoteStore) -> Result<()> {
    if local.is_read_only() {
        return Err(Error::Local(format!(
            "the store at {} is read-only: pull into a writable store, or unset \
             KILN_CACHE_READ_ONLY",
            local.root().display()
        )));
    }
    reachable(remote)
}

/// Whether `remote` answers.
fn reachable(remote: &RemoteStore) -> Result<()> {
    if remote.is_reachable() {
        Ok(())
    } else {
        Err(Error::Unreachable {
            url: remote.config().url_for_display(),
        })
    }
}
