//! [`DiskStore`]: the store against one root, one part of it per file.
//!
//! - `open`: opening a root, writable or read-only, and its settings;
//! - `generation`: the generation token shared with other processes (L10);
//! - `read`: lookups, verified hits and misses (P2);
//! - `history`: what the store remembers of each kernel's keys, for
//!   explanations (P9);
//! - `access`: explicit access times, the eviction clock (P6);
//! - `activity`: this process's hits, misses, compiles and failures,
//!   merged into the store's totals at each batch's end;
//! - `batches`: the records of the last batches of every process;
//! - `blob`: named blobs, kept beside artifacts as artifacts are;
//! - `write`: puts, publication and rollback, and the causes of failed
//!   writes (P3, P5);
//! - `removal`: removing the store's own files, and only those;
//! - `targets`: the key components of every compiler that stored here;
//! - `claim`: single flight across processes (P4);
//! - `eviction`: evicting on its own thread, and within the limits at the
//!   end of a batch (P6);
//! - `scratch` (the `bench` feature): filling a scratch store for benches.
//!
//! This file holds the store's shared state; `contract` holds the
//! [`ArtifactStore`] implementation, which hands each call to its part.
//!
//! [`ArtifactStore`]: kiln_engine::ArtifactStore

mod access;
mod activity;
mod batches;
mod blob;
mod claim;
mod contract;
mod copies;
mod eviction;
mod footprint;
mod generation;
mod history;
mod open;
mod pack_passes;
mod packed;
mod read;
mod removal;
#[cfg(any(test, feature = "bench"))]
mod scratch;
mod spread;
mod targets;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_engine::{Generation, KeyComponents, StoreKey};

use crate::config::StoreConfig;
use crate::error::WriteFailure;
use crate::files::Files;
use crate::usage::Usage;

pub(crate) use access::{not_yet_refreshed, touch};
pub use eviction::Limits;
pub(crate) use eviction::{AGE_BUCKETS, age_bucket};
pub use footprint::Footprint;
pub(crate) use pack_passes::PackedVerify;

/// A verified artifact store in a folder, shared by every process that opens
/// the same root.
///
/// Cloning is cheap and shares everything, counters included.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_engine::fake::{FakeKernel, FakeTarget};
/// use kiln_engine::{Kernel, KernelLoader};
/// use kiln_store::DiskStore;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // KILN_CACHE_DIR, KILN_CACHE_DISABLE, KILN_CACHE_MAX_SIZE, ...
/// let target = match DiskStore::open_from_env()? {
///     Some(store) => FakeTarget::on_store(Arc::new(store)),
///     None => FakeTarget::storeless(),
/// };
/// let mut loader = KernelLoader::new(target);
/// let kernel = FakeKernel::new(1);
/// loader.load(&kernel, &kernel.artifact_id())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DiskStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// The objects and records, over files and packs.
    pub(crate) files: Files,
    generation: Generation,
    /// The root's generation token when this store last looked.
    root_token: AtomicU64,
    /// When to look at the token next, in nanoseconds after `opened`.
    next_token_check: AtomicU64,
    opened: Instant,
    /// Key components this process has written to the targets file.
    registered: Mutex<Vec<KeyComponents>>,
    collecting: AtomicBool,
    /// The failed writes so far, one entry per cause.
    write_failures: Mutex<Vec<WriteFailure>>,
    /// The causes of failed claims said so far, each said once.
    lock_failures_said: Mutex<Vec<crate::WriteCause>>,
    /// Whether a put stored something since the end of the last batch.
    wrote_since_batch: AtomicBool,
    /// Whether a collection started on this process's own thread since the
    /// end of the last batch: its recount may have missed the puts made
    /// while it walked.
    collected_since_batch: AtomicBool,
    /// This process's counts not yet merged into the `activity` file.
    pub(crate) tally: activity::Tally,
    /// Kernel keys that missed in this batch and were not put yet, with
    /// when: written into their histories by their put or at the batch's
    /// end, never on the lookup's path.
    pub(crate) pending_misses: Mutex<history::PendingMisses>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle of the process: what it counted since its last
        // batch is not lost, nor the misses it noted.
        history::write_misses(self);
        activity::merge(self);
    }
}

impl DiskStore {
    /// Whether the store only reads (P5): it serves hits, and skips every
    /// write ([`StoreStatistics::writes_skipped`]) and claim. Asked for
    /// with [`StoreConfig::read_only`], or found when its folder cannot be
    /// written.
    pub fn is_read_only(&self) -> bool {
        self.inner.files.read_only
    }

    /// Its settings.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.files.config
    }

    /// Its root folder.
    pub fn root(&self) -> &Path {
        self.inner.files.root()
    }

    /// What it holds, as last counted: entries, bytes held and bytes
    /// allocated (what the size limit compares).
    pub fn usage(&self) -> Usage {
        self.inner.files.usage.read()
    }

    /// Where the record of `key` lives.
    pub fn record_path(&self, key: &StoreKey) -> PathBuf {
        self.inner.files.layout.record(&key.digest())
    }

    /// Where the object with digest `digest` lives.
    pub fn object_path(&self, digest: &[u8; 32]) -> PathBuf {
        self.inner.files.layout.object(digest)
    }
}
