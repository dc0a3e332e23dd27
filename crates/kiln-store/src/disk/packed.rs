//! Entries in packs (`pack/`): a put of an artifact below
//! [`StoreConfig::pack_below`](crate::StoreConfig::pack_below) appends its
//! object, its records and its kernel's history to the packs of their
//! shards, and a lookup reads a packed record, then its object, before it
//! looks for files. What is read is verified as a file's bytes are (P2),
//! and a bad entry is removed by a tombstone that names the very slot that
//! was judged, so an entry put again meanwhile stays.

use std::io;
use std::time::{Duration, Instant};

use kiln_engine::{Lookup, Miss, StoreKey};

use super::read::{Judged, ObjectMiss, judge};
use super::write::Published;
use crate::files::Files;
use crate::files::bump;
use crate::lock::{Mode, PIN_WAIT, object_slot};
use crate::pack::{Frame, Kind, Read, shard_of, short_key};
use crate::record::{Pointer, Record, digest};

impl Files {
    /// Whether a put of an artifact of `size` bytes appends it to a pack.
    pub(super) fn packs_artifact(&self, size: u64) -> bool {
        size < self.config.pack_below
    }

    /// The lookup of `key` among packed records, or `None` when no pack
    /// holds a record of it (the files are looked at next).
    pub(super) fn find_packed(
        &self,
        key: &StoreKey,
        encoded_key: &[u8],
        note_miss: &dyn Fn(),
    ) -> Option<Lookup<Vec<u8>>> {
        let counters = &self.counters;
        let record_key = short_key(&key.digest());
        let (sealed, at) = match self.packs.read(Kind::Record, &record_key) {
            Read::Absent => return None,
            Read::Unreadable(detail) => {
                bump(&counters.unreadable, 1);
                return Some(Lookup::Miss(Miss::Unreadable { detail }));
            }
            Read::Damaged { detail, at } => {
                bump(&counters.corrupt, 1);
                self.remove_packed(Kind::Record, &record_key, at);
                return Some(self.packed_miss(
                    note_miss,
                    Miss::Corrupt {
                        detail: format!("record {}: {detail}", key.subject_text()),
                    },
                ));
            }
            Read::Found { payload, at } => (payload, at),
        };
        let pointer = match judge(&sealed, encoded_key, key) {
            Judged::Pointer(pointer) => pointer,
            Judged::Inline(pointer) => {
                // A record that carries its bytes is whole on its own: one
                // read of one shard (F11). Its object is renewed with it,
                // at most once a minute, so that eviction, which goes by
                // objects, keeps what is read (P6).
                if self.packs.touch(Kind::Record, &record_key, at) {
                    self.packs
                        .touch_live(Kind::Object, &short_key(&pointer.object));
                }
                let mut artifact = sealed;
                artifact.truncate(usize::try_from(pointer.size).unwrap_or(usize::MAX));
                return Some(self.packed_hit(artifact, &pointer));
            }
            Judged::Corrupt(detail) => {
                bump(&counters.corrupt, 1);
                self.remove_packed(Kind::Record, &record_key, at);
                return Some(self.packed_miss(
                    note_miss,
                    Miss::Corrupt {
                        detail: format!("record {}: {detail}", key.subject_text()),
                    },
                ));
            }
            Judged::Foreign(detail) => {
                bump(&counters.foreign, 1);
                self.remove_packed(Kind::Record, &record_key, at);
                return Some(self.packed_miss(note_miss, Miss::ForeignKey { detail }));
            }
        };
        let miss = match self.read_packed_object(&pointer) {
            Ok(bytes) => return Some(self.packed_hit(bytes, &pointer)),
            Err(ObjectMiss::Unreadable(detail)) => {
                bump(&counters.unreadable, 1);
                return Some(Lookup::Miss(Miss::Unreadable { detail }));
            }
            Err(ObjectMiss::Absent) => {
                bump(&counters.absent, 1);
                Miss::Absent
            }
            Err(ObjectMiss::Corrupt { detail, .. }) => {
                bump(&counters.corrupt, 1);
                Miss::Corrupt {
                    detail: format!(
                        "object {}: {detail}",
                        kiln_engine::store::hex(&pointer.object[..8])
                    ),
                }
            }
        };
        // The record points at nothing whole: it goes.
        self.remove_packed(Kind::Record, &record_key, at);
        Some(self.packed_miss(note_miss, miss))
    }

    /// A miss the store is sure of, logged as a file's would be.
    fn packed_miss(&self, note_miss: &dyn Fn(), miss: Miss) -> Lookup<Vec<u8>> {
        note_miss();
        if !matches!(miss, Miss::Absent) {
            let done = if self.read_only {
                "the store is read-only"
            } else {
                "removed"
            };
            log::warn!("kiln store: {miss}; {done}, the kernel compiles again");
        }
        Lookup::Miss(miss)
    }

    fn packed_hit(&self, artifact: Vec<u8>, pointer: &Pointer) -> Lookup<Vec<u8>> {
        let counters = &self.counters;
        bump(&counters.hits, 1);
        bump(&counters.bytes_read, artifact.len() as u64);
        Lookup::Hit {
            bytes: artifact.len() as u64,
            artifact,
            work: Duration::from_nanos(pointer.work_nanos),
        }
    }

    /// The verified bytes of `pointer`'s object: packed, else its file. A
    /// packed object that does not verify is removed.
    pub(super) fn read_packed_object(&self, pointer: &Pointer) -> Result<Vec<u8>, ObjectMiss> {
        let packs = &self.packs;
        let object_key = short_key(&pointer.object);
        match packs.read(Kind::Object, &object_key) {
            Read::Found { payload, at } => {
                let detail = if payload.len() as u64 != pointer.size {
                    format!(
                        "the object is {} bytes, its record says {}",
                        payload.len(),
                        pointer.size
                    )
                } else if digest(&payload) != pointer.object {
                    "the object's digest does not match its name".to_owned()
                } else {
                    packs.touch(Kind::Object, &object_key, at);
                    return Ok(payload);
                };
                self.remove_packed_object(&pointer.object, at);
                Err(corrupt(detail))
            }
            Read::Damaged { detail, at } => {
                self.remove_packed_object(&pointer.object, at);
                Err(corrupt(detail))
            }
            Read::Unreadable(detail) => Err(ObjectMiss::Unreadable(detail)),
            Read::Absent => self.read_object(pointer),
        }
    }

    /// Removes the packed entry read at `at`, unless it changed since.
    fn remove_packed(&self, kind: Kind, key: &[u8; 16], at: crate::pack::Position) {
        if self.read_only {
            return;
        }
        if let Err(error) = self.packs.remove_if_at(&self.locks, kind, key, at) {
            log::warn!("kiln store: cannot remove a damaged packed entry: {error}");
        }
    }

    /// Removes the packed object `object` read at `at`, unless someone
    /// is publishing it.
    fn remove_packed_object(&self, object: &[u8; 32], at: crate::pack::Position) {
        if self.read_only {
            return;
        }
        let Ok(Some(_alone)) = self
            .locks
            .acquire(object_slot(object), Mode::Exclusive, None)
        else {
            return;
        };
        self.remove_packed(Kind::Object, &short_key(object), at);
    }

    /// Appends the object of `bytes` and its records to the packs, each
    /// shard under its lock, the object first (P3); returns the bytes
    /// written and the entries added. A put that cannot finish removes
    /// what it appended.
    pub(super) fn publish_packed(
        &self,
        bytes: &[u8],
        object: &[u8; 32],
        records: &[(StoreKey, Vec<u8>)],
    ) -> io::Result<(u64, i64)> {
        let packs = &self.packs;
        let locks = &self.locks;
        let object_key = short_key(object);
        // Held while the object and its records are appended, so eviction
        // cannot take the object between the two (P6).
        let _pin = locks
            .acquire(
                object_slot(object),
                Mode::Shared,
                Some(Instant::now() + PIN_WAIT),
            )?
            .ok_or_else(|| io::Error::other("the object stayed locked"))?;
        let mut written = 0;
        let mut new_entries = 0;
        // Content addressing: the same bytes, whole, are not appended again.
        let here = matches!(
            packs.read(Kind::Object, &object_key),
            Read::Found { payload, .. } if payload == bytes
        );
        if !here {
            let frame = Frame {
                kind: Kind::Object,
                key: object_key,
                payload: bytes,
            };
            written += packs.append(locks, shard_of(&object_key), &[frame], &[])?;
            new_entries = 1;
        }
        let mut appended: Vec<[u8; 16]> = Vec::new();
        for (key, sealed) in records {
            let record_key = short_key(&key.digest());
            let frame = Frame {
                kind: Kind::Record,
                key: record_key,
                payload: sealed,
            };
            match packs.append(locks, shard_of(&record_key), &[frame], &[]) {
                Ok(bytes) => {
                    written += bytes;
                    appended.push(record_key);
                }
                Err(error) => {
                    // A failed put stores nothing: not an object without
                    // its records, nor some of its records.
                    for record_key in appended {
                        let _ = packs.remove(locks, Kind::Record, &record_key);
                    }
                    if new_entries == 1 {
                        let _ = packs.remove(locks, Kind::Object, &object_key);
                    }
                    return Err(error);
                }
            }
        }
        // A file record of the same key, from before the store packed, is
        // no longer what the key holds.
        for (key, _) in records {
            if std::fs::symlink_metadata(self.layout.record(&key.digest())).is_ok() {
                self.remove_record_file(key);
            }
        }
        Ok((written, new_entries))
    }

    /// Publishes a packed put of `bytes` under `key` and `source_key`.
    pub(super) fn try_put_packed(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> io::Result<Published> {
        let object = digest(bytes);
        let size = bytes.len() as u64;
        let records: Vec<(StoreKey, Vec<u8>)> = std::iter::once(key)
            .chain(source_key)
            .map(|key| {
                let record = Record::new(key.clone(), object, size, work);
                (key.clone(), packed_record(&record, bytes))
            })
            .collect();
        let (written, new_entries) = self.publish_packed(bytes, &object, &records)?;
        // A pack grows by its frames and slots: allocated as written.
        Ok(Published {
            written,
            allocated: written,
            new_entries,
        })
    }

    /// Removes a packed record of `key`, if any: a file put of the key
    /// replaces it, as a later packed put would.
    pub(super) fn remove_packed_record(&self, key: &StoreKey) {
        if self.read_only {
            return;
        }
        let record_key = short_key(&key.digest());
        if let Err(error) = self.packs.remove(&self.locks, Kind::Record, &record_key) {
            log::debug!("kiln store: cannot remove a packed record: {error}");
        }
    }

    /// The packed record of `key`, if one is there and whole.
    pub(super) fn packed_record(&self, key: &StoreKey) -> Option<Record> {
        match self.packs.read(Kind::Record, &short_key(&key.digest())) {
            Read::Found { payload, .. } => {
                Record::open_any(&payload).ok().map(|(record, _)| record)
            }
            _ => None,
        }
    }

    /// The verified bytes of `record`'s packed object, read without the
    /// store's lookup: nothing counted, renewed or removed.
    pub(super) fn packed_object_bytes(&self, record: &Record) -> Option<Vec<u8>> {
        match self.packs.read(Kind::Object, &short_key(&record.object)) {
            Read::Found { payload, .. }
                if payload.len() as u64 == record.size && digest(&payload) == record.object =>
            {
                Some(payload)
            }
            _ => None,
        }
    }

    /// The packed record of `key`, removed: an import publishes the key's
    /// record as a file in its place.
    pub(crate) fn take_packed_record(&self, key: &StoreKey) -> Option<Record> {
        let record = self.packed_record(key)?;
        self.remove_packed_record(key);
        Some(record)
    }

    /// Whether the object `object` is held, packed or as a file.
    pub(crate) fn holds_object(&self, object: &[u8; 32]) -> bool {
        self.packs
            .contains(Kind::Object, &short_key(object))
            .unwrap_or(false)
            || std::fs::symlink_metadata(self.layout.object(object))
                .is_ok_and(|found| found.is_file())
    }
}

impl Files {
    /// Calls `visit` with the payload of every live packed entry of
    /// `kind` whose frame is whole; an object's only when its digest is
    /// its key. Shards that cannot be read are logged and skipped.
    pub(crate) fn each_packed(&self, kind: Kind, visit: &mut dyn FnMut(&[u8])) {
        for shard in 0..crate::pack::SHARDS {
            let walked = self.packs.each(shard, &mut |live| {
                if live.slot.kind != kind {
                    return;
                }
                if let Ok(payload) = live.payload
                    && (kind != Kind::Object || short_key(&digest(payload)) == live.slot.key)
                {
                    visit(payload);
                }
            });
            if let Err(error) = walked {
                log::warn!("kiln store: pack {shard:03x} cannot be read: {error}");
            }
        }
    }
}

/// The frame a packed `record` of `bytes` is: a kernel's own record of a
/// small artifact carries the bytes (as its file would), so a warm start
/// reads one frame of one shard per kernel (F11); any other names its
/// object.
pub(super) fn packed_record(record: &Record, bytes: &[u8]) -> Vec<u8> {
    crate::record::record_file(record, bytes).0
}

fn corrupt(detail: String) -> ObjectMiss {
    ObjectMiss::Corrupt {
        detail,
        found: None,
    }
}
