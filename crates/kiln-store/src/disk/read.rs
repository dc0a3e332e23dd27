//! The read path: a lookup reads a record, then its object unless the
//! record carries the bytes, verifies both (P2), and answers a hit or the
//! reason for a miss; a bad record is removed on the way.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use kiln_engine::store::hex;
use kiln_engine::{Lookup, Miss, StoreKey};

use super::access::{touch, touch_inline};
use crate::files::Files;
use crate::files::bump;
use crate::lock::{Mode, object_slot};
use crate::record::{self, Checked, INLINE_MAX, Pointer, Record, digest};
use crate::tree::Removal;
use crate::usage::Delta;

/// The largest record file a lookup reads whole; anything longer is not a
/// record the store wrote and reads as damaged.
const RECORD_LIMIT: u64 = INLINE_MAX as u64 + (1 << 20);

/// Why an object gave no bytes.
pub(super) enum ObjectMiss {
    Absent,
    /// Damaged: `found` is the file, when it is one, to remove.
    Corrupt {
        detail: String,
        found: Option<Box<Metadata>>,
    },
    Unreadable(String),
}

/// What a lookup looks for: its record, named for the logs.
pub(super) struct Sought<'a> {
    /// Where the record is filed.
    pub(super) record_path: &'a Path,
    /// What the record is of, for a miss's detail.
    pub(super) subject: &'a dyn Fn() -> String,
    /// What happens without the entry, for the log of a miss.
    pub(super) without_it: &'a str,
}

impl Files {
    /// The verified bytes stored under `key`, or why there are none:
    /// [`ArtifactStore::lookup`](kiln_engine::ArtifactStore::lookup).
    /// `note_miss` is called on a miss the store is sure of.
    pub(crate) fn find_artifact(&self, key: &StoreKey, note_miss: &dyn Fn()) -> Lookup<Vec<u8>> {
        let mut key_buffer = [0u8; 512];
        let encoded_key = record::encode_into(key, &mut key_buffer);
        let encoded_key = encoded_key.as_ref();
        if let Some(found) = self.find_packed(key, encoded_key, note_miss) {
            return found;
        }
        self.find(
            &Sought {
                record_path: &self.layout.record(&key.digest()),
                subject: &|| key.subject_text(),
                without_it: "the kernel compiles",
            },
            |sealed| judge(sealed, encoded_key, key),
            note_miss,
        )
    }

    /// Reads the record `sought` names, judged by `judge`, then its
    /// object unless the record carries the bytes; verifies both (P2) and
    /// answers the hit or the miss. A record that is bad, of another key or
    /// points at nothing is removed, unless a writer replaced it meanwhile;
    /// `note_miss` is called on a miss the store is sure of.
    pub(super) fn find(
        &self,
        sought: &Sought<'_>,
        judge: impl Fn(&[u8]) -> Judged,
        note_miss: &dyn Fn(),
    ) -> Lookup<Vec<u8>> {
        let counters = &self.counters;
        let record_path = sought.record_path;
        // When the object a record names has vanished, the record is read
        // once more: a writer may have replaced it meanwhile (its new object
        // published first, P3), and then the new one is followed; the same
        // record again means the entry was evicted.
        let mut vanished: Option<Vec<u8>> = None;
        let (sealed, miss) = loop {
            let (record_file, record_found, mut sealed) = match read_record(record_path) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    bump(&counters.absent, 1);
                    note_miss();
                    return Lookup::Miss(Miss::Absent);
                }
                Err(error) => {
                    bump(&counters.unreadable, 1);
                    return Lookup::Miss(Miss::Unreadable {
                        detail: format!("reading {}: {error}", record_path.display()),
                    });
                }
            };
            if vanished.as_ref() == Some(&sealed) {
                bump(&counters.absent, 1);
                object_gone(sought);
                break (sealed, Miss::Absent);
            }
            let pointer = match judge(&sealed) {
                Judged::Inline(pointer) => {
                    if !self.read_only {
                        touch_inline(&record_file, &record_found, || {
                            self.layout.object(&pointer.object)
                        });
                    }
                    // The artifact is the start of the record: cut, not copied.
                    sealed.truncate(usize::try_from(pointer.size).unwrap_or(usize::MAX));
                    return self.hit(sealed, &pointer);
                }
                Judged::Pointer(pointer) => pointer,
                Judged::Corrupt(detail) => {
                    bump(&counters.corrupt, 1);
                    break (
                        sealed,
                        Miss::Corrupt {
                            detail: format!("record {}: {detail}", (sought.subject)()),
                        },
                    );
                }
                Judged::Foreign(detail) => {
                    bump(&counters.foreign, 1);
                    break (sealed, Miss::ForeignKey { detail });
                }
            };
            // A file record's object may have moved into a pack (`kiln gc`
            // packs an upgraded store's small entries): looked for there
            // only when its file is gone, so a file hit costs no more.
            let object = match self.read_object(&pointer) {
                Err(ObjectMiss::Absent) => self.read_packed_object(&pointer),
                read => read,
            };
            match object {
                Ok(bytes) => return self.hit(bytes, &pointer),
                Err(ObjectMiss::Unreadable(detail)) => {
                    bump(&counters.unreadable, 1);
                    return Lookup::Miss(Miss::Unreadable { detail });
                }
                Err(ObjectMiss::Absent) if vanished.is_none() => vanished = Some(sealed),
                Err(ObjectMiss::Absent) => {
                    bump(&counters.absent, 1);
                    object_gone(sought);
                    break (sealed, Miss::Absent);
                }
                Err(ObjectMiss::Corrupt { detail, found }) => {
                    bump(&counters.corrupt, 1);
                    if let Some(found) = found {
                        self.remove_object(&pointer.object, &found);
                    }
                    break (
                        sealed,
                        Miss::Corrupt {
                            detail: format!("object {}: {detail}", hex(&pointer.object[..8])),
                        },
                    );
                }
            }
        };
        // The record is bad, of another key, or points at nothing: remove it,
        // unless a writer replaced it meanwhile.
        if self.read_only {
            if !matches!(miss, Miss::Absent) {
                log::warn!(
                    "kiln store: {miss}; the store is read-only, {}",
                    sought.without_it
                );
            }
            return Lookup::Miss(miss);
        }
        let removal = self.remove_at(record_path, |folder, name| {
            folder.remove_if_holds(name, &sealed)
        });
        note_miss();
        match removal {
            Removal::Failed(error) => {
                log::warn!(
                    "kiln store: {miss}; left as it is ({error}), {} again",
                    sought.without_it
                )
            }
            _ if !matches!(miss, Miss::Absent) => {
                log::warn!("kiln store: {miss}; removed, {} again", sought.without_it);
            }
            _ => {}
        }
        Lookup::Miss(miss)
    }

    /// The bytes of `record`'s object, read without the store's lookup:
    /// nothing is counted, no access time renewed, nothing removed, so
    /// listing or checking a store (`kiln ls`, `kiln verify --recompile`)
    /// changes nothing in it. `None` when the object is missing, is not a
    /// plain file (a link is not followed, a FIFO not waited on), or is not
    /// of the record's length and digest.
    pub(crate) fn object_bytes(&self, record: &Record) -> Option<Vec<u8>> {
        if let Some(bytes) = self.packed_object_bytes(record) {
            return Some(bytes);
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.layout.object(&record.object))
            .ok()?;
        let metadata = file.metadata().ok()?;
        if !metadata.is_file() || metadata.len() != record.size {
            return None;
        }
        let bytes = read_up_to(&file, usize::try_from(record.size).ok()?).ok()?;
        (bytes.len() as u64 == record.size && digest(&bytes) == record.object).then_some(bytes)
    }

    /// The record stored under `key`, if one is there and whole; its object
    /// is not read.
    pub(crate) fn record(&self, key: &StoreKey) -> Option<Record> {
        if let Some(record) = self.packed_record(key) {
            return Some(record);
        }
        let sealed = fs::read(self.layout.record(&key.digest())).ok()?;
        Record::open_any(&sealed).ok().map(|(record, _)| record)
    }

    /// The verified bytes of the object `pointer` names.
    ///
    /// No lock: an object file is never changed in place, and a descriptor
    /// keeps reading a file that eviction unlinks, so once the object is
    /// open nothing can tear what is read from it (P6). Eviction can only
    /// take it before it is opened, which the lookup sees as an absent
    /// object.
    pub(super) fn read_object(&self, pointer: &Pointer) -> Result<Vec<u8>, ObjectMiss> {
        let path = self.layout.object(&pointer.object);
        let file = match open_no_link(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(ObjectMiss::Absent);
            }
            Err(error) => {
                return Err(ObjectMiss::Unreadable(format!(
                    "opening the object: {error}"
                )));
            }
        };
        let found = file
            .metadata()
            .map_err(|error| ObjectMiss::Unreadable(format!("reading the object: {error}")))?;
        let corrupt = |detail: String, found: Metadata| {
            Err(ObjectMiss::Corrupt {
                detail,
                found: Some(Box::new(found)),
            })
        };
        if !found.is_file() {
            return Err(ObjectMiss::Unreadable(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        if found.len() == 0 {
            return corrupt("empty object".into(), found);
        }
        if found.len() != pointer.size {
            return corrupt(
                format!(
                    "the object is {} bytes, its record says {}",
                    found.len(),
                    pointer.size
                ),
                found,
            );
        }
        let length = usize::try_from(pointer.size).unwrap_or(usize::MAX);
        let bytes = match read_up_to(&file, length) {
            Ok(bytes) => bytes,
            Err(error) => {
                return Err(ObjectMiss::Unreadable(format!(
                    "reading the object: {error}"
                )));
            }
        };
        if bytes.len() != length {
            return corrupt(format!("read {} of {length} bytes", bytes.len()), found);
        }
        if digest(&bytes) != pointer.object {
            return corrupt("the object's digest does not match its name".into(), found);
        }
        if !self.read_only {
            touch(&file, &found);
        }
        Ok(bytes)
    }

    fn hit(&self, artifact: Vec<u8>, pointer: &Pointer) -> Lookup<Vec<u8>> {
        let counters = &self.counters;
        bump(&counters.hits, 1);
        bump(&counters.bytes_read, artifact.len() as u64);
        Lookup::Hit {
            bytes: artifact.len() as u64,
            artifact,
            work: Duration::from_nanos(pointer.work_nanos),
        }
    }

    /// Removes the object at `digest` if it is still the file `found`
    /// describes and nobody is publishing it.
    fn remove_object(&self, digest: &[u8; 32], found: &Metadata) {
        if self.read_only {
            return;
        }
        let Ok(Some(_alone)) = self
            .locks
            .acquire(object_slot(digest), Mode::Exclusive, None)
        else {
            return;
        };
        let path = self.layout.object(digest);
        let removal = self.remove_at(&path, |folder, name| {
            folder.remove_if_same(name, found.dev(), found.ino())
        });
        if matches!(removal, Removal::Removed) {
            // Best effort: the counters are estimates between recounts.
            let taken = Delta::of(found.len(), found.blocks() * 512, 1).removed();
            let _ = self.usage.adjust(&self.locks, taken);
        }
    }
}

/// What a record file says to a lookup of `key`.
pub(super) enum Judged {
    /// The artifact is the start of the file.
    Inline(Pointer),
    /// The artifact is in the object it names.
    Pointer(Pointer),
    /// The record is damaged.
    Corrupt(String),
    /// The record is whole and of another key: the first component that
    /// differs.
    Foreign(String),
}

/// Judges a record file read for `key`, whose bytes are `encoded_key`. The
/// common case, a whole record of this key, is settled without decoding
/// the key the record holds; anything else is decoded to say what is wrong.
pub(super) fn judge(sealed: &[u8], encoded_key: &[u8], key: &StoreKey) -> Judged {
    match record::check(sealed, encoded_key) {
        Checked::Inline(pointer) => Judged::Inline(pointer),
        Checked::Pointer(pointer) => Judged::Pointer(pointer),
        Checked::Other => match Record::open_any(sealed) {
            Err(defect) => Judged::Corrupt(defect),
            Ok((record, _)) if record.key != *key => {
                Judged::Foreign(record.key.first_difference(key).map_or_else(
                    || "a record of another key".to_owned(),
                    |difference| difference.to_string(),
                ))
            }
            Ok((record, inline)) => {
                let pointer = record.pointer();
                if inline.is_some() {
                    Judged::Inline(pointer)
                } else {
                    Judged::Pointer(pointer)
                }
            }
        },
    }
}

/// Opens a record file and reads it whole: one open, one status, one read.
fn read_record(path: &Path) -> io::Result<(File, Metadata, Vec<u8>)> {
    let file = open_no_link(path)?;
    let found = file.metadata()?;
    if !found.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // One byte past the limit is enough to see that a file is too long.
    let length = usize::try_from(found.len().min(RECORD_LIMIT + 1)).unwrap_or(usize::MAX);
    let bytes = read_up_to(&file, length)?;
    Ok((file, found, bytes))
}

/// Opens the file at `path` to read, refusing a link at its final name
/// (`ELOOP`) in the same single `open` a plain one costs. A link on the way
/// (a shard folder swapped for one) is not looked for here, so a hit still
/// opens one path: what is read through it is verified as any read is, and
/// removals and publications reach their folders without following links.
fn open_no_link(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Reads up to `length` bytes from the start of `file`, fewer only where it
/// ends, into a buffer of exactly that capacity: one `read` call for a
/// whole file, where `Read::read_to_end` adds one to see the end or grows
/// its buffer in steps.
fn read_up_to(file: &File, length: usize) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(length);
    while bytes.len() < length {
        let spare = bytes.spare_capacity_mut();
        // SAFETY: the descriptor is open for the life of `file`, and `spare`
        // is `spare.len()` bytes of writable memory, which `read` only
        // writes.
        let read = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        match usize::try_from(read) {
            Ok(0) => break,
            Ok(read) => {
                // SAFETY: `read` returned how many bytes past the length it
                // wrote, within the capacity.
                unsafe { bytes.set_len(bytes.len() + read) };
            }
            Err(_) => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(bytes)
}

/// Says, at `-v`, that the record of `sought` named an object that is
/// gone: not an absent key but an entry that lost its object (removed by
/// hand, or by a disk that lost it).
fn object_gone(sought: &Sought<'_>) {
    log::info!(
        "kiln store: record {} names an object which is gone; the record is removed and {} \
         again",
        (sought.subject)(),
        sought.without_it
    );
}
