//! [`ArtifactStore`] for [`DiskStore`], with every part of it ([`Claims`],
//! [`Blobs`], [`Records`], [`Groups`]): each call handed to the part of
//! the store that does it.

use std::time::Duration;

use kiln_engine::store::{BlobKey, Blobs, Claims, Groups, Records, Shaped, StoreParts};
use kiln_engine::{
    ArtifactStore, Claim, ClaimWait, Explanation, Generation, Lookup, Origin, Put, StoreKey,
    StoreOutcome, StoreStatistics,
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

    fn lookup_each(&self, keys: &[StoreKey], found: &mut dyn FnMut(usize, Lookup<Vec<u8>>)) {
        spread::lookup_each(self, keys, &|_, answer| answer, found);
    }

    fn lookup_each_shaped(
        &self,
        keys: &[StoreKey],
        shape: &(dyn Fn(usize, Lookup<Vec<u8>>) -> Shaped + Sync),
        found: &mut dyn FnMut(usize, Shaped),
    ) {
        spread::lookup_each(self, keys, shape, found);
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        let mut outcomes: Vec<Option<StoreOutcome>> = vec![None; puts.len()];
        let (mut copied, mut rekeyed) = (Vec::new(), Vec::new());
        for (at, put) in puts.iter().enumerate() {
            match put.origin {
                Origin::Compiled { source_key } => {
                    // A compile, whether or not the store could keep it.
                    self.count_compile(put.key, source_key, put.work);
                    outcomes[at] = Some(self.store_artifact(put, source_key));
                }
                Origin::Rekeyed { source_key } => {
                    // Counted by its text, as a kernel rekeyed; stored by
                    // its id only.
                    self.count_compile(put.key, Some(source_key), put.work);
                    rekeyed.push(at);
                }
                // A copy of another store's artifact: no compile to count.
                Origin::Copied => copied.push(at),
            }
        }
        if let [at] = copied[..] {
            let put = &puts[at];
            outcomes[at] = Some(self.store_artifact(put, None));
        } else if !copied.is_empty() {
            // Made durable together, as a remote tier's hits written back.
            let batch: Vec<Put<'_>> = copied.iter().map(|&at| puts[at]).collect();
            for (at, outcome) in copied.iter().zip(self.store_copies(&batch)) {
                outcomes[*at] = Some(outcome);
            }
        }
        if !rekeyed.is_empty() {
            // Stored together, as copies are. Their records name objects
            // that are durable already: they are written and not waited for
            // (L11), so a program's start after another tool filled the
            // store makes no sync on its way.
            let batch: Vec<Put<'_>> = rekeyed.iter().map(|&at| puts[at]).collect();
            for (at, outcome) in rekeyed.iter().zip(self.store_copies_as(&batch, false)) {
                outcomes[*at] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| StoreOutcome::Failed {
                    detail: "the store gave no answer for this put".to_owned(),
                })
            })
            .collect()
    }

    fn remove(&self, key: &StoreKey) {
        self.remove_record(key);
    }

    fn generation(&self) -> Generation {
        self.inner.generation.handle()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.files.counters.snapshot()
    }

    fn parts(&self) -> StoreParts<'_> {
        StoreParts::all(self)
    }
}

impl Claims for DiskStore {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.claim_key(key, wait)
    }

    fn claim_timeout(&self) -> Duration {
        DiskStore::claim_timeout(self)
    }

    fn holder(&self, key: &StoreKey) -> Option<String> {
        self.claim_holder(key)
    }
}

impl Blobs for DiskStore {
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

impl Records for DiskStore {
    fn keep_batch(&self, record: &[u8]) {
        self.keep_batch_record(record);
    }

    fn kept_batches(&self) -> Vec<Vec<u8>> {
        self.inner.records.kept_bytes(&self.inner.files)
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        self.explain_key(key)
    }

    fn found_elsewhere(&self, key: &StoreKey) {
        self.take_miss(key);
    }
}

impl Groups for DiskStore {
    fn begin_group(&self) {
        if !self.inner.files.read_only {
            crate::durable::begin_group();
        }
    }

    fn commit_group(&self) {
        self.commit_writes();
    }

    fn batch_finished(&self) {
        self.write_misses();
        self.commit_writes();
        self.hold_limits();
        self.merge_activity();
    }
}
