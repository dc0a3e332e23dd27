//! What a cache keeps of its background builds (R2): whether one runs, the
//! health counters of its loader (R3), and the failures reported so far.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashSet;

use crate::error::KernelError;
use crate::id::KernelId;
use crate::statistics::HealthCounters;

/// A cache's background builds: whether one runs, the health counters of
/// its loader, and the failures reported so far.
pub(crate) struct BackgroundBuilds {
    pub(super) running: AtomicBool,
    pub(super) health: Arc<HealthCounters>,
    reported: Mutex<FxHashSet<KernelId>>,
}

impl BackgroundBuilds {
    pub(super) fn new(health: Arc<HealthCounters>) -> Self {
        Self {
            running: AtomicBool::new(false),
            health,
            reported: Mutex::new(FxHashSet::default()),
        }
    }

    /// A background build ended with `failures`: each kernel's first is
    /// reported (logged) once, and its fallback stays.
    pub(super) fn ended(&self, failures: &[KernelError]) {
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        let mut new = 0;
        for failure in failures {
            if reported.insert(failure.kernel.clone()) {
                new += 1;
                log::warn!("{failure}; its fallback stays");
            }
        }
        self.health.background_batch(new);
    }
}
