//! Whole-store passes: verify, collect (evict), list and search. Each walks
//! the shard folders one at a time and keeps only counters, so memory stays
//! flat whatever the store holds.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::disk::{AGE_BUCKETS, DiskStore, Limits, age_bucket};
use crate::error::Result;
use crate::lock::{COLLECT_SLOT, Mode, key_slot, object_slot};
use crate::record::{AnyRecord, BlobRecord, KernelHistory, Record, digest};
use crate::tree::{Folder, Kind, Removal, Status, is_absent};
use crate::usage::Usage;
use crate::usage::file_allocation;
use crate::walk::digest_from_name;

mod collect;
mod list;
mod verify;

/// How far a pass has got, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What it is doing: `objects`, `records`, `histories`, `evicting`.
    pub phase: &'static str,
    /// Files done in this phase.
    pub done: u64,
    /// Files in this phase, when known (from the usage counters: an
    /// estimate).
    pub total: Option<u64>,
    /// Bytes read so far.
    pub bytes: u64,
}

/// What a verify found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Objects re-digested.
    pub objects: u64,
    /// Records checked.
    pub records: u64,
    /// Kernel histories checked.
    pub histories: u64,
    /// Bytes re-digested.
    pub bytes: u64,
    /// Objects whose bytes did not match their name: removed.
    pub bad_objects: u64,
    /// Records that were damaged, or filed under another key: removed.
    pub bad_records: u64,
    /// Records whose object was gone or of another size: removed.
    pub dangling_records: u64,
    /// Damaged kernel histories: removed.
    pub bad_histories: u64,
    /// Files left in `staging/` by processes that died while writing:
    /// removed. They were never entries.
    pub staging_removed: u64,
    /// Bad files left alone because another process was using them.
    pub busy: u64,
    /// What verify could not check, and why: a folder it may not read, a
    /// folder or link where a file should be, a name the store does not
    /// give its files. Left as it was.
    #[serde(default)]
    pub unchecked: Vec<(PathBuf, String)>,
}

impl VerifyReport {
    /// Whether everything verified: nothing was bad, and nothing was left
    /// unchecked.
    pub fn is_clean(&self) -> bool {
        self.bad_objects + self.bad_records + self.dangling_records + self.bad_histories == 0
            && self.unchecked.is_empty()
    }
}

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectReport {
    /// What the store held before.
    pub before: Usage,
    /// What it holds after.
    pub after: Usage,
    /// Entries (objects) evicted.
    pub evicted: u64,
    /// Bytes of objects evicted.
    pub evicted_bytes: u64,
    /// Records removed because their object was evicted or gone.
    pub records_removed: u64,
    /// Entries that should have gone but were being read or written: kept.
    pub busy: u64,
    /// Staging files of dead processes removed.
    pub staging_removed: u64,
    /// Whether another process was already collecting, so this one did
    /// nothing.
    pub skipped: bool,
    /// What the collection could not check, and why (as
    /// [`VerifyReport::unchecked`]): left as it was.
    #[serde(default)]
    pub unchecked: Vec<(PathBuf, String)>,
}

/// One entry as `kiln ls` shows it: its record and what its object looks
/// like.
///
/// As JSON, the record is under the name of what it is (`"record"` for an
/// artifact's, `"blob"` for a named blob's), beside `"accessed_at"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The record, of an artifact or a named blob.
    #[serde(flatten)]
    pub entry: Entry,
    /// When the object was last read, in seconds since the Unix epoch;
    /// `None` when the object is missing.
    pub accessed_at: Option<u64>,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// An artifact's record: of a kernel or of lowered source.
    Record(Record),
    /// A named blob's record ([`kiln_engine::store::BlobKey`]): data a
    /// backend keeps beside its artifacts, such as a pipeline cache.
    Blob(BlobRecord),
}

use crate::tree::not_a_file;
use crate::walk::{
    Skip, StoreRoot, Unchecked, count, has_object, object_status, open_regular, stream_digest,
    unless_read_only,
};

impl DiskStore {
    /// The store's root, opened for a pass once it is seen to carry the
    /// store's marker: a pass removes only from a store.
    fn open_root(&self) -> Result<StoreRoot<'_>> {
        Ok(StoreRoot {
            folder: crate::skeleton::open_marked(&self.inner.files.layout)?,
            path: self.inner.files.layout.root(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;

    use std::fs;

    #[test]
    fn p6_an_object_being_published_is_not_evicted() {
        use kiln_engine::ArtifactStoreExt;
        use kiln_engine::fake::{FakeCompiler, FakeKernel};
        use kiln_engine::{ArtifactStore, Lookup, StoreKey};

        let root = std::env::temp_dir().join(format!("kiln-store-pinned-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let store = DiskStore::open(StoreConfig::at(&root)).expect("a store");
        let key = |number| {
            StoreKey::for_artifact(
                &FakeCompiler::default_key_components(),
                &FakeKernel::new(number).artifact_id(),
                None,
            )
        };
        for number in 0..3 {
            store.put(&key(number), None, &[number as u8 + 1; 100], Duration::ZERO);
        }
        let read = store.record(&key(1)).expect("stored").object;
        // What a publisher holds while it writes the object and its records.
        let pin = store
            .inner
            .files
            .locks
            .acquire(object_slot(&read), Mode::Shared, None)
            .expect("lock")
            .expect("free");
        let nothing = Limits {
            max_bytes: 0,
            max_entries: 0,
        };
        let report = store.collect(nothing, &mut |_| {}).expect("collects");
        assert_eq!(report.evicted, 2);
        assert_eq!(report.busy, 1);
        drop(pin);
        assert!(matches!(store.lookup(&key(1)), Lookup::Hit { .. }));
        assert_eq!(
            store
                .collect(nothing, &mut |_| {})
                .expect("collects")
                .evicted,
            1
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn older_accesses_fall_in_later_buckets() {
        let now = SystemTime::now();
        let bucket = |seconds| age_bucket(now - Duration::from_secs(seconds), now);
        assert_eq!(bucket(0), 0);
        assert!(bucket(60) < bucket(3600));
        assert!(bucket(3600) < bucket(86_400 * 30));
        assert!(bucket(u64::from(u32::MAX) * 1000) < AGE_BUCKETS);
    }

    #[test]
    fn a_blob_is_listed_verified_and_evicted_as_an_entry() {
        // P6: a blob is an entry: listed as a blob, kept by verify, and
        // evicted with the rest.
        use kiln_engine::{ArtifactStoreExt, Blobs};
        use kiln_engine::{Lookup, Miss};

        use crate::fixtures::{blob_key, kernel_key, scratch};

        let store = scratch("blob-entry");
        store.put(&kernel_key(1), None, b"an artifact", Duration::ZERO);
        store.put_blob(&blob_key("1"), b"a blob");
        let mut blobs = Vec::new();
        let mut artifacts = 0;
        store
            .entries(&mut |entry| match entry.entry {
                Entry::Blob(record) => blobs.push(record.key),
                Entry::Record(_) => artifacts += 1,
            })
            .expect("lists");
        assert_eq!((blobs, artifacts), (vec![blob_key("1")], 1));

        let report = store.verify(&mut |_| {}).expect("verifies");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.records, 2);
        assert!(matches!(
            store.lookup_blob(&blob_key("1")),
            Lookup::Hit { .. }
        ));

        let nothing = Limits {
            max_bytes: 0,
            max_entries: 0,
        };
        let report = store.collect(nothing, &mut |_| {}).expect("collects");
        assert_eq!((report.evicted, report.records_removed), (2, 2));
        assert!(matches!(
            store.lookup_blob(&blob_key("1")),
            Lookup::Miss(Miss::Absent)
        ));
        let _ = fs::remove_dir_all(store.root());
    }
}
