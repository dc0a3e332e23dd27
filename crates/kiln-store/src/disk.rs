//! [`DiskStore`]: lookups, puts, claims and explanations against one root.

use std::ffi::OsStr;
use std::fs::{self, File, FileTimes, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kiln_core::store::hex;
use kiln_core::{
    ArtifactStore, Claim, ClaimGuard, ClaimWait, Explanation, Generation, KeyComponents, Lookup,
    Miss, StoreKey, StoreOutcome, StoreStatistics,
};

use crate::config::{MAX_LOCK_TIMEOUT, StoreConfig};
use crate::durable;
use crate::error::{Error, Result, WriteCause, WriteFailure};
use crate::layout::{self, Layout};
use crate::lock::{COLLECT_SLOT, LockFile, Mode, TARGETS_SLOT, key_slot, object_slot};
use crate::record::{self, Checked, KernelHistory, Pointer, Record, Seen, now_seconds};
use crate::tree::{Folder, Removal, relative_names};
use crate::usage::{Usage, UsageFile};

/// How long a publisher waits for an object that is being removed.
const PIN_WAIT: Duration = Duration::from_secs(2);
/// An access time this recent is not written again: a hit then costs no
/// write, and least-recently-used order at this grain is all eviction needs.
const ACCESS_GRAIN: Duration = Duration::from_secs(60);
/// How often a store looks whether another process's import replaced
/// content (L10 across processes).
const TOKEN_CHECK: Duration = Duration::from_secs(1);
/// Artifacts at least this large are digested on several threads.
const PARALLEL_DIGEST: usize = 4 << 20;
/// Artifacts at most this large are also kept inline in their kernel's
/// record, so that a hit opens one file instead of two. Beyond it, the
/// second open is a small part of reading and digesting the bytes, and the
/// copy would cost more disk than it saves time (see
/// `docs/design/store.md`).
pub(crate) const INLINE_MAX: usize = 16 << 10;
/// The largest record file a lookup reads whole; anything longer is not a
/// record the store wrote and reads as damaged.
const RECORD_LIMIT: u64 = INLINE_MAX as u64 + (1 << 20);

/// A verified artifact store in a folder, shared by every process that opens
/// the same root.
///
/// Cloning is cheap and shares everything, counters included.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_core::fake::{FakeKernel, FakeTarget};
/// use kiln_core::{Kernel, KernelLoader};
/// use kiln_store::DiskStore;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // KILN_CACHE_DIR, KILN_CACHE_DISABLE, KILN_CACHE_MAX_SIZE, ...
/// let target = match DiskStore::open_from_env()? {
///     Some(store) => FakeTarget::on_store(Arc::new(store)),
///     None => FakeTarget::storeless(),
/// };
/// let mut loader = KernelLoader::new(target);
/// let kernel = FakeKernel::new(1);
/// loader.load(&kernel, &kernel.artifact_id())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DiskStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: StoreConfig,
    pub(crate) layout: Layout,
    pub(crate) locks: Arc<LockFile>,
    pub(crate) usage: UsageFile,
    pub(crate) counters: Counters,
    generation: Generation,
    /// The root's generation token when this store last looked.
    root_token: AtomicU64,
    /// When to look at the token next, in nanoseconds after `opened`.
    next_token_check: AtomicU64,
    opened: Instant,
    /// Key components this process has written to the targets file.
    registered: Mutex<Vec<KeyComponents>>,
    collecting: AtomicBool,
    /// Whether the store is only read (P5): asked for, or its folder cannot
    /// be written.
    read_only: bool,
    /// The failed writes so far, one entry per cause.
    write_failures: Mutex<Vec<WriteFailure>>,
    /// Whether a put stored something since the end of the last batch.
    wrote_since_batch: AtomicBool,
    /// Whether a collection started on this process's own thread since the
    /// end of the last batch: its recount may have missed the puts made
    /// while it walked.
    collected_since_batch: AtomicBool,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    absent: AtomicU64,
    corrupt: AtomicU64,
    foreign: AtomicU64,
    unreadable: AtomicU64,
    claims_waited: AtomicU64,
    claims_timed_out: AtomicU64,
    puts: AtomicU64,
    put_failures: AtomicU64,
    writes_skipped: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    pub(crate) evicted: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// What a put finds where its object belongs.
enum Here {
    /// Nothing.
    Absent,
    /// The object, whole: open, and as it was found.
    Same(File, Box<Metadata>),
    /// A file that is not the object, or nothing left of what was not a
    /// file.
    Other,
}

/// Why a store is opened read-only.
enum ReadOnly {
    /// [`StoreConfig::read_only`].
    Asked,
    /// Its folder cannot be written.
    Unwritable(io::Error),
}

/// Why an object gave no bytes.
enum ObjectMiss {
    Absent,
    Corrupt {
        detail: String,
        found: Box<Metadata>,
    },
    Unreadable(String),
}

impl DiskStore {
    /// Opens (creating when missing) the store at `config.root`. Opening
    /// another root than before gives a new [`Generation`] (L10).
    ///
    /// A store that cannot be written — [`StoreConfig::read_only`], or a
    /// root on a read-only file system or not writable by this user — is
    /// opened read-only (P5): it serves hits and stores nothing (see
    /// [`is_read_only`](Self::is_read_only)). Found so rather than asked
    /// for, it says so in one warning.
    ///
    /// # Errors
    ///
    /// The root cannot be created or is not a folder, or it holds a store
    /// of another layout; [`Error::NotAStore`] when it holds files and no
    /// store; [`Error::Damaged`] when the store's own files or folders are
    /// damaged beyond what it repairs; [`Error::ReadOnlyEmpty`] when it
    /// holds no store and cannot be written.
    pub fn open(config: StoreConfig) -> Result<Self> {
        let layout = Layout::new(config.root.clone());
        // Decided before anything is created: a store that cannot be
        // written is read as it is.
        let opened_locks = match writable_locks(&config, &layout) {
            Ok(opened_locks) => opened_locks,
            Err(reason) => return Self::open_read_only(config, layout, reason),
        };
        // Adopts only an empty folder or a store, never follows a link
        // below the root, and rebuilds the skeleton's own names.
        crate::skeleton::prepare(&layout, config.durable)?;
        let lock_path = layout.lock_file();
        let locks = match opened_locks
            .map_or_else(|| LockFile::open(&lock_path), |file| Ok(LockFile::of(file)))
        {
            Ok(locks) => locks,
            Err(error) if is_unwritable(&error) => {
                return Self::open_read_only(config, layout, ReadOnly::Unwritable(error));
            }
            Err(error) => return Err(Error::io("open", &lock_path)(error)),
        };
        let usage_path = layout.usage_file();
        let usage = UsageFile::open(&usage_path).map_err(Error::io("open", &usage_path))?;
        Ok(Self::with_parts(config, layout, locks, usage, false))
    }

    /// Opens the store at `layout` to read it only, for `reason`.
    fn open_read_only(config: StoreConfig, layout: Layout, reason: ReadOnly) -> Result<Self> {
        let root = layout.root();
        // The rules of a writable open, without its writes: a folder that
        // holds files and no marker is no store either.
        if !crate::skeleton::inspect(&layout)? {
            return Err(Error::ReadOnlyEmpty {
                root: root.to_path_buf(),
            });
        }
        let usage_path = layout.usage_file();
        let usage =
            UsageFile::open_read_only(&usage_path).map_err(Error::io("open", &usage_path))?;
        match reason {
            ReadOnly::Asked => log::debug!("kiln store: reading {} only", root.display()),
            ReadOnly::Unwritable(error) => log::warn!(
                "kiln store: {} cannot be written ({error}); reading it only: hits are served, \
                 nothing is stored",
                root.display()
            ),
        }
        Ok(Self::with_parts(
            config,
            layout,
            LockFile::in_process(),
            usage,
            true,
        ))
    }

    fn with_parts(
        config: StoreConfig,
        layout: Layout,
        locks: Arc<LockFile>,
        usage: UsageFile,
        read_only: bool,
    ) -> Self {
        let root_token = read_token(&layout.generation_file());
        Self {
            inner: Arc::new(Inner {
                config,
                layout,
                locks,
                usage,
                counters: Counters::default(),
                generation: Generation::fresh(),
                root_token: AtomicU64::new(root_token),
                next_token_check: AtomicU64::new(0),
                opened: Instant::now(),
                registered: Mutex::new(Vec::new()),
                collecting: AtomicBool::new(false),
                read_only,
                write_failures: Mutex::new(Vec::new()),
                wrote_since_batch: AtomicBool::new(false),
                collected_since_batch: AtomicBool::new(false),
            }),
        }
    }

    /// Whether the store only reads (P5): it serves hits, and skips every
    /// write ([`StoreStatistics::writes_skipped`]) and claim. Asked for
    /// with [`StoreConfig::read_only`], or found when its folder cannot be
    /// written.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The writes that failed through this handle and its clones, one
    /// entry per cause, in the order the causes were first seen (P5).
    pub fn write_failures(&self) -> Vec<WriteFailure> {
        self.inner
            .write_failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Counts a failed write under its cause, and logs the first of each
    /// cause: a full disk fails every put of a run, and one line says it.
    fn count_write_failure(&self, error: &io::Error) -> WriteCause {
        let cause = WriteCause::of(error);
        let mut failures = self
            .inner
            .write_failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match failures.iter_mut().find(|failure| failure.cause == cause) {
            Some(failure) => failure.count += 1,
            None => {
                failures.push(WriteFailure {
                    cause,
                    detail: error.to_string(),
                    count: 1,
                });
                log::warn!(
                    "kiln store: cannot write to {}: {cause}: {error}; kernels still load, and \
                     further writes that fail so are only counted",
                    self.root().display()
                );
            }
        }
        cause
    }

    /// Opens the store the `KILN_CACHE_*` variables describe, or `None` when
    /// `KILN_CACHE_DISABLE=1`.
    ///
    /// # Errors
    ///
    /// A variable cannot be read, or the store cannot be opened.
    pub fn open_from_env() -> Result<Option<Self>> {
        StoreConfig::from_env()?.map(Self::open).transpose()
    }

    /// Its settings.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Its root folder.
    pub fn root(&self) -> &Path {
        self.inner.layout.root()
    }

    /// What it holds, as last counted.
    pub fn usage(&self) -> Usage {
        self.inner.usage.read()
    }

    /// The key components of every compiler that stored here.
    pub fn targets(&self) -> Vec<KeyComponents> {
        read_targets(&self.inner.layout.targets_file())
    }

    /// Where the record of `key` lives.
    pub fn record_path(&self, key: &StoreKey) -> PathBuf {
        self.inner.layout.record(&key.digest())
    }

    /// Where the object with digest `digest` lives.
    pub fn object_path(&self, digest: &[u8; 32]) -> PathBuf {
        self.inner.layout.object(digest)
    }

    /// The record stored under `key`, if one is there and whole; its object
    /// is not read.
    pub fn record(&self, key: &StoreKey) -> Option<Record> {
        let sealed = fs::read(self.record_path(key)).ok()?;
        Record::open_any(&sealed).ok().map(|(record, _)| record)
    }

    /// What the store knows of the kernel whose id has digest
    /// `kernel_digest`.
    pub fn history(&self, kernel_digest: u128) -> Option<KernelHistory> {
        let sealed = fs::read(self.inner.layout.kernel(kernel_digest)).ok()?;
        KernelHistory::open(&sealed).ok()
    }

    fn refresh_generation(&self) {
        let inner = &self.inner;
        let now = u64::try_from(inner.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if now < inner.next_token_check.load(Ordering::Relaxed) {
            return;
        }
        inner
            .next_token_check
            .store(now + TOKEN_CHECK.as_nanos() as u64, Ordering::Relaxed);
        let token = read_token(&inner.layout.generation_file());
        if inner.root_token.swap(token, Ordering::Relaxed) != token {
            log::debug!(
                "another process replaced content in {}",
                self.root().display()
            );
            inner.generation.advance();
        }
    }

    /// Moves the generation here and tells other processes to move theirs.
    pub(crate) fn content_replaced(&self) {
        let inner = &self.inner;
        inner.generation.advance();
        if inner.read_only {
            return;
        }
        let token =
            inner.generation.current() ^ u64::from(std::process::id()) << 32 ^ now_seconds();
        let path = inner.layout.generation_file();
        match self.publish(&path, &token.to_le_bytes()) {
            Ok(_) => inner.root_token.store(token, Ordering::Relaxed),
            Err(error) => log::warn!("cannot tell other processes the store changed: {error}"),
        }
    }

    /// The verified bytes of the object `pointer` names.
    ///
    /// No lock: an object file is never changed in place, and a descriptor
    /// keeps reading a file that eviction unlinks, so once the object is
    /// open nothing can tear what is read from it (P6). Eviction can only
    /// take it before it is opened, which the lookup sees as an absent
    /// object.
    fn read_object(&self, pointer: &Pointer) -> Result<Vec<u8>, ObjectMiss> {
        let path = self.inner.layout.object(&pointer.object);
        let file = match open_no_link(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(ObjectMiss::Absent);
            }
            Err(error) => {
                return Err(ObjectMiss::Unreadable(format!(
                    "opening the object: {error}"
                )));
            }
        };
        let found = file
            .metadata()
            .map_err(|error| ObjectMiss::Unreadable(format!("reading the object: {error}")))?;
        let corrupt = |detail: String, found: Metadata| {
            Err(ObjectMiss::Corrupt {
                detail,
                found: Box::new(found),
            })
        };
        if !found.is_file() {
            return Err(ObjectMiss::Unreadable(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        if found.len() == 0 {
            return corrupt("empty object".into(), found);
        }
        if found.len() != pointer.size {
            return corrupt(
                format!(
                    "the object is {} bytes, its record says {}",
                    found.len(),
                    pointer.size
                ),
                found,
            );
        }
        let length = usize::try_from(pointer.size).unwrap_or(usize::MAX);
        let bytes = match read_up_to(&file, length) {
            Ok(bytes) => bytes,
            Err(error) => {
                return Err(ObjectMiss::Unreadable(format!(
                    "reading the object: {error}"
                )));
            }
        };
        if bytes.len() != length {
            return corrupt(format!("read {} of {length} bytes", bytes.len()), found);
        }
        if digest(&bytes) != pointer.object {
            return corrupt("the object's digest does not match its name".into(), found);
        }
        if !self.inner.read_only {
            touch(&file, &found);
        }
        Ok(bytes)
    }

    fn hit(&self, artifact: Vec<u8>, pointer: &Pointer) -> Lookup<Vec<u8>> {
        let counters = &self.inner.counters;
        bump(&counters.hits, 1);
        bump(&counters.bytes_read, artifact.len() as u64);
        Lookup::Hit {
            bytes: artifact.len() as u64,
            artifact,
            work: Duration::from_nanos(pointer.work_nanos),
        }
    }

    /// Removes the object at `digest` if it is still the file `found`
    /// describes and nobody is publishing it.
    fn remove_object(&self, digest: &[u8; 32], found: &Metadata) {
        let inner = &self.inner;
        if inner.read_only {
            return;
        }
        let Ok(Some(_alone)) = inner
            .locks
            .acquire(object_slot(digest), Mode::Exclusive, None)
        else {
            return;
        };
        let path = inner.layout.object(digest);
        let removal = self.remove_at(&path, |folder, name| {
            folder.remove_if_same(name, found.dev(), found.ino())
        });
        if matches!(removal, Removal::Removed) {
            // Best effort: the counters are estimates between recounts.
            let _ = inner.usage.adjust(&inner.locks, -(found.len() as i64), -1);
        }
    }

    /// Removes the store's file at `path` as `remove` decides, in the
    /// folder that holds it, which is reached from a root that carries the
    /// store's marker one name at a time without following a link; `path`
    /// must be named as the store names its entries' files. A link on the
    /// way fails the removal: neither it nor what it points to is touched.
    fn remove_at(&self, path: &Path, remove: impl FnOnce(&Folder, &OsStr) -> Removal) -> Removal {
        let holder = || -> io::Result<(Folder, &OsStr)> {
            let names = relative_names(self.root(), path)?;
            if !layout::is_own_file(&names) {
                return Err(io::Error::other(format!(
                    "{} is not a file of the store",
                    path.display()
                )));
            }
            let (name, folders) = names.split_last().expect("a file of the store has a name");
            let root =
                crate::skeleton::open_marked(&self.inner.layout).map_err(io::Error::other)?;
            Ok((root.descend(folders)?, OsStr::new(*name)))
        };
        match holder() {
            Ok((folder, name)) => remove(&folder, name),
            Err(error) => Removal::Failed(error),
        }
    }

    /// Clears the entry's name at `path` for a file to be published there
    /// when something else stands there: at an entry's name only a file
    /// the store wrote belongs, and a folder there would fail every put of
    /// the entry forever. It is reached as [`remove_at`](Self::remove_at)
    /// reaches it; when a link stands where a folder on the way should be,
    /// nothing is cleared, as publication replaces the link with a folder.
    fn clear_non_file(&self, path: &Path) -> io::Result<()> {
        // The common case, a file or nothing, costs one look by path; what
        // that look saw is only a hint, acted on from descriptors.
        match fs::symlink_metadata(path) {
            Ok(found) if found.is_file() => return Ok(()),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            // A file where a shard folder should be, say: the put fails.
            Err(error) => return Err(error),
        }
        let mut cleared = Ok(false);
        let removal = self.remove_at(path, |folder, name| {
            cleared = folder.clear_for_file(name);
            Removal::Changed
        });
        match (removal, cleared?) {
            (Removal::Failed(error), _) if !is_unreachable(&error) => Err(error),
            (_, true) => {
                log::warn!(
                    "kiln store: {} was not a file; removed to store the entry again",
                    path.display()
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn note_miss(&self, key: &StoreKey) {
        if self.inner.read_only {
            return;
        }
        let Some((name, kernel)) = key.kernel() else {
            return;
        };
        self.update_history(name, kernel, |history| {
            if history.asked.as_ref().is_some_and(|seen| seen.key == *key) {
                return false;
            }
            history.asked = Some(Seen {
                key: key.clone(),
                at: now_seconds(),
            });
            history.held_at_miss = history.stored.clone();
            true
        });
    }

    /// Reads, changes and rewrites a kernel's history. Histories explain
    /// misses and decide nothing, so they are written without syncing and
    /// a lost update between two processes costs only a vaguer explanation.
    fn update_history(
        &self,
        name: &str,
        kernel: u128,
        change: impl FnOnce(&mut KernelHistory) -> bool,
    ) {
        let path = self.inner.layout.kernel(kernel);
        let mut history = fs::read(&path)
            .ok()
            .and_then(|sealed| KernelHistory::open(&sealed).ok())
            .unwrap_or_else(|| KernelHistory {
                name: name.to_owned(),
                digest: kernel,
                stored: None,
                asked: None,
                held_at_miss: None,
            });
        if !change(&mut history) {
            return;
        }
        let sealed = history.seal();
        if let Err(error) = within_file_size_limit(sealed.len() as u64)
            .and_then(|()| durable::publish(&self.inner.layout.staging(), &path, &sealed, false))
        {
            log::debug!("cannot update the history of {name}: {error}");
        }
    }

    fn register_target(&self, components: &KeyComponents) {
        let inner = &self.inner;
        let mut registered = inner
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if registered.contains(components) || inner.read_only {
            return;
        }
        let result = (|| -> io::Result<()> {
            let _guard = inner
                .locks
                .acquire(
                    TARGETS_SLOT,
                    Mode::Exclusive,
                    Some(Instant::now() + PIN_WAIT),
                )?
                .ok_or_else(|| io::Error::other("the targets list stayed locked"))?;
            let path = inner.layout.targets_file();
            let mut targets = read_targets(&path);
            if !targets.contains(components) {
                targets.push(components.clone());
                self.publish(&path, &record::seal_targets(&targets))?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => registered.push(components.clone()),
            Err(error) => log::debug!("cannot register {components} with the store: {error}"),
        }
    }

    pub(crate) fn register(&self, components: &KeyComponents) {
        self.register_target(components);
    }

    fn try_put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> io::Result<u64> {
        if bytes.is_empty() {
            return Err(io::Error::other("an empty artifact is never stored"));
        }
        let inner = &self.inner;
        let object = digest(bytes);
        let size = bytes.len() as u64;
        let records: Vec<(PathBuf, Vec<u8>, bool)> = std::iter::once(key)
            .chain(source_key)
            .map(|key| {
                let record = Record::new(key.clone(), object, size, work);
                let (sealed, inline) = record_file(&record, bytes);
                (inner.layout.record(&key.digest()), sealed, inline)
            })
            .collect();
        // Refused before a byte is written: past the limit, the system
        // would stop the process with SIGXFSZ unless it ignores it.
        let largest = records
            .iter()
            .map(|(_, sealed, _)| sealed.len() as u64)
            .fold(size, u64::max);
        within_file_size_limit(largest)?;
        // Held while the object and its records are published, so eviction
        // cannot take the object between the two (P6).
        let pin = inner
            .locks
            .acquire(
                object_slot(&object),
                Mode::Shared,
                Some(Instant::now() + PIN_WAIT),
            )?
            .ok_or_else(|| io::Error::other("the object stayed locked"))?;
        let object_path = inner.layout.object(&object);
        let mut written = 0;
        let mut new_entries = 0;
        // What this put published, to take back if it cannot finish: a
        // failed put stores nothing, not an object without its records.
        let mut published_object: Option<Metadata> = None;
        let mut published_records: Vec<(&Path, Metadata)> = Vec::new();
        let result = (|| -> io::Result<()> {
            match self.same_object_here(&object_path, &object, size)? {
                Here::Same(file, found) => {
                    // The same bytes are already here: content addressing.
                    touch(&file, &found);
                }
                other => {
                    if matches!(other, Here::Absent) {
                        new_entries = 1;
                    }
                    let file = self.publish(&object_path, bytes)?;
                    written += size;
                    if new_entries == 1 {
                        published_object = file.metadata().ok();
                    }
                }
            }
            for (target, sealed, inline) in &records {
                self.clear_non_file(target)?;
                let file = self.publish(target, sealed)?;
                if let Ok(found) = file.metadata() {
                    published_records.push((target, found));
                }
                if *inline {
                    not_yet_refreshed(&file);
                }
                written += sealed.len() as u64;
            }
            Ok(())
        })();
        drop(pin);
        if let Err(error) = result {
            // Only the files this put published: another writer's record
            // published since stays.
            let same = |found: &Metadata| {
                let (device, inode) = (found.dev(), found.ino());
                move |folder: &Folder, name: &OsStr| folder.remove_if_same(name, device, inode)
            };
            for (target, found) in &published_records {
                self.remove_at(target, same(found));
            }
            // Unless another publisher of the same bytes holds it now.
            if let Some(found) = &published_object
                && let Ok(Some(_alone)) =
                    inner
                        .locks
                        .acquire(object_slot(&object), Mode::Exclusive, None)
            {
                self.remove_at(&object_path, same(found));
            }
            return Err(error);
        }
        inner.wrote_since_batch.store(true, Ordering::Release);
        if let Some((name, kernel)) = key.kernel() {
            self.update_history(name, kernel, |history| {
                history.stored = Some(Seen {
                    key: key.clone(),
                    at: now_seconds(),
                });
                true
            });
        }
        self.register_target(&key.components);
        match inner.usage.adjust(
            &inner.locks,
            i64::try_from(written).unwrap_or(i64::MAX),
            new_entries,
        ) {
            Ok(usage) => self.collect_if_over(usage),
            Err(error) => log::debug!("cannot count a put: {error}"),
        }
        Ok(written)
    }

    /// What is at `path`, where the object with digest `object` and `size`
    /// bytes belongs. A file of the right length is digested before it is
    /// trusted: a bit flipped in place keeps the length, and a put that
    /// trusted it would leave the entry corrupt for every later run (P2).
    /// Anything else than a file there is removed, so the object can be
    /// published in its place.
    fn same_object_here(&self, path: &Path, object: &[u8; 32], size: u64) -> io::Result<Here> {
        let found = match fs::symlink_metadata(path) {
            Ok(found) => found,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Here::Absent),
            Err(error) => return Err(error),
        };
        if !found.is_file() {
            self.clear_non_file(path)?;
            return Ok(Here::Other);
        }
        if found.len() != size {
            return Ok(Here::Other);
        }
        let Ok(file) = File::open(path) else {
            return Ok(Here::Other);
        };
        match file_digest(&file) {
            Ok(found_digest) if found_digest == *object => Ok(Here::Same(file, Box::new(found))),
            Ok(_) => {
                log::warn!(
                    "kiln store: object {} was damaged in place; written again",
                    hex(&object[..8])
                );
                Ok(Here::Other)
            }
            Err(_) => Ok(Here::Other),
        }
    }

    /// Publishes `bytes` at `path` (P3), refusing a file the process's
    /// file size limit would not let it write whole.
    fn publish(&self, path: &Path, bytes: &[u8]) -> io::Result<File> {
        within_file_size_limit(bytes.len() as u64)?;
        durable::publish_open(
            &self.inner.layout.staging(),
            path,
            bytes,
            self.inner.config.durable,
        )
    }

    /// Fills a scratch store with `entries`, as [`put`](ArtifactStore::put)
    /// would with no source keys, only faster: for benchmarks that need a
    /// store of many entries. Returns how many it wrote.
    ///
    /// Nothing of what makes a put safe to share is here: each file is
    /// written in place, without staging, syncing or locks, so a process
    /// reading the store meanwhile could see half a file, and a crash leaves
    /// torn entries (which then read as corrupt). No kernel history is
    /// kept, so misses of these kernels cannot be explained (P9). The
    /// objects and records are those a put writes, so a lookup costs what
    /// it would in a store filled by puts.
    ///
    /// # Errors
    ///
    /// A file could not be written.
    #[doc(hidden)]
    pub fn fill_scratch(
        &self,
        entries: impl IntoIterator<Item = (StoreKey, Vec<u8>)>,
    ) -> io::Result<u64> {
        let inner = &self.inner;
        let mut folders = std::collections::HashSet::new();
        let mut write = |path: &Path, bytes: &[u8]| -> io::Result<File> {
            let folder = path.parent().expect("store files live in folders");
            if !folders.contains(folder) {
                fs::create_dir_all(folder)?;
                folders.insert(folder.to_path_buf());
            }
            let mut file = File::create(path)?;
            io::Write::write_all(&mut file, bytes)?;
            Ok(file)
        };
        let (mut written, mut filled) = (0u64, 0u64);
        let mut components: Vec<KeyComponents> = Vec::new();
        for (key, bytes) in entries {
            if bytes.is_empty() {
                continue;
            }
            let object = digest(&bytes);
            write(&inner.layout.object(&object), &bytes)?;
            let record = Record::new(key.clone(), object, bytes.len() as u64, Duration::ZERO);
            let (sealed, inline) = record_file(&record, &bytes);
            let file = write(&inner.layout.record(&key.digest()), &sealed)?;
            if inline {
                not_yet_refreshed(&file);
            }
            written += (bytes.len() + sealed.len()) as u64;
            filled += 1;
            if !components.contains(&key.components) {
                components.push(key.components);
            }
        }
        for components in &components {
            self.register_target(components);
        }
        inner.usage.adjust(
            &inner.locks,
            i64::try_from(written).unwrap_or(i64::MAX),
            i64::try_from(filled).unwrap_or(i64::MAX),
        )?;
        Ok(filled)
    }

    /// Starts evicting on a thread of its own when `usage` is over a limit,
    /// unless this process already is.
    fn collect_if_over(&self, usage: Usage) {
        let config = &self.inner.config;
        if !config.collects_automatically
            || (usage.bytes <= config.max_bytes && usage.entries <= config.max_entries)
            || self.inner.collecting.swap(true, Ordering::AcqRel)
        {
            return;
        }
        self.inner
            .collected_since_batch
            .store(true, Ordering::Release);
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("kiln-store-collect".into())
            .spawn(move || {
                let limits = crate::Limits::low_water(store.config());
                if let Err(error) = store.collect(limits, &mut |_| {}) {
                    log::warn!("evicting from {}: {error}", store.root().display());
                }
                store.inner.collecting.store(false, Ordering::Release);
            });
        if let Err(error) = spawned {
            log::warn!("cannot start evicting: {error}");
            self.inner.collecting.store(false, Ordering::Release);
        }
    }

    /// Brings the store within its limits before a batch returns, when
    /// this process's puts took it over (P6): a run that fills the store
    /// ends within its limits, where eviction on its own thread alone
    /// could end the process long before it caught up. Waits for a
    /// collection that is running, then evicts down to 90 % of the limits
    /// when still over. A collection that ran on this process's thread
    /// during the batch may have counted before the batch's last puts, so
    /// the store is then recounted (evicting down to the limits only).
    fn hold_limits(&self) {
        let inner = &self.inner;
        let config = &inner.config;
        if inner.read_only
            || !config.collects_automatically
            || !inner.wrote_since_batch.swap(false, Ordering::AcqRel)
        {
            return;
        }
        let deadline = deadline_after(config.lock_timeout);
        while inner.collecting.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Another process collecting holds the slot until it is done.
        drop(
            inner
                .locks
                .acquire(COLLECT_SLOT, Mode::Exclusive, Some(deadline)),
        );
        let recount = inner.collected_since_batch.swap(false, Ordering::AcqRel);
        let usage = self.usage();
        let limits = if usage.bytes > config.max_bytes || usage.entries > config.max_entries {
            crate::Limits::low_water(config)
        } else if recount {
            crate::Limits::of(config)
        } else {
            return;
        };
        match self.collect(limits, &mut |_| {}) {
            Ok(report) if report.skipped => {
                log::debug!("another process is evicting from {}", self.root().display());
            }
            Ok(_) => {}
            Err(error) => log::warn!("evicting from {}: {error}", self.root().display()),
        }
    }
}

impl ArtifactStore for DiskStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.refresh_generation();
        let counters = &self.inner.counters;
        let mut key_buffer = [0u8; 512];
        let encoded_key = record::encode_into(key, &mut key_buffer);
        let encoded_key = encoded_key.as_ref();
        let record_path = self.inner.layout.record(&key.digest());
        // When the object a record names has vanished, the record is read
        // once more: a writer may have replaced it meanwhile (its new object
        // published first, P3), and then the new one is followed; the same
        // record again means the entry was evicted.
        let mut vanished: Option<Vec<u8>> = None;
        let (sealed, miss) = loop {
            let (record_file, record_found, mut sealed) = match read_record(&record_path) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    bump(&counters.absent, 1);
                    self.note_miss(key);
                    return Lookup::Miss(Miss::Absent);
                }
                Err(error) => {
                    bump(&counters.unreadable, 1);
                    return Lookup::Miss(Miss::Unreadable {
                        detail: format!("reading {}: {error}", record_path.display()),
                    });
                }
            };
            if vanished.as_ref() == Some(&sealed) {
                bump(&counters.absent, 1);
                break (sealed, Miss::Absent);
            }
            let pointer = match judge(&sealed, encoded_key, key) {
                Judged::Inline(pointer) => {
                    if !self.inner.read_only {
                        touch_inline(&record_file, &record_found, || {
                            self.inner.layout.object(&pointer.object)
                        });
                    }
                    // The artifact is the start of the record: cut, not copied.
                    sealed.truncate(usize::try_from(pointer.size).unwrap_or(usize::MAX));
                    return self.hit(sealed, &pointer);
                }
                Judged::Pointer(pointer) => pointer,
                Judged::Corrupt(detail) => {
                    bump(&counters.corrupt, 1);
                    break (
                        sealed,
                        Miss::Corrupt {
                            detail: format!("record {}: {detail}", key.subject_text()),
                        },
                    );
                }
                Judged::Foreign(detail) => {
                    bump(&counters.foreign, 1);
                    break (sealed, Miss::ForeignKey { detail });
                }
            };
            match self.read_object(&pointer) {
                Ok(bytes) => return self.hit(bytes, &pointer),
                Err(ObjectMiss::Unreadable(detail)) => {
                    bump(&counters.unreadable, 1);
                    return Lookup::Miss(Miss::Unreadable { detail });
                }
                Err(ObjectMiss::Absent) if vanished.is_none() => vanished = Some(sealed),
                Err(ObjectMiss::Absent) => {
                    bump(&counters.absent, 1);
                    break (sealed, Miss::Absent);
                }
                Err(ObjectMiss::Corrupt { detail, found }) => {
                    bump(&counters.corrupt, 1);
                    self.remove_object(&pointer.object, &found);
                    break (
                        sealed,
                        Miss::Corrupt {
                            detail: format!("object {}: {detail}", hex(&pointer.object[..8])),
                        },
                    );
                }
            }
        };
        // The record is bad, of another key, or points at nothing: remove it,
        // unless a writer replaced it meanwhile.
        if self.inner.read_only {
            if !matches!(miss, Miss::Absent) {
                log::warn!("kiln store: {miss}; the store is read-only, the kernel compiles");
            }
            return Lookup::Miss(miss);
        }
        let removal = self.remove_at(&record_path, |folder, name| {
            folder.remove_if_holds(name, &sealed)
        });
        self.note_miss(key);
        match removal {
            Removal::Failed(error) => {
                log::warn!("kiln store: {miss}; left as it is ({error}), the kernel compiles again")
            }
            _ if !matches!(miss, Miss::Absent) => {
                log::warn!("kiln store: {miss}; removed, the kernel compiles again");
            }
            _ => {}
        }
        Lookup::Miss(miss)
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let inner = &self.inner;
        if inner.read_only {
            // Nothing it compiles is stored, so nobody could wait for it,
            // and it waits for nobody: what others store is read as it
            // lands.
            return Claim::Uncoordinated;
        }
        let slot = key_slot(&key.digest());
        let held = |guard| Claim::Held(ClaimGuard::new(guard));
        match inner.locks.acquire(slot, Mode::Exclusive, None) {
            Ok(Some(guard)) => return held(guard),
            Ok(None) if wait == ClaimWait::Once => return Claim::Busy,
            Ok(None) => {}
            Err(error) => {
                log::warn!("kiln store: cannot lock {}: {error}", key.subject_text());
                return Claim::Uncoordinated;
            }
        }
        bump(&inner.counters.claims_waited, 1);
        let deadline = deadline_after(inner.config.lock_timeout);
        match inner.locks.acquire(slot, Mode::Exclusive, Some(deadline)) {
            Ok(Some(guard)) => held(guard),
            Ok(None) => {
                bump(&inner.counters.claims_timed_out, 1);
                log::warn!(
                    "kiln store: another process held {} for over {:?}; compiling it here too",
                    key.subject_text(),
                    inner.config.lock_timeout
                );
                Claim::Busy
            }
            Err(error) => {
                log::warn!("kiln store: cannot lock {}: {error}", key.subject_text());
                Claim::Uncoordinated
            }
        }
    }

    fn put(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        bytes: &[u8],
        work: Duration,
    ) -> StoreOutcome {
        let counters = &self.inner.counters;
        if self.inner.read_only {
            bump(&counters.writes_skipped, 1);
            return StoreOutcome::Skipped;
        }
        match self.try_put(key, source_key, bytes, work) {
            Ok(written) => {
                bump(&counters.puts, 1);
                bump(&counters.bytes_written, written);
                StoreOutcome::Stored { bytes: written }
            }
            Err(error) => {
                bump(&counters.put_failures, 1);
                let cause = self.count_write_failure(&error);
                log::debug!(
                    "kiln store: cannot store {} in {}: {error}",
                    key.subject_text(),
                    self.root().display()
                );
                StoreOutcome::Failed {
                    detail: format!("{cause}: {error}"),
                }
            }
        }
    }

    fn remove(&self, key: &StoreKey) {
        if self.inner.read_only {
            return;
        }
        let path = self.record_path(key);
        // A file or a link at the record's name goes, never a folder.
        let removal = self.remove_at(&path, |folder, name| Removal::of(folder.remove_file(name)));
        if let Removal::Failed(error) = removal {
            log::warn!("kiln store: cannot remove {}: {error}", path.display());
        }
    }

    fn generation(&self) -> Generation {
        self.inner.generation.clone()
    }

    fn statistics(&self) -> StoreStatistics {
        let counters = &self.inner.counters;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StoreStatistics {
            hits: read(&counters.hits),
            absent: read(&counters.absent),
            corrupt: read(&counters.corrupt),
            foreign: read(&counters.foreign),
            unreadable: read(&counters.unreadable),
            claims_waited: read(&counters.claims_waited),
            claims_timed_out: read(&counters.claims_timed_out),
            puts: read(&counters.puts),
            put_failures: read(&counters.put_failures),
            writes_skipped: read(&counters.writes_skipped),
            bytes_read: read(&counters.bytes_read),
            bytes_written: read(&counters.bytes_written),
            evicted: read(&counters.evicted),
        }
    }

    fn batch_finished(&self) {
        self.hold_limits();
    }

    fn explain(&self, key: &StoreKey) -> Explanation {
        let Some((_, kernel)) = key.kernel() else {
            return Explanation::NeverSeen;
        };
        if let Some(record) = self.record(key)
            && record.key == *key
            && fs::metadata(self.object_path(&record.object)).is_ok()
        {
            return Explanation::Held {
                stored_at: record.stored_at,
            };
        }
        let Some(stored) = self.history(kernel).and_then(|history| history.stored) else {
            return Explanation::NeverSeen;
        };
        match stored.key.first_difference(key) {
            Some(difference) => Explanation::Changed {
                difference,
                stored_at: stored.at,
            },
            None => Explanation::Gone {
                stored_at: stored.at,
            },
        }
    }
}

/// The BLAKE3 digest of `bytes`, on several threads when they are large.
pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    if bytes.len() >= PARALLEL_DIGEST {
        *blake3::Hasher::new()
            .update_rayon(bytes)
            .finalize()
            .as_bytes()
    } else {
        *blake3::hash(bytes).as_bytes()
    }
}

/// Whether the record of `key` carries a copy of its artifact of `size`
/// bytes (inline). Only a kernel's own record does: the warm path looks
/// kernels up by id, and a source record is read only after a miss by id,
/// in a batch that lowers the kernel anyway.
pub(crate) fn is_inlined(key: &StoreKey, size: u64) -> bool {
    key.kernel().is_some() && size <= INLINE_MAX as u64
}

/// The file `record` of `bytes` is published as, and whether it carries
/// them.
fn record_file(record: &Record, bytes: &[u8]) -> (Vec<u8>, bool) {
    if is_inlined(&record.key, record.size) {
        (record.seal_inline(bytes), true)
    } else {
        (record.seal(), false)
    }
}

/// What a record file says to a lookup of `key`.
enum Judged {
    /// The artifact is the start of the file.
    Inline(Pointer),
    /// The artifact is in the object it names.
    Pointer(Pointer),
    /// The record is damaged.
    Corrupt(String),
    /// The record is whole and of another key: the first component that
    /// differs.
    Foreign(String),
}

/// Judges a record file read for `key`, whose bytes are `encoded_key`. The
/// common case, a whole record of this key, is settled without decoding
/// the key the record holds; anything else is decoded to say what is wrong.
fn judge(sealed: &[u8], encoded_key: &[u8], key: &StoreKey) -> Judged {
    match record::check(sealed, encoded_key) {
        Checked::Inline(pointer) => Judged::Inline(pointer),
        Checked::Pointer(pointer) => Judged::Pointer(pointer),
        Checked::Other => match Record::open_any(sealed) {
            Err(defect) => Judged::Corrupt(defect),
            Ok((record, _)) if record.key != *key => {
                Judged::Foreign(record.key.first_difference(key).map_or_else(
                    || "a record of another key".to_owned(),
                    |difference| difference.to_string(),
                ))
            }
            Ok((record, inline)) => {
                let pointer = record.pointer();
                if inline.is_some() {
                    Judged::Inline(pointer)
                } else {
                    Judged::Pointer(pointer)
                }
            }
        },
    }
}

/// Opens a record file and reads it whole: one open, one status, one read.
fn read_record(path: &Path) -> io::Result<(File, Metadata, Vec<u8>)> {
    let file = open_no_link(path)?;
    let found = file.metadata()?;
    if !found.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // One byte past the limit is enough to see that a file is too long.
    let length = usize::try_from(found.len().min(RECORD_LIMIT + 1)).unwrap_or(usize::MAX);
    let bytes = read_up_to(&file, length)?;
    Ok((file, found, bytes))
}

/// Opens the file at `path` to read, refusing a link at its final name
/// (`ELOOP`) in the same single `open` a plain one costs. A link on the way
/// (a shard folder swapped for one) is not looked for here, so a hit still
/// opens one path: what is read through it is verified as any read is, and
/// removals and publications reach their folders without following links.
fn open_no_link(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Reads up to `length` bytes from the start of `file`, fewer only where it
/// ends, into a buffer of exactly that capacity: one `read` call for a
/// whole file, where `Read::read_to_end` adds one to see the end or grows
/// its buffer in steps.
fn read_up_to(file: &File, length: usize) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(length);
    while bytes.len() < length {
        let spare = bytes.spare_capacity_mut();
        // SAFETY: the descriptor is open for the life of `file`, and `spare`
        // is `spare.len()` bytes of writable memory, which `read` only
        // writes.
        let read = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        match usize::try_from(read) {
            Ok(0) => break,
            Ok(read) => {
                // SAFETY: `read` returned how many bytes past the length it
                // wrote, within the capacity.
                unsafe { bytes.set_len(bytes.len() + read) };
            }
            Err(_) => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(bytes)
}

/// Records the access explicitly, as `noatime` mounts would not (P6), at
/// most once per [`ACCESS_GRAIN`].
pub(crate) fn touch(file: &File, found: &Metadata) {
    let now = SystemTime::now();
    let recent = found
        .accessed()
        .ok()
        .and_then(|accessed| now.duration_since(accessed).ok())
        .is_some_and(|age| age < ACCESS_GRAIN);
    if !recent && let Err(error) = file.set_times(FileTimes::new().set_accessed(now)) {
        log::trace!("cannot record an access: {error}");
    }
}

/// Records an access through an inline record (P6), at most once per
/// [`ACCESS_GRAIN`].
///
/// The object's access time stays the entry's one clock for eviction, so a
/// hit through the record sets it, by path. The record's modification time
/// says when a hit through it last did: a record's bytes never change, so
/// that time has nothing else to say, and the record's own access time
/// would not do, as the system may set it on every read. A record is
/// published with the oldest modification time ([`not_yet_refreshed`]), so
/// the first hit after a put always sets the clock.
fn touch_inline(record: &File, found: &Metadata, object: impl FnOnce() -> PathBuf) {
    let now = SystemTime::now();
    let recent = found
        .modified()
        .ok()
        .and_then(|refreshed| now.duration_since(refreshed).ok())
        .is_some_and(|age| age < ACCESS_GRAIN);
    if recent {
        return;
    }
    if let Err(error) = set_accessed(&object(), now) {
        log::trace!("cannot record an access: {error}");
    }
    if let Err(error) = record.set_times(FileTimes::new().set_accessed(now).set_modified(now)) {
        log::trace!("cannot record an access: {error}");
    }
}

/// Marks a freshly published inline record as never having set its
/// object's access time (see [`touch_inline`]).
pub(crate) fn not_yet_refreshed(record: &File) {
    if let Err(error) = record.set_times(FileTimes::new().set_modified(SystemTime::UNIX_EPOCH)) {
        log::trace!("cannot reset a record's time: {error}");
    }
}

/// Sets the access time of the file at `path` to `when`, in one call.
fn set_accessed(path: &Path, when: SystemTime) -> io::Result<()> {
    let since = when
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(io::Error::other)?;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `timespec` is plain data (on some systems with padding
    // fields, hence no literal); all-zero is a valid value.
    let mut times: [libc::timespec; 2] = unsafe { std::mem::zeroed() };
    times[0].tv_sec = libc::time_t::try_from(since.as_secs()).map_err(io::Error::other)?;
    // Below 10^9: fits a `c_long` of any width.
    times[0].tv_nsec = since.subsec_nanos() as libc::c_long;
    // The modification time stays as it is.
    times[1].tv_nsec = libc::UTIME_OMIT;
    // A link at the object's name is left as it is, and its target too.
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: `path` is a NUL-terminated string and `times` two valid
    // `timespec`s, both alive for the call.
    if unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The store's `locks` file opened for writing, or why the store at
/// `layout` is to be opened read-only: asked for, or its `locks` file
/// (when it has none, the nearest folder that exists on the way to its
/// root) cannot be written. `Ok(None)` when it may be written but has no
/// regular `locks` file to keep yet.
///
/// The open that proves a store writable is the one its locks need, so a
/// healthy store opens the file once. It follows no link and keeps only a
/// regular file: opening the store replaces anything else at the name.
fn writable_locks(config: &StoreConfig, layout: &Layout) -> Result<Option<File>, ReadOnly> {
    if config.read_only {
        return Err(ReadOnly::Asked);
    }
    let lock_path = layout.lock_file();
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_path);
    if let Ok(file) = opened
        && file.metadata().is_ok_and(|found| found.is_file())
    {
        return Ok(Some(file));
    }
    let probe = if lock_path.exists() {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&lock_path)
            .map(drop)
    } else {
        let existing = layout
            .root()
            .ancestors()
            .find(|folder| folder.exists())
            .unwrap_or(Path::new("."));
        may_write(existing)
    };
    match probe {
        Err(error) if is_unwritable(&error) => Err(ReadOnly::Unwritable(error)),
        _ => Ok(None),
    }
}

/// Whether this process may create files in `folder`, as the system
/// answers before trying: a read-only file system says so too.
fn may_write(folder: &Path) -> io::Result<()> {
    let path = std::ffi::CString::new(folder.as_os_str().as_bytes())?;
    // SAFETY: `path` is a NUL-terminated string alive for the call.
    if unsafe { libc::access(path.as_ptr(), libc::W_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `error`, met on the way to a name that a look by path reached,
/// says a folder on the way is a link (`ELOOP`, or `ENOTDIR` as
/// `O_DIRECTORY` reports one) or has gone: nothing of the store's stands
/// at the name, and publication replaces the link with a folder.
fn is_unreachable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)
    )
}

/// Whether `error` says the store's folder cannot be written at all, as
/// opposed to a failure of one write.
fn is_unwritable(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EROFS | libc::EACCES | libc::EPERM)
    )
}

/// Refuses a file of `length` bytes that the process's file size limit
/// (`RLIMIT_FSIZE`) would not let it write whole. Past the limit the system
/// sends SIGXFSZ, which stops a process that does not ignore it: the store
/// must not depend on how its host set that signal up (P5).
pub(crate) fn within_file_size_limit(length: u64) -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `limit` is a valid `rlimit` that the call fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
        || length <= limit.rlim_cur
    {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "a file of {length} bytes would pass the process's file size limit of {} bytes",
            limit.rlim_cur
        ),
    ))
}

/// The instant `wait` from now; a wait longer than a clock can add is cut
/// to the longest lock timeout the environment may set.
fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(MAX_LOCK_TIMEOUT))
        .unwrap_or(now)
}

/// The BLAKE3 digest of what `file` holds, read in chunks.
fn file_digest(file: &File) -> io::Result<[u8; 32]> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(file)?;
    Ok(*hasher.finalize().as_bytes())
}

fn read_token(path: &Path) -> u64 {
    fs::read(path)
        .ok()
        .and_then(|bytes| {
            bytes
                .get(..8)
                .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        })
        .unwrap_or(0)
}

pub(crate) fn read_targets(path: &Path) -> Vec<KeyComponents> {
    fs::read(path)
        .ok()
        .and_then(|sealed| record::open_targets(&sealed).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use kiln_core::fake::{FakeCompiler, FakeKernel};

    use super::*;

    fn scratch(test: &str) -> DiskStore {
        let root = std::env::temp_dir().join(format!("kiln-store-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        DiskStore::open(StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root)
        })
        .expect("a store")
    }

    fn kernel_key(number: u32) -> StoreKey {
        StoreKey::for_artifact(
            &FakeCompiler::default_key_components(),
            &FakeKernel::new(number).artifact_id(),
            None,
        )
    }

    fn source_key(number: u32) -> StoreKey {
        StoreKey::for_source(
            &FakeCompiler::default_key_components(),
            &FakeKernel::new(number).artifact_id(),
            None,
            &format!("source {number}"),
        )
    }

    fn hit(store: &DiskStore, key: &StoreKey) -> Vec<u8> {
        match store.lookup(key) {
            Lookup::Hit { artifact, .. } => artifact,
            Lookup::Miss(miss) => panic!("a stored entry missed: {miss}"),
        }
    }

    fn accessed(path: &Path) -> SystemTime {
        fs::metadata(path)
            .and_then(|found| found.accessed())
            .expect("an access time")
    }

    #[test]
    fn a_small_kernel_artifact_travels_in_its_record_and_a_source_record_points() {
        let store = scratch("inline");
        let small = vec![7u8; 4 << 10];
        store.put(&kernel_key(1), Some(&source_key(1)), &small, Duration::ZERO);
        let kernel_record = fs::read(store.record_path(&kernel_key(1))).expect("a record");
        assert!(kernel_record.starts_with(&small), "it carries the bytes");
        let source_record = fs::read(store.record_path(&source_key(1))).expect("a record");
        assert!(Record::open(&source_record).is_ok(), "it points");
        assert_eq!(hit(&store, &kernel_key(1)), small);
        assert_eq!(hit(&store, &source_key(1)), small);

        let large = vec![9u8; INLINE_MAX + 1];
        store.put(&kernel_key(2), None, &large, Duration::ZERO);
        let sealed = fs::read(store.record_path(&kernel_key(2))).expect("a record");
        assert!(Record::open(&sealed).is_ok(), "a large artifact's points");
        assert_eq!(hit(&store, &kernel_key(2)), large);
        let _ = fs::remove_dir_all(store.root());
    }

    #[test]
    fn p6_a_hit_through_a_record_that_carries_the_bytes_moves_its_object_up_once_a_minute() {
        // P6: the object's access time is the entry's clock, whichever
        // file a hit reads.
        let store = scratch("inline-touch");
        store.put(&kernel_key(1), None, b"small artifact", Duration::ZERO);
        let object = store.object_path(&store.record(&kernel_key(1)).expect("stored").object);
        let long_ago = SystemTime::now() - Duration::from_secs(86_400);
        let age = |path: &Path| {
            File::open(path)
                .and_then(|file| file.set_times(FileTimes::new().set_accessed(long_ago)))
                .expect("an access time");
        };
        age(&object);
        hit(&store, &kernel_key(1));
        assert!(accessed(&object) > long_ago, "the first hit after a put");
        age(&object);
        hit(&store, &kernel_key(1));
        assert_eq!(
            accessed(&object),
            long_ago,
            "a second hit within a minute writes nothing"
        );
        let _ = fs::remove_dir_all(store.root());
    }

    #[test]
    fn a_scratch_fill_writes_what_puts_write() {
        let filled = scratch("fill");
        let put = scratch("fill-put");
        let entries = [
            (kernel_key(1), vec![1u8; 100]),
            (kernel_key(2), vec![2u8; 20 << 10]),
        ];
        assert_eq!(filled.fill_scratch(entries.clone()).expect("fills"), 2);
        for (key, bytes) in &entries {
            put.put(key, None, bytes, Duration::ZERO);
            assert_eq!(&hit(&filled, key), bytes);
            let read = |store: &DiskStore| fs::read(store.record_path(key)).expect("a record");
            assert_eq!(read(&filled).len(), read(&put).len());
            assert_eq!(
                filled
                    .record(key)
                    .map(|record| record.pointer())
                    .map(|pointer| pointer.object),
                put.record(key)
                    .map(|record| record.pointer())
                    .map(|pointer| pointer.object)
            );
        }
        assert_eq!(filled.usage(), put.usage());
        assert_eq!(filled.targets(), put.targets());
        let _ = fs::remove_dir_all(filled.root());
        let _ = fs::remove_dir_all(put.root());
    }

    #[test]
    fn p4_a_claim_waits_under_any_lock_timeout_without_overflowing() {
        // P4: a timeout no clock can add to is cut, never a panic.
        let holder = scratch("claim-timeout");
        let waiter = DiskStore::open(StoreConfig {
            lock_timeout: Duration::from_secs(9_300_000_000_000_000_000),
            ..holder.config().clone()
        })
        .expect("a second handle");
        let Claim::Held(guard) = holder.claim(&kernel_key(1), ClaimWait::Patiently) else {
            panic!("the first claim is held");
        };
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(guard);
        });
        assert!(matches!(
            waiter.claim(&kernel_key(1), ClaimWait::Patiently),
            Claim::Held(_)
        ));
        releaser.join().expect("released");
        let _ = fs::remove_dir_all(holder.root());
    }

    #[test]
    fn failed_writes_are_counted_once_per_cause() {
        // P5: one entry, and one warning, per cause; the first detail kept.
        let store = scratch("write-causes");
        for (number, detail) in [(libc::ENOSPC, "first"), (libc::ENOSPC, "second")] {
            let error = io::Error::new(io::Error::from_raw_os_error(number).kind(), detail);
            store.count_write_failure(&error);
        }
        store.count_write_failure(&io::Error::from_raw_os_error(libc::EDQUOT));
        let failures = store.write_failures();
        assert_eq!(
            failures
                .iter()
                .map(|failure| (failure.cause, failure.count, failure.detail.as_str()))
                .collect::<Vec<_>>(),
            [
                (WriteCause::DiskFull, 2, "first"),
                (WriteCause::Quota, 1, "Disk quota exceeded (os error 122)")
            ]
        );
        let _ = fs::remove_dir_all(store.root());
    }
}
