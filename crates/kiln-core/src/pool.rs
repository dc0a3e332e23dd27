//! The workers that lower and finalize a batch's kernels.
//!
//! Threads are started once per process and size, the first time a batch
//! needs more than one, and shared by every loader of that size: a batch
//! spawns nothing. Jobs are handed out one at a time, so a worker that
//! finishes a cheap kernel takes the next one instead of waiting behind a
//! fixed share — kernels differ by orders of magnitude in compile cost.
//!
//! For a compiler that can finalize in other processes (it has a
//! [`WorkerRecipe`]), each loader also keeps a pool of worker processes,
//! started lazily and shut down with the loader: the threads still lower
//! and schedule, and hand each finalize to an idle process (see
//! [`crate::worker`]).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;

use crate::statistics::WorkerMode;
use crate::worker::{self, ProcessPool, WorkerProcesses, WorkerRecipe};

/// A loader's workers: the shared threads of one size and, for compilers
/// that finalize out of process, its own worker processes.
pub(crate) struct WorkerPool {
    parallelism: NonZeroUsize,
    threads: OnceLock<Arc<rayon::ThreadPool>>,
    /// Threads only, or processes where the compiler and program allow.
    mode: WorkerMode,
    processes: Option<ProcessPool>,
    /// Whether the loader already warned that it found no worker program.
    warned: bool,
}

impl WorkerPool {
    pub(crate) fn new(parallelism: NonZeroUsize) -> Self {
        let mode = match std::env::var(worker::WORKER_MODE_VARIABLE) {
            Ok(value) if value.trim() == "threads" => WorkerMode::Threads,
            Ok(value) if value.trim() == "processes" || value.trim().is_empty() => {
                WorkerMode::Processes
            }
            Ok(value) => {
                log::warn!(
                    "{}={value:?} is neither `threads` nor `processes`; using processes where \
                     the compiler allows",
                    worker::WORKER_MODE_VARIABLE
                );
                WorkerMode::Processes
            }
            Err(_) => WorkerMode::Processes,
        };
        Self {
            parallelism,
            threads: OnceLock::new(),
            mode,
            processes: None,
            warned: false,
        }
    }

    /// Threads only, or worker processes where the compiler allows.
    pub(crate) fn set_mode(&mut self, mode: WorkerMode) {
        self.mode = mode;
        if mode == WorkerMode::Threads {
            self.processes = None;
        }
    }

    /// Readies the worker processes of a compiler with `recipe` (they start
    /// lazily, as jobs need them): `false` when the batch finalizes on
    /// threads (the mode says threads,
    /// the compiler has no recipe, no worker program is found, or a worker
    /// could not start). A pool for another recipe is shut down first.
    pub(crate) fn prepare_processes(&mut self, recipe: Option<WorkerRecipe>) -> bool {
        let Some(recipe) = recipe.filter(|_| self.mode == WorkerMode::Processes) else {
            return false;
        };
        if worker::is_worker_process() {
            return false;
        }
        if self
            .processes
            .as_ref()
            .is_some_and(|pool| *pool.recipe() != recipe)
        {
            self.processes = None;
        }
        if self.processes.is_none() {
            match worker::worker_program() {
                Ok(program) => self.processes = Some(ProcessPool::new(program, recipe)),
                Err(reason) => {
                    if !self.warned {
                        self.warned = true;
                        log::warn!(
                            "{} could compile in worker processes, but {reason}; compiling on \
                             threads of this process",
                            recipe.compiler()
                        );
                    }
                    return false;
                }
            }
        }
        self.processes
            .as_ref()
            .is_some_and(|pool| !pool.is_unavailable())
    }

    /// The worker processes [`prepare_processes`](Self::prepare_processes)
    /// readied.
    pub(crate) fn process_pool(&self) -> Option<&ProcessPool> {
        self.processes.as_ref()
    }

    /// The worker processes now.
    pub(crate) fn worker_processes(&self) -> WorkerProcesses {
        self.processes
            .as_ref()
            .map(ProcessPool::snapshot)
            .unwrap_or_default()
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
            .field("mode", &self.mode)
            .field("processes", &self.processes)
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
