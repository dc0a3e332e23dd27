//! The collect pass (eviction): least recently used entries go until the
//! store is within its limits, in allocated bytes and in entries (P6).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::disk::{AGE_BUCKETS, DiskStore, Limits, age_bucket};
use crate::error::Result;
use crate::lock::{COLLECT_SLOT, Mode, key_slot, object_slot};
use crate::record::AnyRecord;
use crate::tree::{Folder, Kind, Status, is_absent, not_a_file};
use crate::usage::{Usage, file_allocation};
use crate::walk::{Skip, Unchecked, count, digest_from_name, has_object};

use super::verify::Progress;

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectReport {
    /// What the store held before.
    pub before: Usage,
    /// What it holds after.
    pub after: Usage,
    /// Entries (objects) evicted.
    pub evicted: u64,
    /// Bytes of objects evicted.
    pub evicted_bytes: u64,
    /// Records removed because their object was evicted or gone.
    pub records_removed: u64,
    /// Entries that should have gone but were being read or written: kept.
    pub busy: u64,
    /// Staging files of dead processes removed.
    pub staging_removed: u64,
    /// Whether another process was already collecting, so this one did
    /// nothing.
    pub skipped: bool,
    /// What the collection could not check, and why (as
    /// [`VerifyReport::unchecked`](crate::VerifyReport::unchecked)): left as
    /// it was.
    #[serde(default)]
    pub unchecked: Vec<(PathBuf, String)>,
}

impl DiskStore {
    /// Evicts least recently used entries until the store is within
    /// `limits` (P6), skipping any entry being read or written, then
    /// removes records left pointing at nothing and recounts. Streams, as
    /// [`verify`](Self::verify) does, and removes only what verify would:
    /// what it cannot check is reported in
    /// [`CollectReport::unchecked`]. Another process already collecting
    /// makes this one return at once.
    ///
    /// # Errors
    ///
    /// The store's root cannot be opened.
    pub fn collect(
        &self,
        limits: Limits,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<CollectReport> {
        let inner = &self.inner;
        let Ok(Some(_collecting)) = inner
            .files
            .locks
            .acquire(COLLECT_SLOT, Mode::Exclusive, None)
        else {
            return Ok(CollectReport {
                skipped: true,
                ..CollectReport::default()
            });
        };
        // A store that packs moves its small file entries into the packs
        // first (an upgraded store's), so what is counted next is packed.
        let packed_files = self.inner.files.pack_small_files();
        if packed_files > 0 {
            log::info!(
                "kiln store: moved {packed_files} small entries of {} into packs",
                self.root().display()
            );
        }
        let root = self.open_root()?;
        let mut unchecked = Vec::new();
        let mut report = CollectReport {
            staging_removed: self.remove_stale_staging(&root.folder, &mut unchecked),
            ..CollectReport::default()
        };
        // Packs no index names: left by a killed rewrite or a full disk.
        if !self.is_read_only() {
            let mut swept = crate::disk::PackedVerify::default();
            self.inner.files.sweep_packs(&mut swept);
            report.staging_removed += swept.orphans;
            unchecked.extend(
                swept
                    .unchecked
                    .into_iter()
                    .map(|(name, why)| (root.path.join(name), why)),
            );
        }
        let now = SystemTime::now();
        let regular = |folder: &Folder, name: &str| -> Result<Status, Skip> {
            match folder.status(OsStr::new(name)) {
                Ok(found) if found.kind == Kind::File => Ok(found),
                Ok(found) => Err(not_a_file(found.kind).into()),
                Err(error) if is_absent(&error) => Err(Skip::Gone),
                Err(error) => Err(format!("cannot be looked at: {error}").into()),
            }
        };

        // Pass 1: how many bytes of each age. What it cannot check is
        // reported by the later passes.
        // Bytes held and bytes allocated: the limit compares what the
        // disk gives, so the ages and the excess are in allocated bytes.
        let (mut record_bytes, mut record_allocated) = (0u64, 0u64);
        let mut ignored = Vec::new();
        root.walk("records", &mut ignored, &mut |folder, name, _| {
            let found = regular(folder, name)?;
            record_bytes += found.len;
            record_allocated += found.allocated;
            Ok(())
        });
        let mut buckets = [(0u64, 0u64); AGE_BUCKETS];
        let (mut object_bytes, mut object_allocated, mut objects) = (0u64, 0u64, 0u64);
        root.walk("objects", &mut unchecked, &mut |folder, name, _| {
            let found = regular(folder, name)?;
            let bucket = age_bucket(found.accessed, now);
            buckets[bucket].0 += found.allocated;
            buckets[bucket].1 += 1;
            object_bytes += found.len;
            object_allocated += found.allocated;
            objects += 1;
            Ok(())
        });
        // Packed objects age with the files; the rest of the packs' bytes
        // is the records' share, as the record files are.
        let packed = self.inner.files.packed_ages(now);
        for (bucket, (bytes, count)) in buckets.iter_mut().zip(packed.buckets) {
            bucket.0 += bytes;
            bucket.1 += count;
        }
        // A pack's files grow frame by frame: what they allocate beyond
        // the packed objects is the records' and histories' share.
        let packed_allocated = self.inner.files.packed_allocated_bytes();
        let packed_other = packed_allocated.saturating_sub(packed.object_bytes);
        report.before = Usage {
            bytes: object_bytes + record_bytes + packed.object_bytes + packed.other_bytes,
            entries: objects + packed.objects,
            allocated_bytes: object_allocated + record_allocated + packed_allocated,
        };
        if self.is_read_only() {
            // Reports what it holds, and removes nothing.
            report.after = report.before;
            unchecked.push((
                root.path.to_path_buf(),
                "the store is opened to read only: nothing was evicted or removed".to_owned(),
            ));
            report.unchecked = unchecked;
            return Ok(report);
        }
        // Records go with their objects: count each entry's share.
        let overhead = (record_allocated + packed_other)
            .checked_div(objects + packed.objects)
            .unwrap_or(0);
        let mut excess_bytes = report
            .before
            .allocated_bytes
            .saturating_sub(limits.max_bytes);
        let mut excess_entries = report.before.entries.saturating_sub(limits.max_entries);
        // The youngest bucket that still has to go entirely or in part.
        let mut cutoff = AGE_BUCKETS;
        let (mut bytes_left, mut entries_left) = (excess_bytes, excess_entries);
        for bucket in (0..AGE_BUCKETS).rev() {
            if bytes_left == 0 && entries_left == 0 {
                break;
            }
            cutoff = bucket;
            let (bytes, count) = buckets[bucket];
            bytes_left = bytes_left.saturating_sub(bytes + count * overhead);
            entries_left = entries_left.saturating_sub(count);
        }

        // Pass 2: evict everything older than the cutoff bucket, and from
        // the cutoff bucket until the excess is gone.
        let mut done = 0;
        let mut evicted_allocated = 0u64;
        if cutoff < AGE_BUCKETS {
            // What this walk meets again pass 1 reported; only a removal
            // that failed is news.
            let mut ignored = Vec::new();
            let mut failed = Vec::new();
            root.walk("objects", &mut ignored, &mut |folder, name, path| {
                if excess_bytes == 0 && excess_entries == 0 {
                    return Ok(());
                }
                done += 1;
                let digest = digest_from_name(name).expect("the walk passes only digest names");
                let found = regular(folder, name)?;
                if age_bucket(found.accessed, now) < cutoff {
                    return Ok(());
                }
                // Alone on the object: nobody reads it or publishes it (P6).
                let Ok(Some(_alone)) =
                    inner
                        .files
                        .locks
                        .acquire(object_slot(&digest), Mode::Exclusive, None)
                else {
                    report.busy += 1;
                    return Ok(());
                };
                let mut evicted = 0;
                if let Err(Skip::Unchecked(why)) = count(
                    folder.remove_if_same(OsStr::new(name), found.device, found.inode),
                    &mut evicted,
                    "to be evicted",
                ) {
                    failed.push((path.to_path_buf(), why));
                }
                if evicted == 1 {
                    report.evicted += 1;
                    report.evicted_bytes += found.len;
                    evicted_allocated += found.allocated;
                    excess_bytes = excess_bytes.saturating_sub(found.allocated + overhead);
                    excess_entries = excess_entries.saturating_sub(1);
                }
                progress(&Progress {
                    phase: "evicting",
                    done,
                    total: Some(objects),
                    bytes: report.evicted_bytes,
                });
                Ok(())
            });
            unchecked.extend(failed);
        }
        let (packed_evicted, packed_evicted_bytes, packed_busy) = if cutoff < AGE_BUCKETS {
            self.inner.files.evict_packed(
                cutoff,
                now,
                &mut excess_bytes,
                &mut excess_entries,
                overhead,
            )
        } else {
            (0, 0, 0)
        };
        inner
            .files
            .counters
            .evicted
            .fetch_add(report.evicted + packed_evicted, Ordering::Relaxed);

        // Pass 3: records whose object is gone go too; a record whose
        // object cannot be looked at stays.
        let mut usage = Usage {
            bytes: object_bytes - report.evicted_bytes,
            entries: objects - report.evicted,
            allocated_bytes: object_allocated - evicted_allocated,
        };
        done = 0;
        let objects = root.objects();
        root.walk_sealed("records", &mut unchecked, &mut |folder, name, sealed| {
            done += 1;
            // Its object may be a file or packed: the packing above moved
            // small objects out of their files.
            if let Ok(record) = AnyRecord::open(&sealed)
                && (has_object(objects.as_ref(), &record)?
                    || self.inner.files.holds_object(&record.object().0))
            {
                usage.bytes += sealed.len() as u64;
                usage.allocated_bytes += file_allocation(sealed.len() as u64);
                return Ok(());
            }
            let key = digest_from_name(name).unwrap_or_default();
            // A process holding the key is publishing it now: leave it.
            let Ok(Some(_alone)) = inner
                .files
                .locks
                .acquire(key_slot(&key), Mode::Exclusive, None)
            else {
                return Ok(());
            };
            count(
                folder.remove_if_holds(OsStr::new(name), &sealed),
                &mut report.records_removed,
                "dangling",
            )?;
            progress(&Progress {
                phase: "records",
                done,
                total: None,
                bytes: report.evicted_bytes,
            });
            Ok(())
        });
        // Packed records whose object went go too, and every shard with
        // dead space is compacted.
        report.records_removed += self.inner.files.drop_dangling_packed();
        usage.bytes += self.inner.files.packed_file_bytes();
        usage.allocated_bytes += self.inner.files.packed_allocated_bytes();
        usage.entries += packed.objects - packed_evicted;
        report.evicted += packed_evicted;
        report.evicted_bytes += packed_evicted_bytes;
        report.busy += packed_busy;
        report.after = usage;
        report.unchecked = unchecked;
        if let Err(error) = inner.files.usage.set(&inner.files.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }

    /// The maintenance lock, waited for up to the lock timeout: another
    /// verify or collect running on the store past it is an error that
    /// says so.
    pub(super) fn maintenance_lock(&self) -> Result<crate::lock::SlotGuard> {
        let deadline = crate::lock::deadline_after(self.inner.files.config.lock_timeout);
        match self
            .inner
            .files
            .locks
            .acquire(COLLECT_SLOT, Mode::Exclusive, Some(deadline))
        {
            Ok(Some(guard)) => Ok(guard),
            Ok(None) => Err(crate::error::Error::Busy {
                root: self.root().to_path_buf(),
            }),
            Err(error) => Err(crate::error::Error::io("lock", self.root())(error)),
        }
    }

    /// Removes staging files of dead processes, and any older than the lock
    /// timeout; returns how many. Only files named as the store names them
    /// (`<pid>-<n>.part`) in the store's own `staging` folder go; anything
    /// else there is reported.
    pub(super) fn remove_stale_staging(
        &self,
        root: &Folder,
        unchecked: &mut Vec<Unchecked>,
    ) -> u64 {
        if self.is_read_only() {
            return 0;
        }
        let timeout = self
            .inner
            .files
            .config
            .lock_timeout
            .max(Duration::from_secs(60));
        crate::staging::sweep_staging(
            root,
            &self.inner.files.layout.staging(),
            unchecked,
            &|pid, age| crate::staging::is_dead(pid) || age > timeout,
        )
    }
}
