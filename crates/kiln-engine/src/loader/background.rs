//! Background batches: [`KernelLoader::load_or`] and
//! [`KernelLoader::try_load`] answer at once and leave what is missing to a
//! batch of its own, on a thread of the loader's, while the program goes on
//! launching.
//!
//! The background batch is an ordinary batch (the same queue, jobs, worker
//! pool and worker processes) of a second loader, owned by that thread,
//! whose target stands in for the real one: it shares the real target's
//! compiler, device step and store, and hands each kernel's artifact and
//! device object back instead of publishing it. The loader's own thread
//! publishes what landed at its next miss, so a target is still only
//! published to from the thread that owns it, and a launch of a loaded
//! kernel stays one lookup.
//!
//! One batch runs at a time: kernels missed while it runs wait for the
//! next, which starts as soon as it ends. Dropping the loader lets the
//! batch in flight end (its kernels stored whole, as any batch's are),
//! drops what waited, and shuts the worker processes down before the drop
//! returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use rustc_hash::FxHashSet;

use super::KernelLoader;
use super::job::{contained, refused};
use crate::compiler::ArtifactCompiler;
use crate::config::LoaderConfig;
use crate::error::{DeviceRefusal, FallbackMissing, KernelError, Stage};
use crate::id::ArtifactId;
use crate::statistics::{BatchRecord, HealthCounters, LoaderStatistics, Registration};
use crate::store::ArtifactStore;
use crate::target::{ArtifactOf, CompilationTarget, DeviceStep, KernelOf, MadeOf, VariantOf};
use crate::worker::WorkerProcesses;

/// What [`KernelLoader::try_load`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loading<L> {
    /// The kernel is loaded.
    Ready(L),
    /// It is not loaded yet: a background batch compiles it.
    Pending,
    /// Its background batch failed it; the failure was reported once (see
    /// [`KernelLoader::take_background_failures`]) and it is not compiled
    /// again in the background.
    Failed,
}

/// A loader's background batches, as its own thread sees them.
pub(super) struct Batches<T: CompilationTarget> {
    config: LoaderConfig,
    shared: Option<Arc<Shared<T>>>,
    thread: Option<JoinHandle<()>>,
    /// Kernels waiting for or in a background batch.
    pending: FxHashSet<ArtifactId<VariantOf<T>>>,
    /// Kernels a background batch failed: their fallback stays.
    failed: FxHashSet<ArtifactId<VariantOf<T>>>,
    /// Failures not taken yet.
    failures: Vec<KernelError>,
    /// The background loader's totals, as of its last batch.
    statistics: LoaderStatistics,
}

impl<T: CompilationTarget> Batches<T> {
    pub(super) fn new(mut config: LoaderConfig) -> Self {
        // The loader keeps the profile; the background loader only compiles.
        config.profile = false;
        Self {
            config,
            shared: None,
            thread: None,
            pending: FxHashSet::default(),
            failed: FxHashSet::default(),
            failures: Vec::new(),
            statistics: LoaderStatistics::default(),
        }
    }

    /// The background batches' worker mode follows the loader's.
    pub(super) fn set_worker_mode(&mut self, mode: crate::config::WorkerMode) {
        self.config.worker_mode = mode;
    }

    pub(super) fn statistics(&self) -> &LoaderStatistics {
        &self.statistics
    }

    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether a background batch landed something the loader has not
    /// taken yet: one atomic load.
    #[inline]
    pub(super) fn has_landed(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|shared| shared.landed.load(Ordering::Acquire))
    }
}

impl<T: CompilationTarget> Drop for Batches<T> {
    fn drop(&mut self) {
        let Some(shared) = &self.shared else {
            return;
        };
        {
            let mut state = shared.lock();
            state.closed = true;
            // Kernels no batch took yet are dropped unsettled.
            state.waiting.clear();
        }
        shared.wake.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::warn!("the background batches' thread panicked");
        }
    }
}

/// What the loader's thread and the background thread share.
struct Shared<T: CompilationTarget> {
    state: Mutex<State<T>>,
    wake: Condvar,
    /// Set when `state` holds something landed; cleared by the loader's
    /// thread as it takes it.
    landed: AtomicBool,
    health: Arc<HealthCounters>,
}

impl<T: CompilationTarget> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct State<T: CompilationTarget> {
    waiting: Vec<Wanted<T>>,
    /// When each kernel of the batch in flight was asked for.
    in_flight: Vec<Instant>,
    landed: Vec<Landed<T>>,
    failures: Vec<(ArtifactId<VariantOf<T>>, KernelError)>,
    records: Vec<BatchRecord>,
    statistics: LoaderStatistics,
    /// Variants the real target's store does not keep.
    unkept: Vec<VariantOf<T>>,
    processes: WorkerProcesses,
    closed: bool,
}

impl<T: CompilationTarget> State<T> {
    /// Tells the health counters how many kernels compile and since when.
    fn tell(&self, health: &HealthCounters) {
        let oldest = self
            .waiting
            .iter()
            .map(|wanted| wanted.asked)
            .chain(self.in_flight.iter().copied())
            .min();
        health.set_compiling(self.waiting.len() + self.in_flight.len(), oldest);
    }
}

/// A kernel missed by `load_or`, waiting for the next background batch.
struct Wanted<T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    kernel: Box<KernelOf<T>>,
    asked: Instant,
    registration: Option<Registration>,
}

/// A kernel a background batch loaded, for the loader's thread to publish.
struct Landed<T: CompilationTarget> {
    id: ArtifactId<VariantOf<T>>,
    artifact: ArtifactOf<T>,
    /// Its device object, or `None` when the driver makes them on the
    /// loader's thread.
    made: Option<MadeOf<T>>,
    /// Whether it came from the store.
    found: bool,
}

/// What the background loader's kernels load as: the kernel itself went
/// back to the real loader.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handed;

/// The real target's device step, on the background batch's workers; for a
/// driver that makes device objects on one thread, nothing is made there
/// and the loader's thread makes each object as it publishes it.
struct Deferred<D>(Arc<D>);

impl<C: ArtifactCompiler, D: DeviceStep<C>> DeviceStep<C> for Deferred<D> {
    type Made = Option<D::Made>;

    fn make(
        &self,
        id: &ArtifactId<C::Variant>,
        artifact: &C::Artifact,
    ) -> Result<Self::Made, DeviceRefusal> {
        if self.0.on_workers() {
            self.0.make(id, artifact).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// The target of the background loader: the real target's compiler,
/// device step and store, handing what it loads back to the real loader.
struct Stand<T: CompilationTarget> {
    compiler: Arc<T::Compiler>,
    device: Arc<Deferred<T::Device>>,
    store: Option<Arc<dyn ArtifactStore>>,
    shared: Arc<Shared<T>>,
    found: FxHashSet<ArtifactId<VariantOf<T>>>,
}

impl<T: CompilationTarget> CompilationTarget for Stand<T> {
    type Compiler = T::Compiler;
    type Loaded = Handed;
    type Device = Deferred<T::Device>;

    fn compiler(&self) -> &Arc<Self::Compiler> {
        &self.compiler
    }

    fn device_step(&self) -> &Arc<Self::Device> {
        &self.device
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.store.as_ref()
    }

    fn keeps(&self, variant: &VariantOf<Self>) -> bool {
        !self.shared.lock().unkept.contains(variant)
    }

    fn found(&mut self, id: &ArtifactId<VariantOf<Self>>, _: &ArtifactOf<Self>) {
        self.found.insert(id.clone());
    }

    fn publish(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
        made: MadeOf<Self>,
    ) -> Result<Handed, DeviceRefusal> {
        let found = self.found.remove(id);
        self.shared.lock().landed.push(Landed {
            id: id.clone(),
            artifact: artifact.clone(),
            made,
            found,
        });
        self.shared.landed.store(true, Ordering::Release);
        Ok(Handed)
    }
}

impl<T: CompilationTarget + 'static> KernelLoader<T>
where
    KernelOf<T>: Clone,
{
    /// The loaded kernel for `kernel` under `id` when it is loaded, else
    /// the loaded `fallback`, queuing `kernel` for a background batch: a
    /// load that never compiles on the caller's thread.
    ///
    /// A loaded kernel costs what [`load`](Self::load) costs it: one
    /// lookup. A missing one joins the next background batch, which runs on
    /// the loader's workers while the program goes on launching the
    /// fallback; once it lands, the next call answers `kernel`. A kernel
    /// the background batch fails keeps its fallback for good, and its
    /// failure is reported once (logged, and kept for
    /// [`take_background_failures`](Self::take_background_failures)).
    ///
    /// ```
    /// use kiln_engine::fake::{FakeKernel, FakeTarget};
    /// use kiln_engine::{ArtifactId, Kernel, KernelLoader};
    ///
    /// let mut loader = KernelLoader::new(FakeTarget::storeless());
    /// let generic = FakeKernel::new(0);
    /// let generic_id = generic.artifact_id();
    /// loader.load(&generic, &generic_id).expect("compiles, once");
    ///
    /// let special = FakeKernel::new(7);
    /// let special_id = special.artifact_id();
    /// let served = loader.load_or(&special, &special_id, &generic_id).expect("loaded");
    /// assert_eq!(served.kernel, generic_id.kernel, "the fallback, at once");
    /// assert!(loader.wait_for_background(std::time::Duration::from_secs(30)));
    /// let served = loader.load_or(&special, &special_id, &generic_id).expect("loaded");
    /// assert_eq!(served.kernel, special_id.kernel, "the kernel, once it landed");
    /// assert_eq!(loader.statistics().health.request_path_compiles, 1, "the fallback's");
    /// ```
    ///
    /// # Errors
    ///
    /// [`FallbackMissing`] at once when neither `kernel` nor the fallback
    /// is loaded: the fallback is loaded once, by the program, before it
    /// serves with it.
    #[inline]
    pub fn load_or(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
        fallback: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, FallbackMissing> {
        if self.loaded.is_current(&self.store)
            && let Some(slot) = self.loaded.entries.get_mut(id)
        {
            return Ok(slot.ask(&mut self.profile));
        }
        self.load_or_missing(kernel, id, fallback)
    }

    #[cold]
    #[inline(never)]
    fn load_or_missing(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
        fallback: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, FallbackMissing> {
        match self.try_load(kernel, id) {
            Loading::Ready(loaded) => Ok(loaded),
            Loading::Pending | Loading::Failed => match self.asked_for(fallback) {
                Some(loaded) => {
                    self.health.fallback_load();
                    Ok(loaded)
                }
                None => Err(FallbackMissing {
                    fallback: fallback.kernel.clone(),
                }),
            },
        }
    }

    /// [`Ready`](Loading::Ready) with the loaded kernel for `kernel` under
    /// `id` when it is loaded, else [`Pending`](Loading::Pending), queuing
    /// it for a background batch as [`load_or`](Self::load_or) does, or
    /// [`Failed`](Loading::Failed) when a background batch failed it.
    /// Never compiles on the caller's thread.
    pub fn try_load(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
    ) -> Loading<T::Loaded> {
        self.check_store();
        if let Some(loaded) = self.asked_for(id) {
            return Loading::Ready(loaded);
        }
        if self.background.failed.contains(id) {
            return Loading::Failed;
        }
        if !self.background.pending.contains(id) {
            self.want_in_background(kernel, id);
        }
        Loading::Pending
    }

    /// Queues `kernel` for the next background batch, starting the
    /// batches' thread at the first.
    fn want_in_background(&mut self, kernel: &KernelOf<T>, id: &ArtifactId<VariantOf<T>>) {
        let keeps = self.target.keeps(&id.variant);
        let shared = match &self.background.shared {
            Some(shared) => Arc::clone(shared),
            None => match self.start_background() {
                Some(shared) => shared,
                None => return,
            },
        };
        {
            let mut state = shared.lock();
            if !keeps && !state.unkept.contains(&id.variant) {
                state.unkept.push(id.variant.clone());
            }
            state.waiting.push(Wanted {
                id: id.clone(),
                kernel: Box::new(kernel.clone()),
                asked: Instant::now(),
                registration: Registration::register(),
            });
            state.tell(&shared.health);
        }
        shared.wake.notify_all();
        self.background.pending.insert(id.clone());
    }

    /// Starts the thread that runs the background batches.
    fn start_background(&mut self) -> Option<Arc<Shared<T>>> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                waiting: Vec::new(),
                in_flight: Vec::new(),
                landed: Vec::new(),
                failures: Vec::new(),
                records: Vec::new(),
                statistics: LoaderStatistics::default(),
                unkept: Vec::new(),
                processes: WorkerProcesses::default(),
                closed: false,
            }),
            wake: Condvar::new(),
            landed: AtomicBool::new(false),
            health: Arc::clone(&self.health),
        });
        let stand = Stand {
            compiler: Arc::clone(self.target.compiler()),
            device: Arc::new(Deferred(Arc::clone(self.target.device_step()))),
            store: self.target.store().cloned(),
            shared: Arc::clone(&shared),
            found: FxHashSet::default(),
        };
        let config = self.background.config.clone();
        let thread_shared = Arc::clone(&shared);
        let started = std::thread::Builder::new()
            .name("kiln-background".into())
            .spawn(move || run(stand, config, &thread_shared));
        match started {
            Ok(thread) => {
                self.background.thread = Some(thread);
                self.background.shared = Some(Arc::clone(&shared));
                Some(shared)
            }
            Err(error) => {
                log::warn!("could not start the background batches' thread: {error}");
                None
            }
        }
    }
}

impl<T: CompilationTarget> KernelLoader<T> {
    /// Publishes what the background batches landed, on this thread, and
    /// reports their failures once: at the first miss after they landed.
    pub(super) fn take_landed(&mut self) {
        let Some(shared) = self.background.shared.clone() else {
            return;
        };
        if !shared.landed.swap(false, Ordering::AcqRel) {
            return;
        }
        let (landed, failures, records, statistics) = {
            let mut state = shared.lock();
            (
                std::mem::take(&mut state.landed),
                std::mem::take(&mut state.failures),
                std::mem::take(&mut state.records),
                state.statistics,
            )
        };
        self.background.statistics = statistics;
        let mut failures = failures;
        if !landed.is_empty() {
            self.target.batch_started();
            for kernel in landed {
                let Landed {
                    id,
                    artifact,
                    made,
                    found,
                } = kernel;
                self.background.pending.remove(&id);
                if found {
                    self.target.found(&id, &artifact);
                }
                let target = &mut self.target;
                let published = contained(Stage::Load, &id, || {
                    match made {
                        Some(made) => target.publish(&id, &artifact, made),
                        None => target.load(&id, &artifact),
                    }
                    .map_err(|refusal| refused(&id, refusal))
                });
                match published {
                    Ok(loaded) => {
                        self.note_loaded(&id);
                        self.loaded.insert(id, loaded, &self.store);
                    }
                    Err(error) => failures.push((id, error)),
                }
            }
            self.target.batch_finished();
        }
        for (id, error) in failures {
            self.background.pending.remove(&id);
            if self.background.failed.insert(id) {
                log::warn!("{error}; its fallback stays");
                self.background.failures.push(error);
            }
        }
        for record in records {
            if self.record_limit > 0 {
                if self.records.len() == self.record_limit {
                    self.records.pop_front();
                }
                self.records.push_back(record);
            }
        }
    }

    /// The failures of kernels that background batches failed since the
    /// last call, each once: their fallback stays.
    pub fn take_background_failures(&mut self) -> Vec<KernelError> {
        self.take_landed();
        std::mem::take(&mut self.background.failures)
    }

    /// Waits, up to `timeout`, until no kernel waits for or compiles in a
    /// background batch, and publishes what landed: for tests, benchmarks
    /// and a program that wants its warm state before it serves. Whether
    /// nothing is pending any more; at once when nothing was.
    pub fn wait_for_background(&mut self, timeout: std::time::Duration) -> bool {
        let Some(shared) = self.background.shared.clone() else {
            return true;
        };
        let deadline = Instant::now().checked_add(timeout);
        {
            let mut state = shared.lock();
            while (!state.waiting.is_empty() || !state.in_flight.is_empty()) && !state.closed {
                let left = deadline.map_or(timeout, |deadline| {
                    deadline.saturating_duration_since(Instant::now())
                });
                if left.is_zero() {
                    break;
                }
                state = shared
                    .wake
                    .wait_timeout(state, left)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        }
        self.take_landed();
        self.background.is_idle()
    }

    /// The worker processes of the background batches, as of the end of
    /// the latest: which ran, how many were started.
    pub fn background_worker_processes(&self) -> WorkerProcesses {
        self.background
            .shared
            .as_ref()
            .map(|shared| shared.lock().processes.clone())
            .unwrap_or_default()
    }

    /// Whether the loader is warm, for a readiness probe: nothing waits for
    /// or compiles in a background batch, nothing is queued, and every
    /// kernel the warm-start profile names is loaded.
    pub fn is_warm(&mut self) -> bool {
        self.check_store();
        self.queue.is_empty() && self.background.is_idle() && self.profile_complete()
    }

    /// The counters behind the loader's health, for a shared handle to
    /// read without its build lock.
    pub(crate) fn health_counters(&self) -> Arc<HealthCounters> {
        Arc::clone(&self.health)
    }

    /// Marks the batches that follow as background batches, which no
    /// caller waits on, or as a caller's again.
    pub(crate) fn set_in_background(&mut self, background: bool) {
        self.in_background = background;
    }

    /// Notes a batch's health in its record: a background batch says so; a
    /// batch a caller waited on counts its compiles as the request path's.
    pub(super) fn note_health(&self, batch: &mut BatchRecord) {
        if self.in_background {
            batch.background = true;
        } else if self.caller_waits {
            let compiled = batch.count(crate::statistics::KernelOutcome::Compiled);
            self.health
                .request_path(u64::try_from(compiled).unwrap_or(u64::MAX), batch.wall);
        }
        batch.health = self.health.snapshot();
    }
}

/// The background thread: one batch at a time of whatever waits, until the
/// loader drops.
fn run<T: CompilationTarget>(stand: Stand<T>, config: LoaderConfig, shared: &Shared<T>) {
    let mut loader = KernelLoader::with_config(stand, config);
    loader.in_background = true;
    loader.health = Arc::clone(&shared.health);
    loop {
        let batch: Vec<Wanted<T>> = {
            let mut state = shared.lock();
            while state.waiting.is_empty() && !state.closed {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if state.closed {
                break;
            }
            let batch = std::mem::take(&mut state.waiting);
            state.in_flight = batch.iter().map(|wanted| wanted.asked).collect();
            state.tell(&shared.health);
            batch
        };
        let mut batch = batch;
        let registrations: Vec<Option<Registration>> = batch
            .iter_mut()
            .map(|wanted| wanted.registration.take())
            .collect();
        let ids: Vec<_> = batch.iter().map(|wanted| wanted.id.clone()).collect();
        let asked = batch
            .iter()
            .zip(registrations)
            .map(|(wanted, registration)| (&*wanted.kernel, wanted.id.clone(), registration))
            .collect();
        let answers = loader.compile_borrowed(asked);
        let mut state = shared.lock();
        let mut failed = 0;
        for (id, answer) in ids.into_iter().zip(answers) {
            if let Err(error) = answer {
                failed += 1;
                state.failures.push((id, error));
            }
        }
        state.records.extend(loader.take_records());
        state.statistics = loader.statistics;
        state.processes = loader.worker_processes();
        state.in_flight.clear();
        state.tell(&shared.health);
        shared.health.background_batch(failed);
        shared.landed.store(true, Ordering::Release);
        drop(state);
        shared.wake.notify_all();
    }
    // The loader drops here: its worker processes are shut down before the
    // real loader's drop returns.
    drop(loader);
}
