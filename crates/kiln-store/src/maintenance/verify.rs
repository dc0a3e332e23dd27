//! The verify pass: every object re-digested, every record and history
//! checked, what is bad removed, the usage recounted.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::disk::DiskStore;
use crate::error::Result;
use crate::lock::{Mode, key_slot, object_slot};
use crate::record::{AnyRecord, KernelHistory, digest};
use crate::tree::Removal;
use crate::usage::{Usage, file_allocation};
use crate::walk::{
    count, digest_from_name, has_object, open_regular, stream_digest, unless_read_only,
};

/// How far a pass has got, for a progress bar: verify, collect, export
/// and import report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What it is doing: `objects`, `records`, `histories`, `evicting`.
    pub phase: &'static str,
    /// Files done in this phase.
    pub done: u64,
    /// Files in this phase, when known (from the usage counters: an
    /// estimate).
    pub total: Option<u64>,
    /// Bytes read so far.
    pub bytes: u64,
}

/// What a verify found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Objects re-digested.
    pub objects: u64,
    /// Records checked.
    pub records: u64,
    /// Kernel histories checked.
    pub histories: u64,
    /// Bytes re-digested.
    pub bytes: u64,
    /// Objects whose bytes did not match their name: removed.
    pub bad_objects: u64,
    /// Records that were damaged, or filed under another key: removed.
    pub bad_records: u64,
    /// Records whose object was gone or of another size: removed.
    pub dangling_records: u64,
    /// Damaged kernel histories: removed.
    pub bad_histories: u64,
    /// Files left in `staging/` by processes that died while writing:
    /// removed. They were never entries.
    pub staging_removed: u64,
    /// Bad files left alone because another process was using them.
    pub busy: u64,
    /// What verify could not check, and why: a folder it may not read, a
    /// folder or link where a file should be, a name the store does not
    /// give its files. Left as it was.
    #[serde(default)]
    pub unchecked: Vec<(PathBuf, String)>,
}

impl VerifyReport {
    /// Whether everything verified: nothing was bad, and nothing was left
    /// unchecked.
    pub fn is_clean(&self) -> bool {
        self.bad_objects + self.bad_records + self.dangling_records + self.bad_histories == 0
            && self.unchecked.is_empty()
    }
}

impl DiskStore {
    /// Re-digests every object, checks every record and history, removes
    /// whatever is bad, recounts the usage and reports. Streams: memory
    /// stays flat however large the store.
    ///
    /// Only files the store can prove are its own are removed: reached
    /// without following a link, named as the store names them. A file it
    /// could not read, a folder or link where a file should be, a name it
    /// does not give, or a removal that failed is reported in
    /// [`VerifyReport::unchecked`] and left as it was; a record is dangling
    /// only when its object is not there, never when it cannot be looked
    /// at.
    ///
    /// # Errors
    ///
    /// The store's root cannot be opened.
    pub fn verify(&self, progress: &mut dyn FnMut(&Progress)) -> Result<VerifyReport> {
        let inner = &self.inner;
        let root = self.open_root()?;
        // Never beside a collect, which moves entries into the packs: what
        // it moved half-way would look gone. A store opened to read only
        // removes nothing, and needs no lock.
        let _maintenance = if self.is_read_only() {
            None
        } else {
            Some(self.maintenance_lock()?)
        };
        // A store opened to read only reports what is bad, and keeps it.
        let writable = !self.is_read_only();
        let mut unchecked = Vec::new();
        let mut report = VerifyReport {
            staging_removed: self.remove_stale_staging(&root.folder, &mut unchecked),
            ..VerifyReport::default()
        };
        let estimate = inner.files.usage.read().entries;
        let mut usage = Usage::default();
        let mut buffer = vec![0u8; 64 << 10];
        let mut done = 0;
        root.walk("objects", &mut unchecked, &mut |folder, name, _| {
            done += 1;
            let expected = digest_from_name(name).expect("the walk passes only digest names");
            let (file, found) = open_regular(folder, name)?;
            let read = stream_digest(&file, &mut buffer);
            report.objects += 1;
            match read {
                Ok((digest, length)) if digest == expected && length > 0 => {
                    report.bytes += length;
                    usage.bytes += length;
                    usage.allocated_bytes += found.blocks() * 512;
                    usage.entries += 1;
                }
                Ok(_) => {
                    match inner
                        .files
                        .locks
                        .acquire(object_slot(&expected), Mode::Exclusive, None)
                    {
                        Ok(Some(_alone)) => count(
                            unless_read_only(writable, || {
                                folder.remove_if_same(OsStr::new(name), found.dev(), found.ino())
                            }),
                            &mut report.bad_objects,
                            "does not match its name",
                        )?,
                        _ => report.busy += 1,
                    }
                }
                Err(error) => return Err(format!("cannot be read: {error}").into()),
            }
            progress(&Progress {
                phase: "objects",
                done,
                total: Some(estimate),
                bytes: report.bytes,
            });
            Ok(())
        });

        done = 0;
        let objects = root.objects();
        root.walk_sealed("records", &mut unchecked, &mut |folder, name, sealed| {
            done += 1;
            report.records += 1;
            // `Err(None)`: its object is gone; `Err(Some(defect))`: the
            // record itself is bad.
            let verdict = match AnyRecord::open(&sealed) {
                Err(defect) => Err(Some(format!("damaged: {defect}"))),
                Ok(record) if digest_from_name(name) != Some(record.key_digest()) => {
                    Err(Some("filed under another key".to_owned()))
                }
                Ok(AnyRecord::Artifact(record, Some(inline)))
                    if digest(inline) != record.object =>
                {
                    Err(Some("the bytes it carries are not its object's".to_owned()))
                }
                // An inline record lives as long as its object, as any
                // other record (a blob's too) does: eviction and verify go
                // by objects.
                // Its object may be a file or packed (a collect moves
                // objects into the packs): either is there.
                Ok(record) => {
                    if has_object(objects.as_ref(), &record)?
                        || self.inner.files.holds_object(&record.object().0)
                    {
                        Ok(())
                    } else {
                        Err(None)
                    }
                }
            };
            match verdict {
                Ok(()) => {
                    usage.bytes += sealed.len() as u64;
                    usage.allocated_bytes += file_allocation(sealed.len() as u64);
                }
                Err(defect) => {
                    let key = digest_from_name(name).unwrap_or_default();
                    let Ok(Some(_alone)) =
                        inner
                            .files
                            .locks
                            .acquire(key_slot(&key), Mode::Exclusive, None)
                    else {
                        report.busy += 1;
                        return Ok(());
                    };
                    let removal = unless_read_only(writable, || {
                        folder.remove_if_holds(OsStr::new(name), &sealed)
                    });
                    match defect {
                        None => count(removal, &mut report.dangling_records, "dangling")?,
                        Some(defect) => {
                            if matches!(removal, Removal::Removed) {
                                log::info!("removed record {name}: {defect}");
                            }
                            count(removal, &mut report.bad_records, &defect)?;
                        }
                    }
                }
            }
            progress(&Progress {
                phase: "records",
                done,
                total: None,
                bytes: report.bytes,
            });
            Ok(())
        });

        done = 0;
        root.walk_sealed("kernels", &mut unchecked, &mut |folder, name, sealed| {
            done += 1;
            report.histories += 1;
            let whole = KernelHistory::open(&sealed)
                .is_ok_and(|history| format!("{:032x}", history.digest) == name);
            if !whole {
                count(
                    unless_read_only(writable, || {
                        folder.remove_if_holds(OsStr::new(name), &sealed)
                    }),
                    &mut report.bad_histories,
                    "a damaged history",
                )?;
            }
            progress(&Progress {
                phase: "histories",
                done,
                total: None,
                bytes: report.bytes,
            });
            Ok(())
        });

        let packed = self.inner.files.verify_packs();
        report.objects += packed.objects;
        report.records += packed.records;
        report.histories += packed.histories;
        report.bytes += packed.bytes;
        report.bad_objects += packed.bad_objects;
        report.bad_records += packed.bad_records;
        report.dangling_records += packed.dangling_records;
        report.bad_histories += packed.bad_histories;
        report.staging_removed += packed.orphans;
        usage.bytes += packed.file_bytes;
        usage.allocated_bytes += self.inner.files.packed_allocated_bytes();
        usage.entries += packed.objects - packed.bad_objects;
        unchecked.extend(
            packed
                .unchecked
                .into_iter()
                .map(|(name, why)| (root.path.join(name), why)),
        );
        report.unchecked = unchecked;
        if writable && let Err(error) = inner.files.usage.set(&inner.files.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }
}
