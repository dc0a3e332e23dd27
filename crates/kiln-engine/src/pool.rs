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

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use crate::config::{self, WorkerMode};
use crate::worker::{self, ProcessPool, WorkerProcesses, WorkerRecipe};

/// A loader's workers: the shared threads of one size and, for compilers
/// that finalize out of process, its own worker processes.
pub(crate) struct WorkerPool {
    parallelism: NonZeroUsize,
    /// How long one finalize may take in a worker process.
    compile_timeout: Duration,
    threads: OnceLock<Arc<rayon::ThreadPool>>,
    /// Threads only, or processes where the compiler and program allow.
    mode: WorkerMode,
    processes: Option<ProcessPool>,
    /// Whether the loader already warned that it found no worker program.
    warned: bool,
    /// The tail of the last run on several workers (F2).
    last_tail: Mutex<Option<Duration>>,
}

impl WorkerPool {
    /// Workers for `parallelism` jobs at once, finalizing as `mode` allows,
    /// a worker process killed when one finalize passes `compile_timeout`.
    pub(crate) fn new(
        parallelism: NonZeroUsize,
        mode: WorkerMode,
        compile_timeout: Duration,
    ) -> Self {
        Self {
            parallelism,
            compile_timeout,
            threads: OnceLock::new(),
            mode,
            processes: None,
            warned: false,
            last_tail: Mutex::new(None),
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
                Ok(program) => {
                    self.processes = Some(ProcessPool::new(program, recipe, self.compile_timeout));
                }
                Err(reason) => {
                    if !self.warned {
                        self.warned = true;
                        // Once per process, and on standard error when the
                        // program has no logger: a batch on threads is
                        // slower, and one crash of the compiler takes the
                        // program down.
                        crate::config::warn_once(
                            "worker program",
                            "",
                            format!(
                                "{} could compile in worker processes, but {reason}; this \
                                 batch and the next compile on threads of this process",
                                recipe.compiler()
                            ),
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

    /// Starts, in the background, the worker processes a batch of
    /// `missing` kernels to compile will finalize in (F5), unless the batch
    /// compiles nothing, finalizes on threads, or this pool runs already:
    /// a batch the store answers whole starts no process (F11).
    pub(crate) fn start_early(&self, recipe: Option<WorkerRecipe>, missing: usize) {
        if missing == 0 || self.mode != WorkerMode::Processes {
            return;
        }
        if self
            .processes
            .as_ref()
            .is_some_and(|pool| !pool.snapshot().running.is_empty())
        {
            return;
        }
        if let Some(recipe) = recipe {
            worker::start_early(recipe, self.parallelism.get().min(missing));
        }
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

    /// Runs `work` on every job on `workers` workers, in order, each worker
    /// taking the next job when it finishes one, and hands each job to
    /// `done` on the caller's thread as soon as its work is over: the caller
    /// publishes one kernel while the workers compile the next. The jobs
    /// `done` gives back are queued to run `work` again (a kernel that took
    /// its artifact from another on the caller's thread, whose device object
    /// is still to make, F9); the run ends when no job is queued, running
    /// or in `done`. `work` must not panic: the loader contains every panic
    /// inside the job.
    pub(crate) fn run<'j, J: Send>(
        &self,
        jobs: Vec<&'j mut J>,
        workers: usize,
        work: impl Fn(&mut J) + Sync,
        done: impl FnMut(&'j mut J) -> Vec<&'j mut J>,
    ) {
        self.run_with(jobs, workers, false, work, done);
    }

    /// [`run`](Self::run), and `on_pool`: on the pool's threads even with
    /// one worker, for work that makes device objects (F9), which the
    /// caller's thread leaves to the pool however few there are. Without a
    /// thread to start, the caller's runs it.
    pub(crate) fn run_with<'j, J: Send>(
        &self,
        jobs: Vec<&'j mut J>,
        workers: usize,
        on_pool: bool,
        work: impl Fn(&mut J) + Sync,
        mut done: impl FnMut(&'j mut J) -> Vec<&'j mut J>,
    ) {
        let threads = if jobs.is_empty() || workers == 0 || (workers == 1 && !on_pool) {
            None
        } else {
            match self.threads.get() {
                Some(threads) => Some(threads),
                // Not one thread could start: the batch runs on the caller's,
                // and the next batch tries to start the pool again.
                None => shared_threads(self.parallelism)
                    .map(|threads| self.threads.get_or_init(|| threads)),
            }
        };
        let Some(threads) = threads else {
            *self
                .last_tail
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
            let mut queue: VecDeque<&'j mut J> = jobs.into();
            while let Some(job) = queue.pop_front() {
                work(job);
                queue.extend(done(job));
            }
            return;
        };
        let queue = Queue {
            state: Mutex::new(Queued {
                pending: jobs.len(),
                jobs: jobs.into(),
            }),
            more: Condvar::new(),
        };
        let (finished, arrivals) = mpsc::channel();
        // When each worker finished its last job: the batch's tail is the
        // last one's finish less the one before.
        let idle_at: Mutex<Vec<Instant>> = Mutex::new(Vec::with_capacity(workers));
        threads.in_place_scope(|scope| {
            for _ in 0..workers {
                let finished = finished.clone();
                let (work, queue, idle_at) = (&work, &queue, &idle_at);
                scope.spawn(move |_| {
                    let mut last = None;
                    while let Some(job) = queue.next() {
                        work(job);
                        last = Some(Instant::now());
                        if finished.send(job).is_err() {
                            break;
                        }
                    }
                    if let Some(last) = last {
                        idle_at
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .push(last);
                    }
                });
            }
            drop(finished);
            // Should `done` panic, the workers waiting for more stop.
            let _close = Close(&queue);
            for job in arrivals {
                let again = done(job);
                queue.settled(again);
            }
        });
        let mut idle_at = idle_at
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        idle_at.sort();
        let tail = match idle_at.as_slice() {
            [.., second, last] => Some(last.duration_since(*second)),
            _ => None,
        };
        *self
            .last_tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = tail;
    }

    /// Runs `jobs` whose work is a device step alone (a round with nothing
    /// to compile: every kernel came from the store), where it is fastest:
    /// the first two on the caller's thread, timed, then the rest there
    /// too when all of them at the pace of the faster of the two fit in
    /// [`SERIAL_DEVICE_STEPS`], else on as many of the pool's threads as
    /// the work fills (F9 where it pays: a driver's pipeline compile of
    /// milliseconds; a module load of tens of microseconds or a
    /// description stays on one thread, with no thread started or woken).
    /// The pace is never the first step's alone: a driver's first module
    /// load on a fresh context pays its one-time set-up (on an H100, 120
    /// µs against 27 µs for the next), and judged by it 63 loads went to
    /// 6 threads, where they took three times longer than on one. Returns
    /// the workers it used.
    pub(crate) fn run_device_steps<'j, J: Send>(
        &self,
        mut jobs: Vec<&'j mut J>,
        work: impl Fn(&mut J) + Sync,
        mut done: impl FnMut(&'j mut J) -> Vec<&'j mut J>,
    ) -> usize {
        if jobs.is_empty() {
            return 0;
        }
        let mut rest = jobs.split_off(1);
        let started = Instant::now();
        self.run_with(jobs, 1, false, &work, &mut done);
        let mut pace = started.elapsed();
        if !rest.is_empty() {
            let more = rest.split_off(1);
            let started = Instant::now();
            self.run_with(rest, 1, false, &work, &mut done);
            pace = pace.min(started.elapsed());
            rest = more;
        }
        let workers = device_workers(pace, rest.len(), self.parallelism.get());
        log::debug!(
            "device steps at {pace:?} each: {} more on {workers} worker(s)",
            rest.len()
        );
        self.run_with(rest, workers, workers > 1, &work, &mut done);
        workers
    }

    /// The tail of the last run on several workers (F2): when its last
    /// worker finished its last job, less when the worker before it did.
    /// Jobs are handed out one at a time, longest first, so a worker that
    /// runs dry takes the next queued job whoever would have had it; the
    /// tail is what is left of one slow kernel. `None` after a run on one
    /// worker, or one where fewer than two workers took a job.
    pub(crate) fn last_tail(&self) -> Option<Duration> {
        *self
            .last_tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A run's jobs waiting for a worker, and how many are not through `done`.
struct Queue<'j, J> {
    state: Mutex<Queued<'j, J>>,
    /// Signalled when a job is queued again or the last one is through.
    more: Condvar,
}

struct Queued<'j, J> {
    jobs: VecDeque<&'j mut J>,
    /// Jobs queued, running, or on their way through `done`.
    pending: usize,
}

impl<'j, J> Queue<'j, J> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued<'j, J>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next job, waiting while none is queued but some may come back;
    /// `None` once every job is through.
    fn next(&self) -> Option<&'j mut J> {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Some(job);
            }
            if state.pending == 0 {
                return None;
            }
            state = self
                .more
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// One job through `done`, which gave `again` back to run.
    fn settled(&self, again: Vec<&'j mut J>) {
        let mut state = self.lock();
        state.pending = (state.pending + again.len()).saturating_sub(1);
        state.jobs.extend(again);
        drop(state);
        self.more.notify_all();
    }
}

/// Ends a run's queue when dropped: no worker waits for a job that a
/// panicking `done` will never give back.
struct Close<'q, 'j, J>(&'q Queue<'j, J>);

impl<J> Drop for Close<'_, '_, J> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.pending = 0;
        state.jobs.clear();
        drop(state);
        self.0.more.notify_all();
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

/// `done` as [`WorkerPool::run`] takes it: a closure bound once and handed
/// to either of two runs takes its signature from here.
pub(crate) fn as_done<'j, J: 'j, F>(done: F) -> F
where
    F: FnMut(&'j mut J) -> Vec<&'j mut J>,
{
    done
}

/// How long a round's device steps may take on the caller's thread: about
/// what handing them to the pool costs (its threads started or woken, each
/// step's object sent back), so that less work than this is never spread.
pub(crate) const SERIAL_DEVICE_STEPS: Duration = Duration::from_micros(1500);

/// The workers for `left` device steps that take `pace` each: one while
/// they all fit in [`SERIAL_DEVICE_STEPS`], else one more for each such
/// share of work, at most `parallelism`.
pub(crate) fn device_workers(pace: Duration, left: usize, parallelism: usize) -> usize {
    let expected = pace.saturating_mul(u32::try_from(left).unwrap_or(u32::MAX));
    if expected <= SERIAL_DEVICE_STEPS {
        return 1;
    }
    let shares = expected.as_nanos() / SERIAL_DEVICE_STEPS.as_nanos().max(1);
    usize::try_from(shares)
        .unwrap_or(usize::MAX)
        .saturating_add(1)
        .min(parallelism)
        .min(left)
        .max(1)
}

/// The process's pool of `parallelism` threads, started on first use, or
/// `None` when the operating system lets it start none.
fn shared_threads(parallelism: NonZeroUsize) -> Option<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(threads) = pools.get(&parallelism.get()) {
        return Some(threads.clone());
    }
    let threads = Arc::new(start_threads(parallelism)?);
    pools.insert(parallelism.get(), threads.clone());
    Some(threads)
}

/// A pool of `wanted` threads, or of as many as the operating system lets
/// the process start.
///
/// rayon starts a pool's threads all or none: one that cannot start (a
/// process or user thread limit, memory for its stack) fails the whole
/// pool. A compile needs no particular number of threads, so the pool is
/// tried again with at most half as many, and no more than started, until
/// one starts; a pool smaller than asked for, or none at all, is said once
/// per process. The threads of a failed try are joined before the next, so
/// that they no longer count against the limit that stopped it.
fn start_threads(wanted: NonZeroUsize) -> Option<rayon::ThreadPool> {
    let mut trying = wanted.get();
    loop {
        let mut started = Vec::new();
        let attempt = rayon::ThreadPoolBuilder::new()
            .num_threads(trying)
            .thread_name(|index| format!("kiln-compile-{index}"))
            .spawn_handler(|thread| {
                let mut builder = std::thread::Builder::new();
                if let Some(name) = thread.name() {
                    builder = builder.name(name.to_owned());
                }
                if let Some(stack_size) = thread.stack_size() {
                    builder = builder.stack_size(stack_size);
                }
                started.push(builder.spawn(move || thread.run())?);
                Ok(())
            })
            .build();
        match attempt {
            Ok(threads) => {
                if trying < wanted.get() {
                    config::warn_once(
                        "compile worker threads",
                        &wanted.to_string(),
                        format!(
                            "the operating system would not start {wanted} compile worker \
                             threads; compiling on {trying}"
                        ),
                    );
                }
                return Some(threads);
            }
            Err(error) => {
                // A failed build has told the threads it started to stop.
                let n_started = started.len();
                for thread in started {
                    // A worker that panicked has aborted the process already
                    // (rayon's rule), so a join has nothing to report.
                    let _ = thread.join();
                }
                if trying == 1 {
                    config::warn_once(
                        "compile worker threads",
                        "none",
                        format!(
                            "the operating system would not start a compile worker thread \
                             ({error}); compiling on the threads that ask for kernels"
                        ),
                    );
                    return None;
                }
                trying = (trying / 2).min(n_started).max(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    // F11, F9: device steps of microseconds stay on the caller's thread;
    // steps of milliseconds spread over as many workers as they fill.
    #[test]
    fn f11_cheap_device_steps_stay_on_one_thread_and_costly_ones_spread() {
        let micros = Duration::from_micros;
        assert_eq!(
            device_workers(micros(20), 63, 16),
            1,
            "a load of 64 modules"
        );
        assert_eq!(device_workers(micros(1), 255, 16), 1, "256 descriptions");
        assert_eq!(device_workers(Duration::from_millis(3), 46, 16), 16);
        assert_eq!(device_workers(Duration::from_millis(3), 46, 2), 2);
        assert_eq!(device_workers(Duration::from_millis(3), 2, 16), 2);
        assert_eq!(device_workers(micros(100), 63, 16), 5);
        assert_eq!(device_workers(micros(100), 0, 16), 1);
    }

    // F11: a round of store hits whose device steps are cheap runs on the
    // caller's thread alone, every job through `done` once.
    #[test]
    fn f11_a_round_of_cheap_device_steps_starts_no_thread() {
        let pool = WorkerPool::new(
            NonZeroUsize::new(4).expect("4"),
            WorkerMode::Threads,
            Duration::from_secs(1),
        );
        let caller = std::thread::current().id();
        let mut jobs: Vec<(u32, Option<std::thread::ThreadId>)> =
            (0..64).map(|number| (number, None)).collect();
        let mut done = 0;
        let workers = pool.run_device_steps(
            jobs.iter_mut().collect(),
            |job| job.1 = Some(std::thread::current().id()),
            |_| {
                done += 1;
                Vec::new()
            },
        );
        assert_eq!(workers, 1);
        assert_eq!(done, 64);
        assert!(jobs.iter().all(|job| job.1 == Some(caller)));
        assert!(pool.threads.get().is_none(), "no pool started");
    }

    // F11: a first device step that pays a driver's one-time set-up does
    // not send the cheap rest to the pool: the pace is the faster of the
    // first two.
    #[test]
    fn f11_a_slow_first_device_step_alone_spreads_nothing() {
        let pool = WorkerPool::new(
            NonZeroUsize::new(4).expect("4"),
            WorkerMode::Threads,
            Duration::from_secs(1),
        );
        let caller = std::thread::current().id();
        let mut jobs: Vec<(u32, Option<std::thread::ThreadId>)> =
            (0..64).map(|number| (number, None)).collect();
        let workers = pool.run_device_steps(
            jobs.iter_mut().collect(),
            |job| {
                if job.0 == 0 {
                    std::thread::sleep(Duration::from_millis(3));
                }
                job.1 = Some(std::thread::current().id());
            },
            |_| Vec::new(),
        );
        assert_eq!(workers, 1, "63 cheap steps after one slow one");
        assert!(jobs.iter().all(|job| job.1 == Some(caller)));
        assert!(pool.threads.get().is_none(), "no pool started");
    }

    // F9: a job `done` gives back runs on a worker again, and the run
    // waits for it, on several workers as on one.
    #[test]
    fn f9_a_job_given_back_runs_again_before_the_run_ends() {
        let pool = WorkerPool::new(
            NonZeroUsize::new(2).expect("two"),
            WorkerMode::Threads,
            Duration::from_secs(60),
        );
        for workers in [1, 2] {
            // (times worked, times done, thread of the last work)
            let mut jobs: Vec<(u32, u32, Option<std::thread::ThreadId>)> = vec![(0, 0, None); 4];
            let caller = std::thread::current().id();
            pool.run(
                jobs.iter_mut().collect(),
                workers,
                |job| {
                    job.0 += 1;
                    job.2 = Some(std::thread::current().id());
                    std::thread::sleep(Duration::from_millis(2));
                },
                |job| {
                    job.1 += 1;
                    if job.1 < 3 { vec![job] } else { Vec::new() }
                },
            );
            for job in &jobs {
                assert_eq!((job.0, job.1), (3, 3), "on {workers} workers");
                if workers > 1 {
                    assert_ne!(job.2, Some(caller), "the work ran on a worker");
                }
            }
        }
    }

    // F9: device work goes to the pool's threads even when one job, on
    // one worker, is all there is; `run` keeps such a run on the caller's.
    #[test]
    fn f9_a_run_on_the_pool_of_one_job_runs_on_a_pool_thread() {
        let pool = WorkerPool::new(
            NonZeroUsize::new(2).expect("two"),
            WorkerMode::Threads,
            Duration::from_secs(60),
        );
        let caller = std::thread::current().id();
        let mut on_pool = [None];
        pool.run_with(
            on_pool.iter_mut().collect(),
            1,
            true,
            |job| *job = Some(std::thread::current().id()),
            |_| Vec::new(),
        );
        let worked = on_pool[0].expect("the job ran");
        assert_ne!(worked, caller, "a pool thread ran the one job");
        let mut here = [None];
        pool.run(
            here.iter_mut().collect(),
            1,
            |job| *job = Some(std::thread::current().id()),
            |_| Vec::new(),
        );
        assert_eq!(here[0], Some(caller), "a plain run of one job stays here");
    }

    #[test]
    fn f2_the_tail_is_the_last_worker_s_finish_less_the_one_before() {
        // F2: the first job holds its worker until the second job, taken by
        // the other worker, is done: the other worker is idle first, and
        // the tail is what the first job took past it.
        let pool = WorkerPool::new(
            NonZeroUsize::new(2).expect("two"),
            WorkerMode::Threads,
            Duration::from_secs(60),
        );
        let second_done = AtomicBool::new(false);
        let mut jobs = [0u32, 1];
        pool.run(
            jobs.iter_mut().collect(),
            2,
            |job| {
                if *job == 0 {
                    while !second_done.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            },
            |job| {
                if *job == 1 {
                    second_done.store(true, Ordering::Release);
                }
                Vec::new()
            },
        );
        let tail = pool.last_tail().expect("two workers each took a job");
        assert!(tail >= Duration::from_millis(5), "{tail:?}");

        let mut one = [0u32];
        pool.run(one.iter_mut().collect(), 1, |_| {}, |_| Vec::new());
        assert_eq!(pool.last_tail(), None, "one worker has no tail");
    }
}
