//! What the bundle passes hand back and take: what an export wrote and
//! an import did, and what a bundle's signature covers.

use serde::{Deserialize, Serialize};

/// Makes a bundle's signature from the bytes it covers
/// ([`BundleSeal::signed`]).
pub type SignBundle<'a> = &'a dyn Fn(&[u8]) -> Vec<u8>;

/// What a bundle's signature covers, and the signature, handed to the
/// judge of [`DiskStore::import_checked`](crate::DiskStore::import_checked)
/// once every checksum of the bundle held.
#[derive(Debug, Clone, Copy)]
pub struct BundleSeal<'a> {
    /// The end section, tag included: `'E'`, the counts and the closing
    /// digest of every byte before it. A signature over these bytes covers
    /// the whole bundle.
    pub signed: &'a [u8],
    /// The signature the bundle carries, if any.
    pub signature: Option<&'a [u8]>,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportReport {
    /// Objects written.
    pub objects: u64,
    /// Records written.
    pub records: u64,
    /// Named blobs written (P15): tuning answers, warm-start profiles,
    /// pipeline caches.
    #[serde(default)]
    pub blobs: u64,
    /// Bytes of the bundle.
    pub bytes: u64,
    /// Objects skipped because they did not verify.
    pub skipped: u64,
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportReport {
    /// Objects in the bundle.
    pub objects: u64,
    /// Of those, objects the store did not have.
    pub new_objects: u64,
    /// Records in the bundle.
    pub records: u64,
    /// Of those, records that replaced a record pointing elsewhere: the
    /// store's generation moved (L10).
    pub replaced: u64,
    /// Named blobs in the bundle (P15).
    #[serde(default)]
    pub blobs: u64,
}
