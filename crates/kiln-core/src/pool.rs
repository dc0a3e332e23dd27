//! The workers that lower and finalize a batch's kernels.
//!
//! Threads are started once per process and size, the first time a batch
//! needs more than one, and shared by every loader of that size: a batch
//! spawns nothing. Jobs are handed out one at a time, so a worker that
//! finishes a cheap kernel takes the next one instead of waiting behind a
//! fixed share — kernels differ by orders of magnitude in compile cost.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;

/// A handle on the shared worker threads of one size.
#[derive(Clone)]
pub(crate) struct WorkerPool {
    parallelism: NonZeroUsize,
    threads: OnceLock<Arc<rayon::ThreadPool>>,
}

impl WorkerPool {
    pub(crate) fn new(parallelism: NonZeroUsize) -> Self {
        Self {
            parallelism,
            threads: OnceLock::new(),
        }
    }

    /// How many workers run `jobs` jobs.
    pub(crate) fn workers_for(&self, jobs: usize) -> usize {
        self.parallelism.get().min(jobs).max(1)
    }

    /// Runs `work` on every job, each worker taking the next job when it
    /// finishes one. `work` must not panic: the loader contains every panic
    /// inside the job.
    pub(crate) fn run<J: Send>(&self, jobs: &mut [J], work: impl Fn(&mut J) + Sync + Send) {
        if self.workers_for(jobs.len()) <= 1 {
            jobs.iter_mut().for_each(work);
            return;
        }
        let threads = self
            .threads
            .get_or_init(|| shared_threads(self.parallelism));
        threads.install(|| jobs.par_iter_mut().with_max_len(1).for_each(work));
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("parallelism", &self.parallelism)
            .field("started", &self.threads.get().is_some())
            .finish()
    }
}

/// The process's pool of `parallelism` threads, started on first use.
fn shared_threads(parallelism: NonZeroUsize) -> Arc<rayon::ThreadPool> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    pools
        .entry(parallelism.get())
        .or_insert_with(|| {
            Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(parallelism.get())
                    .thread_name(|index| format!("kiln-compile-{index}"))
                    .build()
                    .expect("the operating system can start the compile worker threads"),
            )
        })
        .clone()
}
