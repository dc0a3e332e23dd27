//! Whole-store passes: verify, collect (evict), list and search. Each walks
//! the shard folders one at a time and keeps only counters, so memory stays
//! flat whatever the store holds.

use crate::disk::DiskStore;
use crate::error::Result;
use crate::walk::StoreRoot;

mod collect;
mod list;
mod verify;

pub use collect::CollectReport;
pub use list::{Entry, EntryInfo};
pub use verify::{Progress, VerifyReport};

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
    use std::fs;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::config::StoreConfig;
    use crate::disk::{AGE_BUCKETS, Limits, age_bucket};
    use crate::lock::{Mode, object_slot};

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
