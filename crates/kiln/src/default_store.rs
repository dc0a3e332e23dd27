//! The disk store in one line: the store every kiln program and the `kiln`
//! command share, found the way they find it.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_core::ArtifactStore;
use kiln_store::{DiskStore, StoreConfig};

/// The default disk store (kiln-store's [`DiskStore`]), ready for a
/// target's `with_optional_store` or `with_store`.
///
/// `Store` holds no value: it names the two ways a program opens the disk
/// store, each returning it as the `Arc<dyn ArtifactStore>` a target takes.
/// [`from_env`](Store::from_env) reads the `KILN_CACHE_*` variables exactly
/// as [`DiskStore::open_from_env`] and the `kiln` command do, so a program,
/// `kiln warm` and `kiln stats` see one store; [`at`](Store::at) opens one
/// in a folder of the program's choosing. For other settings in code, open
/// a [`DiskStore`] with a [`StoreConfig`].
///
/// ```no_run
/// # #[cfg(feature = "cuda")] {
/// let target = kiln::cuda::CudaTarget::on_device(0)?.with_optional_store(kiln::Store::from_env()?);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {}

impl Store {
    /// The store the `KILN_CACHE_*` variables describe: in
    /// `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`,
    /// with the size, entry, lock and read-only settings they give; `None`
    /// under `KILN_CACHE_DISABLE=1`, for a target that then keeps its
    /// artifacts in memory.
    ///
    /// ```no_run
    /// use kiln::{KernelLoader, Store};
    /// # #[cfg(feature = "wgpu")] {
    /// use kiln::wgpu::WgpuTarget;
    ///
    /// let target = WgpuTarget::open()?.with_optional_store(Store::from_env()?);
    /// let loader = KernelLoader::new(target);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A `KILN_CACHE_*` variable does not parse, no folder can be found
    /// (no `KILN_CACHE_DIR`, `XDG_CACHE_HOME` or `HOME`), or the folder
    /// cannot hold a store (it holds something else, or cannot be made).
    /// A program that would rather run without a store then keeps the
    /// error for its log and passes `None`.
    pub fn from_env() -> Result<Option<Arc<dyn ArtifactStore>>, kiln_store::Error> {
        Ok(DiskStore::open_from_env()?.map(shared))
    }

    /// The store in `root`, made there when the folder is empty or absent,
    /// with the default limits and no regard for the `KILN_CACHE_*`
    /// variables.
    ///
    /// ```
    /// # let root = std::env::temp_dir().join(format!("kiln-doc-store-at-{}", std::process::id()));
    /// let store = kiln::Store::at(&root)?;
    /// assert_eq!(store.statistics().hits, 0);
    /// # std::fs::remove_dir_all(&root).ok();
    /// # Ok::<(), kiln::disk::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The folder cannot hold a store (it holds something else, or cannot
    /// be made).
    pub fn at(root: impl Into<PathBuf>) -> Result<Arc<dyn ArtifactStore>, kiln_store::Error> {
        DiskStore::open(StoreConfig::at(root)).map(shared)
    }
}

fn shared(store: DiskStore) -> Arc<dyn ArtifactStore> {
    Arc::new(store)
}
