//! What the unit tests of the store's parts share: scratch stores and keys.

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use kiln_engine::fake::{FakeCompiler, FakeKernel};
use kiln_engine::store::BlobKey;
use kiln_engine::{ArtifactStore, Lookup, StoreKey};

use crate::DiskStore;
use crate::config::StoreConfig;

/// A store of files only: the tests of the parts look at the files an entry
/// is made of; packed entries have tests of their own (`pack/`, `packed.rs`).
pub(crate) fn scratch(test: &str) -> DiskStore {
    let root = std::env::temp_dir().join(format!("kiln-store-{test}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    DiskStore::open(StoreConfig {
        collects_automatically: false,
        pack_below: 0,
        ..StoreConfig::at(root)
    })
    .expect("a store")
}

pub(crate) fn kernel_key(number: u32) -> StoreKey {
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
    )
}

pub(crate) fn source_key(number: u32) -> StoreKey {
    StoreKey::for_source(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
        &format!("source {number}"),
    )
}

pub(crate) fn hit(store: &DiskStore, key: &StoreKey) -> Vec<u8> {
    match store.lookup(key) {
        Lookup::Hit { artifact, .. } => artifact,
        Lookup::Miss(miss) => panic!("a stored entry missed: {miss}"),
    }
}

pub(crate) fn accessed(path: &Path) -> SystemTime {
    fs::metadata(path)
        .and_then(|found| found.accessed())
        .expect("an access time")
}

/// The key of a named blob, one per `driver`.
pub(crate) fn blob_key(driver: &str) -> BlobKey {
    BlobKey::new("test cache")
        .component("adapter", "test adapter")
        .component("driver", driver)
}
