//! The records of the last batches of every process that used the store,
//! kept in its `batches` file (`kiln records`).

use kiln_core::StoredBatch;

use super::DiskStore;
use crate::batches::BatchesFile;

impl DiskStore {
    /// Keeps an encoded batch record among the store's last
    /// ([`kiln_core::ArtifactStore::keep_batch`]). A read-only store keeps
    /// nothing; a record that cannot be written is dropped with a debug
    /// line, never an error: it is history, not an artifact.
    pub(super) fn keep_batch_record(&self, record: &[u8]) {
        if self.inner.read_only {
            return;
        }
        let path = self.inner.layout.batches_file();
        let kept = BatchesFile::open(&path).and_then(|file| file.keep(record));
        if let Err(error) = kept {
            log::debug!("kiln store: cannot keep a batch record ({error})");
        }
    }

    /// The records of the last batches of every process that used the
    /// store, oldest first; records this build cannot read are left out.
    pub fn kept_batches(&self) -> Vec<StoredBatch> {
        BatchesFile::read_at(&self.inner.layout.batches_file())
            .iter()
            .filter_map(|bytes| StoredBatch::decode(bytes))
            .collect()
    }
}
