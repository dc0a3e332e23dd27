//! The loader: the kernels one device holds, and the one path that loads
//! more.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::config::LoaderConfig;
use crate::diagnostic::{CompileFailure, Diagnostic};
use crate::error::{Failure, KernelError, Stage};
use crate::id::ArtifactId;
use crate::kernel::Kernel;
use crate::pool::WorkerPool;
use crate::statistics::{
    BatchRecord, KernelOutcome, KernelRecord, LoaderStatistics, Registration, Settled, Settlement,
    WorkerMode,
};
use crate::target::{
    ArtifactCompiler, ArtifactOf, CompilationTarget, KernelOf, Lookup, LoweredOf, StoreOutcome,
    VariantOf,
};
use crate::worker::{Outcome, ProcessPool, WorkerLost, WorkerProcesses};

/// Every kernel one device has loaded, in front of the target that compiles
/// and loads the ones it has not.
///
/// A loader belongs to the thread that launches on its device and is used
/// through `&mut self`: its hot path, a launch of a kernel it holds, is one
/// hash lookup and one clone of the loaded handle, with no lock, allocation
/// or system call.
///
/// Kernels can be [queued](Self::enqueue) ahead of their launches. Queuing
/// compiles nothing; the next launch of anything, or
/// [`compile_queued`](Self::compile_queued), compiles the whole queue in one
/// batch on the shared worker threads, so a batch lasts about as long as its
/// slowest kernel rather than the sum of all of them.
///
/// ```
/// use kiln_core::fake::{FakeKernel, FakeTarget};
/// use kiln_core::{ArtifactId, Kernel, KernelLoader};
///
/// let mut loader = KernelLoader::new(FakeTarget::storeless());
/// for number in 0..8 {
///     loader.enqueue(Box::new(FakeKernel::new(number)), ());
/// }
/// // The first launch compiles the queue and its own kernel in one batch.
/// let kernel = FakeKernel::new(8);
/// let id = ArtifactId::new(kernel.id(), ());
/// let loaded = loader.load(&kernel, &id).expect("the fake kernel compiles");
/// assert_eq!(loaded.kernel, id.kernel);
/// assert_eq!(loader.records().len(), 1);
/// assert_eq!(loader.records()[0].kernels, 9);
/// ```
pub struct KernelLoader<T: CompilationTarget> {
    target: T,
    loaded: LoadedKernels<ArtifactId<VariantOf<T>>, T::Loaded>,
    queue: KernelQueue<T>,
    /// Why each kernel of the latest batch that failed failed, until its own
    /// load reports it. Launching is where a failure has a caller to go to;
    /// compiling the kernel again there would only fail again. The next batch
    /// drops what is left, so a kernel whose launch never came compiles
    /// afresh rather than keeping a stale error.
    failed: FxHashMap<ArtifactId<VariantOf<T>>, KernelError>,
    pool: WorkerPool,
    statistics: LoaderStatistics,
    records: VecDeque<BatchRecord>,
    record_limit: usize,
}

impl<T: CompilationTarget> KernelLoader<T> {
    /// A loader holding nothing yet, with settings from the `KILN_*`
    /// environment (see [`LoaderConfig`]).
    pub fn new(target: T) -> Self {
        Self::with_config(target, LoaderConfig::from_env_or_default())
    }

    /// A loader holding nothing yet, with `config`.
    pub fn with_config(target: T, config: LoaderConfig) -> Self {
        let generation = target.persists().then(|| target.generation());
        Self {
            target,
            loaded: LoadedKernels {
                entries: FxHashMap::default(),
                generation,
            },
            queue: KernelQueue::default(),
            failed: FxHashMap::default(),
            pool: WorkerPool::new(config.parallelism),
            statistics: LoaderStatistics::default(),
            records: VecDeque::new(),
            record_limit: config.record_limit,
        }
    }

    /// The same loader, finalizing on `mode`: [`WorkerMode::Threads`] keeps
    /// every compile in this process; [`WorkerMode::Processes`] (the default
    /// unless `KILN_WORKER_MODE=threads`) finalizes in worker processes when
    /// the compiler can (it has a
    /// [`worker_recipe`](ArtifactCompiler::worker_recipe)) and the program
    /// provides a worker (see [`crate::worker`]), and on threads otherwise.
    pub fn with_worker_mode(mut self, mode: WorkerMode) -> Self {
        self.set_worker_mode(mode);
        self
    }

    /// Chooses threads or worker processes for the next batches, as
    /// [`with_worker_mode`](Self::with_worker_mode) does; choosing threads
    /// shuts the worker processes down.
    pub fn set_worker_mode(&mut self, mode: WorkerMode) {
        self.pool.set_mode(mode);
    }

    /// The loader's worker processes: which are running, how many were
    /// started and replaced, and why there are none when they could not
    /// start.
    pub fn worker_processes(&self) -> WorkerProcesses {
        self.pool.worker_processes()
    }

    /// The loaded kernel for `kernel` under `id`, compiling first whatever is
    /// queued, and `kernel` itself when it is not loaded.
    ///
    /// `id` must be `kernel`'s id under the variant it is launched with; the
    /// caller builds it once and keeps it, so a launch does not hash the
    /// kernel's parameters again.
    ///
    /// # Errors
    ///
    /// Why `kernel` could not be loaded, now or in the batch that compiled it
    /// from the queue. The failure is reported once: the next load of the
    /// kernel tries again.
    #[inline]
    pub fn load(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, KernelError> {
        if self.queue.is_empty()
            && self.loaded.is_current(&self.target)
            && let Some(loaded) = self.loaded.entries.get(id)
        {
            return Ok(loaded.clone());
        }
        self.load_missing(kernel, id)
    }

    /// [`load`](Self::load) past its one lookup: the kernel is not loaded,
    /// the queue has to compile first, or the store switched.
    #[cold]
    #[inline(never)]
    fn load_missing(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, KernelError> {
        loop {
            self.loaded.reset_if_switched(&self.target);
            // A failure is reported as it stands only when nothing else is
            // queued: a batch drops it, and the kernel compiles in that batch.
            let reported = self.failed.contains_key(id) && self.queue.is_empty();
            let missing = !self.loaded.entries.contains_key(id) && !reported;
            self.compile_queue(missing.then_some(Asked { kernel, id }));

            if let Some(error) = self.failed.remove(id) {
                return Err(error);
            }
            // A store that switched during the batch dropped every kernel
            // loaded before it, this one too: go round and load it from the
            // store switched to.
            self.loaded.reset_if_switched(&self.target);
            if let Some(loaded) = self.loaded.entries.get(id) {
                return Ok(loaded.clone());
            }
        }
    }

    /// Queues `kernel` under `variant`, to be compiled with the rest of the
    /// queue by the next load or [`compile_queued`](Self::compile_queued),
    /// and not before. A kernel already loaded or queued is left alone; one
    /// whose failure is still unreported has it dropped and is tried again.
    pub fn enqueue(&mut self, kernel: Box<KernelOf<T>>, variant: VariantOf<T>) {
        let id = ArtifactId::new(kernel.id(), variant);
        self.loaded.reset_if_switched(&self.target);
        if self.loaded.entries.contains_key(&id) || self.queue.contains(&id) {
            return;
        }
        self.failed.remove(&id);
        self.queue.push(id, kernel, Registration::register());
    }

    /// Compiles and loads everything queued now, so that the launch that
    /// follows pays for one lookup. A kernel that fails reports it at its own
    /// load.
    pub fn compile_queued(&mut self) {
        self.compile_queue(None);
    }

    /// Compiles the queue together with `asked` in one batch, and answers
    /// each kernel of `asked`, in order, with its own outcome.
    ///
    /// For a caller that keeps its kernels so that it can ask for a failed
    /// one again, as the shared [`KernelCache`](crate::handle::KernelCache)
    /// does: a failure of `asked` goes back to it here instead of waiting in
    /// the loader for a load to report it. Each kernel of `asked` is not
    /// loaded, not queued, and asked once.
    pub(crate) fn compile_borrowed(
        &mut self,
        asked: Vec<BorrowedKernel<'_, T>>,
    ) -> Vec<Result<T::Loaded, KernelError>> {
        if self.queue.is_empty() && asked.is_empty() {
            return Vec::new();
        }
        let mut queued = self.queue.take();
        self.failed.clear();
        let (mut requests, _) = queued_requests(&mut queued, None);
        let n_queued = requests.len();
        requests.extend(asked.into_iter().map(|(kernel, id, registration)| Request {
            id,
            kernel,
            registration,
        }));
        let mut answers = Vec::with_capacity(requests.len() - n_queued);
        for (index, (id, result)) in self.run_batch(requests).into_iter().enumerate() {
            if index < n_queued {
                self.keep(id, result);
                continue;
            }
            if let Ok(loaded) = &result {
                self.loaded.insert(id, loaded.clone(), &self.target);
            }
            answers.push(result);
        }
        answers
    }

    /// The loaded kernel for `id`, if it is loaded; compiles nothing.
    pub fn get(&mut self, id: &ArtifactId<VariantOf<T>>) -> Option<T::Loaded> {
        self.loaded.reset_if_switched(&self.target);
        self.loaded.entries.get(id).cloned()
    }

    /// Whether `id` is loaded.
    pub fn is_loaded(&mut self, id: &ArtifactId<VariantOf<T>>) -> bool {
        self.get(id).is_some()
    }

    /// How many kernels are loaded.
    pub fn loaded_len(&self) -> usize {
        self.loaded.entries.len()
    }

    /// How many kernels wait in the queue.
    pub fn queued_len(&self) -> usize {
        self.queue.kernels.len()
    }

    /// The target.
    pub fn target(&self) -> &T {
        &self.target
    }

    /// The target, mutably: to switch its store, say.
    pub fn target_mut(&mut self) -> &mut T {
        &mut self.target
    }

    /// The target, giving up everything loaded: to hand its store to a new
    /// loader, as the next process would find it.
    pub fn into_target(self) -> T {
        self.target
    }

    /// Totals since the loader was made.
    pub fn statistics(&self) -> LoaderStatistics {
        self.statistics
    }

    /// The records of the latest batches, oldest first, up to the configured
    /// [`record_limit`](LoaderConfig::record_limit).
    pub fn records(&self) -> &VecDeque<BatchRecord> {
        &self.records
    }

    /// Takes the kept batch records, leaving none.
    pub fn take_records(&mut self) -> Vec<BatchRecord> {
        self.records.drain(..).collect()
    }

    /// Compiles the queue and `asked` together, keeping each kernel loaded or
    /// the reason it failed.
    fn compile_queue(&mut self, asked: Option<Asked<'_, T>>) {
        if self.queue.is_empty() && asked.is_none() {
            return;
        }
        let mut queued = self.queue.take();
        // Failures an earlier batch left unreported go: their kernels
        // compile again when they are launched or queued.
        self.failed.clear();

        let (mut requests, queued_registration) =
            queued_requests(&mut queued, asked.as_ref().map(|asked| asked.id));
        if let Some(asked) = asked {
            requests.push(Request {
                id: asked.id.clone(),
                kernel: asked.kernel,
                // Asked for and queued, it counts where it was queued; asked
                // for alone, it registers with the collector open now.
                registration: queued_registration.unwrap_or_else(Registration::register),
            });
        }
        for (id, result) in self.run_batch(requests) {
            self.keep(id, result);
        }
    }

    /// Keeps a kernel's outcome: loaded, or its failure for its own load to
    /// report (L7).
    fn keep(&mut self, id: ArtifactId<VariantOf<T>>, result: Result<T::Loaded, KernelError>) {
        match result {
            Ok(loaded) => self.loaded.insert(id, loaded, &self.target),
            Err(error) => {
                self.failed.insert(id, error);
            }
        }
    }

    /// One batch (L5): store, lower, group by source, finalize, load, record.
    fn run_batch(&mut self, requests: Vec<Request<'_, T>>) -> Vec<JobOutcome<T>> {
        let started = Instant::now();
        let mut jobs: Vec<Job<'_, T>> = requests.into_iter().map(Job::new).collect();
        let n_kernels = jobs.len();

        for job in &mut jobs {
            job.look_up(&mut self.target, &mut self.statistics);
        }

        let persists = self.target.persists();
        let mut missing: Vec<&mut Job<'_, T>> =
            jobs.iter_mut().filter(|job| job.is_missing()).collect();
        let with_processes = !missing.is_empty()
            && self
                .pool
                .prepare_processes(self.target.compiler().worker_recipe());
        let used_processes = AtomicBool::new(false);
        let finalizer = Finalizer {
            compiler: self.target.compiler(),
            processes: self.pool.process_pool().filter(|_| with_processes),
            used_processes: &used_processes,
        };
        let mut workers = self.pool.workers_for(missing.len());
        if missing.len() > 1 {
            log::debug!(
                "compiling {} of {n_kernels} kernels on {workers} workers{}",
                missing.len(),
                if with_processes { " (processes)" } else { "" }
            );
        }
        self.pool.run(&mut missing, |job| {
            job.lower(finalizer.compiler);
            // With nothing to share it by, a kernel finalizes on the worker
            // that lowered it, without waiting for the others to lower.
            if job.is_lowered() && !(persists && job.has_source()) {
                job.finalize(&finalizer);
            }
            job.settle();
        });
        drop(missing);

        if persists {
            group_by_source(&mut jobs, &mut self.target, &mut self.statistics);
        }

        let finalizer = Finalizer {
            compiler: self.target.compiler(),
            processes: self.pool.process_pool().filter(|_| with_processes),
            used_processes: &used_processes,
        };
        let mut lowered: Vec<&mut Job<'_, T>> =
            jobs.iter_mut().filter(|job| job.is_lowered()).collect();
        workers = workers.max(self.pool.workers_for(lowered.len()));
        self.pool.run(&mut lowered, |job| {
            job.finalize(&finalizer);
            job.settle();
        });
        drop(lowered);
        let mode = if used_processes.load(Ordering::Relaxed) {
            WorkerMode::Processes
        } else {
            WorkerMode::Threads
        };

        take_from_leaders(&mut jobs);

        let mut records = Vec::with_capacity(jobs.len());
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            let (outcome, record) = job.load(&mut self.target, &mut self.statistics);
            records.push(record);
            outcomes.push(outcome);
        }

        self.target.batch_finished();

        let batch = BatchRecord {
            kernels: records.len(),
            workers,
            mode,
            wall: started.elapsed(),
            stored: records.iter().any(|record| record.stored),
            records,
        };
        log::debug!(
            "batch of {} kernels: {:?} wall, {:?} work on {} workers ({:?})",
            batch.kernels,
            batch.wall,
            batch.summed_work(),
            batch.workers,
            batch.mode
        );
        if self.record_limit > 0 {
            if self.records.len() == self.record_limit {
                self.records.pop_front();
            }
            self.records.push_back(batch);
        }
        outcomes
    }
}

impl<T: CompilationTarget + std::fmt::Debug> std::fmt::Debug for KernelLoader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelLoader")
            .field("target", &self.target)
            .field("loaded", &self.loaded.entries.len())
            .field("queued", &self.queue.kernels.len())
            .field("failed", &self.failed.len())
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// The requests of every queued kernel but `except`, and, when `except` was
/// queued, the registration it was queued with, so that a kernel both queued
/// and asked for compiles once and counts where it was queued.
fn queued_requests<'q, T: CompilationTarget>(
    queued: &'q mut [Queued<T>],
    except: Option<&ArtifactId<VariantOf<T>>>,
) -> (Vec<Request<'q, T>>, Option<Option<Registration>>) {
    let mut requests = Vec::with_capacity(queued.len() + 1);
    let mut excepted_registration = None;
    for entry in queued {
        if except.is_some_and(|except| *except == entry.id) {
            excepted_registration = Some(entry.registration.take());
            continue;
        }
        requests.push(Request {
            id: entry.id.clone(),
            kernel: &*entry.kernel,
            registration: entry.registration.take(),
        });
    }
    (requests, excepted_registration)
}

/// Gives each group of lowered kernels with identical source under the same
/// variant one leader: the leader asks the store by source and finalizes
/// only when the store has nothing; every other member waits for the
/// leader's artifact (L5c). The variant is part of the group's key because
/// one text compiled for two architectures is two artifacts.
fn group_by_source<T: CompilationTarget>(
    jobs: &mut [Job<'_, T>],
    target: &mut T,
    statistics: &mut LoaderStatistics,
) {
    let mut leaders: FxHashMap<(VariantOf<T>, String), usize> = FxHashMap::default();
    for (index, job) in jobs.iter_mut().enumerate() {
        let Step::Lowered {
            source: Some(source),
            ..
        } = &job.step
        else {
            continue;
        };
        let key = (job.id.variant.clone(), source.clone());
        match leaders.get(&key).copied() {
            Some(leader) => job.wait_for(leader),
            None => {
                leaders.insert(key, index);
                job.reuse_stored_source(target, statistics);
            }
        }
        job.settle();
    }
}

/// Hands each waiting kernel its leader's artifact, or its leader's failure
/// (L6): the source is finalized once, not once per member.
fn take_from_leaders<T: CompilationTarget>(jobs: &mut [Job<'_, T>]) {
    for index in 0..jobs.len() {
        let Step::Waiting { leader, .. } = jobs[index].step else {
            continue;
        };
        // Leaders come first in the batch, so the leader is in `before`.
        let (before, rest) = jobs.split_at_mut(index);
        let member = &mut rest[0];
        let Step::Waiting { source, .. } = std::mem::replace(&mut member.step, Step::Missing)
        else {
            unreachable!("matched as waiting right above");
        };
        member.step = match &before[leader].step {
            Step::Ready { artifact, .. } => Step::Ready {
                artifact: artifact.clone(),
                origin: Origin::Rekeyed,
                source: Some(source),
            },
            Step::Failed(error) => Step::Failed(KernelError {
                kernel: member.id.kernel.clone(),
                ..error.clone()
            }),
            Step::Missing | Step::Lowered { .. } | Step::Waiting { .. } => {
                unreachable!("every leader is finalized, taken from the store, or failed")
            }
        };
        member.settle();
    }
}

/// What a batch gives back for one kernel.
type JobOutcome<T> = (
    ArtifactId<VariantOf<T>>,
    Result<<T as CompilationTarget>::Loaded, KernelError>,
);

/// The kernels a loader holds, bound to the store generation they were
/// loaded under (L10). A loader whose target does not persist is unbound and
/// never resets: with nothing persisted, a switch changes nothing it holds.
struct LoadedKernels<K, V> {
    entries: FxHashMap<K, V>,
    generation: Option<u64>,
}

impl<K: Eq + std::hash::Hash, V> LoadedKernels<K, V> {
    #[inline]
    fn is_current<T: CompilationTarget>(&self, target: &T) -> bool {
        self.generation
            .is_none_or(|generation| generation == target.generation())
    }

    fn reset_if_switched<T: CompilationTarget>(&mut self, target: &T) {
        let Some(generation) = self.generation else {
            return;
        };
        let current = target.generation();
        if current != generation {
            log::debug!(
                "the store switched (generation {generation} to {current}): dropping {} loaded kernels",
                self.entries.len()
            );
            self.entries.clear();
            self.generation = Some(current);
        }
    }

    fn insert<T: CompilationTarget>(&mut self, key: K, value: V, target: &T) {
        self.reset_if_switched(target);
        self.entries.insert(key, value);
    }
}

/// The kernels queued and not compiled yet, each once.
struct KernelQueue<T: CompilationTarget> {
    kernels: Vec<Queued<T>>,
    /// Their ids, so that queuing one more costs a lookup, not a scan.
    ids: FxHashSet<ArtifactId<VariantOf<T>>>,
}

impl<T: CompilationTarget> Default for KernelQueue<T> {
    fn default() -> Self {
        Self {
            kernels: Vec::new(),
            ids: FxHashSet::default(),
        }
    }
}

impl<T: CompilationTarget> KernelQueue<T> {
    #[inline]
    fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    fn contains(&self, id: &ArtifactId<VariantOf<T>>) -> bool {
        self.ids.contains(id)
    }

    fn push(
        &mut self,
        id: ArtifactId<VariantOf<T>>,
        kernel: Box<KernelOf<T>>,
        registration: Option<Registration>,
    ) {
        self.ids.insert(id.clone());
        self.kernels.push(Queued {
            id,
            kernel,
            registration,
        });
    }

    fn take(&mut self) -> Vec<Queued<T>> {
        self.ids.clear();
        std::mem::take(&mut self.kernels)
    }
}

struct Queued<T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    kernel: Box<KernelOf<T>>,
    registration: Option<Registration>,
}

struct Asked<'k, T: CompilationTarget> {
    kernel: &'k KernelOf<T>,
    id: &'k ArtifactId<VariantOf<T>>,
}

/// A kernel its caller keeps, asked of [`KernelLoader::compile_borrowed`]
/// under its id, with the collector it registered with.
pub(crate) type BorrowedKernel<'k, T> = (
    &'k KernelOf<T>,
    ArtifactId<VariantOf<T>>,
    Option<Registration>,
);

struct Request<'k, T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    kernel: &'k KernelOf<T>,
    registration: Option<Registration>,
}

/// Where an artifact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    FromStore,
    Rekeyed,
    Compiled,
}

/// How far a kernel got through its batch.
enum Step<T: CompilationTarget> {
    /// The store held nothing under its id.
    Missing,
    /// Lowered, with the text it can share an artifact by.
    Lowered {
        lowered: LoweredOf<T>,
        source: Option<String>,
    },
    /// Same source as the batch's kernel at `leader`, whose artifact it takes.
    Waiting {
        leader: usize,
        source: String,
    },
    /// An artifact to load.
    Ready {
        artifact: ArtifactOf<T>,
        origin: Origin,
        source: Option<String>,
    },
    Failed(KernelError),
}

/// Where a kernel stands with the collector it registered with.
enum Count {
    Uncounted,
    Registered(Registration),
    Settled(Settled),
}

/// One kernel on its way through a batch.
struct Job<'k, T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    kernel: &'k KernelOf<T>,
    step: Step<T>,
    count: Count,
    /// Lower + finalize time.
    compile_work: Duration,
    /// Load time.
    load_work: Duration,
    /// Warnings and remarks of its successful finalize.
    diagnostics: Vec<Diagnostic>,
}

impl<'k, T: CompilationTarget> Job<'k, T> {
    fn new(request: Request<'k, T>) -> Self {
        Self {
            id: request.id,
            kernel: request.kernel,
            step: Step::Missing,
            count: match request.registration {
                Some(registration) => Count::Registered(registration),
                None => Count::Uncounted,
            },
            compile_work: Duration::ZERO,
            load_work: Duration::ZERO,
            diagnostics: Vec::new(),
        }
    }

    fn is_missing(&self) -> bool {
        matches!(self.step, Step::Missing)
    }

    fn is_lowered(&self) -> bool {
        matches!(self.step, Step::Lowered { .. })
    }

    fn has_source(&self) -> bool {
        matches!(
            self.step,
            Step::Lowered {
                source: Some(_),
                ..
            }
        )
    }

    /// Settles the kernel in its collector once its outcome is known (S1,
    /// S2): compiled, taken, or failed. A kernel still on its way settles
    /// nothing yet, and one settles only once.
    fn settle(&mut self) {
        let settlement = match &self.step {
            Step::Ready {
                origin: Origin::Compiled,
                ..
            } => Settlement::Compiled,
            Step::Ready { .. } => Settlement::Loaded,
            Step::Failed(_) => Settlement::Failed,
            Step::Missing | Step::Lowered { .. } | Step::Waiting { .. } => return,
        };
        self.count = match std::mem::replace(&mut self.count, Count::Uncounted) {
            Count::Registered(registration) => Count::Settled(registration.settle(settlement)),
            count => count,
        };
    }

    fn look_up(&mut self, target: &mut T, statistics: &mut LoaderStatistics) {
        match target.lookup(&self.id) {
            Lookup::Hit {
                artifact,
                bytes,
                work,
            } => {
                statistics.hits += 1;
                statistics.bytes_read += bytes;
                statistics.saved_seconds += work.as_secs_f64();
                self.step = Step::Ready {
                    artifact,
                    origin: Origin::FromStore,
                    source: None,
                };
                self.settle();
            }
            Lookup::Miss(miss) => {
                statistics.misses += 1;
                log::trace!("{} is not in the store: {miss:?}", self.id);
            }
        }
    }

    fn lower(&mut self, compiler: &T::Compiler) {
        let started = Instant::now();
        let (kernel, id) = (self.kernel, &self.id);
        self.step = match contained(Stage::Lower, id, || compiler.lower(kernel, id)) {
            Ok(lowered) => Step::Lowered {
                source: <T::Compiler as ArtifactCompiler>::source(&lowered).map(str::to_owned),
                lowered,
            },
            Err(error) => Step::Failed(error),
        };
        self.compile_work += started.elapsed();
    }

    fn finalize(&mut self, finalizer: &Finalizer<'_, T>) {
        let Step::Lowered { lowered, source } = std::mem::replace(&mut self.step, Step::Missing)
        else {
            unreachable!("only a lowered kernel is finalized");
        };
        let started = Instant::now();
        let id = &self.id;
        let (result, remote_work) = match finalizer.in_process_or_worker(id, lowered) {
            Ok(remote) => remote,
            Err(lowered) => (
                contained(Stage::Finalize, id, || {
                    finalizer.compiler.finalize(id, lowered)
                }),
                None,
            ),
        };
        self.step = match result {
            Ok(finalized) => {
                self.diagnostics = finalized.diagnostics;
                Step::Ready {
                    artifact: finalized.artifact,
                    origin: Origin::Compiled,
                    source,
                }
            }
            Err(error) => Step::Failed(error),
        };
        // A worker's own measure of its compile leaves out the pipes.
        self.compile_work += remote_work.unwrap_or_else(|| started.elapsed());
    }

    fn wait_for(&mut self, leader: usize) {
        let Step::Lowered {
            source: Some(source),
            ..
        } = std::mem::replace(&mut self.step, Step::Missing)
        else {
            unreachable!("only a lowered kernel with source waits");
        };
        self.step = Step::Waiting { leader, source };
    }

    fn reuse_stored_source(&mut self, target: &mut T, statistics: &mut LoaderStatistics) {
        let Step::Lowered {
            source: Some(source),
            ..
        } = &self.step
        else {
            return;
        };
        if let Lookup::Hit {
            artifact,
            bytes,
            work,
        } = target.lookup_source(&self.id, source)
        {
            statistics.bytes_read += bytes;
            statistics.saved_seconds += work.as_secs_f64();
            let Step::Lowered { source, .. } = std::mem::replace(&mut self.step, Step::Missing)
            else {
                unreachable!("matched as lowered right above");
            };
            self.step = Step::Ready {
                artifact,
                origin: Origin::Rekeyed,
                source,
            };
        }
    }

    /// Loads the artifact on the device and stores it when it did not come
    /// from the store under this id; a refused artifact is neither kept nor
    /// stored (L9).
    fn load(
        mut self,
        target: &mut T,
        statistics: &mut LoaderStatistics,
    ) -> (JobOutcome<T>, KernelRecord) {
        let mut stored = false;
        let (result, outcome) = match std::mem::replace(&mut self.step, Step::Missing) {
            Step::Ready {
                artifact,
                origin,
                source,
            } => {
                let started = Instant::now();
                let id = &self.id;
                let loaded = contained(Stage::Load, id, || {
                    target.load(id, &artifact).map_err(|refusal| KernelError {
                        kernel: id.kernel.clone(),
                        stage: Stage::Load,
                        failure: Failure::Refused(refusal),
                    })
                });
                self.load_work = started.elapsed();
                match loaded {
                    Ok(loaded) => {
                        match origin {
                            Origin::Compiled => statistics.compiled += 1,
                            Origin::Rekeyed => statistics.rekeyed += 1,
                            Origin::FromStore => {}
                        }
                        if origin != Origin::FromStore {
                            let work = self.compile_work;
                            match target.store(id, &artifact, source.as_deref(), work) {
                                StoreOutcome::Stored { bytes } => {
                                    stored = true;
                                    statistics.stored += 1;
                                    statistics.bytes_written += bytes;
                                }
                                StoreOutcome::Skipped => {}
                                StoreOutcome::Failed { detail } => {
                                    statistics.store_errors += 1;
                                    // The store warns once per cause; a line per kernel
                                    // would bury that warning under a full disk's worth.
                                    log::debug!("could not store {id}: {detail}; it still loads");
                                }
                            }
                        }
                        if let (true, Count::Settled(settled)) = (stored, &self.count) {
                            settled.stored();
                        }
                        let outcome = match origin {
                            Origin::FromStore => KernelOutcome::FromStore,
                            Origin::Rekeyed => KernelOutcome::Rekeyed,
                            Origin::Compiled => KernelOutcome::Compiled,
                        };
                        (Ok(loaded), outcome)
                    }
                    Err(error) => {
                        // Settled as obtained before the device saw it: the
                        // refusal is counted beside that.
                        if let Count::Settled(settled) = &self.count {
                            settled.refused();
                        }
                        (Err(error), KernelOutcome::Refused)
                    }
                }
            }
            Step::Failed(error) => (Err(error), KernelOutcome::Failed),
            Step::Missing | Step::Lowered { .. } | Step::Waiting { .. } => {
                unreachable!("every kernel is ready or failed before it loads")
            }
        };
        if let Err(error) = &result {
            statistics.count_failure(error);
        }
        statistics.compile_seconds += self.compile_work.as_secs_f64();
        let record = KernelRecord {
            kernel: self.id.kernel.clone(),
            outcome,
            work: self.compile_work + self.load_work,
            stored,
            diagnostics: self.diagnostics,
            error: result.as_ref().err().map(ToString::to_string),
        };
        ((self.id, result), record)
    }
}

/// Where a batch finalizes: the compiler in this process, or its worker
/// processes.
struct Finalizer<'p, T: CompilationTarget> {
    compiler: &'p T::Compiler,
    processes: Option<&'p ProcessPool>,
    /// Whether any kernel of the batch was finalized in a worker process.
    used_processes: &'p AtomicBool,
}

impl<T: CompilationTarget> Finalizer<'_, T> {
    /// Finalizes `lowered` in a worker process: its result and the worker's
    /// compile time. Gives `lowered` back when it is to be finalized here:
    /// no worker processes, or none could start.
    #[allow(clippy::type_complexity, reason = "a private two-way answer")]
    fn in_process_or_worker(
        &self,
        id: &ArtifactId<VariantOf<T>>,
        lowered: LoweredOf<T>,
    ) -> Result<
        (
            Result<crate::target::Finalized<ArtifactOf<T>>, KernelError>,
            Option<Duration>,
        ),
        LoweredOf<T>,
    > {
        let Some(pool) = self.processes else {
            return Err(lowered);
        };
        let (Ok(id_bytes), Ok(lowered_bytes)) =
            (crate::worker::encode(id), crate::worker::encode(&lowered))
        else {
            log::warn!("{id} does not serialize for a worker process; finalizing it here");
            return Err(lowered);
        };
        let kernel_error = |failure: Failure| KernelError {
            kernel: id.kernel.clone(),
            stage: Stage::Finalize,
            failure,
        };
        match pool.finalize(id_bytes, lowered_bytes) {
            Ok((outcome, work)) => {
                self.used_processes.store(true, Ordering::Relaxed);
                let result = match outcome {
                    Outcome::Built {
                        artifact,
                        diagnostics,
                    } => match crate::worker::decode::<ArtifactOf<T>>(&artifact) {
                        Ok(artifact) => Ok(crate::target::Finalized {
                            artifact,
                            diagnostics,
                        }),
                        Err(error) => Err(kernel_error(Failure::Compile(Box::new(
                            CompileFailure::message(format!(
                                "the artifact a worker process built does not decode: {error}"
                            )),
                        )))),
                    },
                    Outcome::Failed(failure) => {
                        Err(kernel_error(Failure::Compile(Box::new(failure))))
                    }
                    Outcome::Panicked(message) => Err(kernel_error(Failure::Panicked { message })),
                };
                Ok((result, Some(work)))
            }
            Err(WorkerLost::Crashed(message)) => {
                self.used_processes.store(true, Ordering::Relaxed);
                Ok((
                    Err(kernel_error(Failure::Compile(Box::new(
                        CompileFailure::message(message),
                    )))),
                    None,
                ))
            }
            Err(WorkerLost::Unavailable) => Err(lowered),
        }
    }
}

/// Runs one step of one kernel, a panic in it becoming that kernel's failure
/// with the panic's message (L8): one kernel a generator or compiler cannot
/// handle must not take its whole batch, or the launches waiting on it, down.
fn contained<R, E: IntoKernelFailure, V>(
    stage: Stage,
    id: &ArtifactId<V>,
    step: impl FnOnce() -> Result<R, E>,
) -> Result<R, KernelError> {
    match std::panic::catch_unwind(AssertUnwindSafe(step)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => Err(failure.into_kernel_error(stage, id)),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("a panic without a message");
            Err(KernelError {
                kernel: id.kernel.clone(),
                stage,
                failure: Failure::Panicked {
                    message: message.to_owned(),
                },
            })
        }
    }
}

/// The error values a step can return, made into that kernel's error.
trait IntoKernelFailure {
    fn into_kernel_error<V>(self, stage: Stage, id: &ArtifactId<V>) -> KernelError;
}

impl IntoKernelFailure for CompileFailure {
    fn into_kernel_error<V>(self, stage: Stage, id: &ArtifactId<V>) -> KernelError {
        KernelError {
            kernel: id.kernel.clone(),
            stage,
            failure: Failure::Compile(Box::new(self)),
        }
    }
}

impl IntoKernelFailure for KernelError {
    fn into_kernel_error<V>(self, _stage: Stage, _id: &ArtifactId<V>) -> KernelError {
        self
    }
}

#[cfg(test)]
mod tests;
