//! Listing the entries (`kiln ls`, forget, `verify --recompile`) and
//! searching the kernels' histories.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::disk::DiskStore;
use crate::error::Result;
use crate::record::{AnyRecord, BlobRecord, KernelHistory, Record};
use crate::tree::Kind;
use crate::walk::object_status;

/// One entry as `kiln ls` shows it: its record and what its object looks
/// like.
///
/// As JSON, the record is under the name of what it is (`"record"` for an
/// artifact's, `"blob"` for a named blob's), beside `"accessed_at"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The record, of an artifact or a named blob.
    #[serde(flatten)]
    pub entry: Entry,
    /// When the object was last read, in seconds since the Unix epoch;
    /// `None` when the object is missing.
    pub accessed_at: Option<u64>,
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// An artifact's record: of a kernel or of lowered source.
    Record(Record),
    /// A named blob's record ([`kiln_engine::store::BlobKey`]): data a
    /// backend keeps beside its artifacts, such as a pipeline cache.
    Blob(BlobRecord),
}

impl DiskStore {
    /// Calls `visit` with every entry, kernel and source records and named
    /// blobs alike, one at a time. Damaged records are skipped (`verify`
    /// removes them).
    ///
    /// # Errors
    ///
    /// The store's root cannot be opened.
    pub fn entries(&self, visit: &mut dyn FnMut(EntryInfo)) -> Result<()> {
        let root = self.open_root()?;
        let objects = root.objects();
        let mut unchecked = Vec::new();
        root.walk_sealed("records", &mut unchecked, &mut |_, _, sealed| {
            let Ok(record) = AnyRecord::open(&sealed) else {
                return Ok(());
            };
            let accessed_at = object_status(objects.as_ref(), &record.object().0)
                .ok()
                .filter(|found| found.kind == Kind::File)
                .and_then(|found| found.accessed.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|since| since.as_secs());
            let entry = match record {
                AnyRecord::Artifact(record, _) => Entry::Record(record),
                AnyRecord::Blob(record) => Entry::Blob(record),
            };
            visit(EntryInfo { entry, accessed_at });
            Ok(())
        });
        self.inner
            .files
            .each_packed(crate::pack::Kind::Record, &mut |sealed| {
                let Ok(record) = AnyRecord::open(sealed) else {
                    return;
                };
                let object = record.object().0;
                let accessed_at = self
                    .inner
                    .files
                    .packs
                    .slot(crate::pack::Kind::Object, &crate::pack::short_key(&object))
                    .map(|slot| u64::from(slot.accessed))
                    .or_else(|| {
                        object_status(objects.as_ref(), &object)
                            .ok()
                            .filter(|found| found.kind == Kind::File)
                            .and_then(|found| {
                                found.accessed.duration_since(SystemTime::UNIX_EPOCH).ok()
                            })
                            .map(|since| since.as_secs())
                    });
                let entry = match record {
                    AnyRecord::Artifact(record, _) => Entry::Record(record),
                    AnyRecord::Blob(record) => Entry::Blob(record),
                };
                visit(EntryInfo { entry, accessed_at });
            });
        for (path, why) in unchecked {
            log::warn!("{}: {why}", path.display());
        }
        Ok(())
    }

    /// The histories of every kernel whose name, `name#digest` text or id
    /// digest contains `query` (a full 32-digit digest is found without a
    /// walk).
    ///
    /// # Errors
    ///
    /// The store's root cannot be opened.
    pub fn find_kernels(&self, query: &str) -> Result<Vec<KernelHistory>> {
        let query = query.trim();
        if query.len() == 32
            && let Ok(digest) = u128::from_str_radix(query, 16)
        {
            return Ok(self.history(digest).into_iter().collect());
        }
        let root = self.open_root()?;
        let mut found = Vec::new();
        let mut unchecked = Vec::new();
        root.walk_sealed("kernels", &mut unchecked, &mut |_, _, sealed| {
            let Ok(history) = KernelHistory::open(&sealed) else {
                return Ok(());
            };
            let text = format!("{}#{:032x}", history.name, history.digest);
            if text.contains(query) {
                found.push(history);
            }
            Ok(())
        });
        self.inner
            .files
            .each_packed(crate::pack::Kind::History, &mut |sealed| {
                let Ok(history) = KernelHistory::open(sealed) else {
                    return;
                };
                let text = format!("{}#{:032x}", history.name, history.digest);
                if text.contains(query) && !found.iter().any(|held| held.digest == history.digest) {
                    found.push(history);
                }
            });
        for (path, why) in unchecked {
            log::warn!("{}: {why}", path.display());
        }
        Ok(found)
    }
}
