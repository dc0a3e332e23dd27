//! [`ArtifactStore`] for [`DiskStore`]: each call handed to its part.

use std::time::Duration;

use kiln_engine::store::BlobKey;
use kiln_engine::{
    ArtifactStore, Claim, ClaimWait, Explanation, Generation, Lookup, StoreKey, StoreOutcome,
    StoreStatistics,
};

use super::{DiskStore, spread};

impl ArtifactStore for DiskStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        let found = self.find_artifact(key);
        self.count_lookup(key, &found);
        found
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        spread::lookup_many(self, keys)
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.claim_key(key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        DiskStore::claim_timeout(self)
    }

    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        // A compile, whether or not the store could keep it.
        self.count_compile(key, source_key, work);
        self.store_artifact(key, source_key, bytes, work)
    }

    fn put_rekeyed(
        &self,
        key: &StoreKey,
        source_key: &StoreKey,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        // Counted by its text, as a kernel rekeyed; stored by its id only.
        self.count_compile(key, Some(source_key), work);
        self.store_artifact(key, None, bytes, work)
    }

    fn found_elsewhere(&self, key: &StoreKey) {
        self.take_miss(key);
    }

    fn put_copy(&self, key: &StoreKey, bytes: &[u8], work: Duration) -> StoreOutcome {
        // A copy of another store's artifact: no compile to count.
        self.store_artifact(key, None, bytes, work)
    }

    fn put_many(&self, copies: &[kiln_engine::ArtifactCopy<'_>]) -> Vec<StoreOutcome> {
        self.store_copies(copies)
    }

    fn put_rekeyed_many(&self, puts: &[kiln_engine::RekeyedPut<'_>]) -> Vec<StoreOutcome> {
        // Each counted by its text, as `put_rekeyed` counts it; stored by
        // its id only, all together, as copies are. Their records name
        // objects that are durable already: they are written and not
        // waited for (L11), so a program's start after another tool filled
        // the store makes no sync on its way.
        for put in puts {
            self.count_compile(put.key, Some(put.source_key), put.work);
        }
        let copies: Vec<kiln_engine::ArtifactCopy<'_>> = puts
            .iter()
            .map(|put| kiln_engine::ArtifactCopy {
                key: put.key,
                bytes: put.bytes,
                work: put.work,
            })
            .collect();
        self.store_copies_as(&copies, false)
    }

    fn remove(&self, key: &StoreKey) {
        self.remove_record(key);
    }

    fn generation(&self) -> Generation {
        self.inner.generation.clone()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.counters.snapshot()
    }

    fn batch_finished(&self) {
        self.write_misses();
        self.commit_writes();
        self.hold_limits();
        self.merge_activity();
    }

    fn begin_group(&self) {
        if !self.inner.read_only {
            crate::durable::begin_group();
        }
    }

    fn commit_group(&self) {
        self.commit_writes();
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        self.claim_holder(key)
    }

    fn kept_batches(&self) -> Vec<Vec<u8>> {
        crate::batches::BatchesFile::read_at(&self.inner.layout.batches_file())
    }

    fn keep_batch(&self, record: &[u8]) {
        self.keep_batch_record(record);
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        self.explain_key(key)
    }

    fn lookup_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        let found = self.find_blob(key);
        self.count_blob_lookup(key, &found);
        found
    }

    fn put_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        self.count_blob_put(key, bytes);
        self.store_blob(key, bytes)
    }
}
