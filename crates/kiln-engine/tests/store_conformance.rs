//! The store conformance suite on [`MemoryStore`]: the rules of the
//! `ArtifactStore` contract that a store of one process can show; those
//! across processes print why they do not apply.

use kiln_engine::MemoryStore;
use kiln_engine::conformance::StoreSubject;

/// Fresh memory stores; replacing content is a [`MemoryStore::clear`].
struct Memory;

impl StoreSubject for Memory {
    type Store = MemoryStore;

    fn store(&self) -> MemoryStore {
        MemoryStore::new()
    }

    fn replace_content(&self, store: &MemoryStore) -> bool {
        store.clear();
        true
    }

    fn with_lease(&self, lease: std::time::Duration) -> Option<MemoryStore> {
        Some(MemoryStore::with_lease(lease))
    }
}

kiln_engine::store_conformance_suite!(Memory);
