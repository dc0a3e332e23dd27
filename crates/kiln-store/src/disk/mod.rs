//! [`DiskStore`]: the store against one root, a composition of rooms. Each
//! room is a type that owns its state and is handed the files (and what it
//! needs of other rooms) as parameters, so each file reads alone; this file
//! composes them (`Inner`) and is the one that knows them all. Every call
//! of the store comes through its methods (`contract` implements the store
//! traits with them).
//!
//! The rooms, the state each owns, and each one's invariant:
//!
//! - **`Files`** (`crate::files`; its methods, one concern a file, in
//!   `read`, `write`, `packed`, `blob`, `removal`, `pack_passes`, and
//!   `open`): the objects and records over files and packs: settings,
//!   layout, the `locks` file, usage, counters, packs, read-only. An entry
//!   is published object first, then its records, each atomically (P3),
//!   and every read verifies what it reads (P2).
//! - **`GenerationWatch`** (`generation`): the generation, the root's token
//!   and when to look at it next. It moves when this process replaced
//!   content, and within a second when another did (L10).
//! - **`KeyClaims`** (`claim`): the causes of failed claims said. One live
//!   holder per key; a holder that stops renewing loses the key when its
//!   lease runs out (P4, P12).
//! - **`History`** (`history`): the misses of this batch not yet written.
//!   Nothing is written on a lookup's path; a miss goes with its put or at
//!   the batch's end (P9).
//! - **`Tally`** (`activity`): this process's counts not merged yet. Each
//!   count reaches the `activity` file once.
//! - **`Targets`** (`targets`): the compilers this process registered. A
//!   compiler that stored is in the `targets` file.
//! - **`Eviction`** (`eviction`): whether this process collects, and what
//!   its batch wrote and collected. One collection at a time per process;
//!   a batch that stored ends within the limits (P6).
//! - **`WriteFailures`** (`write`): failed writes by cause. One entry, and
//!   one warning, per cause (P5).
//!
//! Without state of their own: `batches` (the batch records' file),
//! `footprint`, `access` (access times, the eviction clock, P6), `spread`
//! (a lookup of many keys on up to four threads), `copies` (many puts
//! appended together, which tells history, targets and eviction as this
//! file does) and `scratch` (the `bench` feature: filling a scratch store).

mod access;
mod activity;
mod batches;
mod blob;
mod claim;
mod contract;
mod copies;
mod eviction;
mod footprint;
mod generation;
mod history;
mod open;
mod pack_passes;
mod packed;
mod read;
mod removal;
#[cfg(any(test, feature = "bench"))]
mod scratch;
mod spread;
mod targets;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kiln_engine::store::BlobKey;
use kiln_engine::{
    Claim, ClaimWait, Explanation, KeyComponents, Lookup, Put, StoreKey, StoreOutcome, StoredBatch,
};

use crate::activity::Activity;
use crate::config::StoreConfig;
use crate::error::{Result, WriteFailure};
use crate::files::{Files, bump};
use crate::record::{KernelHistory, Record};
use crate::usage::Usage;
use activity::Tally;
use claim::KeyClaims;
use eviction::Eviction;
use generation::GenerationWatch;
use history::History;
use targets::Targets;
use write::{Published, WriteFailures};

pub(crate) use access::{not_yet_refreshed, touch};
pub use eviction::Limits;
pub(crate) use eviction::{AGE_BUCKETS, age_bucket};
pub use footprint::Footprint;
pub(crate) use pack_passes::PackedVerify;

/// A verified artifact store in a folder, shared by every process that opens
/// the same root.
///
/// Cloning is cheap and shares everything, counters included.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use kiln_engine::fake::{FakeKernel, FakeTarget};
/// use kiln_engine::{Kernel, KernelLoader};
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
    /// The objects and records, over files and packs.
    pub(crate) files: Files,
    /// The generation of its content, shared with other processes.
    generation: GenerationWatch,
    /// Claims of keys across processes, and what was said of failed ones.
    claims: KeyClaims,
    /// Misses not yet written into their kernels' histories.
    history: History,
    /// This process's counts not yet merged into the `activity` file.
    activity: Tally,
    /// Compilers this process has written to the targets file.
    targets: Targets,
    /// Whether this process evicts, and what its batch wrote.
    eviction: Eviction,
    /// The causes of failed writes, one entry per cause.
    write_failures: WriteFailures,
    /// Batch records queued to be kept, and their writer.
    records: batches::Keeper,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle of the process: what it counted since its last
        // batch is not lost, nor the misses it noted, nor the records it
        // queued.
        self.records.flush();
        self.history.write_misses(&self.files);
        self.activity.merge(&self.files);
    }
}

impl DiskStore {
    /// The store over `files`, every other room empty.
    fn compose(files: Files) -> Self {
        Self {
            inner: Arc::new(Inner {
                generation: GenerationWatch::new(&files),
                files,
                claims: KeyClaims::default(),
                history: History::default(),
                activity: Tally::default(),
                targets: Targets::default(),
                eviction: Eviction::default(),
                write_failures: WriteFailures::default(),
                records: batches::Keeper::default(),
            }),
        }
    }

    /// Opens (creating when missing) the store at `config.root`. Opening
    /// another root than before gives a new [`Generation`](kiln_engine::Generation) (L10).
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
    /// of another layout; [`Error::NotAStore`](crate::Error::NotAStore) when it holds files and no
    /// store; [`Error::Damaged`](crate::Error::Damaged) when the store's own files or folders are
    /// damaged beyond what it repairs; [`Error::ReadOnlyEmpty`](crate::Error::ReadOnlyEmpty) when it
    /// holds no store and cannot be written.
    pub fn open(config: StoreConfig) -> Result<Self> {
        // A batch's lookup is spread over threads of the process's own
        // (F11), started now, beside the open, for its first batch; once
        // they have started, one of them reads the home shard's index
        // (every entry of a small store is there) for the first lookup.
        spread::start_helpers();
        let store = Files::open(config).map(Self::compose)?;
        spread::beside(Box::new(store.inner.files.packs.home_opener()));
        Ok(store)
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

    /// Whether the store only reads (P5): it serves hits, and skips every
    /// write ([`StoreStatistics::writes_skipped`](kiln_engine::StoreStatistics::writes_skipped)) and claim. Asked for
    /// with [`StoreConfig::read_only`], or found when its folder cannot be
    /// written.
    pub fn is_read_only(&self) -> bool {
        self.inner.files.read_only
    }

    /// Its settings.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.files.config
    }

    /// Its root folder.
    pub fn root(&self) -> &Path {
        self.inner.files.root()
    }

    /// What it holds, as last counted: entries, bytes held and bytes
    /// allocated (what the size limit compares).
    pub fn usage(&self) -> Usage {
        self.inner.files.usage.read()
    }

    /// Where the record of `key` lives.
    pub fn record_path(&self, key: &StoreKey) -> PathBuf {
        self.inner.files.layout.record(&key.digest())
    }

    /// Where the object with digest `digest` lives.
    pub fn object_path(&self, digest: &[u8; 32]) -> PathBuf {
        self.inner.files.layout.object(digest)
    }

    /// Walks the store's folder, following no link, and says how many
    /// files and folders it holds and what they take on disk. A file or
    /// folder that cannot be looked at is left out.
    pub fn footprint(&self) -> Footprint {
        Footprint::of(self.root())
    }

    /// The key components of every compiler that stored here.
    pub fn targets(&self) -> Vec<KeyComponents> {
        Targets::list(&self.inner.files)
    }

    /// The records of the last batches of every process that used the
    /// store, oldest first; records this build cannot read are left out.
    pub fn kept_batches(&self) -> Vec<StoredBatch> {
        self.inner.records.kept(&self.inner.files)
    }

    /// What the store knows of the kernel whose id has digest
    /// `kernel_digest`.
    pub fn history(&self, kernel_digest: u128) -> Option<KernelHistory> {
        History::of(&self.inner.files, kernel_digest)
    }

    /// What every process that used the store did with it (`kiln stats`),
    /// this one's counts merged first.
    pub fn activity(&self) -> Activity {
        self.inner.activity.totals(&self.inner.files)
    }

    /// Sets the store's activity totals to zero (`kiln stats --zero`),
    /// counting again from now; this process's counts not merged yet are
    /// dropped too.
    ///
    /// # Errors
    ///
    /// The store is read-only, or its `activity` file cannot be written.
    pub fn zero_activity(&self) -> Result<()> {
        self.inner.activity.zero(&self.inner.files)
    }

    /// The bytes of `record`'s object, read without the store's lookup:
    /// nothing is counted, no access time renewed, nothing removed, so
    /// listing or checking a store (`kiln ls`, `kiln verify --recompile`)
    /// changes nothing in it. `None` when the object is missing, is not a
    /// plain file (a link is not followed, a FIFO not waited on), or is not
    /// of the record's length and digest.
    pub fn object_bytes(&self, record: &Record) -> Option<Vec<u8>> {
        self.inner.files.object_bytes(record)
    }

    /// The record stored under `key`, if one is there and whole; its object
    /// is not read.
    pub fn record(&self, key: &StoreKey) -> Option<Record> {
        self.inner.files.record(key)
    }

    /// The writes that failed through this handle and its clones, one
    /// entry per cause, in the order the causes were first seen (P5).
    pub fn write_failures(&self) -> Vec<WriteFailure> {
        self.inner.write_failures.list()
    }
}

/// The rooms' doors the store's own calls go through: each hands the call
/// to its room with the files (and the other rooms) it needs.
impl DiskStore {
    /// The verified bytes stored under `key`, or why there are none:
    /// [`ArtifactStore::lookup`](kiln_engine::ArtifactStore::lookup).
    pub(super) fn find_artifact(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.refresh_generation();
        self.inner.files.find_artifact(key, &|| self.note_miss(key))
    }

    /// Publishes `put`'s bytes under its key and, when given, under
    /// `source_key` (its text's key), then tells the rooms that follow a
    /// put.
    pub(super) fn store_artifact(
        &self,
        put: &Put<'_>,
        source_key: Option<&StoreKey>,
    ) -> StoreOutcome {
        let Put {
            key, bytes, work, ..
        } = *put;
        let files = &self.inner.files;
        if files.read_only {
            bump(&files.counters.writes_skipped, 1);
            return StoreOutcome::Skipped;
        }
        let result = files
            .try_put(key, source_key, bytes, work)
            .map(|published| {
                self.after_put(key, published);
                published.written
            });
        self.count_put(result, || key.subject_text())
    }

    /// What follows a put's publication: this batch wrote, the kernel's
    /// history, the targets list and the usage counters.
    fn after_put(&self, key: &StoreKey, published: Published) {
        self.inner.eviction.wrote();
        // The miss this put follows, written with it: one write.
        self.inner.history.stored(&self.inner.files, key);
        self.register_target(&key.components);
        self.count_usage(published);
    }

    /// Adds what a put `published` to the usage counters, and starts
    /// evicting when that takes the store over a limit (P6).
    pub(super) fn count_usage(&self, published: Published) {
        if let Some(usage) = self.inner.files.count_usage(published) {
            self.collect_if_over(usage);
        }
    }

    /// Removes whatever is stored under `key`:
    /// [`ArtifactStore::remove`](kiln_engine::ArtifactStore::remove).
    pub(super) fn remove_record(&self, key: &StoreKey) {
        self.inner.files.remove_record(key);
    }

    /// The verified bytes of the blob `key`:
    /// [`Blobs::lookup_blob`](kiln_engine::Blobs::lookup_blob).
    pub(super) fn find_blob(&self, key: &BlobKey) -> Lookup<Vec<u8>> {
        self.refresh_generation();
        self.inner.files.find_blob(key)
    }

    /// Publishes `bytes` as the blob `key`:
    /// [`Blobs::put_blob`](kiln_engine::Blobs::put_blob).
    pub(super) fn store_blob(&self, key: &BlobKey, bytes: &[u8]) -> StoreOutcome {
        let files = &self.inner.files;
        if files.read_only {
            bump(&files.counters.writes_skipped, 1);
            return StoreOutcome::Skipped;
        }
        let result = files.try_put_blob(key, bytes).map(|published| {
            self.inner.eviction.wrote();
            self.count_usage(published);
            published.written
        });
        self.count_put(result, || key.to_string())
    }

    pub(super) fn refresh_generation(&self) {
        self.inner.generation.refresh(&self.inner.files);
    }

    /// Moves the generation here and tells other processes to move theirs.
    pub(crate) fn content_replaced(&self) {
        self.inner.generation.content_replaced(&self.inner.files);
    }

    pub(super) fn register_target(&self, components: &KeyComponents) {
        self.inner.targets.register(&self.inner.files, components);
    }

    pub(crate) fn register(&self, components: &KeyComponents) {
        self.register_target(components);
    }

    pub(super) fn claim_key(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.inner.claims.claim(&self.inner.files, key, wait)
    }

    pub(super) fn claim_timeout(&self) -> Duration {
        KeyClaims::timeout(&self.inner.files)
    }

    pub(super) fn claim_holder(&self, key: &StoreKey) -> Option<String> {
        KeyClaims::holder(&self.inner.files, key)
    }

    pub(super) fn keep_batch_record(&self, record: &[u8]) {
        self.inner.records.keep(&self.inner.files, record);
    }

    pub(super) fn count_lookup(&self, key: &StoreKey, found: &Lookup<Vec<u8>>) {
        self.inner.activity.count_lookup(key, found);
    }

    pub(super) fn count_compile(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        work: Duration,
    ) {
        self.inner.activity.count_compile(key, source_key, work);
    }

    pub(super) fn count_blob_lookup(&self, key: &BlobKey, found: &Lookup<Vec<u8>>) {
        self.inner.activity.count_blob_lookup(key, found);
    }

    pub(super) fn count_blob_put(&self, key: &BlobKey, bytes: &[u8]) {
        self.inner.activity.count_blob_put(key, bytes);
    }

    pub(super) fn merge_activity(&self) {
        self.inner.activity.merge(&self.inner.files);
    }

    pub(super) fn explain_key(&self, key: &StoreKey) -> Explanation {
        let files = &self.inner.files;
        History::explain(files, key, || {
            let record = files.record(key)?;
            (record.key == *key && files.holds_object(&record.object)).then_some(record.stored_at)
        })
    }

    pub(super) fn note_miss(&self, key: &StoreKey) {
        self.inner.history.note_miss(&self.inner.files, key);
    }

    pub(super) fn take_miss(&self, key: &StoreKey) -> Option<u64> {
        self.inner.history.take_miss(key)
    }

    pub(super) fn write_misses(&self) {
        self.inner.history.write_misses(&self.inner.files);
    }

    pub(super) fn history_after_put(&self, key: &StoreKey) -> Option<([u8; 16], Vec<u8>)> {
        self.inner.history.after_put(&self.inner.files, key)
    }

    pub(crate) fn update_history(
        &self,
        name: &str,
        kernel: u128,
        change: impl FnOnce(&mut KernelHistory) -> bool,
    ) {
        history::update(&self.inner.files, name, kernel, change);
    }

    /// Starts evicting on a thread of its own when `usage` is over a limit,
    /// unless this process already is.
    pub(super) fn collect_if_over(&self, usage: Usage) {
        let store = self.clone();
        self.inner
            .eviction
            .collect_if_over(self.config(), usage, move || {
                let limits = Limits::low_water(store.config());
                if let Err(error) = store.collect(limits, &mut |_| {}) {
                    log::warn!("evicting from {}: {error}", store.root().display());
                }
            });
    }

    pub(super) fn hold_limits(&self) {
        self.inner
            .eviction
            .hold_limits(&self.inner.files, |limits| {
                self.collect(limits, &mut |_| {})
            });
    }

    pub(super) fn count_put(
        &self,
        result: std::io::Result<u64>,
        subject: impl FnOnce() -> String,
    ) -> StoreOutcome {
        self.inner
            .write_failures
            .count_put(&self.inner.files, result, subject)
    }

    #[cfg(test)]
    pub(super) fn count_write_failure(&self, error: &std::io::Error) -> crate::WriteCause {
        self.inner.write_failures.count(error, self.root())
    }

    pub(super) fn commit_writes(&self) {
        self.inner.write_failures.commit(&self.inner.files);
    }
}
