//! kiln-store's errors. Lookups and puts never return these: a store that
//! cannot read is a miss and one that cannot write is a counted warning
//! (P5). They come from opening a store and from the maintenance commands.

use std::io;
use std::path::{Path, PathBuf};

use kiln_core::{ConfigError, KeyComponent};

/// Why a store could not be opened, verified, collected, exported or
/// imported.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system call failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A `KILN_CACHE_*` variable could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No folder to keep the store in could be found.
    #[error("no cache folder: set KILN_CACHE_DIR, XDG_CACHE_HOME or HOME")]
    NoCacheFolder,
    /// The root holds a store of a layout this version does not read.
    #[error("{} holds a store of layout {found:?}; this kiln reads {expected:?}", root.display())]
    Layout {
        /// The store's root.
        root: PathBuf,
        /// The layout it declares.
        found: String,
        /// The layout this version reads.
        expected: &'static str,
    },
    /// The file is not a bundle this version reads.
    #[error("{} is not a kiln bundle: {reason}", path.display())]
    NotABundle {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// The bundle was built for another backend, compiler or architecture
    /// than the store expects (P8).
    #[error(
        "the bundle was built for another {component}: it has {bundle:?}, this store expects {expected:?}"
    )]
    ForeignBundle {
        /// The component that differs.
        component: KeyComponent,
        /// Its value in the bundle.
        bundle: String,
        /// Its value here.
        expected: String,
    },
    /// An entry of the bundle did not verify; nothing was imported.
    #[error("the bundle is damaged, nothing was imported: {detail}")]
    DamagedBundle {
        /// What did not verify.
        detail: String,
    },
    /// Export needs one compiler to name in the bundle's header.
    #[error("the store holds entries of {} compilers; choose one of: {}", choices.len(), choices.join("; "))]
    AmbiguousExport {
        /// The compilers the store holds entries of.
        choices: Vec<String>,
    },
    /// Export found nothing to put in a bundle.
    #[error("the store holds no entries to export")]
    NothingToExport,
}

impl Error {
    /// An [`Error::Io`] for `action` on `path`, for `map_err`.
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

/// A kiln-store result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
