//! [`DiskStore`]: lookups, puts, claims and explanations against one root.

use std::fs::{self, File, FileTimes, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kiln_core::store::hex;
use kiln_core::{
    ArtifactStore, Claim, ClaimGuard, ClaimWait, Explanation, Generation, KeyComponents, Lookup,
    Miss, StoreKey, StoreOutcome, StoreStatistics,
};

use crate::config::StoreConfig;
use crate::durable;
use crate::error::{Error, Result};
use crate::layout::{LAYOUT, Layout};
use crate::lock::{LockFile, Mode, TARGETS_SLOT, key_slot, object_slot};
use crate::record::{self, KernelHistory, Record, Seen, now_seconds};
use crate::usage::{Usage, UsageFile};

/// How long a reader waits for an object that is being removed.
const PIN_WAIT: Duration = Duration::from_secs(2);
/// An access time this recent is not written again: a hit then costs no
/// write, and least-recently-used order at this grain is all eviction needs.
const ACCESS_GRAIN: Duration = Duration::from_secs(60);
/// How often a store looks whether another process's import replaced
/// content (L10 across processes).
const TOKEN_CHECK: Duration = Duration::from_secs(1);
/// Artifacts at least this large are digested on several threads.
const PARALLEL_DIGEST: usize = 4 << 20;

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
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    pub(crate) evicted: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
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
    /// # Errors
    ///
    /// The root cannot be created or is not a folder, or it holds a store
    /// of another layout.
    pub fn open(config: StoreConfig) -> Result<Self> {
        let layout = Layout::new(config.root.clone());
        let root = layout.root();
        fs::create_dir_all(root).map_err(Error::io("create the store folder", root))?;
        let layout_file = layout.layout_file();
        match fs::read_to_string(&layout_file) {
            Ok(found) if found.trim() == LAYOUT => {}
            Ok(found) => {
                return Err(Error::Layout {
                    root: root.to_path_buf(),
                    found: found.trim().to_owned(),
                    expected: LAYOUT,
                });
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                durable::publish(
                    &layout.staging(),
                    &layout_file,
                    format!("{LAYOUT}\n").as_bytes(),
                    config.durable,
                )
                .map_err(Error::io("write", &layout_file))?;
            }
            Err(error) => return Err(Error::io("read", &layout_file)(error)),
        }
        for folder in [
            layout.objects(),
            layout.records(),
            layout.kernels(),
            layout.staging(),
        ] {
            fs::create_dir_all(&folder).map_err(Error::io("create", &folder))?;
        }
        let lock_path = layout.lock_file();
        let locks = LockFile::open(&lock_path).map_err(Error::io("open", &lock_path))?;
        let usage_path = layout.usage_file();
        let usage = UsageFile::open(&usage_path).map_err(Error::io("open", &usage_path))?;
        let root_token = read_token(&layout.generation_file());
        Ok(Self {
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
            }),
        })
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
        Record::open(&sealed).ok()
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
        let token =
            inner.generation.current() ^ u64::from(std::process::id()) << 32 ^ now_seconds();
        let path = inner.layout.generation_file();
        match durable::publish(
            &inner.layout.staging(),
            &path,
            &token.to_le_bytes(),
            inner.config.durable,
        ) {
            Ok(()) => inner.root_token.store(token, Ordering::Relaxed),
            Err(error) => log::warn!("cannot tell other processes the store changed: {error}"),
        }
    }

    fn read_object(&self, record: &Record) -> Result<Vec<u8>, ObjectMiss> {
        let inner = &self.inner;
        let _pin = match inner.locks.acquire(
            object_slot(&record.object),
            Mode::Shared,
            Some(Instant::now() + PIN_WAIT),
        ) {
            Ok(Some(pin)) => pin,
            Ok(None) => return Err(ObjectMiss::Unreadable("the object stayed locked".into())),
            Err(error) => return Err(ObjectMiss::Unreadable(format!("locking it: {error}"))),
        };
        let path = inner.layout.object(&record.object);
        let file = match File::open(&path) {
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
        if found.len() != record.size {
            return corrupt(
                format!(
                    "the object is {} bytes, its record says {}",
                    found.len(),
                    record.size
                ),
                found,
            );
        }
        let mut bytes = Vec::with_capacity(usize::try_from(record.size).unwrap_or(usize::MAX));
        if let Err(error) = (&file).take(record.size).read_to_end(&mut bytes) {
            return Err(ObjectMiss::Unreadable(format!(
                "reading the object: {error}"
            )));
        }
        if bytes.len() as u64 != record.size {
            return corrupt(
                format!("read {} of {} bytes", bytes.len(), record.size),
                found,
            );
        }
        if digest(&bytes) != record.object {
            return corrupt("the object's digest does not match its name".into(), found);
        }
        touch(&file, &found);
        Ok(bytes)
    }

    /// Removes the object at `digest` if it is still the file `found`
    /// describes and nobody reads it.
    fn remove_object(&self, digest: &[u8; 32], found: &Metadata) {
        let inner = &self.inner;
        let Ok(Some(_alone)) = inner
            .locks
            .acquire(object_slot(digest), Mode::Exclusive, None)
        else {
            return;
        };
        if remove_if_same(&inner.layout.object(digest), found) {
            // Best effort: the counters are estimates between recounts.
            let _ = inner.usage.adjust(&inner.locks, -(found.len() as i64), -1);
        }
    }

    fn note_miss(&self, key: &StoreKey) {
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
        if change(&mut history)
            && let Err(error) =
                durable::publish(&self.inner.layout.staging(), &path, &history.seal(), false)
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
        if registered.contains(components) {
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
                durable::publish(
                    &inner.layout.staging(),
                    &path,
                    &record::seal_targets(&targets),
                    inner.config.durable,
                )?;
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
        let staging = inner.layout.staging();
        let durable = inner.config.durable;
        // Held while the object and its records are published, so eviction
        // cannot take the object between the two (P6).
        let _pin = inner
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
        match fs::metadata(&object_path) {
            Ok(found) if found.len() == size => {
                // The same bytes are already here: content addressing.
                if let Ok(file) = File::open(&object_path) {
                    touch(&file, &found);
                }
            }
            _ => {
                durable::publish(&staging, &object_path, bytes, durable)?;
                written += size;
                new_entries = 1;
            }
        }
        for key in std::iter::once(key).chain(source_key) {
            let sealed = Record::new(key.clone(), object, size, work).seal();
            durable::publish(
                &staging,
                &inner.layout.record(&key.digest()),
                &sealed,
                durable,
            )?;
            written += sealed.len() as u64;
        }
        drop(_pin);
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
}

impl ArtifactStore for DiskStore {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.refresh_generation();
        let counters = &self.inner.counters;
        let record_path = self.inner.layout.record(&key.digest());
        let sealed = match read_small(&record_path) {
            Ok(sealed) => sealed,
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
        let miss = match Record::open(&sealed) {
            Err(defect) => {
                bump(&counters.corrupt, 1);
                Miss::Corrupt {
                    detail: format!("record {}: {defect}", key.subject_text()),
                }
            }
            Ok(record) if record.key != *key => {
                bump(&counters.foreign, 1);
                Miss::ForeignKey {
                    detail: record.key.first_difference(key).map_or_else(
                        || "a record of another key".to_owned(),
                        |difference| difference.to_string(),
                    ),
                }
            }
            Ok(record) => match self.read_object(&record) {
                Ok(bytes) => {
                    bump(&counters.hits, 1);
                    bump(&counters.bytes_read, bytes.len() as u64);
                    return Lookup::Hit {
                        bytes: bytes.len() as u64,
                        artifact: bytes,
                        work: record.work(),
                    };
                }
                Err(ObjectMiss::Unreadable(detail)) => {
                    bump(&counters.unreadable, 1);
                    return Lookup::Miss(Miss::Unreadable { detail });
                }
                Err(ObjectMiss::Absent) => {
                    // Evicted: the record points at nothing.
                    bump(&counters.absent, 1);
                    Miss::Absent
                }
                Err(ObjectMiss::Corrupt { detail, found }) => {
                    bump(&counters.corrupt, 1);
                    self.remove_object(&record.object, &found);
                    Miss::Corrupt {
                        detail: format!("object {}: {detail}", hex(&record.object[..8])),
                    }
                }
            },
        };
        // The record is bad, of another key, or points at nothing: remove it,
        // unless a writer replaced it meanwhile.
        remove_if_unchanged(&record_path, &sealed);
        self.note_miss(key);
        if !matches!(miss, Miss::Absent) {
            log::warn!("kiln store: {miss}; removed, the kernel compiles again");
        }
        Lookup::Miss(miss)
    }

    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        let inner = &self.inner;
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
        let deadline = Instant::now() + inner.config.lock_timeout;
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
        match self.try_put(key, source_key, bytes, work) {
            Ok(written) => {
                bump(&counters.puts, 1);
                bump(&counters.bytes_written, written);
                StoreOutcome::Stored { bytes: written }
            }
            Err(error) => {
                bump(&counters.put_failures, 1);
                log::warn!(
                    "kiln store: cannot store {} in {}: {error}",
                    key.subject_text(),
                    self.root().display()
                );
                StoreOutcome::Failed {
                    detail: error.to_string(),
                }
            }
        }
    }

    fn remove(&self, key: &StoreKey) {
        let path = self.record_path(key);
        if let Err(error) = fs::remove_file(&path)
            && error.kind() != io::ErrorKind::NotFound
        {
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
            bytes_read: read(&counters.bytes_read),
            bytes_written: read(&counters.bytes_written),
            evicted: read(&counters.evicted),
        }
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

/// Reads a small file whole: one open, one or two reads.
fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(1024);
    File::open(path)?.read_to_end(&mut bytes)?;
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

/// Removes `path` if it still holds exactly `sealed`; a writer may have
/// published a good file there since it was read.
pub(crate) fn remove_if_unchanged(path: &Path, sealed: &[u8]) -> bool {
    if fs::read(path).is_ok_and(|now| now == sealed) {
        return fs::remove_file(path).is_ok();
    }
    false
}

/// Removes `path` if it is still the file `found` describes.
pub(crate) fn remove_if_same(path: &Path, found: &Metadata) -> bool {
    match fs::symlink_metadata(path) {
        Ok(now) if now.dev() == found.dev() && now.ino() == found.ino() => {
            fs::remove_file(path).is_ok()
        }
        _ => false,
    }
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
