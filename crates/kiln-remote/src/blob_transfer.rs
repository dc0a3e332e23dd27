//! Named blobs between a disk store and the remote tier (`kiln push`,
//! `kiln pull`, P15): tuning answers, warm-start profiles, pipeline caches
//! and whatever else a store keeps by name, so that a node that pulls
//! starts as fast as the node that pushed.
//!
//! A blob's remote entry carries only its bytes under its key's digest, so
//! a push writes beside it a **name entry**: the whole [`BlobKey`], signed
//! as every entry is, under a subject derived from the blob's digest (a
//! space of its own, `n:`). A pull lists the name entries, keeps those
//! that verify and name the digest they are filed under, fetches the blobs
//! the disk store lacks in batches (one round trip each), verifies each,
//! and writes it to the disk store. Nothing that does not verify is
//! written: it is counted.
//!
//! A blob the disk store already holds is not replaced by a pull: the
//! node's own (a pipeline cache its driver grew, a profile its program
//! kept) is at least as much its own as the fleet's. Remembered failures
//! are this machine's and never travel this way, as in a bundle.

use kiln_engine::store::{BlobKey, FAILURE_BLOB_KIND};
use kiln_engine::{ArtifactStore, Lookup, Miss, StoreOutcome};
use kiln_store::{DiskStore, Entry, Progress};
use redis::cmd;
use serde::{Deserialize, Serialize};

use crate::entry::{self, Kind};
use crate::error::{Error, Result};
use crate::fleet::{digest_from_hex, glob_escaped};
use crate::remote::RemoteStore;
use crate::transfer::{pullable, writable};

/// The Redis key space of name entries.
const NAME_SPACE: &str = "n";

/// The context a name entry's subject is derived under from its blob's
/// digest: never a blob's or an artifact's subject.
const NAME_CONTEXT: &str = "kiln remote blob name";

/// What a name entry's payload starts with, ahead of the encoded key.
const NAME_TAG: &[u8] = b"kiln blob name 1\0";

/// The most an encoded blob key may take to decode.
const KEY_LIMIT: usize = 1 << 20;

/// How many entries one step of a copy reads at once.
const BATCH: usize = 64;

/// What a copy of named blobs did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobTransferReport {
    /// Blobs looked at: in the disk store (push) or named by the remote
    /// (pull) and chosen.
    pub entries: u64,
    /// Blobs copied.
    pub copied: u64,
    /// Bytes of blobs copied.
    pub bytes: u64,
    /// Blobs the disk store already held (pull): kept as they are.
    pub already_held: u64,
    /// Blobs or names that did not verify where they were read: never
    /// copied.
    pub refused: u64,
    /// Blobs that went between listing and reading (expired, evicted).
    pub gone: u64,
    /// Blobs the destination did not take.
    pub failed: u64,
}

/// The keys of the named blobs a remote holds (`kiln pull`).
#[derive(Debug, Clone, Default)]
pub struct BlobListing {
    /// Every key named by a verified name entry.
    pub keys: Vec<BlobKey>,
    /// Name entries that did not verify or decode: never used.
    pub refused: u64,
}

/// The subject a blob's name entry is filed under.
fn name_subject(blob: &[u8; 32]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(NAME_CONTEXT);
    hasher.update(blob);
    *hasher.finalize().as_bytes()
}

impl RemoteStore {
    /// Writes `bytes` as the blob `key` names, and beside it the entry
    /// that names it, so that a pull can list it: one round trip.
    pub fn put_named_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let digest = key.digest();
        let subject = name_subject(&digest);
        let Ok(encoded) = bincode::serde::encode_to_vec(key, bincode::config::standard()) else {
            return StoreOutcome::Failed {
                detail: "the blob's key does not encode".to_owned(),
            };
        };
        let mut name = NAME_TAG.to_vec();
        name.extend_from_slice(&encoded);
        let now = crate::remote::now();
        let sealed = self
            .sealed(Kind::Blob, &digest, now, std::time::Duration::ZERO, bytes)
            .and_then(|blob| {
                self.sealed(Kind::Blob, &subject, now, std::time::Duration::ZERO, &name)
                    .map(|name| (blob, name))
            });
        match sealed {
            Ok((blob, name)) => {
                let written = (blob.len() + name.len()) as u64;
                let commands = vec![
                    self.set(self.redis_key("b", &digest), blob),
                    self.set(self.redis_key(NAME_SPACE, &subject), name),
                ];
                self.write(commands, written, bytes.len() as u64).0
            }
            Err(outcome) => outcome,
        }
    }

    /// Every blob key the remote holds a name entry for, each verified as
    /// an entry is; `None` when the remote does not answer.
    pub fn stored_blob_keys(&self) -> Option<BlobListing> {
        let inner = &self.inner;
        let prefix = format!("{}{NAME_SPACE}:", inner.config.prefix);
        let pattern = format!("{}*", glob_escaped(&prefix));
        let mut names = inner
            .remote
            .call(&inner.counters, move |link| link.keys_matching(&pattern))?;
        names.sort_unstable();
        names.dedup();
        let subjects: Vec<[u8; 32]> = names
            .iter()
            .filter_map(|name| name.strip_prefix(prefix.as_bytes()))
            .filter_map(digest_from_hex)
            .collect();
        let mut listing = BlobListing::default();
        for chunk in subjects.chunks(BATCH) {
            let commands = chunk
                .iter()
                .map(|subject| {
                    let mut command = cmd("GET");
                    command.arg(self.redis_key(NAME_SPACE, subject));
                    command
                })
                .collect();
            let values = inner.remote.call(&inner.counters, move |link| {
                link.pipeline::<Vec<Option<Vec<u8>>>>(commands)
            })?;
            for (subject, value) in chunk.iter().zip(values) {
                // Gone since it was listed: its time ran out.
                let Some(value) = value else { continue };
                match self.named(subject, &value) {
                    Some(key) => listing.keys.push(key),
                    None => listing.refused += 1,
                }
            }
        }
        Some(listing)
    }

    /// The key a name entry `value` filed under `subject` names, when it
    /// verifies, decodes, and names the blob the subject is derived from.
    fn named(&self, subject: &[u8; 32], value: &[u8]) -> Option<BlobKey> {
        let verified = entry::open(&self.inner.config.keys, Kind::Blob, subject, value).ok()?;
        let encoded = verified.payload.strip_prefix(NAME_TAG)?;
        let config = bincode::config::standard().with_limit::<KEY_LIMIT>();
        let (key, _) = bincode::serde::decode_from_slice::<BlobKey, _>(encoded, config).ok()?;
        (name_subject(&key.digest()) == *subject).then_some(key)
    }
}

/// Copies every named blob of `local` that `choose` accepts to `remote`,
/// signed with its key, each with the entry that names it.
///
/// # Errors
///
/// [`Error::CannotWrite`] when this node cannot sign or is read-only,
/// [`Error::Unreachable`] when the remote does not answer at the start,
/// [`Error::Local`] when the disk store cannot be listed. Blobs that fail
/// later are counted in the report.
pub fn push_blobs(
    local: &DiskStore,
    remote: &RemoteStore,
    choose: &dyn Fn(&BlobKey) -> bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<BlobTransferReport> {
    writable(remote)?;
    let mut keys = Vec::new();
    local
        .entries(&mut |info| {
            if let Entry::Blob(record) = info.entry
                && travels(&record.key)
                && choose(&record.key)
            {
                keys.push(record.key);
            }
        })
        .map_err(|error| Error::Local(error.to_string()))?;
    let mut report = BlobTransferReport {
        entries: keys.len() as u64,
        ..BlobTransferReport::default()
    };
    for chunk in keys.chunks(BATCH) {
        for key in chunk {
            match local.parts().lookup_blob(key) {
                Lookup::Hit { artifact, .. } => match remote.put_named_blob(key, &artifact) {
                    StoreOutcome::Stored { bytes } => {
                        report.copied += 1;
                        report.bytes += bytes;
                    }
                    StoreOutcome::Skipped | StoreOutcome::Failed { .. } => report.failed += 1,
                },
                Lookup::Miss(Miss::Absent) => report.gone += 1,
                Lookup::Miss(_) => report.refused += 1,
            }
        }
        progress(&Progress {
            phase: "push blobs",
            done: report.copied + report.failed + report.gone + report.refused,
            total: Some(report.entries),
            bytes: report.bytes,
        });
    }
    Ok(report)
}

/// Copies every named blob `remote` names that `choose` accepts and
/// `local` lacks into `local`, each verified first.
///
/// # Errors
///
/// [`Error::Unreachable`] when the remote does not answer at the start,
/// [`Error::Local`] when the disk store is read-only. Blobs that fail later
/// are counted in the report.
pub fn pull_blobs(
    local: &DiskStore,
    remote: &RemoteStore,
    choose: &dyn Fn(&BlobKey) -> bool,
    progress: &mut dyn FnMut(&Progress),
) -> Result<BlobTransferReport> {
    pullable(local, remote)?;
    let listing = remote
        .stored_blob_keys()
        .ok_or_else(|| Error::Unreachable {
            url: remote.config().url_for_display(),
        })?;
    let keys: Vec<BlobKey> = listing
        .keys
        .into_iter()
        .filter(|key| travels(key) && choose(key))
        .collect();
    let mut report = BlobTransferReport {
        entries: keys.len() as u64,
        refused: listing.refused,
        ..BlobTransferReport::default()
    };
    for chunk in keys.chunks(BATCH) {
        let missing: Vec<&BlobKey> = chunk
            .iter()
            .filter(|key| matches!(local.parts().lookup_blob(key), Lookup::Miss(_)))
            .collect();
        report.already_held += (chunk.len() - missing.len()) as u64;
        if missing.is_empty() {
            continue;
        }
        let subjects: Vec<(Kind, [u8; 32])> = missing
            .iter()
            .map(|key| (Kind::Blob, key.digest()))
            .collect();
        for (key, found) in missing.iter().zip(remote.lookup_subjects(&subjects)) {
            match found {
                Lookup::Hit { artifact, .. } => match local.parts().put_blob(key, &artifact) {
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
            phase: "pull blobs",
            done: report.copied + report.already_held + report.failed + report.gone,
            total: Some(report.entries),
            bytes: report.bytes,
        });
    }
    local.parts().batch_finished();
    Ok(report)
}

/// Whether a blob of `key` travels between stores: not a remembered
/// failure.
fn travels(key: &BlobKey) -> bool {
    key.kind != FAILURE_BLOB_KIND
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_subject_is_no_blob_digest() {
        let key = BlobKey::new("wgpu pipeline cache").component("driver", "1");
        let digest = key.digest();
        assert_ne!(name_subject(&digest), digest);
        assert_eq!(name_subject(&digest), name_subject(&key.digest()));
    }

    #[test]
    fn only_whole_hex_digests_are_listed() {
        assert_eq!(digest_from_hex(&[b'a'; 64]), Some([0xaa; 32]));
        assert_eq!(digest_from_hex(&[b'a'; 63]), None);
        assert_eq!(digest_from_hex(&[b'g'; 64]), None);
        assert_eq!(glob_escaped("p*:"), "p\\*:");
    }
}
