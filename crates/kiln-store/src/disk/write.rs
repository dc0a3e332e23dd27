//! The write path: a put publishes the object, then its records, each
//! atomically (P3), takes back what it published when it cannot finish,
//! and counts a failure under its cause (P5).

use std::ffi::OsStr;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kiln_engine::store::hex;
use kiln_engine::{StoreKey, StoreOutcome};

use super::access::{not_yet_refreshed, touch};
use crate::durable;
use crate::error::{WriteCause, WriteFailure};
use crate::file_size::within_file_size_limit;
use crate::files::{Files, bump};
use crate::lock::{Mode, PIN_WAIT, object_slot};
use crate::record::{Record, digest, record_file};
use crate::tree::Folder;
use crate::usage::{Delta, Usage, file_allocation};

/// What a file put that wrote `written` bytes, `records` among them,
/// takes on disk: each file rounded up to whole blocks.
pub(super) fn files_allocation(written: u64, records: &[RecordFile]) -> u64 {
    let record_bytes: u64 = records
        .iter()
        .map(|record| record.sealed.len() as u64)
        .sum();
    let object_bytes = written.saturating_sub(record_bytes);
    file_allocation(object_bytes)
        + records
            .iter()
            .map(|record| file_allocation(record.sealed.len() as u64))
            .sum::<u64>()
}

/// What a put published: bytes written, what they take on disk, and the
/// entries added (1 when the object is new). The rooms that follow a put
/// (history, targets, usage and eviction) are told it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Published {
    pub(crate) written: u64,
    pub(crate) allocated: u64,
    pub(crate) new_entries: i64,
}

/// One record file a put publishes.
pub(super) struct RecordFile {
    /// Where.
    pub(super) path: PathBuf,
    /// Its sealed bytes.
    pub(super) sealed: Vec<u8>,
    /// Whether it carries the artifact's bytes (see [`not_yet_refreshed`]).
    pub(super) inline: bool,
}

/// What a put finds where its object belongs.
enum Here {
    /// Nothing.
    Absent,
    /// The object, whole: open, and as it was found.
    Same(File, Box<Metadata>),
    /// A file that is not the object, or nothing left of what was not a
    /// file.
    Other,
}

/// The write failures room: the causes of the writes that failed through
/// a handle and its clones.
///
/// **Invariant:** one entry, and one warning, per cause (P5).
#[derive(Debug, Default)]
pub(crate) struct WriteFailures {
    failures: Mutex<Vec<WriteFailure>>,
}

impl WriteFailures {
    /// The writes that failed, one entry per cause, in the order the
    /// causes were first seen (P5).
    pub(crate) fn list(&self) -> Vec<WriteFailure> {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Counts a failed write to the store at `root` under its cause, and
    /// logs the first of each cause: a full disk fails every put of a run,
    /// and one line says it.
    pub(crate) fn count(&self, error: &io::Error, root: &Path) -> WriteCause {
        let cause = WriteCause::of(error);
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match failures.iter_mut().find(|failure| failure.cause == cause) {
            Some(failure) => failure.count += 1,
            None => {
                failures.push(WriteFailure {
                    cause,
                    detail: error.to_string(),
                    count: 1,
                });
                log::warn!(
                    "kiln store: cannot write to {}: {cause}: {error}; kernels still load, and \
                     further writes that fail so are only counted",
                    root.display()
                );
            }
        }
        cause
    }

    /// Counts a put's `result` in `files` as a put or a failed write of
    /// its cause (P5), and says what it did; `subject` names what was put,
    /// for the log.
    pub(crate) fn count_put(
        &self,
        files: &Files,
        result: io::Result<u64>,
        subject: impl FnOnce() -> String,
    ) -> StoreOutcome {
        let counters = &files.counters;
        match result {
            Ok(written) => {
                bump(&counters.puts, 1);
                bump(&counters.bytes_written, written);
                StoreOutcome::Stored { bytes: written }
            }
            Err(error) => {
                bump(&counters.put_failures, 1);
                let cause = self.count(&error, files.root());
                log::debug!(
                    "kiln store: cannot store {} in {}: {error}",
                    subject(),
                    files.root().display()
                );
                StoreOutcome::Failed {
                    detail: format!("{cause}: {error}"),
                }
            }
        }
    }

    /// Commits the calling thread's group: what it wrote in `files` made
    /// durable together (P3); a sync that fails is counted as a failed
    /// write under its cause (P5).
    pub(crate) fn commit(&self, files: &Files) {
        if let Err(error) = durable::commit_group() {
            bump(&files.counters.put_failures, 1);
            self.count(&error, files.root());
        }
    }
}

impl Files {
    /// Publishes `bytes` under `key` and `source_key`, packed when they
    /// are small: [`ArtifactStoreExt::put`](kiln_engine::ArtifactStoreExt::put)
    /// without what follows a put in the other rooms.
    pub(crate) fn try_put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> io::Result<Published> {
        if bytes.is_empty() {
            return Err(io::Error::other("an empty artifact is never stored"));
        }
        if self.packs_artifact(bytes.len() as u64) {
            return self.try_put_packed(key, source_key, bytes, work);
        }
        let object = digest(bytes);
        let size = bytes.len() as u64;
        let records: Vec<RecordFile> = std::iter::once(key)
            .chain(source_key)
            .map(|key| {
                let record = Record::new(key.clone(), object, size, work);
                let (sealed, inline) = record_file(&record, bytes);
                RecordFile {
                    path: self.layout.record(&key.digest()),
                    sealed,
                    inline,
                }
            })
            .collect();
        let (written, new_entries) = self.publish_entry(bytes, &object, &records)?;
        let allocated = files_allocation(written, &records);
        // A packed record of the same key is no longer what it holds.
        for key in std::iter::once(key).chain(source_key) {
            self.remove_packed_record(key);
        }
        Ok(Published {
            written,
            allocated,
            new_entries,
        })
    }

    /// Publishes the object of `bytes`, whose digest is `object`, then
    /// `records`, each atomically (P3), and takes back what it published
    /// when it cannot finish: a failed put stores nothing, not an object
    /// without its records. Returns the bytes written and the entries it
    /// added (1 when the object is new).
    pub(super) fn publish_entry(
        &self,
        bytes: &[u8],
        object: &[u8; 32],
        records: &[RecordFile],
    ) -> io::Result<(u64, i64)> {
        let object = *object;
        let size = bytes.len() as u64;
        // Refused before a byte is written: past the limit, the system
        // would stop the process with SIGXFSZ unless it ignores it.
        let largest = records
            .iter()
            .map(|record| record.sealed.len() as u64)
            .fold(size, u64::max);
        within_file_size_limit(largest)?;
        // Held while the object and its records are published, so eviction
        // cannot take the object between the two (P6).
        let pin = self
            .locks
            .acquire(
                object_slot(&object),
                Mode::Shared,
                Some(Instant::now() + PIN_WAIT),
            )?
            .ok_or_else(|| io::Error::other("the object stayed locked"))?;
        let object_path = self.layout.object(&object);
        let mut written = 0;
        let mut new_entries = 0;
        // What this put published, to take back if it cannot finish: a
        // failed put stores nothing, not an object without its records.
        let mut published_object: Option<Metadata> = None;
        let mut published_records: Vec<(&Path, Metadata)> = Vec::new();
        let result = (|| -> io::Result<()> {
            match self.same_object_here(&object_path, &object, size)? {
                Here::Same(file, found) => {
                    // The same bytes are already here: content addressing.
                    touch(&file, &found);
                }
                other => {
                    if matches!(other, Here::Absent) {
                        new_entries = 1;
                    }
                    let file = self.publish(&object_path, bytes)?;
                    written += size;
                    if new_entries == 1 {
                        published_object = file.metadata().ok();
                    }
                }
            }
            for record in records {
                self.clear_non_file(&record.path)?;
                let file = self.publish(&record.path, &record.sealed)?;
                if let Ok(found) = file.metadata() {
                    published_records.push((&record.path, found));
                }
                if record.inline {
                    not_yet_refreshed(&file);
                }
                written += record.sealed.len() as u64;
            }
            Ok(())
        })();
        drop(pin);
        if let Err(error) = result {
            // Only the files this put published: another writer's record
            // published since stays.
            let same = |found: &Metadata| {
                let (device, inode) = (found.dev(), found.ino());
                move |folder: &Folder, name: &OsStr| folder.remove_if_same(name, device, inode)
            };
            for (target, found) in &published_records {
                self.remove_at(target, same(found));
            }
            // Unless another publisher of the same bytes holds it now.
            if let Some(found) = &published_object
                && let Ok(Some(_alone)) =
                    self.locks
                        .acquire(object_slot(&object), Mode::Exclusive, None)
            {
                self.remove_at(&object_path, same(found));
            }
            return Err(error);
        }
        Ok((written, new_entries))
    }

    /// Adds what a put `published` to the usage counters, and says what
    /// the store holds then (for eviction, P6).
    pub(crate) fn count_usage(&self, published: Published) -> Option<Usage> {
        let Published {
            written,
            allocated,
            new_entries,
        } = published;
        self.usage
            .adjust(&self.locks, Delta::of(written, allocated, new_entries))
            .inspect_err(|error| log::debug!("cannot count a put: {error}"))
            .ok()
    }

    /// What is at `path`, where the object with digest `object` and `size`
    /// bytes belongs. A file of the right length is digested before it is
    /// trusted: a bit flipped in place keeps the length, and a put that
    /// trusted it would leave the entry corrupt for every later run (P2).
    /// Anything else than a file there is removed, so the object can be
    /// published in its place.
    fn same_object_here(&self, path: &Path, object: &[u8; 32], size: u64) -> io::Result<Here> {
        let found = match fs::symlink_metadata(path) {
            Ok(found) => found,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Here::Absent),
            Err(error) => return Err(error),
        };
        if !found.is_file() {
            self.clear_non_file(path)?;
            return Ok(Here::Other);
        }
        if found.len() != size {
            return Ok(Here::Other);
        }
        let Ok(file) = File::open(path) else {
            return Ok(Here::Other);
        };
        match file_digest(&file) {
            Ok(found_digest) if found_digest == *object => Ok(Here::Same(file, Box::new(found))),
            Ok(_) => {
                log::warn!(
                    "kiln store: object {} was damaged in place; written again",
                    hex(&object[..8])
                );
                Ok(Here::Other)
            }
            Err(_) => Ok(Here::Other),
        }
    }
}

/// The BLAKE3 digest of what `file` holds, read in chunks.
fn file_digest(file: &File) -> io::Result<[u8; 32]> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file)?;
    Ok(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io;
    use std::time::Duration;

    use kiln_engine::ArtifactStoreExt;

    use crate::error::WriteCause;
    use crate::fixtures::{hit, kernel_key, scratch, source_key};
    use crate::record::INLINE_MAX;
    use crate::record::Record;

    #[test]
    fn a_small_kernel_artifact_travels_in_its_record_and_a_source_record_points() {
        let store = scratch("inline");
        let small = vec![7u8; 4 << 10];
        store.put(&kernel_key(1), Some(&source_key(1)), &small, Duration::ZERO);
        let kernel_record = fs::read(store.record_path(&kernel_key(1))).expect("a record");
        assert!(kernel_record.starts_with(&small), "it carries the bytes");
        let source_record = fs::read(store.record_path(&source_key(1))).expect("a record");
        assert!(Record::open(&source_record).is_ok(), "it points");
        assert_eq!(hit(&store, &kernel_key(1)), small);
        assert_eq!(hit(&store, &source_key(1)), small);

        let large = vec![9u8; INLINE_MAX + 1];
        store.put(&kernel_key(2), None, &large, Duration::ZERO);
        let sealed = fs::read(store.record_path(&kernel_key(2))).expect("a record");
        assert!(Record::open(&sealed).is_ok(), "a large artifact's points");
        assert_eq!(hit(&store, &kernel_key(2)), large);
        let _ = fs::remove_dir_all(store.root());
    }

    #[test]
    fn failed_writes_are_counted_once_per_cause() {
        // P5: one entry, and one warning, per cause; the first detail kept.
        let store = scratch("write-causes");
        for (number, detail) in [(libc::ENOSPC, "first"), (libc::ENOSPC, "second")] {
            let error = io::Error::new(io::Error::from_raw_os_error(number).kind(), detail);
            store.count_write_failure(&error);
        }
        store.count_write_failure(&io::Error::from_raw_os_error(libc::EDQUOT));
        let failures = store.write_failures();
        assert_eq!(
            failures
                .iter()
                .map(|failure| (failure.cause, failure.count, failure.detail.as_str()))
                .collect::<Vec<_>>(),
            [
                (WriteCause::DiskFull, 2, "first"),
                (WriteCause::Quota, 1, "Disk quota exceeded (os error 122)")
            ]
        );
        let _ = fs::remove_dir_all(store.root());
    }
}
