//! The store's files as one process holds them: where they are
//! ([`Layout`]), how they are written ([`StoreConfig`]), the `locks` file,
//! the usage counts, the packs, the counters of what was done with them,
//! and whether they may be written at all.
//!
//! [`Files`] is the objects-and-records room of a
//! [`DiskStore`](crate::DiskStore): its methods, one concern a file, are in
//! `disk/read.rs` (lookups), `disk/write.rs` (puts), `disk/packed.rs`
//! (entries in packs), `disk/blob.rs` (named blobs), `disk/removal.rs`
//! (removing the store's own files) and `disk/pack_passes.rs` (the passes
//! over every pack). Every other room of the store (claims, history,
//! activity, the generation watch, targets, eviction) owns its own state
//! and is handed the files it works on. **Invariant:** nothing here
//! changes once the store is open but the files themselves, the packs'
//! view of them and the counters.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::StoreConfig;
use crate::durable;
use crate::file_size::within_file_size_limit;
use crate::layout::Layout;
use crate::lock::LockFile;
use crate::pack::Packs;
use crate::usage::UsageFile;

/// The store's counts: the one type every store counts with.
pub(crate) type Counters = kiln_engine::StoreCounters;

/// Adds `by` to `counter`.
pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// The store's files, as one process holds them.
#[derive(Debug)]
pub(crate) struct Files {
    /// The store's settings.
    pub(crate) config: StoreConfig,
    /// Where each of its files lives.
    pub(crate) layout: Layout,
    /// The `locks` file: one byte per key, object and counter.
    pub(crate) locks: Arc<LockFile>,
    /// The usage counts, kept in the `usage` file.
    pub(crate) usage: UsageFile,
    /// What was done through this handle and its clones.
    pub(crate) counters: Counters,
    /// Whether the store is only read (P5): asked for, or its folder cannot
    /// be written.
    pub(crate) read_only: bool,
    /// The packs and this process's view of them.
    pub(crate) packs: Packs,
}

impl Files {
    /// The files of the store `config` names, laid out as `layout`, with
    /// its `locks` and `usage` files open.
    pub(crate) fn new(
        config: StoreConfig,
        layout: Layout,
        locks: Arc<LockFile>,
        usage: UsageFile,
        read_only: bool,
    ) -> Self {
        let packs = Packs::new(layout.clone(), !read_only, config.durable);
        Self {
            config,
            layout,
            locks,
            usage,
            counters: Counters::default(),
            read_only,
            packs,
        }
    }

    /// The store's root folder.
    pub(crate) fn root(&self) -> &Path {
        self.layout.root()
    }

    /// Publishes `bytes` at `path` (P3), refusing a file the process's
    /// file size limit would not let it write whole; made durable now, or
    /// by the thread's group commit when one is open (a batch's put).
    pub(crate) fn publish(&self, path: &Path, bytes: &[u8]) -> io::Result<File> {
        within_file_size_limit(bytes.len() as u64)?;
        durable::publish_open_grouped(&self.layout.staging(), path, bytes, self.config.durable)
    }
}
