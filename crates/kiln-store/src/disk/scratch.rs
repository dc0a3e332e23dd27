//! Filling a scratch store fast, for benchmarks that need many entries:
//! behind the `bench` feature, which only `benches/` turns on, and in this
//! crate's own tests. Nothing here is part of the store's API.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::Duration;

use kiln_engine::{KeyComponents, StoreKey};

use super::DiskStore;
use super::access::not_yet_refreshed;
use crate::record::{Record, digest, record_file};
use crate::usage::{Delta, file_allocation};

impl DiskStore {
    /// Fills a scratch store with `entries`, as [`put`](kiln_engine::ArtifactStoreExt::put)
    /// would with no source keys, only faster: for benchmarks that need a
    /// store of many entries. Returns how many it wrote.
    ///
    /// Nothing of what makes a put safe to share is here: each file is
    /// written in place, without staging, syncing or locks, so a process
    /// reading the store meanwhile could see half a file, and a crash leaves
    /// torn entries (which then read as corrupt). No kernel history is
    /// kept, so misses of these kernels cannot be explained (P9). The
    /// objects and records are those a put writes, so a lookup costs what
    /// it would in a store filled by puts.
    ///
    /// # Errors
    ///
    /// A file could not be written.
    pub fn fill_scratch(
        &self,
        entries: impl IntoIterator<Item = (StoreKey, Vec<u8>)>,
    ) -> io::Result<u64> {
        let inner = &self.inner;
        let mut folders = std::collections::HashSet::new();
        let mut write = |path: &Path, bytes: &[u8]| -> io::Result<File> {
            let folder = path.parent().expect("store files live in folders");
            if !folders.contains(folder) {
                fs::create_dir_all(folder)?;
                folders.insert(folder.to_path_buf());
            }
            let mut file = File::create(path)?;
            io::Write::write_all(&mut file, bytes)?;
            Ok(file)
        };
        let (mut written, mut allocated, mut filled) = (0u64, 0u64, 0u64);
        let mut components: Vec<KeyComponents> = Vec::new();
        for (key, bytes) in entries {
            if bytes.is_empty() {
                continue;
            }
            let object = digest(&bytes);
            write(&inner.files.layout.object(&object), &bytes)?;
            let record = Record::new(key.clone(), object, bytes.len() as u64, Duration::ZERO);
            let (sealed, inline) = record_file(&record, &bytes);
            let file = write(&inner.files.layout.record(&key.digest()), &sealed)?;
            if inline {
                not_yet_refreshed(&file);
            }
            written += (bytes.len() + sealed.len()) as u64;
            allocated += file_allocation(bytes.len() as u64) + file_allocation(sealed.len() as u64);
            filled += 1;
            if !components.contains(&key.components) {
                components.push(key.components);
            }
        }
        for components in &components {
            self.register_target(components);
        }
        inner.files.usage.adjust(
            &inner.files.locks,
            Delta::of(
                written,
                allocated,
                i64::try_from(filled).unwrap_or(i64::MAX),
            ),
        )?;
        Ok(filled)
    }
}

impl DiskStore {
    /// As [`fill_scratch`](Self::fill_scratch), into the packs (F10): each
    /// entry's object, its kernel record and its kernel's history, as a
    /// packed put appends them, many entries per append of a shard and
    /// without syncing. The store must be opened with
    /// [`StoreConfig::durable`](crate::StoreConfig::durable) off for the
    /// fill to be fast; it is as unsafe to share while it runs as
    /// `fill_scratch`.
    ///
    /// # Errors
    ///
    /// A pack could not be written.
    pub fn fill_scratch_packed(
        &self,
        entries: impl IntoIterator<Item = (StoreKey, Vec<u8>)>,
    ) -> io::Result<u64> {
        use crate::pack::{Frame, Kind, SHARDS, shard_of, short_key};
        use crate::record::{KernelHistory, Seen, now_seconds};

        /// A frame waiting for its shard's append.
        type Pending = (Kind, [u8; 16], Vec<u8>);
        /// Bytes gathered for a shard before they are appended.
        const FLUSH: usize = 1 << 20;
        let inner = &self.inner;
        let mut pending: Vec<Vec<Pending>> = vec![Vec::new(); SHARDS];
        let mut pending_bytes = vec![0usize; SHARDS];
        let mut written = 0u64;
        let mut flush = |shard: usize, frames: &mut Vec<Pending>| {
            let framed: Vec<Frame<'_>> = frames
                .iter()
                .map(|(kind, key, payload)| Frame {
                    kind: *kind,
                    key: *key,
                    payload,
                })
                .collect();
            let appended = inner
                .files
                .packs
                .append(&inner.files.locks, shard, &framed, &[]);
            frames.clear();
            appended.map(|bytes| written += bytes)
        };
        let (mut filled, mut components): (u64, Vec<KeyComponents>) = (0, Vec::new());
        for (key, bytes) in entries {
            if bytes.is_empty() {
                continue;
            }
            let object = digest(&bytes);
            let record = Record::new(key.clone(), object, bytes.len() as u64, Duration::ZERO);
            let mut parts = vec![
                (Kind::Object, short_key(&object), bytes),
                (Kind::Record, short_key(&key.digest()), record.seal()),
            ];
            if let Some((name, kernel)) = key.kernel() {
                let history = KernelHistory {
                    name: name.to_owned(),
                    digest: kernel,
                    stored: Some(Seen {
                        key: key.clone(),
                        at: now_seconds(),
                    }),
                    asked: None,
                    held_at_miss: None,
                };
                parts.push((Kind::History, kernel.to_be_bytes(), history.seal()));
            }
            for (kind, part_key, payload) in parts {
                let shard = shard_of(&part_key);
                pending_bytes[shard] += payload.len();
                pending[shard].push((kind, part_key, payload));
                if pending_bytes[shard] >= FLUSH {
                    flush(shard, &mut pending[shard])?;
                    pending_bytes[shard] = 0;
                }
            }
            filled += 1;
            if !components.contains(&key.components) {
                components.push(key.components);
            }
        }
        for (shard, frames) in pending.iter_mut().enumerate() {
            if !frames.is_empty() {
                flush(shard, frames)?;
            }
        }
        for components in &components {
            self.register_target(components);
        }
        inner.files.usage.adjust(
            &inner.files.locks,
            Delta::of(written, written, i64::try_from(filled).unwrap_or(i64::MAX)),
        )?;
        Ok(filled)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::Duration;

    use kiln_engine::ArtifactStoreExt;

    use crate::disk::DiskStore;
    use crate::fixtures::{hit, kernel_key, scratch};

    #[test]
    fn a_scratch_fill_writes_what_puts_write() {
        let filled = scratch("fill");
        let put = scratch("fill-put");
        let entries = [
            (kernel_key(1), vec![1u8; 100]),
            (kernel_key(2), vec![2u8; 20 << 10]),
        ];
        assert_eq!(filled.fill_scratch(entries.clone()).expect("fills"), 2);
        for (key, bytes) in &entries {
            put.put(key, None, bytes, Duration::ZERO);
            assert_eq!(&hit(&filled, key), bytes);
            let read = |store: &DiskStore| fs::read(store.record_path(key)).expect("a record");
            assert_eq!(read(&filled).len(), read(&put).len());
            assert_eq!(
                filled
                    .record(key)
                    .map(|record| record.pointer())
                    .map(|pointer| pointer.object),
                put.record(key)
                    .map(|record| record.pointer())
                    .map(|pointer| pointer.object)
            );
        }
        assert_eq!(filled.usage(), put.usage());
        assert_eq!(filled.targets(), put.targets());
        let _ = fs::remove_dir_all(filled.root());
        let _ = fs::remove_dir_all(put.root());
    }

    #[test]
    fn a_packed_scratch_fill_is_found_as_packed_puts_are() {
        // F10
        let filled = scratch("fill-packed");
        let entries: Vec<_> = (0..300)
            .map(|number| (kernel_key(number), vec![(number % 200) as u8 + 1; 700]))
            .collect();
        assert_eq!(
            filled.fill_scratch_packed(entries.clone()).expect("fills"),
            300
        );
        for (key, bytes) in &entries {
            assert_eq!(&hit(&filled, key), bytes);
        }
        assert!(
            filled
                .history(kernel_key(5).kernel().expect("a kernel").1)
                .is_some()
        );
        assert_eq!(
            fs::read_dir(filled.root().join("objects"))
                .expect("a tree")
                .count(),
            0
        );
        assert!(filled.verify(&mut |_| {}).expect("verifies").is_clean());
        let _ = fs::remove_dir_all(filled.root());
    }
}
