//! The store conformance suite on [`BucketStore`](kiln_bucket::BucketStore)
//! against a real S3 server (Garage on loopback): every rule of the
//! `ArtifactStore` contract as it applies to a store without claims, each
//! test under a prefix of its own. Without Garage each test prints why it
//! skips.

mod support;

use kiln_bucket::BucketStore;
use kiln_engine::conformance::StoreSubject;
use kiln_remote::Keys;

/// Bucket stores on one shared Garage node.
struct Bucket {
    garage: &'static support::Garage,
    keys: Keys,
}

impl Bucket {
    fn new() -> Option<Self> {
        support::shared("the bucket store's conformance suite").map(|garage| Self {
            garage,
            keys: support::fleet_keys(),
        })
    }
}

impl StoreSubject for Bucket {
    type Store = BucketStore;

    fn store(&self) -> BucketStore {
        self.garage
            .store(self.keys.clone(), &support::fresh_prefix())
    }

    /// Another process's handle: its own client, counters and memory of
    /// its publishes, on the same bucket under the same prefix.
    fn in_another_process(&self, store: &BucketStore) -> Option<BucketStore> {
        Some(self.garage.store(self.keys.clone(), &store.config().prefix))
    }
}

kiln_engine::store_conformance_suite!(match Bucket::new() {
    Some(subject) => subject,
    None => return,
});
