//! The store conformance suite on [`DiskStore`]: every rule of the
//! `ArtifactStore` contract, each test on fresh stores in a scratch folder
//! of its own. A second [`DiskStore`] opened on the same root plays another
//! process: it shares the files and none of the first one's locks or
//! counters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kiln_engine::ArtifactStoreExt;
use kiln_engine::conformance::StoreSubject;
use kiln_engine::{ArtifactId, KernelId, KeyComponents, StoreKey, StoreOutcome};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;

/// Disk stores in one test's scratch folder, each in a root of its own.
struct Disk {
    scratch: Scratch,
    made: AtomicUsize,
    /// [`StoreConfig::pack_below`] of every store it opens.
    pack_below: u64,
}

impl Disk {
    fn new() -> Self {
        Self {
            scratch: Scratch::new("store-conformance"),
            made: AtomicUsize::new(0),
            pack_below: 0,
        }
    }

    /// Stores that pack every artifact of the suite (F10).
    fn packing() -> Self {
        Self {
            scratch: Scratch::new("store-conformance-packed"),
            made: AtomicUsize::new(0),
            pack_below: 1 << 20,
        }
    }

    fn open(&self, root: &std::path::Path) -> DiskStore {
        DiskStore::open(StoreConfig {
            pack_below: self.pack_below,
            ..StoreConfig::at(root)
        })
        .expect("a store opens in a scratch folder")
    }

    /// A name inside the scratch folder that no other call gets.
    fn fresh_name(&self, what: &str) -> std::path::PathBuf {
        let number = self.made.fetch_add(1, Ordering::Relaxed);
        self.scratch.join(&format!("{what}-{number}"))
    }
}

impl StoreSubject for Disk {
    type Store = DiskStore;

    fn store(&self) -> DiskStore {
        self.open(&self.fresh_name("store"))
    }

    /// Imports a bundle that holds another artifact under a key the store
    /// holds: the import replaces content, as `kiln import` does.
    fn replace_content(&self, store: &DiskStore) -> bool {
        let components = KeyComponents::new("conformance", "replacement", "arch", "");
        let id = ArtifactId::new(KernelId::named("conformance.replaced").build(), ());
        let key = StoreKey::for_artifact(&components, &id, None);
        let put = |store: &DiskStore, bytes: &[u8]| {
            assert!(matches!(
                store.put(&key, None, bytes, Duration::ZERO),
                StoreOutcome::Stored { .. }
            ));
        };
        put(store, b"before the import");
        let other = self.store();
        put(&other, b"what the import brings");
        let bundle = self.fresh_name("bundle");
        other
            .export(&bundle, Some(&components), &mut |_| {})
            .expect("the other store exports");
        let report = store
            .import(&bundle, None, &mut |_| {})
            .expect("the bundle imports");
        assert_eq!(report.replaced, 1, "the import replaced the entry");
        true
    }

    fn in_another_process(&self, store: &DiskStore) -> Option<DiskStore> {
        Some(self.open(store.root()))
    }

    fn with_lease(&self, lease: Duration) -> Option<DiskStore> {
        let config = StoreConfig {
            lease,
            pack_below: self.pack_below,
            ..StoreConfig::at(self.fresh_name("leased"))
        };
        Some(DiskStore::open(config).expect("a store opens in a scratch folder"))
    }
}

kiln_engine::store_conformance_suite!(Disk::new());

/// The same suite on packed entries (F10): every rule holds for them as
/// for files.
mod packed {
    use super::Disk;

    kiln_engine::store_conformance_suite!(Disk::packing());
}
