//! Removing the store's own files, and only those: reached from a root
//! that carries the store's marker, one name at a time, without following
//! a link (see `tree.rs`).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::Path;

use kiln_engine::StoreKey;

use crate::files::Files;
use crate::layout;
use crate::tree::{Folder, Removal, relative_names};

impl Files {
    /// Removes whatever is stored under `key`:
    /// [`ArtifactStore::remove`](kiln_engine::ArtifactStore::remove).
    pub(crate) fn remove_record(&self, key: &StoreKey) {
        if self.read_only {
            return;
        }
        self.remove_packed_record(key);
        self.remove_record_file(key);
    }

    /// Removes the file record of `key`, if any.
    pub(super) fn remove_record_file(&self, key: &StoreKey) {
        if self.read_only {
            return;
        }
        let path = self.layout.record(&key.digest());
        // A file or a link at the record's name goes, never a folder.
        let removal = self.remove_at(&path, |folder, name| Removal::of(folder.remove_file(name)));
        if let Removal::Failed(error) = removal {
            log::warn!("kiln store: cannot remove {}: {error}", path.display());
        }
    }

    /// Removes the store's file at `path` as `remove` decides, in the
    /// folder that holds it, which is reached from a root that carries the
    /// store's marker one name at a time without following a link; `path`
    /// must be named as the store names its entries' files. A link on the
    /// way fails the removal: neither it nor what it points to is touched.
    pub(super) fn remove_at(
        &self,
        path: &Path,
        remove: impl FnOnce(&Folder, &OsStr) -> Removal,
    ) -> Removal {
        let holder = || -> io::Result<(Folder, &OsStr)> {
            let names = relative_names(self.root(), path)?;
            if !layout::is_own_file(&names) {
                return Err(io::Error::other(format!(
                    "{} is not a file of the store",
                    path.display()
                )));
            }
            let (name, folders) = names.split_last().expect("a file of the store has a name");
            let root = crate::skeleton::open_marked(&self.layout).map_err(io::Error::other)?;
            Ok((root.descend(folders)?, OsStr::new(*name)))
        };
        match holder() {
            Ok((folder, name)) => remove(&folder, name),
            Err(error) => Removal::Failed(error),
        }
    }

    /// Clears the entry's name at `path` for a file to be published there
    /// when something else stands there: at an entry's name only a file
    /// the store wrote belongs, and a folder there would fail every put of
    /// the entry forever. It is reached as [`remove_at`](Self::remove_at)
    /// reaches it; when a link stands where a folder on the way should be,
    /// nothing is cleared, as publication replaces the link with a folder.
    pub(super) fn clear_non_file(&self, path: &Path) -> io::Result<()> {
        // The common case, a file or nothing, costs one look by path; what
        // that look saw is only a hint, acted on from descriptors.
        match fs::symlink_metadata(path) {
            Ok(found) if found.is_file() => return Ok(()),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            // A file where a shard folder should be, say: the put fails.
            Err(error) => return Err(error),
        }
        let mut cleared = Ok(false);
        let removal = self.remove_at(path, |folder, name| {
            cleared = folder.clear_for_file(name);
            Removal::Changed
        });
        match (removal, cleared?) {
            (Removal::Failed(error), _) if !is_unreachable(&error) => Err(error),
            (_, true) => {
                log::warn!(
                    "kiln store: {} was not a file; removed to store the entry again",
                    path.display()
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Whether `error`, met on the way to a name that a look by path reached,
/// says a folder on the way is a link (`ELOOP`, or `ENOTDIR` as
/// `O_DIRECTORY` reports one) or has gone: nothing of the store's stands
/// at the name, and publication replaces the link with a folder.
fn is_unreachable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
    )
}
