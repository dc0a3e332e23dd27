//! What a store takes on disk, against what it counts: `kiln stats`
//! shows both, as F10 is about the difference.

use std::fs;
use std::os::unix::fs::MetadataExt;

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What a store's folder takes on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Files and folders under the root: the inodes the store uses.
    pub files: u64,
    /// Bytes the file system allocated to them (blocks, not lengths).
    pub allocated_bytes: u64,
}

impl Footprint {
    /// Walks the folder `root`, following no link, and says how many
    /// files and folders it holds and what they take on disk. A file or
    /// folder that cannot be looked at is left out.
    pub(crate) fn of(root: &Path) -> Footprint {
        let mut footprint = Footprint::default();
        let mut folders = vec![root.to_path_buf()];
        while let Some(folder) = folders.pop() {
            let Ok(listing) = fs::read_dir(&folder) else {
                continue;
            };
            for entry in listing.flatten() {
                let path = entry.path();
                let Ok(found) = fs::symlink_metadata(&path) else {
                    continue;
                };
                footprint.files += 1;
                footprint.allocated_bytes += found.blocks() * 512;
                if found.is_dir() {
                    folders.push(path);
                }
            }
        }
        footprint
    }
}
