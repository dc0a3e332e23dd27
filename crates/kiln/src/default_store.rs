//! The default store in one function: the store every kiln program and the
//! `kiln` command share, found the way they find it, with the fleet tier
//! behind it when one is configured; and the install that makes it every
//! target's store unless the program chooses another.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_engine::ArtifactStore;
use kiln_store::{DiskStore, StoreConfig};

/// The default disk store (kiln-store's [`DiskStore`]), with the fleet
/// tier behind it when one is configured.
///
/// `Store` holds no value: it names the ways a program opens the store,
/// each returning it as the `Arc<dyn ArtifactStore>` a target takes.
///
/// **A target is on the default store unless the program says otherwise**:
/// in a program on this crate, every target made without a store opens
/// [`Store::from_env`]'s at its loader's first batch (see
/// [`kiln_engine::store::default_store`]); `KILN_CACHE_DISABLE=1`, or a
/// target's `without_store()`, turns it off. So a program needs no store
/// line at all:
///
/// ```no_run
/// # #[cfg(feature = "cuda")] {
/// // On the default store, shared with `kiln warm` and every other program.
/// let target = kiln::cuda::CudaTarget::on_device(0)?;
/// // On none.
/// let storeless = kiln::cuda::CudaTarget::on_device(0)?.without_store();
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`from_env`](Store::from_env) reads the `KILN_CACHE_*` and
/// `KILN_REMOTE_*` variables as the `kiln` command does, so a program,
/// `kiln warm` and `kiln stats` see one store; [`at`](Store::at) opens one
/// in a folder of the program's choosing. For other settings in code, open
/// a [`DiskStore`] with a [`StoreConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {}

/// Why the default store did not open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The disk store: a `KILN_CACHE_*` variable does not parse, or its
    /// folder cannot hold a store.
    #[error(transparent)]
    Disk(#[from] kiln_store::Error),
    /// The fleet tier `KILN_REMOTE_URL` names: a setting that does not
    /// parse, or no key (`kiln keygen` makes one).
    #[cfg(feature = "remote")]
    #[error("the remote tier cannot start: {0}")]
    Remote(#[from] kiln_remote::Error),
    /// The bucket `KILN_REMOTE_URL` names: an address, a setting or a
    /// key that cannot be read.
    #[cfg(feature = "bucket")]
    #[error("the bucket tier cannot start: {0}")]
    Bucket(#[from] kiln_bucket::Error),
}

impl Store {
    /// The store the `KILN_CACHE_*` variables describe: in
    /// `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`,
    /// with the size, entry, lock and read-only settings they give; with
    /// the `remote` feature (on by default) and `KILN_REMOTE_URL` set, the
    /// fleet tier it names behind it (P10), with the keys the
    /// `KILN_REMOTE_*` variables give. `None` under `KILN_CACHE_DISABLE=1`,
    /// for a target that then keeps its artifacts in memory.
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
    /// (no `KILN_CACHE_DIR`, `XDG_CACHE_HOME` or `HOME`), the folder
    /// cannot hold a store (it holds something else, or cannot be made),
    /// or `KILN_REMOTE_URL` is set and its settings or keys cannot be read.
    /// A program that would rather run without a store then keeps the
    /// error for its log and passes `None`.
    pub fn from_env() -> Result<Option<Arc<dyn ArtifactStore>>, StoreError> {
        let Some(config) = Self::config_from_env(None)? else {
            return Ok(None);
        };
        Self::with_fleet(DiskStore::open(config)?, None).map(Some)
    }

    /// `disk`, with the fleet tier behind it that `remote_url` names, else
    /// `KILN_REMOTE_URL`, else none, as [`Store::tiers`] puts them
    /// together; the fleet tier's queued writes go out when the process
    /// exits.
    ///
    /// # Errors
    ///
    /// A fleet tier is named and its settings or keys cannot be read.
    pub fn with_fleet(
        disk: DiskStore,
        remote_url: Option<&str>,
    ) -> Result<Arc<dyn ArtifactStore>, StoreError> {
        let tiers = Self::tiers(disk, remote_url)?;
        #[cfg(feature = "remote")]
        if let Some(fleet) = tiers.fleet() {
            fleet::flush_at_exit(fleet);
        }
        #[cfg(feature = "bucket")]
        if let Some(bucket) = tiers.bucket() {
            fleet::flush_bucket_at_exit(bucket);
        }
        Ok(tiers.shared())
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

    /// Makes [`from_env`](Self::from_env) the store of every target made
    /// without one. kiln does this before `main` in every program on this
    /// crate (on Linux, macOS and Windows); a program on another platform
    /// calls it first thing. Returns whether it was installed now (false:
    /// another opener was installed first).
    pub fn install_default() -> bool {
        kiln_engine::store::install_default_store(open_default)
    }
}

/// The default store, as [`kiln_engine::store::default_store`] opens it.
fn open_default() -> Result<Option<Arc<dyn ArtifactStore>>, String> {
    Store::from_env().map_err(|error| error.to_string())
}

/// Installs the default store before `main`: a target made directly with a
/// backend's constructor never passes through code of this crate, and the
/// store must be there whichever way the program makes its targets.
extern "C" fn install_before_main() {
    Store::install_default();
}

// The loader of the platform calls each function of these sections before
// `main`; rustc keeps a `#[used]` static of a dependency in the link.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly",
    target_os = "illumos"
))]
#[used]
#[unsafe(link_section = ".init_array")]
static INSTALL: extern "C" fn() = install_before_main;

#[cfg(target_vendor = "apple")]
#[used]
#[unsafe(link_section = "__DATA,__mod_init_func")]
static INSTALL: extern "C" fn() = install_before_main;

#[cfg(windows)]
#[used]
#[unsafe(link_section = ".CRT$XCU")]
static INSTALL: extern "C" fn() = install_before_main;

#[cfg(feature = "remote")]
mod fleet {
    //! The fleet tier's writes at the end of the process: they go out
    //! through a background queue, and the default store, held for the
    //! whole process, is never dropped to write what is still queued.

    use std::sync::Mutex;
    #[cfg(unix)]
    use std::sync::Once;

    use kiln_remote::TieredStore;

    static OPEN: Mutex<Vec<TieredStore>> = Mutex::new(Vec::new());
    #[cfg(feature = "bucket")]
    static BUCKETS: Mutex<Vec<kiln_bucket::BucketTier>> = Mutex::new(Vec::new());

    /// Writes what `store` still has queued for its bucket when the
    /// process exits, waiting at most four of the bucket's timeouts.
    #[cfg(feature = "bucket")]
    pub(super) fn flush_bucket_at_exit(store: &kiln_bucket::BucketTier) {
        BUCKETS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(store.clone());
        register();
    }
    #[cfg(unix)]
    static REGISTER: Once = Once::new();

    /// Writes what `store` still has queued when the process exits (past
    /// `main`, or `std::process::exit`), waiting at most four of the
    /// remote's timeouts, as dropping it would.
    pub(super) fn flush_at_exit(store: &TieredStore) {
        OPEN.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(store.clone());
        register();
    }

    fn register() {
        #[cfg(unix)]
        REGISTER.call_once(|| {
            // SAFETY: `flush_all` is an `extern "C"` function of no
            // arguments that never unwinds (it catches every panic), as
            // `atexit` requires; registering it has no other precondition.
            // Its failure to register (no room left) only loses the flush.
            let _ = unsafe { libc::atexit(flush_all) };
        });
    }

    #[cfg(unix)]
    extern "C" fn flush_all() {
        let _ = std::panic::catch_unwind(|| {
            let stores =
                std::mem::take(&mut *OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            for store in stores {
                store.flush(store.remote().config().timeout * 4);
            }
            #[cfg(feature = "bucket")]
            for store in std::mem::take(
                &mut *BUCKETS
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            ) {
                store.flush(store.bucket().config().timeout * 4);
            }
        });
    }
}

fn shared(store: DiskStore) -> Arc<dyn ArtifactStore> {
    Arc::new(store)
}
