//! kiln-store's errors. Lookups and puts never return these: a store that
//! cannot read is a miss and one that cannot write is a counted warning
//! (P5). They come from opening a store and from the maintenance commands.

use std::io;
use std::path::{Path, PathBuf};

use kiln_engine::{ConfigError, KeyComponent};

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
    /// Another process is verifying or collecting the store: passes that
    /// move or remove entries never run beside each other.
    #[error(
        "another kiln verify or gc is running on the store at {}: try again once it ends",
        root.display()
    )]
    Busy {
        /// The store's root.
        root: PathBuf,
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
    /// The bundle says it holds more than this store may hold: refused
    /// before a byte of it was decompressed.
    #[error(
        "the bundle holds {claimed} bytes, over this store's limit of {limit} bytes \
         (KILN_CACHE_MAX_SIZE): nothing was imported"
    )]
    OversizedBundle {
        /// The plain form's length its manifest gives.
        claimed: u64,
        /// The store's size limit.
        limit: u64,
    },
    /// The bundle's checksums hold, but its entries do not agree with each
    /// other: a record names an object that neither the bundle nor the store
    /// holds, or bytes that are not what the record says. The file was
    /// written that way, by a faulty exporter or by hand: nothing was
    /// imported, and it should not be trusted.
    #[error("the bundle does not hold together, nothing was imported: {detail}")]
    InconsistentBundle {
        /// Which record, and what does not agree.
        detail: String,
    },
    /// The bundle's signature is missing, does not verify, or is by a key
    /// not trusted here (checked by the caller of
    /// [`DiskStore::import_checked`](crate::DiskStore::import_checked));
    /// nothing was imported.
    #[error("the bundle is not trusted, nothing was imported: {reason}")]
    UntrustedBundle {
        /// Why, and what to do about it.
        reason: String,
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
    /// The folder holds no store and none can be made there: it, or the
    /// folder it would be made in, is read-only. The caller can run without
    /// a store, with one warning.
    #[error(
        "{} holds no kiln store and none can be made there: it is read-only",
        root.display()
    )]
    ReadOnlyEmpty {
        /// The store's root.
        root: PathBuf,
    },
    /// The folder holds files but no store: kiln never makes a store among
    /// files it did not write, nor verifies or collects them.
    #[error(
        "{} is not a kiln store (it holds files but no LAYOUT file); give kiln an empty or new folder, or the folder of an existing store",
        root.display()
    )]
    NotAStore {
        /// The folder.
        root: PathBuf,
    },
    /// The store's own folders or files are damaged in a way it would not
    /// repair on its own (it removes only what it can prove is its own):
    /// the caller can run without the store, with one warning.
    #[error(
        "the store at {} is damaged: {}; move away or repair what is named, or run without the store",
        root.display(),
        damage.join("; ")
    )]
    Damaged {
        /// The store's root.
        root: PathBuf,
        /// What is damaged, one line each.
        damage: Vec<String>,
    },
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

/// Why a write to the store failed: what the user can do about it differs
/// (free space, raise a quota or a limit, mount it writable, fix owners).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WriteCause {
    /// The file system is full (`ENOSPC`).
    DiskFull,
    /// The user's or the group's disk quota is spent (`EDQUOT`).
    Quota,
    /// The file system or the store is read-only (`EROFS`).
    ReadOnly,
    /// The file would pass the process's file size limit (`RLIMIT_FSIZE`,
    /// `EFBIG`).
    FileSizeLimit,
    /// The store's files or folders may not be written by this user
    /// (`EACCES`, `EPERM`).
    Permission,
    /// Any other failure of the system.
    Other,
}

impl WriteCause {
    /// The cause of `error`: its kind, which the standard library derives
    /// from the system error number where there is one.
    pub fn of(error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::StorageFull => Self::DiskFull,
            io::ErrorKind::QuotaExceeded => Self::Quota,
            io::ErrorKind::ReadOnlyFilesystem => Self::ReadOnly,
            io::ErrorKind::FileTooLarge => Self::FileSizeLimit,
            io::ErrorKind::PermissionDenied => Self::Permission,
            _ => Self::Other,
        }
    }
}

impl std::fmt::Display for WriteCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DiskFull => "disk full",
            Self::Quota => "quota exceeded",
            Self::ReadOnly => "read-only",
            Self::FileSizeLimit => "file size limit",
            Self::Permission => "permission denied",
            Self::Other => "I/O error",
        })
    }
}

/// The failed writes of one cause, as one store handle saw them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteFailure {
    /// Why they failed.
    pub cause: WriteCause,
    /// What the first of them said.
    pub detail: String,
    /// How many failed for this cause.
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_error_is_classified_by_its_cause() {
        let cause = |number| WriteCause::of(&io::Error::from_raw_os_error(number));
        assert_eq!(cause(libc::ENOSPC), WriteCause::DiskFull);
        assert_eq!(cause(libc::EDQUOT), WriteCause::Quota);
        assert_eq!(cause(libc::EROFS), WriteCause::ReadOnly);
        assert_eq!(cause(libc::EFBIG), WriteCause::FileSizeLimit);
        assert_eq!(cause(libc::EACCES), WriteCause::Permission);
        assert_eq!(cause(libc::EPERM), WriteCause::Permission);
        assert_eq!(cause(libc::EIO), WriteCause::Other);
        let refused = io::Error::new(io::ErrorKind::FileTooLarge, "past the limit");
        assert_eq!(WriteCause::of(&refused), WriteCause::FileSizeLimit);
        assert_eq!(WriteCause::DiskFull.to_string(), "disk full");
        assert_eq!(WriteCause::Other.to_string(), "I/O error");
    }
}
