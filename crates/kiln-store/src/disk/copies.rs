//! Many copies put at once ([`ArtifactStore::put_many`]): the packed ones
//! appended as two batches, the objects and then their records and
//! histories, each batch made durable with one sync of the file system
//! (`pack/append.rs`), where putting them one by one syncs every shard
//! file of every entry. A remote tier's warm start writes its hits back
//! this way.
//!
//! [`ArtifactStore::put_many`]: kiln_engine::ArtifactStore::put_many

use std::collections::HashSet;
use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use kiln_engine::{ArtifactCopy, KeyComponents, StoreOutcome};

use super::write::{PIN_WAIT, digest};
use super::{DiskStore, bump};
use crate::lock::{Mode, object_slot};
use crate::pack::{Frame, Kind, Read, UNIT, short_key};
use crate::record::Record;

impl DiskStore {
    /// [`ArtifactStore::put_many`](kiln_engine::ArtifactStore::put_many):
    /// what packs, in one batch; the rest one by one.
    pub(super) fn store_copies(&self, copies: &[ArtifactCopy<'_>]) -> Vec<StoreOutcome> {
        if self.inner.read_only {
            bump(&self.inner.counters.writes_skipped, copies.len() as u64);
            return vec![StoreOutcome::Skipped; copies.len()];
        }
        let packs = |copy: &ArtifactCopy<'_>| {
            !copy.bytes.is_empty() && self.packs_artifact(copy.bytes.len() as u64)
        };
        let batch: Vec<ArtifactCopy<'_>> = copies.iter().copied().filter(packs).collect();
        let mut written = match self.put_packed_batch(&batch) {
            Ok(written) => written.into_iter().map(Ok).collect(),
            Err(error) => batch
                .iter()
                .map(|_| Err(io::Error::new(error.kind(), error.to_string())))
                .collect::<Vec<_>>(),
        }
        .into_iter();
        copies
            .iter()
            .map(|copy| {
                if packs(copy) {
                    let result = written.next().expect("one result per packed copy");
                    self.count_put(result, || copy.key.subject_text())
                } else {
                    self.store_artifact(copy.key, None, copy.bytes, copy.work)
                }
            })
            .collect()
    }

    /// Appends `copies` to the packs: their new objects as one batch, then
    /// their records and their kernels' histories as another, each under
    /// its object's shared pin (P6) as a single put is. Returns what each
    /// wrote.
    fn put_packed_batch(&self, copies: &[ArtifactCopy<'_>]) -> io::Result<Vec<u64>> {
        if copies.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let objects: Vec<[u8; 32]> = copies.iter().map(|copy| digest(copy.bytes)).collect();
        let mut pins = Vec::new();
        let mut pinned = HashSet::new();
        for object in &objects {
            if pinned.insert(*object) {
                let pin = inner
                    .locks
                    .acquire(
                        object_slot(object),
                        Mode::Shared,
                        Some(Instant::now() + PIN_WAIT),
                    )?
                    .ok_or_else(|| io::Error::other("an object stayed locked"))?;
                pins.push(pin);
            }
        }
        // Content addressing: bytes a pack holds whole are not appended
        // again, nor twice in one batch.
        let mut written = vec![0u64; copies.len()];
        let mut new_objects = Vec::new();
        let mut seen = HashSet::new();
        for (at, (copy, object)) in copies.iter().zip(&objects).enumerate() {
            let key = short_key(object);
            let here = matches!(
                inner.packs.read(Kind::Object, &key),
                Read::Found { payload, .. } if payload == copy.bytes
            );
            if !here && seen.insert(key) {
                written[at] += 2 * UNIT + copy.bytes.len() as u64;
                new_objects.push(Frame {
                    kind: Kind::Object,
                    key,
                    payload: copy.bytes,
                });
            }
        }
        inner.packs.append_batch(&inner.locks, &new_objects)?;
        let mut sealed = Vec::new();
        for (at, (copy, object)) in copies.iter().zip(&objects).enumerate() {
            let record = Record::new(
                copy.key.clone(),
                *object,
                copy.bytes.len() as u64,
                copy.work,
            );
            sealed.push((
                at,
                Kind::Record,
                short_key(&copy.key.digest()),
                record.seal(),
            ));
            if let Some((key, history)) = self.history_after_put(copy.key) {
                sealed.push((at, Kind::History, key, history));
            }
        }
        let frames: Vec<Frame<'_>> = sealed
            .iter()
            .map(|(at, kind, key, payload)| {
                written[*at] += 2 * UNIT + payload.len() as u64;
                Frame {
                    kind: *kind,
                    key: *key,
                    payload,
                }
            })
            .collect();
        inner.packs.append_batch(&inner.locks, &frames)?;
        drop(pins);
        // A file record of the same key, from before the store packed, is
        // no longer what the key holds.
        let mut components: Vec<&KeyComponents> = Vec::new();
        for copy in copies {
            if std::fs::symlink_metadata(self.record_path(copy.key)).is_ok() {
                self.remove_record_file(copy.key);
            }
            if !components.contains(&&copy.key.components) {
                components.push(&copy.key.components);
            }
        }
        for components in components {
            self.register_target(components);
        }
        inner.wrote_since_batch.store(true, Ordering::Release);
        let total = written.iter().sum();
        // A pack grows by its frames and slots: allocated as written.
        self.count_usage(total, total, new_objects.len() as i64);
        Ok(written)
    }
}
