//! Folders a test owns: removed when the test is done, never shared with
//! another test or another run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A folder for one test, removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// A new, empty folder named after `test`, the process and a counter,
    /// so that two tests of one process, or two runs, never meet.
    pub fn new(test: &str) -> Self {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "kiln-{test}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("the temporary folder is writable");
        Self { path }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it, not created.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// A folder inside it, created.
    pub fn folder(&self, name: &str) -> PathBuf {
        let folder = self.join(name);
        std::fs::create_dir_all(&folder).expect("the temporary folder is writable");
        folder
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Fresh stores, each in a root of its own inside one scratch folder.
///
/// The store is what `open` makes of a root, so this crate names no store
/// type: kiln-store takes it as a dev-dependency.
#[derive(Debug)]
pub struct StoreRoots<S> {
    scratch: Scratch,
    opened: AtomicUsize,
    open: fn(&Path) -> S,
}

impl<S> StoreRoots<S> {
    /// Roots inside a new scratch folder named after `test`, each opened
    /// with `open`.
    pub fn new(test: &str, open: fn(&Path) -> S) -> Self {
        Self {
            scratch: Scratch::new(test),
            opened: AtomicUsize::new(0),
            open,
        }
    }

    /// A root no other store of these has used, not created.
    pub fn fresh_root(&self) -> PathBuf {
        let number = self.opened.fetch_add(1, Ordering::Relaxed);
        self.scratch.join(&format!("root-{number}"))
    }

    /// An empty store in a fresh root.
    pub fn fresh(&self) -> S {
        (self.open)(&self.fresh_root())
    }
}
