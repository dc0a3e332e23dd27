//! Helpers shared by kiln's cross-crate tests and their worker process:
//! stores at a root, loaders of the fake target on them, keys and artifacts
//! that every process computes the same way, and what a worker reports.

#![warn(missing_docs)]

use std::path::Path;
use std::sync::Arc;

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, LoaderConfig, StoreKey};
use kiln_store::{DiskStore, StoreConfig};
use serde::{Deserialize, Serialize};

/// The store at `root`, durable, evicting only when asked; packing below
/// `KILN_CACHE_PACK_BELOW` when it is set (a worker of a packed case).
pub fn open_store(root: &Path) -> DiskStore {
    let pack_below = std::env::var("KILN_CACHE_PACK_BELOW")
        .ok()
        .and_then(|value| kiln_store::parse_size(&value))
        .unwrap_or(0);
    open_store_packing(root, pack_below)
}

/// As [`open_store`], packing artifacts below `pack_below` bytes (F10):
/// what a test that runs the same case on packed entries opens, and hands
/// its worker processes as `KILN_CACHE_PACK_BELOW`.
pub fn open_store_packing(root: &Path, pack_below: u64) -> DiskStore {
    DiskStore::open(StoreConfig {
        collects_automatically: false,
        pack_below,
        ..StoreConfig::at(root)
    })
    .expect("the store opens")
}

/// The store at `root` behind an `Arc<dyn ArtifactStore>`, for a target.
pub fn shared_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(open_store(root))
}

/// A loader of the fake target on `store`.
pub fn loader_on(store: &DiskStore) -> KernelLoader<FakeTarget> {
    let shared: Arc<dyn ArtifactStore> = Arc::new(store.clone());
    // Each loader stands in for a process of its own on the store: no
    // warm-start profile loads ahead of what the tests count (L12).
    KernelLoader::with_config(
        FakeTarget::on_store(shared),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// Loads fake kernel `number` through `loader`: the text it holds.
pub fn load(loader: &mut KernelLoader<FakeTarget>, number: u32) -> String {
    load_kernel(loader, &FakeKernel::new(number))
}

/// Loads `kernel` through `loader`: the text it holds.
pub fn load_kernel(loader: &mut KernelLoader<FakeTarget>, kernel: &FakeKernel) -> String {
    loader
        .load(kernel, &kernel.artifact_id())
        .expect("the fake kernel loads")
        .text
        .clone()
}

/// The key the fake compiler stores kernel `number` under.
pub fn fake_key(number: u32) -> StoreKey {
    StoreKey::for_artifact(
        &FakeCompiler::default_key_components(),
        &FakeKernel::new(number).artifact_id(),
        None,
    )
}

/// The text the fake compiler makes of kernel `number`.
pub fn fake_text(number: u32) -> String {
    format!("fake kernel {number}")
}

/// Bytes of `length` that are a pure function of `number` and `round`, so a
/// reader in another process can check what it read without being told.
pub fn pattern(number: u32, round: u32, length: usize) -> Vec<u8> {
    let mut state = u64::from(number) << 32 | u64::from(round) | 1;
    let mut bytes = Vec::with_capacity(length + 8);
    bytes.extend_from_slice(&number.to_le_bytes());
    bytes.extend_from_slice(&round.to_le_bytes());
    while bytes.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(length.max(8));
    bytes
}

/// Checks bytes made by [`pattern`]: whether they are exactly what their
/// own header says they should be.
pub fn is_whole_pattern(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return false;
    }
    let number = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let round = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    pattern(number, round, bytes.len()) == bytes
}

/// What a worker process prints when it is done, as one JSON line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Loads or lookups made.
    pub loads: u64,
    /// Loads that returned a kernel.
    pub loaded: u64,
    /// Loads or lookups that returned wrong or torn bytes.
    pub wrong: u64,
    /// Loads that failed.
    pub failed: u64,
    /// Lookups that hit.
    pub hits: u64,
    /// Lookups that missed because nothing was there.
    pub absent: u64,
    /// Lookups that missed for any other reason.
    pub bad_misses: u64,
    /// Store writes that failed, by the store's count.
    pub put_failures: u64,
    /// Store writes that failed, by the loader's count.
    pub store_errors: u64,
}
