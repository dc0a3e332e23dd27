//! Whole-store passes: verify, collect (evict), list and search. Each walks
//! the shard folders one at a time and keeps only counters, so memory stays
//! flat whatever the store holds.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::usage::file_allocation;
use crate::config::StoreConfig;
use crate::disk::{DiskStore, digest};
use crate::durable;
use crate::error::{Error, Result};
use crate::layout::{TREES, digest_from_name, is_hex_name};
use crate::lock::{COLLECT_SLOT, Mode, key_slot, object_slot};
use crate::record::{AnyRecord, BlobRecord, KernelHistory, Record};
use crate::tree::{Folder, Kind, Removal, Status, is_absent};
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
    /// [`VerifyReport::unchecked`]): left as it was.
    #[serde(default)]
    pub unchecked: Vec<(PathBuf, String)>,
}

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

/// Age buckets of eviction: bucket `b` holds ages in `[1.25^b, 1.25^(b+1))`
/// seconds, so 200 buckets span past a century with a fixed, small table.
pub(crate) const AGE_BUCKETS: usize = 200;

pub(crate) fn age_bucket(accessed: SystemTime, now: SystemTime) -> usize {
    let age = now
        .duration_since(accessed)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    ((age + 1.0).ln() / 1.25f64.ln())
        .floor()
        .min((AGE_BUCKETS - 1) as f64) as usize
}

/// Something a pass could not check and left as it was, and why.
pub(crate) type Unchecked = (PathBuf, String);

/// Why a file of a walk was not checked: gone meanwhile (evicted or
/// replaced: nothing to say), or something to report.
enum Skip {
    Gone,
    Unchecked(String),
}

/// What a walk's visit of one file did: `Err` says why it was not checked.
type Visited = Result<(), Skip>;

impl From<String> for Skip {
    fn from(reason: String) -> Self {
        Self::Unchecked(reason)
    }
}

/// Why a name where a file should be, which is a `kind`, was not checked.
fn not_a_file(kind: Kind) -> String {
    format!("{} where a file should be: left alone", kind.describe())
}

/// Why the folder `name` in `parent` could not be entered.
fn why_not_entered(parent: &Folder, name: &OsStr, error: &io::Error) -> String {
    match parent.status(name) {
        Ok(found) if found.kind != Kind::Folder => {
            format!(
                "{} where a folder should be: left alone",
                found.kind.describe()
            )
        }
        _ => format!("cannot be listed: {error}"),
    }
}

/// A store's root as a pass holds it: the folder, reached by its
/// descriptor, and its path, by which reports name what they found.
struct StoreRoot<'a> {
    folder: Folder,
    path: &'a Path,
}

impl StoreRoot<'_> {
    /// Calls `visit` with the shard folder, name and path of every file of
    /// `tree` (`objects`, `records`, `kernels`), one shard at a time. Only
    /// folders and files named as the store names them are entered or
    /// visited, and nothing is followed ([`crate::tree`]); what it cannot
    /// enter, what is not the store's, and what `visit` could not check
    /// goes to `unchecked`.
    fn walk(
        &self,
        tree: &str,
        unchecked: &mut Vec<Unchecked>,
        visit: &mut dyn FnMut(&Folder, &str, &Path) -> Visited,
    ) {
        let name_length = TREES
            .iter()
            .find(|(name, _)| *name == tree)
            .map_or(64, |(_, length)| *length);
        let tree_path = self.path.join(tree);
        if let Some(tree_folder) = enter(&self.folder, OsStr::new(tree), &tree_path, unchecked) {
            walk_level(
                &tree_folder,
                &tree_path,
                &[2, 1, name_length],
                unchecked,
                visit,
            );
        }
    }

    /// As [`walk`](Self::walk), handing `visit` the shard folder, the name
    /// and the whole of each file, read as [`read_regular`] reads it.
    fn walk_sealed(
        &self,
        tree: &str,
        unchecked: &mut Vec<Unchecked>,
        visit: &mut dyn FnMut(&Folder, &str, Vec<u8>) -> Visited,
    ) {
        self.walk(tree, unchecked, &mut |folder, name, _| {
            visit(folder, name, read_regular(folder, name)?)
        });
    }

    /// The `objects` folder for [`object_status`]; `None` when it cannot be
    /// opened, which makes every object's state unknown, never gone.
    fn objects(&self) -> Option<Folder> {
        self.folder.folder(OsStr::new("objects")).ok()
    }
}

/// Walks `folder` at `path`, whose names are `lengths[0]` hex digits: the
/// shard folders of the levels left, then the files of the last one, which
/// go to `visit`. One folder of each level is open at a time.
fn walk_level(
    folder: &Folder,
    path: &Path,
    lengths: &[usize],
    unchecked: &mut Vec<Unchecked>,
    visit: &mut dyn FnMut(&Folder, &str, &Path) -> Visited,
) {
    let Some((&length, deeper)) = lengths.split_first() else {
        return;
    };
    let names = folder.names().unwrap_or_else(|error| {
        unchecked.push((path.to_path_buf(), format!("cannot be listed: {error}")));
        Vec::new()
    });
    for name in names {
        let inner_path = path.join(&name);
        let Some(text) = name.to_str().filter(|text| is_hex_name(text, length)) else {
            let why = "not a name the store gives: left alone".to_owned();
            unchecked.push((inner_path, why));
            continue;
        };
        if deeper.is_empty() {
            if let Err(Skip::Unchecked(why)) = visit(folder, text, &inner_path) {
                unchecked.push((inner_path, why));
            }
        } else if let Some(inner) = enter(folder, &name, &inner_path, unchecked) {
            walk_level(&inner, &inner_path, deeper, unchecked, visit);
        }
    }
}

/// The folder `name` in `parent`, at `path`; `None` when it is gone or,
/// said in `unchecked`, cannot be entered.
fn enter(
    parent: &Folder,
    name: &OsStr,
    path: &Path,
    unchecked: &mut Vec<Unchecked>,
) -> Option<Folder> {
    match parent.folder(name) {
        Ok(folder) => Some(folder),
        Err(error) if is_absent(&error) => None,
        Err(error) => {
            unchecked.push((path.to_path_buf(), why_not_entered(parent, name, &error)));
            None
        }
    }
}

/// Calls `visit` with the path and name of every file of `tree` in the
/// store at `root_path`, one folder at a time, as [`StoreRoot::walk`]
/// finds them: for passes that only read. What cannot be walked is logged.
///
/// # Errors
///
/// The store's root cannot be opened.
pub(crate) fn walk_files(
    root_path: &Path,
    tree: &str,
    visit: &mut dyn FnMut(PathBuf, &str),
) -> Result<()> {
    let root = StoreRoot {
        folder: Folder::open(root_path).map_err(Error::io("open", root_path))?,
        path: root_path,
    };
    let mut unchecked = Vec::new();
    root.walk(tree, &mut unchecked, &mut |_, name, path| {
        visit(path.to_path_buf(), name);
        Ok(())
    });
    for (path, why) in unchecked {
        log::warn!("{}: {why}", path.display());
    }
    Ok(())
}

/// The file `name` in `folder`, opened to read without following a link,
/// and what it is; a folder, link or special file there is reported.
fn open_regular(folder: &Folder, name: &str) -> Result<(File, Metadata), Skip> {
    let file = match folder.open_file(OsStr::new(name)) {
        Ok(file) => file,
        Err(error) if is_absent(&error) => return Err(Skip::Gone),
        Err(error) => {
            return Err(match folder.status(OsStr::new(name)) {
                Ok(found) if found.kind != Kind::File => not_a_file(found.kind),
                _ => format!("cannot be read: {error}"),
            }
            .into());
        }
    };
    let found = file
        .metadata()
        .map_err(|error| format!("cannot be read: {error}"))?;
    if !found.is_file() {
        let kind = if found.is_dir() {
            Kind::Folder
        } else {
            Kind::Other
        };
        return Err(not_a_file(kind).into());
    }
    Ok((file, found))
}

/// The whole of the file `name` in `folder`, read as [`open_regular`]
/// opens it.
fn read_regular(folder: &Folder, name: &str) -> Result<Vec<u8>, Skip> {
    let (mut file, found) = open_regular(folder, name)?;
    let mut bytes = Vec::with_capacity(usize::try_from(found.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|error| format!("cannot be read: {error}"))?;
    Ok(bytes)
}

/// What is at the object `digest`'s name, reached from the `objects`
/// folder without following a link. Only `NotFound` says it is gone.
fn object_status(objects: Option<&Folder>, digest: &[u8; 32]) -> io::Result<Status> {
    let name = kiln_engine::store::hex(digest);
    let objects = objects.ok_or_else(|| io::Error::other("the objects folder cannot be opened"))?;
    objects
        .folder(OsStr::new(&name[..2]))?
        .folder(OsStr::new(&name[2..3]))?
        .status(OsStr::new(&name))
}

/// Whether `record`'s object is there, of the size the record says;
/// `false` only when it is gone or of another size, never when it cannot
/// be looked at or is not a file (that is reported, and the record kept).
fn has_object(objects: Option<&Folder>, record: &AnyRecord<'_>) -> Result<bool, Skip> {
    let (object, size) = record.object();
    match object_status(objects, &object) {
        Ok(found) if found.kind == Kind::File => Ok(found.len == size),
        Err(error) if is_absent(&error) => Ok(false),
        Ok(found) => Err(format!("its object is {}: not checked", found.kind.describe()).into()),
        Err(error) => Err(format!("its object cannot be looked at: {error}").into()),
    }
}

/// What `remove` did, or, in a store opened to read only, the failure
/// that says why nothing was removed.
fn unless_read_only(writable: bool, remove: impl FnOnce() -> Removal) -> Removal {
    if writable {
        remove()
    } else {
        Removal::Failed(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the store is opened to read only",
        ))
    }
}

/// Counts a removal in `removed`; a failed one is not checked for lack of
/// a fix, and says why.
fn count(removal: Removal, removed: &mut u64, defect: &str) -> Result<(), Skip> {
    match removal {
        Removal::Removed => {
            *removed += 1;
            Ok(())
        }
        Removal::Changed => Ok(()),
        Removal::Failed(error) => Err(format!("{defect}; cannot be removed: {error}").into()),
    }
}

impl DiskStore {
    /// The store's root, opened for a pass once it is seen to carry the
    /// store's marker: a pass removes only from a store.
    fn open_root(&self) -> Result<StoreRoot<'_>> {
        Ok(StoreRoot {
            folder: crate::skeleton::open_marked(&self.inner.layout)?,
            path: self.inner.layout.root(),
        })
    }

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
        // A store opened to read only reports what is bad, and keeps it.
        let writable = !self.is_read_only();
        let mut unchecked = Vec::new();
        let mut report = VerifyReport {
            staging_removed: self.remove_stale_staging(&root.folder, &mut unchecked),
            ..VerifyReport::default()
        };
        let estimate = inner.usage.read().entries;
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
                Ok(record) => {
                    if has_object(objects.as_ref(), &record)? {
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
                        inner.locks.acquire(key_slot(&key), Mode::Exclusive, None)
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

        let packed = self.verify_packs();
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
        usage.allocated_bytes += self.packed_allocated_bytes();
        usage.entries += packed.objects - packed.bad_objects;
        unchecked.extend(
            packed
                .unchecked
                .into_iter()
                .map(|(name, why)| (root.path.join(name), why)),
        );
        report.unchecked = unchecked;
        if writable && let Err(error) = inner.usage.set(&inner.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }

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
        let Ok(Some(_collecting)) = inner.locks.acquire(COLLECT_SLOT, Mode::Exclusive, None) else {
            return Ok(CollectReport {
                skipped: true,
                ..CollectReport::default()
            });
        };
        // A store that packs moves its small file entries into the packs
        // first (an upgraded store's), so what is counted next is packed.
        let packed_files = self.pack_small_files();
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
        let packed = self.packed_ages(now);
        for (bucket, (bytes, count)) in buckets.iter_mut().zip(packed.buckets) {
            bucket.0 += bytes;
            bucket.1 += count;
        }
        // A pack's files grow frame by frame: what they allocate beyond
        // the packed objects is the records' and histories' share.
        let packed_allocated = self.packed_allocated_bytes();
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
            self.evict_packed(
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
            if let Ok(record) = AnyRecord::open(&sealed)
                && has_object(objects.as_ref(), &record)?
            {
                usage.bytes += sealed.len() as u64;
                usage.allocated_bytes += file_allocation(sealed.len() as u64);
                return Ok(());
            }
            let key = digest_from_name(name).unwrap_or_default();
            // A process holding the key is publishing it now: leave it.
            let Ok(Some(_alone)) = inner.locks.acquire(key_slot(&key), Mode::Exclusive, None)
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
        report.records_removed += self.drop_dangling_packed();
        usage.bytes += self.packed_file_bytes();
        usage.allocated_bytes += self.packed_allocated_bytes();
        usage.entries += packed.objects - packed_evicted;
        report.evicted += packed_evicted;
        report.evicted_bytes += packed_evicted_bytes;
        report.busy += packed_busy;
        report.after = usage;
        report.unchecked = unchecked;
        if let Err(error) = inner.usage.set(&inner.locks, usage) {
            log::warn!("cannot write the recounted usage: {error}");
        }
        Ok(report)
    }

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
        self.each_packed(crate::pack::Kind::Record, &mut |sealed| {
            let Ok(record) = AnyRecord::open(sealed) else {
                return;
            };
            let object = record.object().0;
            let accessed_at = self
                .inner
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
        self.each_packed(crate::pack::Kind::History, &mut |sealed| {
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

    /// Removes staging files of dead processes, and any older than the lock
    /// timeout; returns how many. Only files named as the store names them
    /// (`<pid>-<n>.part`) in the store's own `staging` folder go; anything
    /// else there is reported.
    fn remove_stale_staging(&self, root: &Folder, unchecked: &mut Vec<Unchecked>) -> u64 {
        if self.is_read_only() {
            return 0;
        }
        let timeout = self.inner.config.lock_timeout.max(Duration::from_secs(60));
        sweep_staging(
            root,
            &self.inner.layout.staging(),
            unchecked,
            &|pid, age| durable::is_dead(pid) || age > timeout,
        )
    }
}

/// Removes from the `staging` folder of `root` (at `staging_path`) every
/// staging file for which `stale(pid, age)` holds, reaching nothing through
/// a link; returns how many. What is not a staging file is reported.
pub(crate) fn sweep_staging(
    root: &Folder,
    staging_path: &Path,
    unchecked: &mut Vec<Unchecked>,
    stale: &dyn Fn(libc::pid_t, Duration) -> bool,
) -> u64 {
    let staging = match root.folder(OsStr::new("staging")) {
        Ok(folder) => folder,
        Err(error) if is_absent(&error) => return 0,
        Err(error) => {
            let why = why_not_entered(root, OsStr::new("staging"), &error);
            unchecked.push((staging_path.to_path_buf(), why));
            return 0;
        }
    };
    let names = match staging.names() {
        Ok(names) => names,
        Err(error) => {
            unchecked.push((
                staging_path.to_path_buf(),
                format!("cannot be listed: {error}"),
            ));
            return 0;
        }
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for name in names {
        let path = staging_path.join(&name);
        let Some(pid) = name.to_str().and_then(durable::staging_pid) else {
            unchecked.push((path, "not a name the store gives: left alone".to_owned()));
            continue;
        };
        let found = match staging.status(&name) {
            Ok(found) if found.kind == Kind::File => found,
            Ok(found) => {
                let why = not_a_file(found.kind);
                unchecked.push((path, why));
                continue;
            }
            Err(_) => continue,
        };
        let age = now.duration_since(found.modified).unwrap_or(Duration::ZERO);
        if !stale(pid, age) {
            continue;
        }
        match staging.remove_file(&name) {
            Ok(()) => removed += 1,
            Err(error) if is_absent(&error) => {}
            Err(error) => unchecked.push((path, format!("stale; cannot be removed: {error}"))),
        }
    }
    removed
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

    use std::fs;

    #[test]
    fn p6_an_object_being_published_is_not_evicted() {
        use kiln_engine::fake::{FakeCompiler, FakeKernel};
        use kiln_engine::{ArtifactStore, Lookup, StoreKey};

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
