//! The packs' share of the whole-store passes (`maintenance.rs`): verify
//! checks every packed entry as it checks files and rewrites a shard
//! without the bad ones; collect ages packed objects with the files,
//! evicts the oldest by rewriting their shards with each evicted object's
//! lock held alone (P6), then drops packed records left pointing at
//! nothing. Every rewrite also compacts: superseded histories, tombstones
//! and dead space go.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::eviction::{AGE_BUCKETS, age_bucket};
use crate::files::Files;
use crate::lock::{Mode, object_slot};
use crate::pack::{Kind, Live, SHARDS, Slot, short_key};
use crate::record::{AnyRecord, KernelHistory, digest};

/// What verify found in the packs.
#[derive(Debug, Default)]
pub(crate) struct PackedVerify {
    pub(crate) objects: u64,
    pub(crate) records: u64,
    pub(crate) histories: u64,
    pub(crate) bytes: u64,
    pub(crate) bad_objects: u64,
    pub(crate) bad_records: u64,
    pub(crate) dangling_records: u64,
    pub(crate) bad_histories: u64,
    /// Bytes the packs' files take after the pass.
    pub(crate) file_bytes: u64,
    /// Leftover packs of killed rewrites removed.
    pub(crate) orphans: u64,
    /// Shards that could not be read or rewritten, and why.
    pub(crate) unchecked: Vec<(String, String)>,
}

/// The packed objects' ages, as collect's first pass counts files.
#[derive(Debug)]
pub(crate) struct PackedAges {
    pub(crate) buckets: [(u64, u64); AGE_BUCKETS],
    pub(crate) objects: u64,
    pub(crate) object_bytes: u64,
    /// Bytes of the packs' files that are not objects: records,
    /// histories, framing, index slots, dead space.
    pub(crate) other_bytes: u64,
}

/// A packed object as a full digest for its lock: the slot of an object's
/// lock is taken from the first bytes of its digest, which the key holds.
fn lock_digest(key: &[u8; 16]) -> [u8; 32] {
    let mut digest = [0u8; 32];
    digest[..16].copy_from_slice(key);
    digest
}

fn accessed(slot: &Slot) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::from(slot.accessed))
}

impl Files {
    /// Checks every packed entry (P2): an object against its digest, a
    /// record's seal, key and object, a history's seal and id; rewrites
    /// each shard without what is bad. Objects go first, so records of a
    /// bad object are dangling in the same pass.
    pub(crate) fn verify_packs(&self) -> PackedVerify {
        let mut found = PackedVerify::default();
        let writable = !self.read_only;
        self.sweep_packs(&mut found);
        for phase in [Kind::Object, Kind::Record] {
            for shard in 0..SHARDS {
                let mut keep = |live: Live<'_>| -> bool {
                    let slot = live.slot;
                    let in_phase = match phase {
                        Kind::Object => slot.kind == Kind::Object,
                        _ => slot.kind != Kind::Object,
                    };
                    if !in_phase {
                        return true;
                    }
                    let good = match (slot.kind, live.payload) {
                        (Kind::Object, Ok(payload)) => {
                            found.objects += 1;
                            found.bytes += payload.len() as u64;
                            let good =
                                !payload.is_empty() && short_key(&digest(payload)) == slot.key;
                            found.bad_objects += u64::from(!good);
                            good
                        }
                        (Kind::Object, Err(_)) => {
                            found.objects += 1;
                            found.bad_objects += 1;
                            false
                        }
                        (Kind::Record, payload) => {
                            found.records += 1;
                            match payload.map(AnyRecord::open) {
                                Ok(Ok(record)) if short_key(&record.key_digest()) == slot.key => {
                                    let inline_good = match &record {
                                        AnyRecord::Artifact(record, Some(inline)) => {
                                            digest(inline) == record.object
                                        }
                                        _ => true,
                                    };
                                    if !inline_good {
                                        found.bad_records += 1;
                                        false
                                    } else if self.holds_object(&record.object().0) {
                                        true
                                    } else {
                                        found.dangling_records += 1;
                                        false
                                    }
                                }
                                _ => {
                                    found.bad_records += 1;
                                    false
                                }
                            }
                        }
                        (Kind::History, payload) => {
                            found.histories += 1;
                            let good = payload
                                .ok()
                                .and_then(|payload| KernelHistory::open(payload).ok())
                                .is_some_and(|history| history.digest.to_be_bytes() == slot.key);
                            found.bad_histories += u64::from(!good);
                            good
                        }
                    };
                    // A store opened to read only reports, and keeps.
                    good || !writable
                };
                if let Err(error) = self.packs.rewrite(&self.locks, shard, &mut keep) {
                    found.unchecked.push((
                        format!("pack {shard:03x}"),
                        format!("cannot be rewritten: {error}"),
                    ));
                }
            }
        }
        found.file_bytes = self.packed_file_bytes();
        found
    }

    /// Removes packs that no index names (left by a killed rewrite, or by
    /// an append that a full disk stopped) and reports what in `packs/` is
    /// not the store's: verify and collect both sweep.
    pub(crate) fn sweep_packs(&self, found: &mut PackedVerify) {
        let Ok(Some(folder)) = self.packs.open_folder() else {
            return;
        };
        let names: Vec<String> = match folder.names() {
            Ok(names) => names
                .into_iter()
                .filter_map(|name| name.into_string().ok())
                .collect(),
            Err(_) => return,
        };
        for name in &names {
            let own = name.len() >= 3
                && u16::from_str_radix(&name[..3], 16)
                    .is_ok_and(|shard| usize::from(shard) < SHARDS)
                && (name.len() == 7 && name.ends_with(".idx")
                    || name.len() == 25 && name.ends_with(".pack"));
            if !own {
                found.unchecked.push((
                    format!("packs/{name}"),
                    "not a name the store gives: left alone".to_owned(),
                ));
            }
        }
        for shard in 0..SHARDS {
            let prefix = format!("{shard:03x}-");
            if names.iter().any(|name| name.starts_with(&prefix)) {
                found.orphans += self.packs.sweep(&self.locks, &folder, &names, shard);
            }
        }
    }

    /// The bytes the packs' files take.
    pub(crate) fn packed_file_bytes(&self) -> u64 {
        (0..SHARDS)
            .filter_map(|shard| self.packs.live(shard).ok())
            .map(|(_, bytes)| bytes)
            .sum()
    }

    /// The bytes the file system allocated to the packs' files (their
    /// blocks); a file that cannot be looked at counts nothing.
    pub(crate) fn packed_allocated_bytes(&self) -> u64 {
        let Ok(listing) = std::fs::read_dir(self.packs.folder_path()) else {
            return 0;
        };
        listing
            .flatten()
            .filter_map(|entry| std::fs::symlink_metadata(entry.path()).ok())
            .filter(|found| found.is_file())
            .map(|found| std::os::unix::fs::MetadataExt::blocks(&found) * 512)
            .sum()
    }

    /// The ages of the packed objects, for collect's first pass.
    pub(crate) fn packed_ages(&self, now: SystemTime) -> PackedAges {
        let mut ages = PackedAges {
            buckets: [(0, 0); AGE_BUCKETS],
            objects: 0,
            object_bytes: 0,
            other_bytes: 0,
        };
        for shard in 0..SHARDS {
            let Ok((slots, file_bytes)) = self.packs.live(shard) else {
                continue;
            };
            let mut object_bytes = 0;
            for slot in slots.iter().filter(|slot| slot.kind == Kind::Object) {
                let bucket = age_bucket(accessed(slot), now);
                ages.buckets[bucket].0 += u64::from(slot.length);
                ages.buckets[bucket].1 += 1;
                object_bytes += u64::from(slot.length);
                ages.objects += 1;
            }
            ages.object_bytes += object_bytes;
            ages.other_bytes += file_bytes.saturating_sub(object_bytes);
        }
        ages
    }

    /// Evicts packed objects at least `cutoff` old while an excess is
    /// left, each with its lock held alone through its shard's rewrite so
    /// nobody publishing it loses it (P6). Returns the objects and bytes
    /// evicted and how many were busy.
    pub(crate) fn evict_packed(
        &self,
        cutoff: usize,
        now: SystemTime,
        excess_bytes: &mut u64,
        excess_entries: &mut u64,
        overhead: u64,
    ) -> (u64, u64, u64) {
        let (mut evicted, mut evicted_bytes, mut busy) = (0, 0, 0);
        for shard in 0..SHARDS {
            if *excess_bytes == 0 && *excess_entries == 0 {
                break;
            }
            let Ok((slots, _)) = self.packs.live(shard) else {
                continue;
            };
            let mut held = Vec::new();
            let mut chosen: std::collections::HashMap<[u8; 16], u64> =
                std::collections::HashMap::new();
            for slot in slots.iter().filter(|slot| slot.kind == Kind::Object) {
                if *excess_bytes == 0 && *excess_entries == 0 {
                    break;
                }
                if age_bucket(accessed(slot), now) < cutoff {
                    continue;
                }
                let Ok(Some(alone)) =
                    self.locks
                        .acquire(object_slot(&lock_digest(&slot.key)), Mode::Exclusive, None)
                else {
                    busy += 1;
                    continue;
                };
                held.push(alone);
                let length = u64::from(slot.length);
                chosen.insert(slot.key, length);
                *excess_bytes = excess_bytes.saturating_sub(length + overhead);
                *excess_entries = excess_entries.saturating_sub(1);
            }
            if chosen.is_empty() {
                continue;
            }
            let mut keep = |live: Live<'_>| {
                live.slot.kind != Kind::Object || !chosen.contains_key(&live.slot.key)
            };
            match self.packs.rewrite(&self.locks, shard, &mut keep) {
                Ok(_) => {
                    evicted += chosen.len() as u64;
                    evicted_bytes += chosen.values().sum::<u64>();
                }
                Err(error) => log::warn!("kiln store: cannot evict from pack {shard:03x}: {error}"),
            }
            drop(held);
        }
        (evicted, evicted_bytes, busy)
    }

    /// Moves the small entries kept as files (those of a store upgraded
    /// from an earlier layout, or put while packing was off) into the
    /// packs: each record below [`pack_below`](crate::StoreConfig::pack_below)
    /// whose object verifies is appended with its object, then its file
    /// and the object's file go; histories follow. Named blobs stay files.
    /// Returns how many records moved.
    pub(crate) fn pack_small_files(&self) -> u64 {
        use std::ffi::OsStr;
        use std::os::unix::fs::MetadataExt;

        use crate::record::Record;
        use crate::tree::Removal;

        if self.read_only || self.config.pack_below == 0 {
            return 0;
        }
        let root = self.root().to_path_buf();
        let mut moved = 0;
        let walked = crate::walk::walk_files(&root, "records", &mut |path, _| {
            let Ok(sealed) = std::fs::read(&path) else {
                return;
            };
            let Ok((record, _)) = Record::open_any(&sealed) else {
                return;
            };
            if !self.packs_artifact(record.size) {
                return;
            }
            let Ok(bytes) = self.read_packed_object(&record.pointer()) else {
                return;
            };
            let records = [(record.key.clone(), record.seal())];
            if self
                .publish_packed(&bytes, &record.object, &records)
                .is_err()
            {
                return;
            }
            moved += 1;
            let object_path = self.layout.object(&record.object);
            if let Ok(found) = std::fs::symlink_metadata(&object_path)
                && let Ok(Some(_alone)) =
                    self.locks
                        .acquire(object_slot(&record.object), Mode::Exclusive, None)
            {
                // Any record left pointing at it reads the packed copy.
                self.remove_at(&object_path, |folder, name| {
                    folder.remove_if_same(name, found.dev(), found.ino())
                });
            }
        });
        if let Err(error) = walked {
            log::warn!("kiln store: cannot pack the small entries: {error}");
        }
        let walked = crate::walk::walk_files(&root, "kernels", &mut |path, _| {
            let Ok(sealed) = std::fs::read(&path) else {
                return;
            };
            let Ok(history) = KernelHistory::open(&sealed) else {
                return;
            };
            let key = history.digest.to_be_bytes();
            let frame = crate::pack::Frame {
                kind: Kind::History,
                key,
                payload: &sealed,
            };
            let packed = self.packs.contains(Kind::History, &key).unwrap_or(false)
                || self
                    .packs
                    .append(&self.locks, crate::pack::shard_of(&key), &[frame], &[])
                    .is_ok();
            if packed {
                let removal: Removal = self.remove_at(&path, |folder, name: &OsStr| {
                    folder.remove_if_holds(name, &sealed)
                });
                drop(removal);
            }
        });
        if let Err(error) = walked {
            log::warn!("kiln store: cannot pack the histories: {error}");
        }
        moved
    }

    /// Drops the packed records whose object is gone, compacting each
    /// shard on the way; returns how many went.
    pub(crate) fn drop_dangling_packed(&self) -> u64 {
        let mut removed = 0;
        for shard in 0..SHARDS {
            let mut dropped = 0;
            let mut keep = |live: Live<'_>| {
                if live.slot.kind != Kind::Record {
                    return true;
                }
                let keeps = live
                    .payload
                    .ok()
                    .and_then(|payload| AnyRecord::open(payload).ok())
                    .is_some_and(|record| self.holds_object(&record.object().0));
                dropped += u64::from(!keeps);
                keeps
            };
            match self.packs.rewrite(&self.locks, shard, &mut keep) {
                Ok(_) => removed += dropped,
                Err(error) => log::warn!("kiln store: cannot compact pack {shard:03x}: {error}"),
            }
        }
        removed
    }
}
