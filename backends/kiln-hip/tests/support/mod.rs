//! What the HIP store tests share: throw-away folders and disk stores in
//! them.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_core::ArtifactStore;
use kiln_store::{DiskStore, StoreConfig};

/// A folder for one test, removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// A new, empty folder named after `test`.
    pub fn new(test: &str) -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "kiln-hip-{test}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temporary folder");
        Self { path }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The disk store at `root`, as a target takes it: durable, as users have
/// it, and evicting only when asked.
pub fn disk_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root)
        })
        .expect("the store opens"),
    )
}

/// Fresh disk stores, each in a root of its own inside one scratch folder.
#[derive(Debug)]
pub struct StoreRoots {
    scratch: Scratch,
    opened: AtomicUsize,
}

impl StoreRoots {
    /// Roots inside a new scratch folder named after `test`.
    pub fn new(test: &str) -> Self {
        Self {
            scratch: Scratch::new(test),
            opened: AtomicUsize::new(0),
        }
    }

    /// An empty store in a root no other store of these has used.
    pub fn fresh(&self) -> Arc<dyn ArtifactStore> {
        let number = self.opened.fetch_add(1, Ordering::Relaxed);
        disk_store(&self.scratch.join(&format!("root-{number}")))
    }
}
