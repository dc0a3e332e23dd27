//! The cache itself: the handle's shared state, its locks, and one batch
//! over the requests waiting.
//!
//! The handles it hands out — [`PendingKernel`](crate::PendingKernel) and
//! [`KeyedCache`](crate::KeyedCache) — live in the modules above it, which
//! add the methods that make them; this one knows neither.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use rustc_hash::FxHashMap;

use super::slot::Slot;
use crate::config::LoaderConfig;
use crate::error::{BuildFailure, CacheError, KernelError};
use crate::id::{ArtifactId, DeviceId};
use crate::kernel::Kernel;
use crate::loader::KernelLoader;
use crate::statistics::{BatchRecord, KernelOutcome, KernelRecord, LoaderStatistics, Registration};
use crate::target::{CompilationTarget, KernelOf, VariantOf};

/// One device's loaded kernels, shared by every thread that wants them.
///
/// Cloning is cheap and every clone is the same cache. See the
/// [module documentation](crate::handle) for how requests, builds and failures
/// behave.
pub struct KernelCache<T: CompilationTarget> {
    shared: Arc<Shared<T>>,
}

/// Called with the record of each artifact a build compiled.
type Reporter<T> = Arc<dyn Fn(&KernelCache<T>, &KernelRecord) + Send + Sync>;

struct Shared<T: CompilationTarget> {
    device: DeviceId,
    /// The build lock: only a batch needs the loader, so owning it is what
    /// serializes batches (K4).
    loader: Mutex<KernelLoader<T>>,
    /// Threads blocked on the build lock right now.
    threads_waiting: AtomicUsize,
    state: Mutex<State<T>>,
    reporter: Mutex<Option<Reporter<T>>>,
    /// The background builds of `resolve_or` (R2) and the loader's
    /// health, read without the build lock (R3).
    pub(super) background: super::builds::BackgroundBuilds,
}

struct State<T: CompilationTarget> {
    /// Every request that is loaded, waiting or being built. A request is
    /// removed only when it failed and nothing but a `get` asked for it.
    slots: FxHashMap<ArtifactId<VariantOf<T>>, Arc<Slot<T>>>,
    /// Requests for the next batch, oldest first.
    waiting: Vec<Wanted<T>>,
    /// How many requests are loaded.
    loaded: usize,
}

/// A request waiting for a batch, with the kernel that batch compiles.
struct Wanted<T: CompilationTarget> {
    slot: Arc<Slot<T>>,
    kernel: Arc<KernelOf<T>>,
    /// The collector open on the requesting thread (S1).
    registration: Option<Registration>,
    /// Failed in an earlier batch: it registers again when retried (S2).
    retry: bool,
}

/// What one batch of a cache did, for its caller.
struct BatchOutcome {
    kernels: usize,
    failures: Vec<KernelError>,
    /// The records of the artifacts it compiled, for the reporter.
    built: Vec<KernelRecord>,
}

impl<T: CompilationTarget> KernelCache<T> {
    /// A cache of the kernels `target` compiles and loads on `device`, with
    /// loader settings from the `KILN_*` environment (see [`LoaderConfig`]).
    pub fn new(device: DeviceId, target: T) -> Self {
        Self::with_config(device, target, LoaderConfig::from_env_or_default())
    }

    /// A cache of the kernels `target` compiles and loads on `device`, with
    /// `config`. It keeps the record of at least the latest batch, whatever
    /// `config` says: the reporter reads each batch's warnings from it.
    ///
    /// Its warm-start profile (L12) is the device's: a cache of device 0
    /// keeps the program's own, one of device N its own (see
    /// [`Program::on_device`](crate::profile::Program::on_device)), so the
    /// caches of several devices of one process each warm their own.
    pub fn with_config(device: DeviceId, target: T, mut config: LoaderConfig) -> Self {
        config.record_limit = config.record_limit.max(1);
        // Device N's profile is started here, in place of the program's
        // (which would be read for nothing).
        let profiled = config.profile && device.number() != 0;
        config.profile &= !profiled;
        let mut loader = KernelLoader::with_config(target, config);
        if profiled {
            loader = loader.with_profile(crate::profile::Program::executable().on_device(device));
        }
        let background = super::builds::BackgroundBuilds::new(loader.health_counters());
        Self {
            shared: Arc::new(Shared {
                device,
                background,
                loader: Mutex::new(loader),
                threads_waiting: AtomicUsize::new(0),
                state: Mutex::new(State {
                    slots: FxHashMap::default(),
                    waiting: Vec::new(),
                    loaded: 0,
                }),
                reporter: Mutex::new(None),
            }),
        }
    }

    /// The device this cache serves.
    pub fn device(&self) -> DeviceId {
        self.shared.device
    }

    /// Builds every outstanding request in one batch, after waiting for the
    /// batch in flight, if any (K4).
    ///
    /// # Errors
    ///
    /// [`CacheError::Build`] with each kernel of the batch that failed. Each
    /// failed alone: the rest of the batch loaded, and every failed request
    /// is still wanted, so the next build tries it again (K3).
    pub fn build(&self) -> Result<(), CacheError> {
        let batch = {
            let mut loader = self.shared.lock_loader();
            self.run_batch(&mut loader)
        };
        self.report(&batch.built);
        if batch.failures.is_empty() {
            Ok(())
        } else {
            Err(CacheError::Build(BuildFailure {
                kernels: batch.kernels,
                failures: batch.failures,
            }))
        }
    }

    /// The loaded kernel for `kernel` under `variant`, to launch on
    /// `device`; when it is not loaded yet, it is built at once together
    /// with every outstanding request.
    ///
    /// A direct load, not a request: when it fails, nothing stays wanted,
    /// and the next `get` compiles it afresh. To launch the same kernel many
    /// times, keep a [`PendingKernel`](crate::PendingKernel) or use a
    /// [`KeyedCache`](crate::KeyedCache): this call
    /// computes the kernel's id and takes the state lock every time.
    ///
    /// # Errors
    ///
    /// [`CacheError::WrongDevice`] when `device` is not this cache's, before
    /// anything is built; [`CacheError::Kernel`] when the kernel fails.
    pub fn get<K>(
        &self,
        device: DeviceId,
        kernel: K,
        variant: VariantOf<T>,
    ) -> Result<T::Loaded, CacheError>
    where
        K: Kernel + Into<Arc<KernelOf<T>>>,
    {
        self.check_device(device)?;
        let (slot, attempts_seen) = self.want(kernel, variant, false);
        match slot.loaded.get() {
            Some(loaded) => Ok(loaded.clone()),
            None => Ok(self.resolve_slot(&slot, attempts_seen)?.clone()),
        }
    }

    /// Calls `reporter` with the record of each artifact a build of this
    /// cache compiles — its kernel, work time, and the warnings and remarks
    /// of the compile — once per artifact, never for a kernel served from
    /// memory, taken from the store, or sharing another kernel's artifact
    /// (D3). Replaces the reporter set before, in every clone of the cache.
    ///
    /// It runs on the thread whose build compiled the artifact, after the
    /// batch, with no lock of the cache held: it may replace itself, or use
    /// the cache. A call already under way finishes with the reporter it
    /// started with; the next artifact goes to the new one.
    pub fn set_reporter<F>(&self, reporter: F)
    where
        F: Fn(&KernelCache<T>, &KernelRecord) + Send + Sync + 'static,
    {
        self.replace_reporter(Some(Arc::new(reporter)));
    }

    /// Stops reporting.
    pub fn remove_reporter(&self) {
        self.replace_reporter(None);
    }

    /// How many requested kernels are loaded.
    pub fn loaded_len(&self) -> usize {
        self.shared.lock_state().loaded
    }

    /// How many requests wait for the next batch, failed ones included.
    pub fn waiting_len(&self) -> usize {
        self.shared.lock_state().waiting.len()
    }

    /// How many threads are waiting right now for the batch in flight to
    /// finish, to build, resolve or read the loader.
    pub fn threads_waiting(&self) -> usize {
        self.shared.threads_waiting.load(Ordering::SeqCst)
    }

    /// The loader's totals; waits for the batch in flight.
    pub fn statistics(&self) -> LoaderStatistics {
        self.shared.lock_loader().statistics()
    }

    /// The records of the latest batches, oldest first; waits for the batch
    /// in flight.
    pub fn records(&self) -> Vec<BatchRecord> {
        self.shared
            .lock_loader()
            .records()
            .iter()
            .cloned()
            .collect()
    }

    /// Runs `inspect` on the target; waits for the batch in flight.
    pub fn with_target<R>(&self, inspect: impl FnOnce(&T) -> R) -> R {
        inspect(self.shared.lock_loader().target())
    }

    /// The target, giving up every loaded kernel: to hand its store to
    /// another cache or loader, as the next process would find it.
    ///
    /// # Errors
    ///
    /// The cache itself, when another clone, pending kernel or keyed index
    /// of it still lives.
    pub fn into_target(self) -> Result<T, Self> {
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => Ok(shared
                .loader
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .into_target()),
            Err(shared) => Err(Self { shared }),
        }
    }

    /// The request for `kernel`, made now or found, and how many failed
    /// attempts it had then. `wanted` says whether a request asks for it,
    /// rather than a `get`.
    ///
    /// The count is read under the state lock, where batches publish: a
    /// kernel only a `get` asked for is forgotten by the batch that fails it,
    /// so a `get` must know, from this moment on, whether a batch has
    /// answered for it, or it would wait for a batch that will never take
    /// its kernel.
    pub(super) fn want<K>(
        &self,
        kernel: K,
        variant: VariantOf<T>,
        wanted: bool,
    ) -> (Arc<Slot<T>>, u64)
    where
        K: Kernel + Into<Arc<KernelOf<T>>>,
    {
        let id = ArtifactId::new(kernel.id(), variant);
        let mut state = self.shared.lock_state();
        if let Some(slot) = state.slots.get(&id) {
            if wanted {
                slot.want();
            }
            return (slot.clone(), slot.failed_attempts());
        }
        let slot = Arc::new(Slot::new(id.clone(), wanted));
        state.slots.insert(id, slot.clone());
        state.waiting.push(Wanted {
            slot: slot.clone(),
            kernel: kernel.into(),
            registration: Registration::register(),
            retry: false,
        });
        (slot, 0)
    }

    /// `slot`'s kernel, once the batch in flight is over, or after building
    /// everything outstanding; `slot` is not loaded when this is called.
    ///
    /// `attempts_seen` is the slot's count of failed attempts when the
    /// caller asked: a batch that tries the kernel after that answers for
    /// it. Compiling a failed kernel again straight away, once for each
    /// thread that waited for it, would only fail again.
    #[cold]
    #[inline(never)]
    pub(super) fn resolve_slot<'s>(
        &self,
        slot: &'s Slot<T>,
        attempts_seen: u64,
    ) -> Result<&'s T::Loaded, KernelError> {
        let batch = {
            let mut loader = self.shared.lock_loader();
            if let Some(loaded) = slot.loaded.get() {
                return Ok(loaded);
            }
            if let Some(error) = slot.failure_since(attempts_seen) {
                return Err(error);
            }
            self.run_batch(&mut loader)
        };
        self.report(&batch.built);
        if let Some(loaded) = slot.loaded.get() {
            return Ok(loaded);
        }
        Err(slot.failure_since(attempts_seen).expect(
            "a request neither loaded nor failed was waiting, and a batch takes everything waiting",
        ))
    }

    /// One batch over every waiting request, under the build lock held by
    /// the caller.
    fn run_batch(&self, loader: &mut KernelLoader<T>) -> BatchOutcome {
        let mut in_flight = InFlight {
            shared: &self.shared,
            entries: std::mem::take(&mut self.shared.lock_state().waiting),
        };
        let kernels = in_flight.entries.len();
        if kernels == 0 {
            return BatchOutcome {
                kernels,
                failures: Vec::new(),
                built: Vec::new(),
            };
        }
        // A request the loader holds already (a kernel of the warm-start
        // profile, loaded ahead, L12) is answered from it: no second load
        // of it on the device.
        let held: Vec<Option<T::Loaded>> = in_flight
            .entries
            .iter()
            .map(|wanted| loader.get(&wanted.slot.id))
            .collect();
        // The requests stay in the slot map while they build, so a request
        // made now finds them and is not added twice (K2).
        let asked: Vec<_> = in_flight
            .entries
            .iter_mut()
            .zip(&held)
            .filter_map(|(wanted, held)| {
                let registration = wanted.registration.take().or_else(|| {
                    // A retry counts with the collector open on the thread
                    // that retries it, as a retried load does.
                    if wanted.retry {
                        Registration::register()
                    } else {
                        None
                    }
                });
                if held.is_some() {
                    // Its artifact came from the store, with the profile.
                    drop(
                        registration
                            .map(|registration| registration.settle(KernelOutcome::FromStore)),
                    );
                    return None;
                }
                Some((&*wanted.kernel, wanted.slot.id.clone(), registration))
            })
            .collect();
        let batch_ran = !asked.is_empty();
        let mut compiled = if batch_ran {
            loader.compile_borrowed(asked)
        } else {
            Vec::new()
        }
        .into_iter();
        let outcomes: Vec<Result<T::Loaded, KernelError>> = held
            .into_iter()
            .map(|held| match held {
                Some(loaded) => Ok(loaded),
                None => compiled
                    .next()
                    .expect("the batch answers every kernel asked of it"),
            })
            .collect();
        let built: Vec<KernelRecord> = loader
            .records()
            .back()
            .filter(|_| batch_ran)
            .map(|batch| {
                batch
                    .records
                    .iter()
                    .filter(|record| record.outcome == KernelOutcome::Compiled)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();

        let entries = std::mem::take(&mut in_flight.entries);
        let mut failures = Vec::new();
        // Dropped after the state lock: a kernel's destructor is user code.
        let mut finished = Vec::with_capacity(entries.len());
        {
            let mut state = self.shared.lock_state();
            let mut retries = Vec::new();
            for (mut wanted, outcome) in entries.into_iter().zip(outcomes) {
                match outcome {
                    Ok(loaded) => {
                        if wanted.slot.loaded.set(loaded).is_ok() {
                            state.loaded += 1;
                        }
                        finished.push(wanted);
                    }
                    Err(error) => {
                        wanted.slot.fail(error.clone());
                        failures.push(error);
                        if wanted.slot.is_wanted() {
                            wanted.retry = true;
                            retries.push(wanted);
                        } else {
                            state.slots.remove(&wanted.slot.id);
                            finished.push(wanted);
                        }
                    }
                }
            }
            // Failures were asked for before anything that came in during
            // the batch, so they keep their place in front (K3).
            retries.append(&mut state.waiting);
            state.waiting = retries;
        }
        drop(finished);
        BatchOutcome {
            kernels,
            failures,
            built,
        }
    }

    /// One build of everything waiting as a background batch, which no
    /// caller waits on (R2): the failures of its kernels.
    pub(super) fn build_unwaited(&self) -> Vec<KernelError> {
        let batch = {
            let mut loader = self.shared.lock_loader();
            loader.set_in_background(true);
            let batch = self.run_batch(&mut loader);
            loader.set_in_background(false);
            batch
        };
        self.report(&batch.built);
        batch.failures
    }

    /// How many requests wait for a batch without having failed one.
    pub(super) fn waiting_afresh(&self) -> usize {
        self.shared
            .lock_state()
            .waiting
            .iter()
            .filter(|wanted| !wanted.retry)
            .count()
    }

    pub(super) fn shared_background(&self) -> &super::builds::BackgroundBuilds {
        &self.shared.background
    }

    /// Gives each built artifact's record to the reporter of the moment,
    /// with no lock held (D3).
    fn report(&self, built: &[KernelRecord]) {
        for record in built {
            // Fetched again for every record, so that a reporter replaced
            // from inside its own call is used from the next artifact on.
            let reporter = self.shared.lock_reporter().clone();
            if let Some(reporter) = reporter {
                reporter(self, record);
            }
        }
    }

    fn replace_reporter(&self, reporter: Option<Reporter<T>>) {
        let previous = std::mem::replace(&mut *self.shared.lock_reporter(), reporter);
        // Dropped once the lock is released: the closure's captures may run
        // any destructor, this cache's too.
        drop(previous);
    }

    #[inline]
    pub(super) fn check_device(&self, device: DeviceId) -> Result<(), CacheError> {
        if device == self.shared.device {
            Ok(())
        } else {
            Err(self.wrong_device(device))
        }
    }

    #[cold]
    fn wrong_device(&self, used: DeviceId) -> CacheError {
        CacheError::WrongDevice {
            owner: self.shared.device,
            used,
        }
    }
}

impl<T: CompilationTarget> Shared<T> {
    /// The build lock, counting this thread as waiting while a batch holds
    /// it.
    fn lock_loader(&self) -> MutexGuard<'_, KernelLoader<T>> {
        match self.loader.try_lock() {
            Ok(loader) => return loader,
            // The loader contains every panic of user code in a batch; one
            // that got through left whole values behind.
            Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        self.threads_waiting.fetch_add(1, Ordering::SeqCst);
        let loader = self.loader.lock().unwrap_or_else(PoisonError::into_inner);
        self.threads_waiting.fetch_sub(1, Ordering::SeqCst);
        loader
    }

    fn lock_state(&self) -> MutexGuard<'_, State<T>> {
        // No user code runs under the state lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_reporter(&self) -> MutexGuard<'_, Option<Reporter<T>>> {
        self.reporter.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The requests of the batch in flight. When the batch unwinds (a target
/// that panicked outside the loader's containment), they go back to the
/// queue instead of being lost with handles still waiting for them.
struct InFlight<'a, T: CompilationTarget> {
    shared: &'a Shared<T>,
    entries: Vec<Wanted<T>>,
}

impl<T: CompilationTarget> Drop for InFlight<'_, T> {
    fn drop(&mut self) {
        if self.entries.is_empty() {
            return;
        }
        let mut entries = std::mem::take(&mut self.entries);
        for wanted in &mut entries {
            wanted.retry = true;
        }
        let mut state = self.shared.lock_state();
        entries.append(&mut state.waiting);
        state.waiting = entries;
    }
}

impl<T: CompilationTarget> Clone for KernelCache<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T: CompilationTarget> fmt::Debug for KernelCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock_state();
        f.debug_struct("KernelCache")
            .field("device", &self.shared.device)
            .field("loaded", &state.loaded)
            .field("waiting", &state.waiting.len())
            .finish_non_exhaustive()
    }
}
