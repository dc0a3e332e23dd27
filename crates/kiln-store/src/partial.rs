//! A file kiln writes outside its store — a bundle, in a folder that belongs
//! to the user — written whole under a name of its own beside its final
//! name, then renamed over it.
//!
//! The folder is not kiln's, so nothing in it is assumed to be kiln's: the
//! partial file is created new (`O_EXCL`, `O_NOFOLLOW`) under a name with
//! the process id and a sequence number, so an existing file or link of any
//! name is never opened, written through or removed. A file that did not
//! become the final one is removed only while it is still the file this
//! process created. The rename replaces whatever the final name was — a
//! link there is replaced, never followed — and a process killed half-way
//! leaves a `<name>.<pid>-<n>.partial` file that says what it is.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Partial files created by this process so far: with the process id, a
/// name no other live writer uses.
static CREATED: AtomicU64 = AtomicU64::new(0);

/// A new file beside a final name, removed on drop unless it was renamed
/// into place.
#[derive(Debug)]
pub(crate) struct PartialFile {
    path: PathBuf,
    file: File,
    /// Device and inode of the file created, to tell it from one put in its
    /// place by someone else.
    identity: (u64, u64),
    is_in_place: bool,
}

impl PartialFile {
    /// A file created new in `target`'s folder, named after it.
    pub(crate) fn beside(target: &Path) -> io::Result<Self> {
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
        let folder = folder_of(target);
        loop {
            let sequence = CREATED.fetch_add(1, Ordering::Relaxed);
            let mut partial_name = name.to_os_string();
            partial_name.push(format!(".{}-{sequence}.partial", std::process::id()));
            let path = folder.join(partial_name);
            // Read too: a bundle's stream is written to one and copied
            // out of it.
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path);
            match opened {
                Ok(file) => {
                    let found = file.metadata()?;
                    return Ok(Self {
                        path,
                        file,
                        identity: (found.dev(), found.ino()),
                        is_in_place: false,
                    });
                }
                // Someone's file or link, or one left by a dead process that
                // had this id: never touched, take the next name.
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Where it is now.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Renames it over `target` and syncs the folder. A link at `target` is
    /// replaced by the file, not followed.
    pub(crate) fn rename_over(mut self, target: &Path) -> io::Result<()> {
        fs::rename(&self.path, target)?;
        self.is_in_place = true;
        File::open(folder_of(target))?.sync_all()
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if self.is_in_place {
            return;
        }
        let is_ours = fs::symlink_metadata(&self.path)
            .is_ok_and(|found| (found.dev(), found.ino()) == self.identity);
        if is_ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The folder `path` is in; `.` for a bare file name.
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::symlink;

    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("kiln-partial-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).expect("a temporary folder");
        folder
    }

    #[test]
    fn a_partial_file_dropped_before_its_rename_is_removed_and_nothing_else() {
        let folder = scratch("dropped");
        let target = folder.join("warm.kiln");
        let partial = PartialFile::beside(&target).expect("created");
        let path = partial.path().to_path_buf();
        assert!(path.starts_with(&folder));
        drop(partial);
        assert!(!path.exists());
        assert_eq!(fs::read_dir(&folder).expect("lists").count(), 0);
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn a_file_put_in_a_partial_files_place_is_not_removed() {
        // Not ours any more: someone renamed their own file over it.
        let folder = scratch("replaced");
        let partial = PartialFile::beside(&folder.join("warm.kiln")).expect("created");
        let path = partial.path().to_path_buf();
        let theirs = folder.join("theirs");
        fs::write(&theirs, b"theirs").expect("written");
        fs::rename(&theirs, &path).expect("renamed");
        drop(partial);
        assert_eq!(fs::read(&path).expect("still there"), b"theirs");
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn a_partial_file_replaces_a_link_at_its_final_name() {
        let folder = scratch("link");
        let decoy = folder.join("decoy");
        fs::write(&decoy, b"precious").expect("written");
        let target = folder.join("warm.kiln");
        symlink(&decoy, &target).expect("linked");
        let partial = PartialFile::beside(&target).expect("created");
        partial.file().write_all(b"bundle").expect("written");
        partial.rename_over(&target).expect("renamed");
        assert_eq!(fs::read(&decoy).expect("the decoy"), b"precious");
        assert!(fs::symlink_metadata(&target).expect("there").is_file());
        assert_eq!(fs::read(&target).expect("the bundle"), b"bundle");
        let _ = fs::remove_dir_all(&folder);
    }
}
