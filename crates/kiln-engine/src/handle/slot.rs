//! One requested kernel, shared by the cache and every handle that names it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use crate::error::KernelError;
use crate::id::ArtifactId;
use crate::target::{CompilationTarget, VariantOf};

/// Where one requested kernel stands: loaded for good, or the failures of
/// its attempts so far.
///
/// The loaded kernel sits in a [`OnceLock`] so that resolving a built kernel
/// is one atomic load on memory every thread only reads: it scales with the
/// number of threads instead of queueing them on a lock.
pub(crate) struct Slot<T: CompilationTarget> {
    pub(crate) id: ArtifactId<VariantOf<T>>,
    pub(crate) loaded: OnceLock<T::Loaded>,
    /// Whether a request asked for it. A kernel only a `get` asked for is not
    /// kept wanted after it fails: that call had its answer. Read and written
    /// under the cache's state lock, so the builder's decision to queue a
    /// failure again cannot miss a request made at the same moment.
    wanted: AtomicBool,
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    /// How many batches tried the kernel and failed.
    attempts: u64,
    latest: Option<KernelError>,
}

impl<T: CompilationTarget> Slot<T> {
    pub(crate) fn new(id: ArtifactId<VariantOf<T>>, wanted: bool) -> Self {
        Self {
            id,
            loaded: OnceLock::new(),
            wanted: AtomicBool::new(wanted),
            failures: Mutex::new(Failures::default()),
        }
    }

    /// Marks the kernel as requested; called under the state lock.
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// Whether a request asked for it; called under the state lock.
    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// How many batches have tried it and failed so far.
    pub(crate) fn failed_attempts(&self) -> u64 {
        self.lock_failures().attempts
    }

    /// The latest failure, if a batch tried the kernel and failed after
    /// `attempts` was read.
    pub(crate) fn failure_since(&self, attempts: u64) -> Option<KernelError> {
        let failures = self.lock_failures();
        if failures.attempts > attempts {
            failures.latest.clone()
        } else {
            None
        }
    }

    /// Whether the latest attempt failed, and none has loaded it since.
    pub(crate) fn has_failed(&self) -> bool {
        self.loaded.get().is_none() && self.lock_failures().latest.is_some()
    }

    /// Records a failed attempt.
    pub(crate) fn fail(&self, error: KernelError) {
        let mut failures = self.lock_failures();
        failures.attempts += 1;
        failures.latest = Some(error);
    }

    fn lock_failures(&self) -> MutexGuard<'_, Failures> {
        // Nothing that can panic runs under this lock; a poisoned one still
        // holds whole values.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
