//! Whole-store passes: verify, collect (evict), list and search. Each walks
//! the shard folders one at a time and keeps only counters, so memory stays
//! flat whatever the store holds.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::config::StoreConfig;
use crate::disk::{DiskStore, digest, remove_if_same, remove_if_unchanged};
use crate::durable;
use crate::error::{Error, Result};
use crate::layout::digest_from_name;
use crate::lock::{COLLECT_SLOT, Mode, key_slot, object_slot};
use crate::record::{KernelHistory, Record};
use crate::usage::Usage;

/// How far a pass has got, for a progress bar.
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

impl VerifyReport {
    /// Whether everything verified.
    pub fn is_clean(&self) -> bool {
        self.bad_objects + self.bad_records + self.dangling_records + self.bad_histories == 0
    }
}

/// The limits a collection brings the store under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The most bytes to keep.
    pub max_bytes: u64,
    /// The most entries to keep.
    pub max_entries: u64,
}

impl Limits {
    /// The store's configured limits.
    pub fn of(config: &StoreConfig) -> Self {
        Self {
            max_bytes: config.max_bytes,
            max_entries: config.max_entries,
        }
    }

    /// 90 % of the configured limits: where automatic eviction stops, so
    /// that it does not run again at the next put.
    pub fn low_water(config: &StoreConfig) -> Self {
        Self {
            max_bytes: config.max_bytes / 10 * 9,
            max_entries: config.max_entries / 10 * 9,
        }
    }
}

/// What a collection did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// One entry as `kiln ls` shows it: a record and what its object looks like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryInfo {
    /// The record.
    pub record: Record,
    /// When the object was last read, in seconds since the Unix epoch;
    /// `None` when the object is missing.
    pub accessed_at: Option<u64>,
}

/// Age buckets of eviction: bucket `b` holds ages in `[1.25^b, 1.25^(b+1))`
/// seconds, so 200 buckets span past a century with a fixed, small table.
const AGE_BUCKETS: usize = 200;

fn age_bucket(accessed: SystemTime, now: SystemTime) -> usize {
    let age = now
        .duration_since(accessed)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    ((age + 1.0).ln() / 1.25f64.ln())
        .floor()
        .min((AGE_BUCKETS - 1) as f64) as usize
}

/// Calls `visit` with the path and name of every file two shard levels
/// under `tree`, one folder at a time.
pub(crate) fn walk_files(tree: &Path, visit: &mut dyn FnMut(PathBuf, &str)) -> Result<()> {
    let entries = |folder: &Path| -> Option<fs::ReadDir> { fs::read_dir(folder).ok() };
    let top = fs::read_dir(tree).map_err(Error::io("list", tree))?;
    for first in top.flatten() {
        let Some(second_level) = entries(&first.path()) else {
            continue;
        };
        for second in second_level.flatten() {
            let Some(files) = entries(&second.path()) else {
                continue;
            };
            for file in files.flatten() {
                let name = file.file_name();
                if let Some(name) = name.to_str() {
                    visit(file.path(), name);
                }
            }
        }
    }
    Ok(())
}

impl DiskStore {
    /// Re-digests every object, checks every record and history, removes
    /// whatever is bad, recounts the usage and reports. Streams: memory
    /// stays flat however large the store.
    ///
    /// # Errors
    ///
    /// A folder of the store cannot be listed.
    pub fn verify(&self, progress: &mut dyn FnMut(&Progress)) -> Result<VerifyReport> {
        let inner = &self.inner;
        let mut report = VerifyReport {
            staging_removed: self.remove_stale_staging(),
            ..VerifyReport::default()
        };
        let estimate = inner.usage.read().entries;
        let mut usage = Usage::default();
        let mut buffer = vec![0u8; 64 << 10];
        let mut done = 0;
        walk_files(&inner.layout.objects(), &mut |path, name| {
            done += 1;
            let Some(expected) = digest_from_name(name) else {
                // Not an object: nothing the store wrote under this name.
                let _ = fs::remove_file(&path);
                report.bad_objects += 1;
                return;
            };
            let Ok(file) = File::open(&path) else {
                return;
            };
            let Ok(found) = file.metadata() else {
                return;
            };
            let read = stream_digest(&file, &mut buffer);
            report.objects += 1;
            match read {
                Ok((digest, length)) if digest == expected && length > 0 => {
                    report.bytes += length;
                    usage.bytes += length;
                    usage.entries += 1;
                }
                Ok(_) => {
                    match inner
                        .locks
                        .acquire(object_slot(&expected), Mode::Exclusive, None)
                    {
                        Ok(Some(_alone)) => {
                            if remove_if_same(&path, &found) {
                                report.bad_objects += 1;
                            }
                        }
                        _ => report.busy += 1,
                    }
                }
                Err(error) => log::warn!("cannot read {}: {error}", path.display()),
            }
            progress(&Progress {
                phase: "objects",
                done,
                total: Some(estimate),
                bytes: report.bytes,
            });
        })?;

        done = 0;
        walk_files(&inner.layout.records(), &mut |path, name| {
            done += 1;
            let Ok(sealed) = fs::read(&path) else {
                return;
            };
            report.records += 1;
            let verdict = match Record::open_any(&sealed) {
                Err(defect) => Err(format!("damaged: {defect}")),
                Ok((record, _)) if digest_from_name(name) != Some(record.key.digest()) => {
                    Err("filed under another key".to_owned())
                }
                Ok((record, Some(inline))) if digest(inline) != record.object => {
                    Err("the bytes it carries are not its object's".to_owned())
                }
                // An inline record lives as long as its object, as any
                // other record does: eviction and verify go by objects.
                Ok((record, _)) => match fs::metadata(inner.layout.object(&record.object)) {
                    Ok(object) if object.len() == record.size => Ok(()),
                    _ => Err(String::new()),
                },
            };
            match verdict {
                Ok(()) => usage.bytes += sealed.len() as u64,
                Err(defect) => {
                    let key = digest_from_name(name).unwrap_or_default();
                    let Ok(Some(_alone)) =
                        inner.locks.acquire(key_slot(&key), Mode::Exclusive, None)
                    else {
                        report.busy += 1;
                        return;
                    };
                    if remove_if_unchanged(&path, &sealed) {
                        if defect.is_empty() {
                            report.dangling_records += 1;
                        } else {
                            log::info!("removed record {name}: {defect}");
                            report.bad_records += 1;
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
        })?;

        done = 0;
        walk_files(&inner.layout.kernels(), &mut |path, name| {
            done += 1;
            let Ok(sealed) = fs::read(&path) else {
                return;
            };
            report.histories += 1;
            let whole = KernelHistory::open(&sealed)
                .is_ok_and(|history| format!("{:032x}", history.digest) == name);
            if !whole && remove_if_unchanged(&path, &sealed) {
                report.bad_histories += 1;
            }
            progress(&Progress {
                phase: "histories",
                done,
                total: None,
                bytes: report.bytes,
            });
        })?;

        if let Err(error) = inner.usage.set(&inner.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }

    /// Evicts least recently used entries until the store is within
    /// `limits` (P6), skipping any entry being read or written, then
    /// removes records left pointing at nothing and recounts. Streams, as
    /// [`verify`](Self::verify) does. Another process already collecting
    /// makes this one return at once.
    ///
    /// # Errors
    ///
    /// A folder of the store cannot be listed.
    pub fn collect(
        &self,
        limits: Limits,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<CollectReport> {
        let inner = &self.inner;
        let Ok(Some(_collecting)) = inner.locks.acquire(COLLECT_SLOT, Mode::Exclusive, None) else {
            return Ok(CollectReport {
                skipped: true,
                ..CollectReport::default()
            });
        };
        let mut report = CollectReport {
            staging_removed: self.remove_stale_staging(),
            ..CollectReport::default()
        };
        let now = SystemTime::now();

        // Pass 1: how many bytes of each age.
        let mut record_bytes = 0u64;
        walk_files(&inner.layout.records(), &mut |path, _| {
            record_bytes += fs::metadata(path).map_or(0, |found| found.len());
        })?;
        let mut buckets = [(0u64, 0u64); AGE_BUCKETS];
        let (mut object_bytes, mut objects) = (0u64, 0u64);
        walk_files(&inner.layout.objects(), &mut |path, _| {
            let Ok(found) = fs::metadata(path) else {
                return;
            };
            let bucket = age_bucket(found.accessed().unwrap_or(now), now);
            buckets[bucket].0 += found.len();
            buckets[bucket].1 += 1;
            object_bytes += found.len();
            objects += 1;
        })?;
        report.before = Usage {
            bytes: object_bytes + record_bytes,
            entries: objects,
        };
        // Records go with their objects: count each entry's share.
        let overhead = record_bytes.checked_div(objects).unwrap_or(0);
        let mut excess_bytes = report.before.bytes.saturating_sub(limits.max_bytes);
        let mut excess_entries = objects.saturating_sub(limits.max_entries);
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
        if cutoff < AGE_BUCKETS {
            walk_files(&inner.layout.objects(), &mut |path, name| {
                if excess_bytes == 0 && excess_entries == 0 {
                    return;
                }
                done += 1;
                let (Some(digest), Ok(found)) = (digest_from_name(name), fs::metadata(&path))
                else {
                    return;
                };
                let bucket = age_bucket(found.accessed().unwrap_or(now), now);
                if bucket < cutoff {
                    return;
                }
                // Alone on the object: nobody reads it or publishes it (P6).
                let Ok(Some(_alone)) =
                    inner
                        .locks
                        .acquire(object_slot(&digest), Mode::Exclusive, None)
                else {
                    report.busy += 1;
                    return;
                };
                if remove_if_same(&path, &found) {
                    report.evicted += 1;
                    report.evicted_bytes += found.len();
                    excess_bytes = excess_bytes.saturating_sub(found.len() + overhead);
                    excess_entries = excess_entries.saturating_sub(1);
                }
                progress(&Progress {
                    phase: "evicting",
                    done,
                    total: Some(objects),
                    bytes: report.evicted_bytes,
                });
            })?;
        }
        inner
            .counters
            .evicted
            .fetch_add(report.evicted, Ordering::Relaxed);

        // Pass 3: records whose object is gone go too.
        let mut usage = Usage {
            bytes: object_bytes - report.evicted_bytes,
            entries: objects - report.evicted,
        };
        done = 0;
        walk_files(&inner.layout.records(), &mut |path, name| {
            done += 1;
            let Ok(sealed) = fs::read(&path) else {
                return;
            };
            let object = Record::open_any(&sealed).map(|(record, _)| (record.object, record.size));
            let present = object.as_ref().is_ok_and(|(object, size)| {
                fs::metadata(inner.layout.object(object)).is_ok_and(|found| found.len() == *size)
            });
            if present {
                usage.bytes += sealed.len() as u64;
                return;
            }
            let key = digest_from_name(name).unwrap_or_default();
            // A process holding the key is publishing it now: leave it.
            let Ok(Some(_alone)) = inner.locks.acquire(key_slot(&key), Mode::Exclusive, None)
            else {
                return;
            };
            if remove_if_unchanged(&path, &sealed) {
                report.records_removed += 1;
            }
            progress(&Progress {
                phase: "records",
                done,
                total: None,
                bytes: report.evicted_bytes,
            });
        })?;
        report.after = usage;
        if let Err(error) = inner.usage.set(&inner.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }

    /// Calls `visit` with every entry, kernel and source records alike, one
    /// at a time. Damaged records are skipped (`verify` removes them).
    ///
    /// # Errors
    ///
    /// A folder of the store cannot be listed.
    pub fn entries(&self, visit: &mut dyn FnMut(EntryInfo)) -> Result<()> {
        let inner = &self.inner;
        walk_files(&inner.layout.records(), &mut |path, _| {
            let Some(record) = fs::read(path)
                .ok()
                .and_then(|sealed| Record::open_any(&sealed).ok().map(|(record, _)| record))
            else {
                return;
            };
            let accessed_at = fs::metadata(inner.layout.object(&record.object))
                .ok()
                .and_then(|found| found.accessed().ok())
                .and_then(|accessed| accessed.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|since| since.as_secs());
            visit(EntryInfo {
                record,
                accessed_at,
            });
        })
    }

    /// The histories of every kernel whose name, `name#digest` text or id
    /// digest contains `query` (a full 32-digit digest is found without a
    /// walk).
    ///
    /// # Errors
    ///
    /// A folder of the store cannot be listed.
    pub fn find_kernels(&self, query: &str) -> Result<Vec<KernelHistory>> {
        let query = query.trim();
        if query.len() == 32
            && let Ok(digest) = u128::from_str_radix(query, 16)
        {
            return Ok(self.history(digest).into_iter().collect());
        }
        let mut found = Vec::new();
        walk_files(&self.inner.layout.kernels(), &mut |path, _| {
            let Some(history) = fs::read(path)
                .ok()
                .and_then(|sealed| KernelHistory::open(&sealed).ok())
            else {
                return;
            };
            let text = format!("{}#{:032x}", history.name, history.digest);
            if text.contains(query) {
                found.push(history);
            }
        })?;
        Ok(found)
    }

    /// Removes staging files of dead processes, and any older than the lock
    /// timeout; returns how many.
    fn remove_stale_staging(&self) -> u64 {
        let staging = self.inner.layout.staging();
        let Ok(files) = fs::read_dir(&staging) else {
            return 0;
        };
        let now = SystemTime::now();
        let timeout = self.inner.config.lock_timeout.max(Duration::from_secs(60));
        let mut removed = 0;
        for file in files.flatten() {
            let name = file.file_name();
            let old = file
                .metadata()
                .and_then(|found| found.modified())
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
                .is_some_and(|age| age > timeout);
            let dead = name.to_str().is_none_or(durable::staged_by_dead_process);
            if (old || dead) && fs::remove_file(file.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// The BLAKE3 digest and length of what `file` holds, read in chunks.
fn stream_digest(mut file: &File, buffer: &mut [u8]) -> io::Result<([u8; 32], u64)> {
    let mut hasher = blake3::Hasher::new();
    let mut length = 0u64;
    loop {
        let read = file.read(buffer)?;
        if read == 0 {
            return Ok((*hasher.finalize().as_bytes(), length));
        }
        hasher.update(&buffer[..read]);
        length += read as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p6_an_object_being_published_is_not_evicted() {
        use kiln_core::fake::{FakeCompiler, FakeKernel};
        use kiln_core::{ArtifactStore, Lookup, StoreKey};

        let root = std::env::temp_dir().join(format!("kiln-store-pinned-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let store = DiskStore::open(StoreConfig::at(&root)).expect("a store");
        let key = |number| {
            StoreKey::for_artifact(
                &FakeCompiler::default_key_components(),
                &FakeKernel::new(number).artifact_id(),
                None,
            )
        };
        for number in 0..3 {
            store.put(&key(number), None, &[number as u8 + 1; 100], Duration::ZERO);
        }
        let read = store.record(&key(1)).expect("stored").object;
        // What a publisher holds while it writes the object and its records.
        let pin = store
            .inner
            .locks
            .acquire(object_slot(&read), Mode::Shared, None)
            .expect("lock")
            .expect("free");
        let nothing = Limits {
            max_bytes: 0,
            max_entries: 0,
        };
        let report = store.collect(nothing, &mut |_| {}).expect("collects");
        assert_eq!(report.evicted, 2);
        assert_eq!(report.busy, 1);
        drop(pin);
        assert!(matches!(store.lookup(&key(1)), Lookup::Hit { .. }));
        assert_eq!(
            store
                .collect(nothing, &mut |_| {})
                .expect("collects")
                .evicted,
            1
        );
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn older_accesses_fall_in_later_buckets() {
        let now = SystemTime::now();
        let bucket = |seconds| age_bucket(now - Duration::from_secs(seconds), now);
        assert_eq!(bucket(0), 0);
        assert!(bucket(60) < bucket(3600));
        assert!(bucket(3600) < bucket(86_400 * 30));
        assert!(bucket(u64::from(u32::MAX) * 1000) < AGE_BUCKETS);
    }
}
