//! Where each file of a store lives under its root.
//!
//! ```text
//! root/
//!   LAYOUT        the layout version, checked on open
//!   locks         byte-range locks: one byte per key, per object, per counter
//!   usage         bytes and entries held, updated by every put
//!   activity      hits, misses, compiles and failures of every process,
//!                 per backend (`kiln stats`), merged at each batch's end
//!   batches       the records of the last batches of every process
//!                   (`kiln records`), a ring of fixed slots
//!   targets       the key components of every compiler that stored here
//!   generation    a token that an import replacing content changes
//!   swept         its time is when staging was last swept at open
//!   staging/      files being written, renamed into place when whole
//!   objects/ab/c/<64 hex>   artifact bytes, named by their BLAKE3 digest
//!   records/ab/c/<64 hex>   one record per key (an artifact's or a named
//!                           blob's), named by the key's digest
//!   kernels/ab/c/<32 hex>   one history per kernel id, for explaining misses
//!   packs/<3 hex>.idx       small entries (objects, records, histories) of
//!   packs/<3 hex>-<16 hex>.pack   one of 512 shards: an index and its
//!                           pack, named by its generation (`pack/`)
//! ```
//!
//! Two levels of shards (256 × 16) keep every folder small: a million
//! entries put about 250 files in a folder, and a lookup opens one known
//! path without listing anything.
//!
//! These names are also how the store knows its own: it removes a file
//! only under one of them (see [`crate::tree`]), and `LAYOUT` marks a
//! folder as a store, so a folder without it that holds anything is never
//! taken for one.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The layout version written to `LAYOUT`. Layout 2 files named blobs'
/// records (`kilnblb1`) in `records/`, which a reader of layout 1 would
/// take for damaged records and remove. Layout 3 keeps small entries in
/// `packs/`, which a reader of layout 2 would not see: its lookups would
/// miss and its eviction would count a store far smaller than it is.
pub(crate) const LAYOUT: &str = "kiln store layout 3";

/// Layouts this one reads as they are and upgrades by rewriting `LAYOUT`
/// alone: layout 1 is layout 2 without blobs, and layout 2 is layout 3
/// without packs, so a store of either is opened (nothing lost) and its
/// entries stay files until a put replaces them or `kiln gc` packs them;
/// the new marker keeps older readers away from what they cannot see.
pub(crate) const UPGRADES_FROM: [&str; 2] = ["kiln store layout 1", "kiln store layout 2"];

/// The folders at the root, each the store's own.
pub(crate) const FOLDERS: [&str; 5] = ["objects", "records", "kernels", "staging", "packs"];

/// The files at the root, each the store's own.
pub(crate) const FILES: [&str; 9] = [
    "LAYOUT",
    // Written once, when kiln makes the store, for backup tools to skip it.
    "CACHEDIR.TAG",
    "locks",
    "usage",
    "targets",
    "generation",
    "swept",
    "activity",
    "batches",
];

/// The root files that are the store's history rather than its entries:
/// the store goes on without them when they cannot be used (a folder
/// holding files in their place is reported, not repaired).
pub(crate) const HISTORY_FILES: [&str; 2] = ["activity", "batches"];

/// The folders a store always has once it holds anything: with only the
/// store's own names beside them, and its own [`WRITTEN_AT_OPEN`] files, a
/// folder that lost its `LAYOUT` marker is still a store.
pub(crate) const ENTRY_FOLDERS: [&str; 2] = ["objects", "records"];

/// The files every opening of a store writes: a folder someone laid out
/// like a store by hand does not have them.
pub(crate) const WRITTEN_AT_OPEN: [&str; 2] = ["locks", "usage"];

/// The sharded trees and the length of the names of their files: 64 hex
/// digits of a BLAKE3 digest, 32 of a kernel id.
pub(crate) const TREES: [(&str, usize); 3] = [("objects", 64), ("records", 64), ("kernels", 32)];

/// Whether `name` is `length` lower-case hex digits, as the store names
/// its shards (2 and 1) and its files (64 and 32).
pub(crate) fn is_hex_name(name: &str, length: usize) -> bool {
    name.len() == length
        && name
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether the folder at `relative` (names below the root) is one the
/// store makes: a root folder, or a shard two levels deep in a tree.
pub(crate) fn is_own_folder(relative: &[&str]) -> bool {
    match relative {
        [folder] => FOLDERS.contains(folder),
        [tree, first] => TREES.iter().any(|(name, _)| name == tree) && is_hex_name(first, 2),
        [tree, first, second] => is_own_folder(&[tree, first]) && is_hex_name(second, 1),
        _ => false,
    }
}

/// Whether the file at `relative` (names below the root) is named as the
/// store names the files of its trees: a digest's hex digits in a shard.
pub(crate) fn is_own_file(relative: &[&str]) -> bool {
    match relative {
        [tree, first, second, name] => {
            is_own_folder(&[tree, first, second])
                && TREES
                    .iter()
                    .any(|(own, length)| own == tree && is_hex_name(name, *length))
        }
        _ => false,
    }
}

/// The paths of one store.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    root: PathBuf,
}

impl Layout {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self { root }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn layout_file(&self) -> PathBuf {
        self.root.join("LAYOUT")
    }

    pub(crate) fn lock_file(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub(crate) fn usage_file(&self) -> PathBuf {
        self.root.join("usage")
    }

    pub(crate) fn activity_file(&self) -> PathBuf {
        self.root.join("activity")
    }

    /// The ring of the last batches' records.
    pub(crate) fn batches_file(&self) -> PathBuf {
        self.root.join("batches")
    }

    pub(crate) fn targets_file(&self) -> PathBuf {
        self.root.join("targets")
    }

    pub(crate) fn generation_file(&self) -> PathBuf {
        self.root.join("generation")
    }

    pub(crate) fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }

    /// The object with BLAKE3 digest `digest`.
    pub(crate) fn object(&self, digest: &[u8; 32]) -> PathBuf {
        sharded(&self.root, "objects", digest)
    }

    /// The record of the key with digest `key_digest`.
    pub(crate) fn record(&self, key_digest: &[u8; 32]) -> PathBuf {
        sharded(&self.root, "records", key_digest)
    }

    /// The history of the kernel with id digest `kernel_digest`.
    pub(crate) fn kernel(&self, kernel_digest: u128) -> PathBuf {
        sharded(&self.root, "kernels", &kernel_digest.to_be_bytes())
    }
}

/// `root/tree/ab/c/abc…`, the name being `digest` in lower-case hex: built
/// in one buffer, without the formatting machinery, as a lookup does it on
/// every call.
fn sharded(root: &Path, tree: &str, digest: &[u8]) -> PathBuf {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digit = |nibble: u8| DIGITS[usize::from(nibble & 0xf)];
    let root = root.as_os_str().as_bytes();
    let mut path = Vec::with_capacity(root.len() + tree.len() + 2 * digest.len() + 8);
    path.extend_from_slice(root);
    path.push(b'/');
    path.extend_from_slice(tree.as_bytes());
    path.push(b'/');
    path.extend_from_slice(&[digit(digest[0] >> 4), digit(digest[0]), b'/']);
    path.extend_from_slice(&[digit(digest[1] >> 4), b'/']);
    for byte in digest {
        path.extend_from_slice(&[digit(byte >> 4), digit(*byte)]);
    }
    PathBuf::from(OsString::from_vec(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    use kiln_engine::store::hex;

    use crate::walk::digest_from_name;

    #[test]
    fn an_object_lives_two_shards_deep_under_its_digest() {
        let layout = Layout::new(PathBuf::from("/store"));
        let digest: [u8; 32] = std::array::from_fn(|index| (index * 37) as u8);
        let path = layout.object(&digest);
        assert_eq!(
            path,
            PathBuf::from(format!("/store/objects/00/2/{}", hex(&digest)))
        );
        let name = path.file_name().and_then(|name| name.to_str());
        assert_eq!(name.and_then(digest_from_name), Some(digest));
        assert_eq!(
            layout.kernel(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
            PathBuf::from("/store/kernels/01/2/0123456789abcdef0011223344556677")
        );
    }

    #[test]
    fn only_the_names_the_store_gives_are_its_own_folders() {
        assert!(is_own_folder(&["records", "ab", "c"]));
        assert!(is_own_folder(&["staging"]));
        assert!(!is_own_folder(&["records", "AB"]));
        assert!(!is_own_folder(&["staging", "ab"]));
        assert!(!is_own_folder(&["records", "ab", "c", "d"]));
        assert!(!is_own_folder(&["notes"]));
        assert!(is_hex_name(&"0f".repeat(32), 64));
        assert!(!is_hex_name(&"0F".repeat(32), 64));
        let record = "ab".repeat(32);
        assert!(is_own_file(&["records", "ab", "c", &record]));
        assert!(!is_own_file(&["kernels", "ab", "c", &record]));
        assert!(!is_own_file(&["records", "ab", "c", "notes.txt"]));
        assert!(!is_own_file(&["staging", &record]));
    }
}
