//! Many copies put at once ([`ArtifactStore::put_many`]): the packed ones
//! appended as two batches, the objects and then their records and
//! histories, each batch made durable with one sync of the file system
//! (`pack/shard/append.rs`), where putting them one by one syncs every shard
//! file of every entry. A remote tier's warm start writes its hits back
//! this way.
//!
//! [`ArtifactStore::put_many`]: kiln_engine::ArtifactStore::put_many

use std::collections::HashSet;
use std::io;
use std::time::Instant;

use kiln_engine::{KeyComponents, Put, StoreOutcome};

use super::DiskStore;
use super::write::Published;
use crate::files::bump;
use crate::lock::{Mode, PIN_WAIT, object_slot};
use crate::pack::{Frame, Kind, Read, UNIT, short_key};
use crate::record::{Record, digest};

impl DiskStore {
    /// [`ArtifactStore::put_many`](kiln_engine::ArtifactStore::put_many):
    /// what packs, in one batch; the rest one by one.
    pub(super) fn store_copies(&self, copies: &[Put<'_>]) -> Vec<StoreOutcome> {
        self.store_copies_as(copies, true)
    }

    /// [`store_copies`](Self::store_copies), the packed records and
    /// histories synced only when `records_synced`: a rekeyed kernel's
    /// record names an object that is durable already, and is an index
    /// entry that a lost power may lose and the kernel's text finds again
    /// (L11); a new object is always synced before a record names it (P3).
    pub(super) fn store_copies_as(
        &self,
        copies: &[Put<'_>],
        records_synced: bool,
    ) -> Vec<StoreOutcome> {
        if self.inner.files.read_only {
            bump(
                &self.inner.files.counters.writes_skipped,
                copies.len() as u64,
            );
            return vec![StoreOutcome::Skipped; copies.len()];
        }
        let packs = |copy: &Put<'_>| {
            !copy.bytes.is_empty() && self.inner.files.packs_artifact(copy.bytes.len() as u64)
        };
        let batch: Vec<Put<'_>> = copies.iter().copied().filter(packs).collect();
        let mut written = match self.put_packed_batch(&batch, records_synced) {
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
                    self.store_artifact(copy, None)
                }
            })
            .collect()
    }

    /// Appends `copies` to the packs: their new objects as one batch, then
    /// their records and their kernels' histories as another, each under
    /// its object's shared pin (P6) as a single put is. Returns what each
    /// wrote.
    fn put_packed_batch(&self, copies: &[Put<'_>], records_synced: bool) -> io::Result<Vec<u64>> {
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
                    .files
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
                inner.files.packs.read(Kind::Object, &key),
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
        inner
            .files
            .packs
            .append_batch(&inner.files.locks, &new_objects)?;
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
                super::packed::packed_record(&record, copy.bytes),
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
        inner
            .files
            .packs
            .append_batch_as(&inner.files.locks, &frames, records_synced)?;
        drop(pins);
        // A file record of the same key, from before the store packed, is
        // no longer what the key holds.
        let mut components: Vec<&KeyComponents> = Vec::new();
        for copy in copies {
            if std::fs::symlink_metadata(self.record_path(copy.key)).is_ok() {
                self.inner.files.remove_record_file(copy.key);
            }
            if !components.contains(&&copy.key.components) {
                components.push(&copy.key.components);
            }
        }
        for components in components {
            self.register_target(components);
        }
        inner.eviction.wrote();
        let total = written.iter().sum();
        // A pack grows by its frames and slots: allocated as written.
        self.count_usage(Published {
            written: total,
            allocated: total,
            new_entries: new_objects.len() as i64,
        });
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_engine::{ArtifactStore, Lookup, Origin, Put, StoreOutcome};

    use crate::fixtures::{hit, kernel_key};
    use crate::{DiskStore, StoreConfig};

    fn packing(test: &str, read_only: bool) -> DiskStore {
        let root = std::env::temp_dir().join(format!("kiln-store-{test}-{}", std::process::id()));
        if !read_only {
            let _ = std::fs::remove_dir_all(&root);
        }
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            read_only,
            ..StoreConfig::at(root)
        })
        .expect("a store")
    }

    // P3, F10: a batch of copies packs the small ones and files the large
    // one, every entry whole, its history noting what was stored, and the
    // usage counting what the batch added.
    #[test]
    fn p3_a_batch_of_copies_packs_the_small_files_the_large_and_counts_them() {
        let store = packing("copies", false);
        let keys: Vec<_> = (0..6).map(kernel_key).collect();
        let mut bytes: Vec<Vec<u8>> = (0..5u8).map(|number| vec![number + 1; 700]).collect();
        bytes.push(vec![9; 100 << 10]);
        let copies: Vec<Put<'_>> = keys
            .iter()
            .zip(&bytes)
            .map(|(key, bytes)| Put {
                key,
                bytes,
                work: Duration::from_millis(5),
                origin: Origin::Copied,
            })
            .collect();
        let outcomes = store.put_many(&copies);
        assert!(
            outcomes
                .iter()
                .all(|outcome| matches!(outcome, StoreOutcome::Stored { .. })),
            "{outcomes:?}"
        );
        for (key, bytes) in keys.iter().zip(&bytes) {
            assert_eq!(&hit(&store, key), bytes);
        }
        assert!(
            std::fs::symlink_metadata(store.record_path(&keys[0])).is_err(),
            "a small copy is packed"
        );
        assert!(
            std::fs::symlink_metadata(store.record_path(&keys[5])).is_ok(),
            "the large copy is a file"
        );
        let usage = store.usage();
        assert_eq!(usage.entries, 6);
        assert!(usage.bytes >= 5 * 700 + (100 << 10), "{usage:?}");
        let (_, kernel) = keys[2].kernel().expect("a kernel key");
        let stored = store.history(kernel).and_then(|history| history.stored);
        assert_eq!(stored.map(|seen| seen.key), Some(keys[2].clone()));
        let report = store.verify(&mut |_| {}).expect("verifies");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.objects, 6);
        // A read-only store skips every copy, and counts each.
        let read_only = packing("copies", true);
        let skipped = read_only.put_many(&copies[..2]);
        assert!(matches!(
            skipped[..],
            [StoreOutcome::Skipped, StoreOutcome::Skipped]
        ));
        assert_eq!(read_only.statistics().writes_skipped, 2);
        assert!(matches!(read_only.lookup(&keys[1]), Lookup::Hit { .. }));
        let _ = std::fs::remove_dir_all(store.root());
    }
}
