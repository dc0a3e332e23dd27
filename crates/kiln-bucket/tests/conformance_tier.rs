//! The store conformance suite on [`BucketTier`](kiln_bucket::BucketTier):
//! a disk store in a scratch folder before a bucket on a real S3 server
//! (Garage on loopback). Without Garage each test prints why it skips.

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kiln_bucket::BucketTier;
use kiln_engine::conformance::StoreSubject;
use kiln_remote::Keys;
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;

/// Two-level stores on one shared Garage node.
struct Tier {
    garage: &'static support::Garage,
    keys: Keys,
    scratch: Scratch,
    /// The disk root of each store, by its bucket prefix.
    roots: Mutex<HashMap<String, PathBuf>>,
}

impl Tier {
    fn new() -> Option<Self> {
        support::shared("the two-level bucket store's conformance suite").map(|garage| Self {
            garage,
            keys: support::fleet_keys(),
            scratch: Scratch::new("bucket-tier"),
            roots: Mutex::new(HashMap::new()),
        })
    }

    fn open(&self, root: &std::path::Path, prefix: &str) -> BucketTier {
        let disk = DiskStore::open(StoreConfig::at(root)).expect("a store opens in scratch");
        BucketTier::new(Arc::new(disk), self.garage.store(self.keys.clone(), prefix))
    }
}

impl StoreSubject for Tier {
    type Store = BucketTier;

    fn store(&self) -> BucketTier {
        let prefix = support::fresh_prefix();
        let root = self
            .scratch
            .join(&format!("disk-{}", prefix.trim_end_matches('/')));
        let store = self.open(&root, &prefix);
        self.roots
            .lock()
            .expect("no test panicked holding the map")
            .insert(prefix, root);
        store
    }

    /// Another process: the same disk root and bucket prefix, opened
    /// again.
    fn in_another_process(&self, store: &BucketTier) -> Option<BucketTier> {
        let prefix = store.bucket().config().prefix.clone();
        let root = self
            .roots
            .lock()
            .expect("no test panicked holding the map")
            .get(&prefix)
            .cloned()
            .expect("every store of the suite was made by `store`");
        Some(self.open(&root, &prefix))
    }
}

kiln_engine::store_conformance_suite!(match Tier::new() {
    Some(subject) => subject,
    None => return,
});
