//! The loader: the kernels one device holds, and the one path that loads
//! more.
//!
//! [`KernelLoader`], its binding to the target's store, and the loaded map
//! bound to a store generation live here; a batch's parts each have a file: the `queue` of kernels waiting
//! for it, the `batch` itself (store, lower, group by source, finalize,
//! load, record), each kernel's `job` through it, and the `finalize` step,
//! in this process or in a worker process; a batch's record as a store
//! keeps it is its `history`.

mod background;
mod batch;
#[cfg(test)]
mod device_step_tests;
mod finalize;
mod history;
mod job;
mod manifest;
mod profiled;
mod progress;
mod publish;
mod queue;
#[cfg(test)]
mod rekey_tests;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::{LoaderConfig, WorkerMode};
use crate::error::KernelError;
use crate::id::ArtifactId;
use crate::kernel::Kernel;
use crate::pool::WorkerPool;
use crate::statistics::{BatchRecord, LoaderStatistics, Registration};
use crate::store::{BoundStore, KeyedCompiler};
use crate::target::{CompilationTarget, KernelOf, VariantOf};

use crate::worker::WorkerProcesses;
pub use background::Loading;
pub use history::{STORED_BATCH_LIMIT, StoredBatch};
pub use manifest::{JobManifest, ListedError, ManifestKernel};
pub use progress::{BatchProgress, Waiting, is_hidden, printable};

pub(crate) use queue::BorrowedKernel;
use queue::{Asked, KernelQueue, Request, queued_requests};

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
/// use kiln_engine::fake::{FakeKernel, FakeTarget};
/// use kiln_engine::{ArtifactId, Kernel, KernelLoader};
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
    /// The target's store bound to its compiler, bound once: every lookup,
    /// claim and put of a batch goes through it, and its generation is what
    /// the hot path compares.
    store: Option<BoundStore<T::Compiler>>,
    /// Whether the target was lent mutably since the store was last checked:
    /// it may name another store now (L10).
    target_lent: bool,
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
    /// Whether remembered failures compile again (P11).
    retry_failed: bool,
    /// What the running batch is doing, for another thread to read.
    progress: BatchProgress,
    /// The warm-start profile, when the loader keeps one (L12).
    profile: Option<profiled::ProfileState<T>>,
    /// The kernels `load_or` left to background batches (R2).
    background: background::Batches<T>,
    /// What a readiness probe reads (R3), shared with the background
    /// batches' loader.
    health: Arc<crate::statistics::HealthCounters>,
    /// Whether this loader runs another loader's background batches.
    in_background: bool,
    /// Whether the batch running now has a caller waiting on it (R3).
    caller_waits: bool,
    /// The job's manifest, when the loader decides with one (R5).
    manifest: Option<manifest::Listed>,
}

impl<T: CompilationTarget> KernelLoader<T> {
    /// A loader holding nothing yet, with settings from the `KILN_*`
    /// environment (see [`LoaderConfig`]).
    pub fn new(target: T) -> Self {
        Self::with_config(target, LoaderConfig::from_env_or_default())
    }

    /// A loader holding nothing yet, with `config`.
    pub fn with_config(target: T, config: LoaderConfig) -> Self {
        let store = bind(&target);
        let generation = store.as_ref().map(BoundStore::generation);
        let mut loader = Self {
            target,
            store,
            target_lent: false,
            loaded: LoadedKernels {
                entries: FxHashMap::default(),
                generation,
                lent: None,
            },
            queue: KernelQueue::default(),
            failed: FxHashMap::default(),
            pool: WorkerPool::new(
                config.parallelism,
                config.worker_mode,
                config.compile_timeout,
            ),
            statistics: LoaderStatistics::default(),
            records: VecDeque::new(),
            record_limit: config.record_limit,
            retry_failed: config.retry_failed,
            progress: BatchProgress::default(),
            profile: None,
            background: background::Batches::new(config.clone()),
            health: Arc::default(),
            in_background: false,
            caller_waits: false,
            manifest: None,
        };
        if config.profile {
            // L12: a loader with a store keeps its program's profile unless
            // told not to; on device N of the machine (N > 0), the device's
            // own, so that the loaders of several devices each warm theirs.
            let program = crate::profile::Program::executable();
            let program = match loader.target.device_id() {
                Some(device) => program.on_device(device),
                None => program,
            };
            loader.profile = loader.start_profile(&program);
        }
        loader
    }

    /// The same loader, finalizing on `mode` instead of its configuration's
    /// [`worker_mode`](LoaderConfig::worker_mode): [`WorkerMode::Threads`]
    /// keeps every compile in this process; [`WorkerMode::Processes`]
    /// finalizes in worker processes when
    /// the compiler can (it has a
    /// [`worker_recipe`](crate::ArtifactCompiler::worker_recipe)) and the program
    /// provides a worker (see [`crate::worker`]), and on threads otherwise.
    pub fn with_worker_mode(mut self, mode: WorkerMode) -> Self {
        self.set_worker_mode(mode);
        self
    }

    /// Chooses threads or worker processes for the next batches, as
    /// [`with_worker_mode`](Self::with_worker_mode) does; choosing threads
    /// shuts the worker processes down.
    pub fn set_worker_mode(&mut self, mode: WorkerMode) {
        self.background.set_worker_mode(mode);
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
            && self.loaded.is_current(&self.store)
            && let Some(slot) = self.loaded.entries.get_mut(id)
        {
            return Ok(slot.ask(&mut self.profile));
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
            self.check_store();
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
            self.loaded.reset_if_switched(&self.store);
            if let Some(loaded) = self.asked_for(id) {
                return Ok(loaded);
            }
        }
    }

    /// Queues `kernel` under `variant`, to be compiled with the rest of the
    /// queue by the next load or [`compile_queued`](Self::compile_queued),
    /// and not before. A kernel already loaded or queued is left alone; one
    /// whose failure is still unreported has it dropped and is tried again.
    pub fn enqueue(&mut self, kernel: Box<KernelOf<T>>, variant: VariantOf<T>) {
        let id = ArtifactId::new(kernel.id(), variant);
        self.check_store();
        if self.asked_for(&id).is_some() || self.queue.contains(&id) {
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
        self.check_store();
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
        self.caller_waits = requests.len() > n_queued;
        let outcomes = self.run_batch(requests);
        self.caller_waits = false;
        for (index, (id, result)) in outcomes.into_iter().enumerate() {
            if index < n_queued {
                self.keep(id, result);
                continue;
            }
            if let Ok(loaded) = &result {
                self.note_loaded(&id);
                self.loaded.insert(id, loaded.clone(), &self.store);
            }
            answers.push(result);
        }
        answers
    }

    /// The loaded kernel for `id`, if it is loaded; compiles nothing.
    pub fn get(&mut self, id: &ArtifactId<VariantOf<T>>) -> Option<T::Loaded> {
        self.check_store();
        self.asked_for(id)
    }

    /// The loaded kernel for `id`, if it is loaded, noting that the program
    /// asked for it when it is a profiled kernel not asked for yet (L12).
    fn asked_for(&mut self, id: &ArtifactId<VariantOf<T>>) -> Option<T::Loaded> {
        Some(self.loaded.entries.get_mut(id)?.ask(&mut self.profile))
    }

    /// Whether `id` is loaded.
    pub fn is_loaded(&mut self, id: &ArtifactId<VariantOf<T>>) -> bool {
        self.get(id).is_some()
    }

    /// Whether `id` waits in the queue.
    pub(crate) fn is_queued(&self, id: &ArtifactId<VariantOf<T>>) -> bool {
        self.queue.contains(id)
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

    /// The target, mutably: to switch its store, say. A target that names
    /// another store afterwards is bound to it at the loader's next access
    /// other than a launch of a loaded kernel, and that launch takes the
    /// same path, so every kernel loaded from the old store is dropped
    /// first (L10).
    pub fn target_mut(&mut self) -> &mut T {
        self.target_lent = true;
        self.loaded.lend();
        &mut self.target
    }

    /// The target's store as the loader bound it to the compiler's keys:
    /// its key of any kernel, why a kernel missed (P9), the claims it
    /// holds. `None` when the target keeps nothing.
    pub fn bound_store(&self) -> Option<&BoundStore<T::Compiler>> {
        self.store.as_ref()
    }

    /// Binds the target's store again when the target, lent mutably since
    /// the last check, names another store (or the same store under other
    /// key components) than the one bound: off the hot path, which a lent
    /// target sends here.
    fn check_store(&mut self) {
        if std::mem::take(&mut self.target_lent) {
            self.loaded.take_back();
            let same = match (self.target.store(), &self.store) {
                (None, None) => true,
                (Some(named), Some(bound)) => {
                    Arc::ptr_eq(named, bound.store())
                        && *bound.components() == self.target.compiler().key_components()
                }
                _ => false,
            };
            if !same {
                log::debug!("the target names another store: binding it");
                self.store = bind(&self.target);
            }
        }
        self.loaded.reset_if_switched(&self.store);
        self.take_in_profile();
        if self.background.has_landed() {
            self.take_landed();
        }
    }

    /// The target, giving up everything loaded: to hand its store to a new
    /// loader, as the next process would find it.
    pub fn into_target(self) -> T {
        self.target
    }

    /// Totals since the loader was made.
    pub fn statistics(&self) -> LoaderStatistics {
        let mut statistics = self.statistics;
        statistics.add(self.background.statistics());
        statistics.health = self.health.snapshot();
        statistics
    }

    /// The tail of the last batch's compile phase (F2): the finish of the
    /// worker that finished last less the finish of the one before it, of
    /// the batch's last round on several workers. `None` when that round
    /// ran on one worker.
    pub fn last_batch_tail(&self) -> Option<std::time::Duration> {
        self.pool.last_tail()
    }

    /// A handle on what the loader's batches are doing, to read from
    /// another thread while one runs (a progress bar): how many of its
    /// kernels are settled, and which kernels it waits for while other
    /// processes compile them, naming who holds them (P12).
    ///
    /// ```
    /// # use kiln_engine::KernelLoader;
    /// # use kiln_engine::fake::{FakeKernel, FakeTarget};
    /// let mut loader = KernelLoader::new(FakeTarget::storeless());
    /// let progress = loader.progress();
    /// loader.enqueue(Box::new(FakeKernel::new(1)), ());
    /// loader.compile_queued();
    /// assert_eq!((progress.settled(), progress.kernels()), (1, 1));
    /// assert!(progress.waiting().is_none());
    /// ```
    pub fn progress(&self) -> BatchProgress {
        self.progress.clone()
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
        self.check_store();
        if self.queue.is_empty() && asked.is_none() {
            return;
        }
        let mut queued = self.queue.take();
        // Failures an earlier batch left unreported go: their kernels
        // compile again when they are launched or queued.
        self.failed.clear();

        let asked_one = asked.is_some();
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
        self.caller_waits = asked_one;
        let outcomes = self.run_batch(requests);
        self.caller_waits = false;
        for (id, result) in outcomes {
            self.keep(id, result);
        }
    }

    /// Keeps a kernel's outcome: loaded, or its failure for its own load to
    /// report (L7).
    fn keep(&mut self, id: ArtifactId<VariantOf<T>>, result: Result<T::Loaded, KernelError>) {
        match result {
            Ok(loaded) => {
                self.note_loaded(&id);
                self.loaded.insert(id, loaded, &self.store);
            }
            Err(error) => {
                self.failed.insert(id, error);
            }
        }
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

/// `target`'s store bound to its compiler's keys, if it names one.
fn bind<T: CompilationTarget>(target: &T) -> Option<BoundStore<T::Compiler>> {
    target
        .store()
        .map(|store| BoundStore::new(Arc::clone(store), &**target.compiler()))
}

/// The generation of the bound store: one atomic load; 0 without a store.
#[inline]
fn generation_of<C: KeyedCompiler>(store: &Option<BoundStore<C>>) -> u64 {
    store.as_ref().map_or(0, BoundStore::generation)
}

/// A generation no store has (they count up from 1): what the loaded map
/// compares while the target is lent, so that the hot path fails and the
/// next access checks the target's store.
const UNCHECKED: u64 = u64::MAX;

/// The kernels a loader holds, bound to the store generation they were
/// loaded under (L10). A loader whose target has no store is unbound and
/// never resets: with nothing persisted, a switch changes nothing it holds.
struct LoadedKernels<K, V> {
    entries: FxHashMap<K, Slot<V>>,
    generation: Option<u64>,
    /// The generation the kernels were loaded under, while
    /// [`lend`](Self::lend) put [`UNCHECKED`] in its place.
    lent: Option<u64>,
}

impl<K: Eq + std::hash::Hash, V> LoadedKernels<K, V> {
    #[inline]
    fn is_current<C: KeyedCompiler>(&self, store: &Option<BoundStore<C>>) -> bool {
        self.generation
            .is_none_or(|generation| generation == generation_of(store))
    }

    /// The target is lent mutably: until [`take_back`](Self::take_back),
    /// no generation is current, so the hot path goes to the slow one.
    fn lend(&mut self) {
        if let Some(generation) = self.generation
            && generation != UNCHECKED
        {
            self.lent = Some(generation);
            self.generation = Some(UNCHECKED);
        }
    }

    /// The target is checked: the kernels' own generation is back.
    fn take_back(&mut self) {
        if let Some(generation) = self.lent.take() {
            self.generation = Some(generation);
        }
    }

    fn reset_if_switched<C: KeyedCompiler>(&mut self, store: &Option<BoundStore<C>>) {
        let Some(generation) = self.generation else {
            return;
        };
        let current = generation_of(store);
        if current != generation {
            log::debug!(
                "the store switched (generation {generation} to {current}): dropping {} loaded kernels",
                self.entries.len()
            );
            self.entries.clear();
            self.generation = Some(current);
        }
    }

    fn insert<C: KeyedCompiler>(&mut self, key: K, value: V, store: &Option<BoundStore<C>>) {
        self.reset_if_switched(store);
        self.entries.insert(
            key,
            Slot {
                loaded: value,
                unasked: None,
            },
        );
    }

    /// Keeps a profiled kernel loaded ahead of its first ask, watched by
    /// the profiler as `index` (L12). The caller reset the map to the
    /// current generation first.
    fn insert_profiled(&mut self, key: K, value: V, index: u32) {
        self.entries.insert(
            key,
            Slot {
                loaded: value,
                unasked: Some(index),
            },
        );
    }
}

/// One loaded kernel.
struct Slot<V> {
    loaded: V,
    /// For a profiled kernel loaded ahead and not asked for yet, the index
    /// the profiler watches it under: the first ask clears it (L12).
    unasked: Option<u32>,
}

impl<V: Clone> Slot<V> {
    /// The loaded kernel, asked for: a load and a branch, and the profile
    /// told once, at a profiled kernel's first ask (L12).
    #[inline]
    fn ask<T: CompilationTarget>(&mut self, profile: &mut Option<profiled::ProfileState<T>>) -> V {
        if let Some(index) = self.unasked.take() {
            profiled::asked(profile, index);
        }
        self.loaded.clone()
    }
}
