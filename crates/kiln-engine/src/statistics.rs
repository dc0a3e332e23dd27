//! Counting and recording what the loader does.
//!
//! Three views, for three questions:
//!
//! - A [`StatisticsCollector`] answers "what happened to the kernels *my code*
//!   asked for?". It counts only while one of its [`CollectorScope`] guards is
//!   open on the thread that queues or launches: a kernel registers with the
//!   collector open when it is queued (or, if never queued, when its launch
//!   asks for it), and settles to that same collector whenever its batch
//!   runs — even after the guard closed. A kernel queued with no collector
//!   open counts nowhere; a kernel served from memory is not registered again.
//! - [`BatchRecord`]s and their [`KernelRecord`]s answer "what did each
//!   batch cost?": one record per kernel with its outcome and work time, one
//!   per batch with its wall time and workers.
//! - [`LoaderStatistics`] answers "what has this loader done in total?", as
//!   a plain serializable snapshot.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::WorkerMode;
use crate::diagnostic::Diagnostic;
use crate::error::KernelError;
use crate::id::KernelId;

mod health;

pub use health::Health;
pub(crate) use health::HealthCounters;

/// Counts the kernels registered while one of its scopes is open.
///
/// Cloning shares the counts.
///
/// ```
/// use kiln_engine::StatisticsCollector;
///
/// let collector = StatisticsCollector::new();
/// {
///     let _scope = collector.open();
///     // Kernels queued or launched here count in `collector`.
/// }
/// assert_eq!(collector.counts().registered, 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct StatisticsCollector {
    counters: Arc<Counters>,
}

impl StatisticsCollector {
    /// A collector with every count at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens a scope on this thread: kernels registered until the guard drops
    /// count here. Scopes nest; the innermost open one counts.
    pub fn open(&self) -> CollectorScope {
        let previous = OPEN_COLLECTOR.with(|open| open.replace(Some(self.counters.clone())));
        CollectorScope {
            previous,
            _bound_to_thread: PhantomData,
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> KernelCounts {
        self.counters.snapshot()
    }
}

thread_local! {
    static OPEN_COLLECTOR: RefCell<Option<Arc<Counters>>> = const { RefCell::new(None) };
}

/// An open counting scope of a [`StatisticsCollector`]; dropping it closes
/// the scope and reopens the one it was nested in.
#[must_use = "the scope closes as soon as the guard is dropped"]
#[derive(Debug)]
pub struct CollectorScope {
    previous: Option<Arc<Counters>>,
    // The scope is this thread's: sending the guard elsewhere would close
    // another thread's scope.
    _bound_to_thread: PhantomData<*const ()>,
}

impl Drop for CollectorScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        OPEN_COLLECTOR.with(|open| *open.borrow_mut() = previous);
    }
}

/// The counts of a [`StatisticsCollector`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounts {
    /// Kernels registered: queued, or launched without being queued, with
    /// the collector open. A retry registers again.
    pub registered: u64,
    /// Settled by compiling.
    pub compiled: u64,
    /// Settled by taking an artifact from the store or from a kernel with the
    /// same source.
    pub loaded: u64,
    /// Settled by failing to lower or finalize.
    pub failed: u64,
    /// Obtained, then refused by the device (counted beside its outcome).
    pub refused: u64,
    /// Whose artifact the batch stored (counted beside its outcome).
    pub stored: u64,
    /// Registered and never settled: their queue was dropped.
    pub abandoned: u64,
}

#[derive(Debug, Default)]
struct Counters {
    registered: AtomicU64,
    compiled: AtomicU64,
    loaded: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    stored: AtomicU64,
    abandoned: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> KernelCounts {
        KernelCounts {
            registered: self.registered.load(Ordering::Relaxed),
            compiled: self.compiled.load(Ordering::Relaxed),
            loaded: self.loaded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            abandoned: self.abandoned.load(Ordering::Relaxed),
        }
    }
}

/// A kernel registered with a collector and not settled yet. Dropped
/// unsettled, it counts as abandoned.
#[derive(Debug)]
pub(crate) struct Registration {
    counters: Option<Arc<Counters>>,
}

impl Registration {
    /// Registers a kernel with the collector open on this thread, if any.
    pub(crate) fn register() -> Option<Self> {
        let counters = OPEN_COLLECTOR.with(|open| open.borrow().clone())?;
        counters.registered.fetch_add(1, Ordering::Relaxed);
        Some(Self {
            counters: Some(counters),
        })
    }

    /// Settles the kernel by how it came to have an artifact — compiled,
    /// or taken from the store or from a kernel with the same source — or
    /// by its failure; what its load does next is counted on the returned
    /// value.
    pub(crate) fn settle(mut self, outcome: KernelOutcome) -> Settled {
        let counters = self.counters.take().expect("a registration settles once");
        let counter = match outcome {
            KernelOutcome::Compiled => &counters.compiled,
            KernelOutcome::FromStore | KernelOutcome::Rekeyed => &counters.loaded,
            KernelOutcome::Failed => &counters.failed,
            KernelOutcome::Refused => {
                unreachable!("a kernel settles before the device sees its artifact")
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Settled { counters }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(counters) = &self.counters {
            counters.abandoned.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A settled kernel, on which the batch counts what its load did.
#[derive(Debug)]
pub(crate) struct Settled {
    counters: Arc<Counters>,
}

impl Settled {
    pub(crate) fn refused(&self) {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stored(&self) {
        self.counters.stored.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a kernel of a batch ended: where its artifact came from (the store,
/// a kernel with the same source, or a compile), or why none was loaded.
/// The loader tracks an artifact's origin with it too, so a record, a
/// collector's counts and the loader's totals cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelOutcome {
    /// Its artifact was in the store under its own id.
    FromStore,
    /// It took the artifact of another kernel with identical source, from
    /// the store or from this batch.
    Rekeyed,
    /// It was lowered and finalized.
    Compiled,
    /// It failed to lower or finalize.
    Failed,
    /// Its artifact was obtained and the device refused it.
    Refused,
}

/// What one kernel of a batch cost and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelRecord {
    /// The kernel.
    pub kernel: KernelId,
    /// How it ended.
    pub outcome: KernelOutcome,
    /// Its work: lower + finalize time spent on it, on whichever worker
    /// (remote time for a worker process). The one definition of work that
    /// `kiln warm`, `kiln records` and `kiln stats` show, summed over a
    /// batch's kernels ([`BatchRecord::summed_work`],
    /// [`LoaderStatistics::compile_seconds`]) and saved by a store hit.
    /// Loading its artifact on the device is not in it: that runs on the
    /// loader's thread, not a worker.
    pub work: Duration,
    /// Whether the batch stored its artifact.
    pub stored: bool,
    /// Warnings and remarks of its successful compile.
    pub diagnostics: Vec<Diagnostic>,
    /// The failure message, for a failed or refused kernel.
    pub error: Option<String>,
    /// Whether its failure was the store's memory of an earlier compile,
    /// reported without compiling (P11).
    #[serde(default)]
    pub remembered: bool,
}

/// What one batch did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchRecord {
    /// How many kernels the batch handled.
    pub kernels: usize,
    /// How many workers lowered and finalized at once.
    pub workers: usize,
    /// Whether the workers were threads or processes.
    pub mode: WorkerMode,
    /// Wall time from start to the last load.
    pub wall: Duration,
    /// Whether the batch stored any artifact.
    pub stored: bool,
    /// Each kernel's record, in the batch's order.
    pub records: Vec<KernelRecord>,
    /// Whether it was a background batch, which no caller waited on: the
    /// kernels `load_or` asked for while it answered their fallbacks.
    #[serde(default)]
    pub background: bool,
    /// The loader's health as the batch ended, its own compiles counted.
    #[serde(default)]
    pub health: Health,
    /// Kernels the warm-start profile loaded (L12): store hits of a
    /// profile's load, counted among its [`FromStore`](KernelOutcome::FromStore)
    /// records; 0 for every other batch.
    #[serde(default)]
    pub profile_hits: usize,
}

impl BatchRecord {
    /// The work of every kernel (lower + finalize), added up: what one
    /// worker would have taken.
    pub fn summed_work(&self) -> Duration {
        self.records.iter().map(|record| record.work).sum()
    }

    /// How many kernels ended with `outcome`.
    pub fn count(&self, outcome: KernelOutcome) -> usize {
        self.records
            .iter()
            .filter(|record| record.outcome == outcome)
            .count()
    }
}

/// Cumulative totals of one loader, as plain data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LoaderStatistics {
    /// Kernels found in the store under their own id, the warm-start
    /// profile's among them.
    pub hits: u64,
    /// Of [`hits`](Self::hits), the kernels the warm-start profile loaded
    /// before the program asked for them (L12).
    #[serde(default)]
    pub profile_hits: u64,
    /// Kernels not found in the store under their own id.
    pub misses: u64,
    /// Kernels lowered and finalized.
    pub compiled: u64,
    /// Kernels that took another kernel's artifact by identical source.
    pub rekeyed: u64,
    /// Kernels that failed to lower or finalize, remembered failures
    /// included.
    pub failed: u64,
    /// Failures the store remembered, reported without compiling (P11).
    #[serde(default)]
    pub remembered: u64,
    /// Artifacts the device refused.
    pub refused: u64,
    /// Artifacts written to the store.
    pub stored: u64,
    /// Store writes that failed (the kernels still loaded).
    pub store_errors: u64,
    /// Bytes read from the store.
    pub bytes_read: u64,
    /// Bytes written to the store.
    pub bytes_written: u64,
    /// Seconds spent lowering and finalizing, summed over workers.
    pub compile_seconds: f64,
    /// Seconds of compiling the store hits spared, as recorded when stored.
    pub saved_seconds: f64,
    /// What a readiness probe reads: background compiles, fallback loads,
    /// compiles a caller waited on.
    #[serde(default)]
    pub health: Health,
}

impl LoaderStatistics {
    /// Adds `other`'s totals to these (its health left out): a loader's
    /// own batches and its background batches' together.
    pub(crate) fn add(&mut self, other: &Self) {
        self.hits += other.hits;
        self.profile_hits += other.profile_hits;
        self.misses += other.misses;
        self.compiled += other.compiled;
        self.rekeyed += other.rekeyed;
        self.failed += other.failed;
        self.remembered += other.remembered;
        self.refused += other.refused;
        self.stored += other.stored;
        self.store_errors += other.store_errors;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.compile_seconds += other.compile_seconds;
        self.saved_seconds += other.saved_seconds;
    }

    pub(crate) fn count_failure(&mut self, error: &KernelError) {
        match error.failure {
            crate::error::Failure::Refused(_) => self.refused += 1,
            _ => self.failed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // S1
    #[test]
    fn a_scope_counts_only_while_open() {
        let collector = StatisticsCollector::new();
        assert!(Registration::register().is_none(), "nothing is open yet");
        let registration = {
            let _scope = collector.open();
            Registration::register().expect("a scope is open")
        };
        assert!(
            Registration::register().is_none(),
            "the guard closed the scope"
        );
        // It settles to its collector after the scope closed.
        let _ = registration.settle(KernelOutcome::Compiled);
        let counts = collector.counts();
        assert_eq!((counts.registered, counts.compiled), (1, 1));
    }

    // S1
    #[test]
    fn scopes_nest_and_the_innermost_counts() {
        let outer = StatisticsCollector::new();
        let inner = StatisticsCollector::new();
        let _outer_scope = outer.open();
        {
            let _inner_scope = inner.open();
            let _ = Registration::register()
                .expect("open")
                .settle(KernelOutcome::FromStore);
        }
        let _ = Registration::register()
            .expect("open")
            .settle(KernelOutcome::Failed);
        assert_eq!(inner.counts().loaded, 1);
        assert_eq!(outer.counts().failed, 1);
        assert_eq!(outer.counts().registered, 1);
    }

    // S1
    #[test]
    fn a_registration_dropped_unsettled_is_abandoned() {
        let collector = StatisticsCollector::new();
        let _scope = collector.open();
        drop(Registration::register());
        assert_eq!(collector.counts().abandoned, 1);
    }

    // S4
    #[test]
    fn statistics_are_plain_serializable_data() {
        let statistics = LoaderStatistics {
            hits: 3,
            compile_seconds: 1.5,
            ..LoaderStatistics::default()
        };
        let text = serde_json_roundtrip(&statistics);
        assert_eq!(text, statistics);
    }

    fn serde_json_roundtrip(statistics: &LoaderStatistics) -> LoaderStatistics {
        let text = serde_json::to_string(statistics).expect("serializes");
        serde_json::from_str(&text).expect("deserializes")
    }
}
