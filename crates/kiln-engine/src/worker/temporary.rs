//! Each worker's private temporary folder: compilers write temporary files
//! (hipRTC a folder of several hundred KiB per compile) and remove them only
//! when they finish, so a worker killed at the timeout, by a signal or with
//! its loader would leave them in the shared temporary folder for good. A
//! worker's `TMPDIR` is a folder of its own instead, which kiln removes once
//! the worker has ended, however it ended.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A folder made for one worker, removed with this value.
#[derive(Debug)]
pub(crate) struct TemporaryFolder {
    path: PathBuf,
}

/// Numbers the folders of this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// What every worker folder's name starts with.
pub(crate) const PREFIX: &str = "kiln-worker-";

/// Set on a worker process: the private temporary folder made for it.
pub(crate) const VARIABLE: &str = "KILN_WORKER_TEMPORARY";

impl TemporaryFolder {
    /// Makes a new folder, only this user's to read, in the temporary
    /// folder this process uses.
    ///
    /// # Errors
    ///
    /// The folder cannot be made (a read-only or full temporary folder):
    /// the worker then uses the one this process uses.
    pub(crate) fn make() -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // Never one already there: what is in it would not be this
        // worker's to remove.
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// In a worker whose loader went away (its request pipe closed, or it
/// exited without closing its workers): removes the folder made for it, so
/// that it is gone whoever ends first. Only a folder named as kiln names
/// them, and only the one this process's temporary files go to.
pub(crate) fn remove_own() {
    let Some(path) = std::env::var_os(VARIABLE).map(PathBuf::from) else {
        return;
    };
    let is_kiln_s = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(PREFIX));
    if is_kiln_s && path == std::env::temp_dir() {
        drop(TemporaryFolder { path });
    }
}

impl Drop for TemporaryFolder {
    fn drop(&mut self) {
        // `remove_dir_all` follows no link inside it: only what the worker
        // wrote there goes.
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => log::debug!(
                "cannot remove the temporary folder {} of a compile worker: {error}",
                self.path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_folder_is_private_and_goes_with_everything_in_it() {
        use std::os::unix::fs::PermissionsExt;
        let folder = TemporaryFolder::make().expect("a temporary folder");
        let path = folder.path().to_path_buf();
        let mode = std::fs::metadata(&path).expect("made").permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "only this user's");
        std::fs::create_dir(path.join("comgr-1")).expect("a compiler's folder");
        std::fs::write(path.join("comgr-1").join("t.o"), b"object").expect("a file");
        let outside = std::env::temp_dir().join(format!("kiln-outside-{}", std::process::id()));
        std::fs::write(&outside, b"not the worker's").expect("a file");
        std::os::unix::fs::symlink(&outside, path.join("link")).expect("a link");
        drop(folder);
        assert!(!path.exists(), "removed with what it held");
        assert_eq!(std::fs::read(&outside).expect("kept"), b"not the worker's");
        std::fs::remove_file(&outside).expect("removed");
    }
}
