//! What a readiness probe and a dashboard read of a loader: kernels
//! compiling in the background now and the oldest one's age, loads a
//! fallback served, and compiles a caller waited on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A loader's health, as plain data: in
/// [`LoaderStatistics::health`](super::LoaderStatistics::health) and in
/// every [`BatchRecord`](super::BatchRecord), as it stood when the batch
/// ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Kernels waiting for or compiling in a background batch now.
    pub compiling_now: u64,
    /// Seconds since the oldest of them was asked for; 0 when none is.
    pub oldest_compiling_seconds: f64,
    /// Loads that `load_or` answered with the fallback, the asked kernel
    /// not being loaded yet.
    pub fallback_loads: u64,
    /// Kernels compiled in a batch a caller waited on: a `load` or a
    /// `resolve` of a kernel that was not loaded.
    pub request_path_compiles: u64,
    /// Seconds callers waited on the batches that compiled them.
    pub request_path_seconds: f64,
    /// Background batches that ended.
    pub background_batches: u64,
    /// Kernels that failed in a background batch (each reported once).
    pub background_failures: u64,
}

impl Health {
    /// Whether a caller ever waited on a compile: what a deployment that
    /// ships a complete pack expects never to see.
    pub fn request_path_compiled(&self) -> bool {
        self.request_path_compiles > 0
    }
}

/// The counters behind [`Health`], shared by a loader and its background
/// batches' thread.
#[derive(Debug)]
pub(crate) struct HealthCounters {
    epoch: Instant,
    compiling_now: AtomicU64,
    /// Nanoseconds after `epoch` when the oldest kernel compiling now was
    /// asked for, plus one; 0 when none is.
    oldest: AtomicU64,
    fallback_loads: AtomicU64,
    request_path_compiles: AtomicU64,
    request_path_nanos: AtomicU64,
    background_batches: AtomicU64,
    background_failures: AtomicU64,
}

impl Default for HealthCounters {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            compiling_now: AtomicU64::new(0),
            oldest: AtomicU64::new(0),
            fallback_loads: AtomicU64::new(0),
            request_path_compiles: AtomicU64::new(0),
            request_path_nanos: AtomicU64::new(0),
            background_batches: AtomicU64::new(0),
            background_failures: AtomicU64::new(0),
        }
    }
}

impl HealthCounters {
    /// The health now.
    pub(crate) fn snapshot(&self) -> Health {
        let oldest = self.oldest.load(Ordering::Acquire);
        let oldest_compiling_seconds = if oldest == 0 {
            0.0
        } else {
            let since = Duration::from_nanos(oldest - 1);
            self.epoch.elapsed().saturating_sub(since).as_secs_f64()
        };
        Health {
            compiling_now: self.compiling_now.load(Ordering::Acquire),
            oldest_compiling_seconds,
            fallback_loads: self.fallback_loads.load(Ordering::Relaxed),
            request_path_compiles: self.request_path_compiles.load(Ordering::Relaxed),
            request_path_seconds: Duration::from_nanos(
                self.request_path_nanos.load(Ordering::Relaxed),
            )
            .as_secs_f64(),
            background_batches: self.background_batches.load(Ordering::Relaxed),
            background_failures: self.background_failures.load(Ordering::Relaxed),
        }
    }

    /// A load answered by its fallback.
    #[inline]
    pub(crate) fn fallback_load(&self) {
        self.fallback_loads.fetch_add(1, Ordering::Relaxed);
    }

    /// `compiled` kernels compiled in a batch a caller waited `wall` on.
    pub(crate) fn request_path(&self, compiled: u64, wall: Duration) {
        if compiled == 0 {
            return;
        }
        self.request_path_compiles
            .fetch_add(compiled, Ordering::Relaxed);
        let nanos = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
        self.request_path_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// A background batch ended, `failed` of its kernels failing.
    pub(crate) fn background_batch(&self, failed: u64) {
        self.background_batches.fetch_add(1, Ordering::Relaxed);
        self.background_failures
            .fetch_add(failed, Ordering::Relaxed);
    }

    /// How many kernels compile in the background now, and when the oldest
    /// of them was asked for.
    pub(crate) fn set_compiling(&self, count: usize, oldest: Option<Instant>) {
        let oldest = oldest.map_or(0, |oldest| {
            let since = oldest.saturating_duration_since(self.epoch);
            u64::try_from(since.as_nanos())
                .unwrap_or(u64::MAX - 1)
                .saturating_add(1)
        });
        self.oldest.store(oldest, Ordering::Release);
        self.compiling_now
            .store(u64::try_from(count).unwrap_or(u64::MAX), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // R3
    #[test]
    fn r3_health_counts_fallbacks_request_path_compiles_and_the_oldest_age() {
        let counters = HealthCounters::default();
        assert_eq!(counters.snapshot(), Health::default());
        counters.fallback_load();
        counters.fallback_load();
        counters.request_path(0, Duration::from_secs(9));
        counters.request_path(3, Duration::from_millis(1500));
        let asked = Instant::now();
        counters.set_compiling(4, Some(asked));
        std::thread::sleep(Duration::from_millis(20));
        let health = counters.snapshot();
        assert_eq!(health.fallback_loads, 2);
        assert_eq!(health.request_path_compiles, 3);
        assert!((health.request_path_seconds - 1.5).abs() < 1e-9);
        assert_eq!(health.compiling_now, 4);
        assert!(health.oldest_compiling_seconds >= 0.02, "{health:?}");
        counters.set_compiling(0, None);
        assert_eq!(counters.snapshot().oldest_compiling_seconds, 0.0);
    }
}
