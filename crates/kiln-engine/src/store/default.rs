//! The process's default store: the store a target opens when the program
//! gave it none (on by default, like Triton's or the CUDA driver's caches).
//!
//! kiln-engine cannot open a disk store itself (kiln-store depends on it), so
//! the store is opened by a function installed once per process: the
//! facade (`kiln`) installs its `Store::from_env` before `main`, so that a
//! program on the facade finds the default store however it makes its
//! targets. A process with no opener installed (a program on a backend
//! crate alone) has no default store, and its targets are storeless unless
//! given one.
//!
//! The store is opened once, at the first target that asks (its loader's
//! first batch), and shared by every target after it; a store that cannot
//! open is said once, as a warning, and the targets run without one.

use std::sync::{Arc, OnceLock};

use super::ArtifactStore;

/// Opens the default store: `Ok(None)` when it is turned off
/// (`KILN_CACHE_DISABLE=1`), `Err` saying why it cannot open.
pub type DefaultStoreOpener = fn() -> Result<Option<Arc<dyn ArtifactStore>>, String>;

static OPENER: OnceLock<DefaultStoreOpener> = OnceLock::new();
static OPENED: OnceLock<Option<Arc<dyn ArtifactStore>>> = OnceLock::new();

/// Makes `opener` the way this process opens its default store. The first
/// opener installed wins; returns whether it was this one.
pub fn install_default_store(opener: DefaultStoreOpener) -> bool {
    OPENER.set(opener).is_ok()
}

/// Whether an opener is installed: whether targets given no store open
/// the default one.
pub fn has_default_store() -> bool {
    OPENER.get().is_some()
}

/// The process's default store, opened at the first call and shared after
/// it; `None` when no opener is installed, the store is turned off, or it
/// cannot open (said once, as a warning).
pub fn default_store() -> Option<Arc<dyn ArtifactStore>> {
    OPENED
        .get_or_init(|| {
            let opener = OPENER.get()?;
            match opener() {
                Ok(store) => store,
                Err(reason) => {
                    crate::config::warn_once(
                        "default store",
                        "",
                        format!(
                            "the default store cannot open: {reason}; kernels are kept in \
                             memory only (set KILN_CACHE_DIR to a folder kiln may write, or \
                             KILN_CACHE_DISABLE=1 to run without a store and without this \
                             warning)"
                        ),
                    );
                    None
                }
            }
        })
        .clone()
}
