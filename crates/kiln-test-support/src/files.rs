//! Files a test plants, reads back whole or hands to another user: what
//! the tests that prove "nothing outside the store changed" compare.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Every file under `folder` and what it holds, without following links.
pub fn snapshot(folder: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in fs::read_dir(&current).expect("the folder lists").flatten() {
            if entry.file_type().expect("a file type").is_dir() {
                pending.push(entry.path());
            } else {
                found.insert(entry.path(), fs::read(entry.path()).unwrap_or_default());
            }
        }
    }
    found
}

/// Writes each `(path, bytes)` of `files` at `folder/path`, creating the
/// folders on the way.
pub fn plant<P: AsRef<Path>, B: AsRef<[u8]>>(
    folder: &Path,
    files: impl IntoIterator<Item = (P, B)>,
) {
    for (path, bytes) in files {
        let path = folder.join(path);
        fs::create_dir_all(path.parent().expect("a folder")).expect("the planted folders");
        fs::write(path, bytes).expect("the planted files");
    }
}

/// Gives `root` and everything under it to user and group `id`.
pub fn chown_all(root: &Path, id: u32) {
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::chown(&path, Some(id), Some(id)).expect("chown");
        if path.is_dir() {
            pending.extend(
                fs::read_dir(&path)
                    .expect("lists")
                    .flatten()
                    .map(|entry| entry.path()),
            );
        }
    }
}
