//! This process's part of the store's [`Activity`]: counted as the loader
//! uses the store, merged into the `activity` file at the end of each
//! batch and when the store is dropped.
//!
//! The store sees lookups, puts and failure memories, not kernels, so
//! kernels are counted from what each call says:
//!
//! - a kernel's lookup that hits is a hit, and saves the work its record
//!   carries; one that misses is pending until the batch ends, so the
//!   lookups a batch repeats for one key (its claim, its wait for another
//!   process) count one miss, and a key another process published
//!   meanwhile counts as a hit only;
//! - a source lookup that hits is a rekeyed kernel (P7);
//! - a put is a compile, unless its source key was found or put earlier
//!   in the batch: then it is a kernel rekeyed onto that artifact;
//! - a failure memory written that holds something is a failure; one read
//!   that holds a failure, for a key the batch then neither compiled nor
//!   failed again, is a failure reported from memory (P11), and no miss.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use kiln_engine::store::{BlobKey, FAILURE_BLOB_KIND, RememberedFailure};
use kiln_engine::{KeySubject, Lookup, StoreKey};

use crate::activity::{Activity, ActivityFile, BackendActivity};
use crate::error::{Error, Result};
use crate::files::Files;
use crate::record::now_seconds;
use crate::walk::digest_from_name;

/// The most keys a batch keeps pending: past it, a miss is counted at once
/// (a program that uses the store without batches never ends one).
const PENDING_LIMIT: usize = 1 << 16;

/// The activity room: what this process counted and has not merged yet.
///
/// **Invariant:** every count reaches the `activity` file once: merged at
/// a batch's end or when the store is dropped, kept in memory while the
/// file cannot be written.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    counts: Activity,
    /// Kernels' keys that missed in this batch, with their backend.
    missed: HashMap<[u8; 32], String>,
    /// Keys whose failure memory was read in this batch and holds a
    /// failure.
    remembered: HashSet<[u8; 32]>,
    /// Source keys found in this batch.
    sources_found: HashSet<[u8; 32]>,
    /// Source keys put in this batch.
    sources_put: HashSet<[u8; 32]>,
    /// The file, once opened.
    file: Option<ActivityFile>,
}

impl State {
    fn backend(&mut self, backend: &str) -> &mut BackendActivity {
        self.counts.backend_mut(backend)
    }

    /// Counts what the batch left pending: its misses, and the failures it
    /// reported from memory.
    fn settle(&mut self) {
        for (key, backend) in std::mem::take(&mut self.missed) {
            if self.remembered.contains(&key) {
                self.backend(&backend).failures_remembered += 1;
            } else {
                self.backend(&backend).misses += 1;
            }
        }
        self.remembered.clear();
        self.sources_found.clear();
        self.sources_put.clear();
    }
}

impl Tally {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Tally {
    /// Counts a lookup of `key` that found `found`.
    pub(crate) fn count_lookup(&self, key: &StoreKey, found: &Lookup<Vec<u8>>) {
        let digest = key.digest();
        let backend = &key.components.backend;
        let mut state = self.state();
        match (&key.subject, found) {
            (KeySubject::Kernel { .. }, Lookup::Hit { work, .. }) => {
                state.missed.remove(&digest);
                let counts = state.backend(backend);
                counts.hits += 1;
                counts.saved_nanos = counts.saved_nanos.saturating_add(nanos(*work));
            }
            (KeySubject::Kernel { .. }, Lookup::Miss(_)) => {
                if state.missed.len() >= PENDING_LIMIT {
                    state.backend(backend).misses += 1;
                } else {
                    state
                        .missed
                        .entry(digest)
                        .or_insert_with(|| backend.clone());
                }
            }
            (KeySubject::Source { .. }, Lookup::Hit { work, .. }) => {
                if state.sources_found.len() < PENDING_LIMIT {
                    state.sources_found.insert(digest);
                }
                let counts = state.backend(backend);
                counts.rekeyed += 1;
                counts.saved_nanos = counts.saved_nanos.saturating_add(nanos(*work));
            }
            (KeySubject::Source { .. }, Lookup::Miss(_)) => {}
        }
    }

    /// Counts a put of `key` (and `source_key`) after `work` of compiling:
    /// a compile, or a kernel rekeyed.
    pub(crate) fn count_compile(
        &self,
        key: &StoreKey,
        source_key: Option<&StoreKey>,
        work: Duration,
    ) {
        let digest = key.digest();
        let backend = &key.components.backend;
        let mut state = self.state();
        state.remembered.remove(&digest);
        let source = source_key.map(StoreKey::digest);
        match source {
            // Found by its source: counted as rekeyed when found.
            Some(source) if state.sources_found.contains(&source) => {
                state.missed.remove(&digest);
            }
            // The artifact of a kernel of the batch with the same text.
            Some(source) if state.sources_put.contains(&source) => {
                state.missed.remove(&digest);
                state.backend(backend).rekeyed += 1;
            }
            _ => {
                if let Some(source) = source
                    && state.sources_put.len() < PENDING_LIMIT
                {
                    state.sources_put.insert(source);
                }
                let counts = state.backend(backend);
                counts.compiles += 1;
                counts.compile_nanos = counts.compile_nanos.saturating_add(nanos(work));
            }
        }
    }

    /// Counts a lookup of the blob `key` that found `found`: a failure
    /// memory read.
    pub(crate) fn count_blob_lookup(&self, key: &BlobKey, found: &Lookup<Vec<u8>>) {
        let (Some(digest), Lookup::Hit { artifact, .. }) = (failure_key(key), found) else {
            return;
        };
        if decode_memory(artifact).is_some_and(|memory| memory.failure.is_some()) {
            let mut state = self.state();
            if state.remembered.len() < PENDING_LIMIT {
                state.remembered.insert(digest);
            }
        }
    }

    /// Counts a put of the blob `key` holding `bytes`: a failure memory
    /// written.
    pub(crate) fn count_blob_put(&self, key: &BlobKey, bytes: &[u8]) {
        let Some(digest) = failure_key(key) else {
            return;
        };
        let mut state = self.state();
        // Compiled again, failed or forgotten: not reported from memory.
        state.remembered.remove(&digest);
        if decode_memory(bytes).is_some_and(|memory| !memory.is_empty()) {
            let backend = state
                .missed
                .get(&digest)
                .cloned()
                .unwrap_or_else(|| "unknown".to_owned());
            state.backend(&backend).failures += 1;
        }
    }

    /// Ends a batch: counts what it left pending and merges this
    /// process's counts into the store's `activity` file. A merge that
    /// cannot be written keeps the counts for the next (P5).
    pub(crate) fn merge(&self, files: &Files) {
        let mut state = self.state();
        state.settle();
        if files.read_only || state.counts.is_zero() {
            return;
        }
        if state.file.is_none() {
            match ActivityFile::open(&files.layout.activity_file()) {
                Ok(file) => state.file = Some(file),
                Err(error) => {
                    // Counts stay in memory; what keeps them out is said once.
                    crate::sealed::report_once(
                        &files.layout.activity_file(),
                        "add to the activity totals in",
                        &error,
                    );
                    return;
                }
            }
        }
        let Some(file) = state.file.as_ref() else {
            return;
        };
        match file.merge(&state.counts, now_seconds()) {
            Ok(()) => state.counts = Activity::default(),
            // A full disk or a limit is said with the other writes it fails.
            Err(error) if error.kind() != std::io::ErrorKind::PermissionDenied => log::debug!(
                "kiln store: cannot add to the activity totals ({error}); kept for the next batch"
            ),
            Err(error) => crate::sealed::report_once(
                &files.layout.activity_file(),
                "add to the activity totals in",
                &error,
            ),
        }
    }

    /// What every process that used the store did with it (`kiln stats`),
    /// this one's counts merged first.
    pub(crate) fn totals(&self, files: &Files) -> Activity {
        self.merge(files);
        ActivityFile::read_at(&files.layout.activity_file())
    }

    /// Sets the store's activity totals to zero (`kiln stats --zero`),
    /// counting again from now; this process's counts not merged yet are
    /// dropped too.
    ///
    /// # Errors
    ///
    /// The store is read-only, or its `activity` file cannot be written.
    pub(crate) fn zero(&self, files: &Files) -> Result<()> {
        let path = files.layout.activity_file();
        if files.read_only {
            return Err(Error::io("zero the activity totals of", &path)(
                std::io::Error::new(
                    std::io::ErrorKind::ReadOnlyFilesystem,
                    "the store is read-only",
                ),
            ));
        }
        let mut state = self.state();
        state.counts = Activity::default();
        let file = ActivityFile::open(&path).map_err(Error::io("open", &path))?;
        file.zero(now_seconds())
            .map_err(Error::io("zero the activity totals of", &path))
    }
}

/// The digest of the key a failure memory named `key` is of; `None` for a
/// blob of another kind.
fn failure_key(key: &BlobKey) -> Option<[u8; 32]> {
    if key.kind != FAILURE_BLOB_KIND {
        return None;
    }
    key.components
        .iter()
        .find(|(name, _)| name == "key")
        .and_then(|(_, value)| digest_from_name(value))
}

fn decode_memory(bytes: &[u8]) -> Option<RememberedFailure> {
    match bincode::serde::decode_from_slice::<RememberedFailure, _>(
        bytes,
        bincode::config::standard(),
    ) {
        Ok((memory, read)) if read == bytes.len() => Some(memory),
        _ => None,
    }
}

fn nanos(work: Duration) -> u64 {
    u64::try_from(work.as_nanos()).unwrap_or(u64::MAX)
}
