//! Opening a [`DiskStore`](crate::DiskStore)'s files at a root: adopting or making the store,
//! deciding whether it may be written, and its settings from the
//! environment.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::config::StoreConfig;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::layout::Layout;
use crate::lock::LockFile;
use crate::usage::UsageFile;

/// Why a store is opened read-only.
enum ReadOnly {
    /// [`StoreConfig::read_only`].
    Asked,
    /// Its folder cannot be written.
    Unwritable(io::Error),
}

impl Files {
    /// Opens (creating when missing) the files of the store at
    /// `config.root`: see [`DiskStore::open`](crate::DiskStore::open).
    pub(crate) fn open(config: StoreConfig) -> Result<Self> {
        let layout = Layout::new(config.root.clone());
        // Decided before anything is created: a store that cannot be
        // written is read as it is.
        let opened_locks = match writable_locks(&config, &layout) {
            Ok(opened_locks) => opened_locks,
            Err(reason) => return Self::open_read_only(config, layout, reason),
        };
        // Adopts only an empty folder or a store, never follows a link
        // below the root, and rebuilds the skeleton's own names.
        crate::skeleton::prepare(&layout, config.durable)?;
        let lock_path = layout.lock_file();
        let locks = match opened_locks
            .map_or_else(|| LockFile::open(&lock_path), |file| Ok(LockFile::of(file)))
        {
            Ok(locks) => locks,
            Err(error) if is_unwritable(&error) => {
                return Self::open_read_only(config, layout, ReadOnly::Unwritable(error));
            }
            Err(error) => return Err(Error::io("open", &lock_path)(error)),
        };
        let usage_path = layout.usage_file();
        let usage = UsageFile::open(&usage_path).map_err(Error::io("open", &usage_path))?;
        Ok(Self::new(config, layout, locks, usage, false))
    }

    /// Opens the store at `layout` to read it only, for `reason`.
    fn open_read_only(config: StoreConfig, layout: Layout, reason: ReadOnly) -> Result<Self> {
        let root = layout.root();
        // The rules of a writable open, without its writes: a folder that
        // holds files and no marker is no store either.
        if !crate::skeleton::inspect(&layout)? {
            return Err(Error::ReadOnlyEmpty {
                root: root.to_path_buf(),
            });
        }
        let usage_path = layout.usage_file();
        let usage =
            UsageFile::open_read_only(&usage_path).map_err(Error::io("open", &usage_path))?;
        match reason {
            ReadOnly::Asked => log::debug!("kiln store: reading {} only", root.display()),
            ReadOnly::Unwritable(error) => log::warn!(
                "kiln store: {} cannot be written ({error}); reading it only: hits are served, \
                 nothing is stored",
                root.display()
            ),
        }
        Ok(Self::new(
            config,
            layout,
            LockFile::in_process(),
            usage,
            true,
        ))
    }
}

/// The store's `locks` file opened for writing, or why the store at
/// `layout` is to be opened read-only: asked for, or its `locks` file
/// (when it has none, the nearest folder that exists on the way to its
/// root) cannot be written. `Ok(None)` when it may be written but has no
/// regular `locks` file to keep yet.
///
/// The open that proves a store writable is the one its locks need, so a
/// healthy store opens the file once. It follows no link and keeps only a
/// regular file: opening the store replaces anything else at the name.
fn writable_locks(config: &StoreConfig, layout: &Layout) -> Result<Option<File>, ReadOnly> {
    if config.read_only {
        return Err(ReadOnly::Asked);
    }
    let lock_path = layout.lock_file();
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_path);
    if let Ok(file) = opened
        && file.metadata().is_ok_and(|found| found.is_file())
    {
        return Ok(Some(file));
    }
    let probe = if lock_path.exists() {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lock_path)
            .map(drop)
    } else {
        let existing = layout
            .root()
            .ancestors()
            .find(|folder| folder.exists())
            .unwrap_or(Path::new("."));
        may_write(existing)
    };
    match probe {
        Err(error) if is_unwritable(&error) => Err(ReadOnly::Unwritable(error)),
        _ => Ok(None),
    }
}

/// Whether this process may create files in `folder`, as the system
/// answers before trying: a read-only file system says so too.
fn may_write(folder: &Path) -> io::Result<()> {
    let path = std::ffi::CString::new(folder.as_os_str().as_bytes())?;
    // SAFETY: `path` is a NUL-terminated string alive for the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `error` says the store's folder cannot be written at all, as
/// opposed to a failure of one write.
fn is_unwritable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EROFS | libc::EACCES | libc::EPERM)
    )
}
