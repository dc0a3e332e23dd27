//! Named blobs ([`BlobKey`]): data a backend keeps beside its artifacts,
//! such as the driver's pipeline cache. A blob is an object and a blob
//! record (`kilnblb1`) filed in the `records` tree under its key's digest,
//! so it is published, verified, evicted and listed as an artifact is; it
//! has no kernel history, no source key and no claim.

use std::io;

use kiln_engine::Lookup;
use kiln_engine::store::BlobKey;

use super::read::{Judged, Sought};
use super::write::{Published, RecordFile, files_allocation};
use crate::files::Files;
use crate::record::{BlobRecord, digest};

impl Files {
    /// The verified bytes of the blob `key`:
    /// [`Blobs::lookup_blob`](kiln_engine::Blobs::lookup_blob).
    pub(crate) fn find_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        self.find(
            &Sought {
                record_path: &self.layout.record(&key.digest()),
                subject: &|| key.kind.clone(),
                without_it: "it is made",
            },
            |sealed| match BlobRecord::open(sealed) {
                Err(defect) => Judged::Corrupt(defect),
                Ok(record) => match record.key.first_difference(key) {
                    Some(difference) => Judged::Foreign(difference),
                    None => Judged::Pointer(record.pointer()),
                },
            },
            &|| {},
        )
    }

    /// Publishes `bytes` as the blob `key`:
    /// [`Blobs::put_blob`](kiln_engine::Blobs::put_blob), without what
    /// follows a put in the other rooms.
    pub(crate) fn try_put_blob(&self, key: &BlobKey, bytes: &[u8]) -> io::Result<Published> {
        if bytes.is_empty() {
            return Err(io::Error::other("an empty blob is never stored"));
        }
        let object = digest(bytes);
        let record = BlobRecord::new(key.clone(), object, bytes.len() as u64);
        let records = [RecordFile {
            path: self.layout.record(&key.digest()),
            sealed: record.seal(),
            inline: false,
        }];
        let (written, new_entries) = self.publish_entry(bytes, &object, &records)?;
        Ok(Published {
            written,
            allocated: files_allocation(written, &records),
            new_entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use kiln_engine::Blobs;
    use kiln_engine::{Lookup, Miss, StoreOutcome};

    use crate::fixtures::{blob_key, scratch};
    use crate::record::BlobRecord;

    #[test]
    fn a_blob_is_a_record_of_its_own_beside_its_object() {
        // P2: the record names the blob's key and its object, whose digest
        // a hit checks.
        let store = scratch("blob-record");
        let bytes = vec![5u8; 40 << 10];
        assert!(matches!(
            store.put_blob(&blob_key("1"), &bytes),
            StoreOutcome::Stored { .. }
        ));
        let path = store.inner.files.layout.record(&blob_key("1").digest());
        let record = BlobRecord::open(&fs::read(&path).expect("a blob record")).expect("whole");
        assert_eq!(record.key, blob_key("1"));
        assert_eq!(record.size, bytes.len() as u64);
        let object = store.object_path(&record.object);
        assert_eq!(fs::read(&object).expect("its object"), bytes);

        fs::write(&object, vec![6u8; bytes.len()]).expect("the object is damaged");
        assert!(matches!(
            store.lookup_blob(&blob_key("1")),
            Lookup::Miss(Miss::Corrupt { .. })
        ));
        assert!(
            matches!(
                store.lookup_blob(&blob_key("1")),
                Lookup::Miss(Miss::Absent)
            ),
            "the damaged blob was removed"
        );
        let _ = fs::remove_dir_all(store.root());
    }
}
