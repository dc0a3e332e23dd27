//! The shared handle on the fake target: what the conformance suite cannot
//! count on a real backend — exact compile counts under many threads, the
//! fake compiler's remarks, a target that panics — and the edges of `get`.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use kiln_engine::fake::{FakeArtifact, FakeKernel, FakeModule, FakeTarget};
use kiln_engine::{
    ArtifactId, ArtifactStore, CacheError, CompilationTarget, DeviceId, DeviceRefusal, KernelCache,
    KernelOutcome, KernelRecord, LoaderConfig, StatisticsCollector,
};

const DEVICE: DeviceId = DeviceId::new("fake", 0);

fn config() -> LoaderConfig {
    LoaderConfig {
        parallelism: NonZeroUsize::new(4).expect("4 is not zero"),
        ..LoaderConfig::default()
    }
}

fn storeless() -> KernelCache<FakeTarget> {
    KernelCache::with_config(DEVICE, FakeTarget::storeless(), config())
}

fn finalized(cache: &KernelCache<impl AsFake>) -> usize {
    cache.with_target(|target| target.fake().fake_compiler().finalized())
}

// K1, K2
#[test]
fn sixteen_threads_requesting_a_thousand_overlapping_kernels_compile_each_once() {
    const THREADS: u32 = 16;
    const PER_THREAD: u32 = 1_000;
    // Thread t asks for [100 t, 100 t + 1000): each window overlaps the
    // next nine, so most kernels are asked for by ten threads.
    const DISTINCT: u32 = 100 * (THREADS - 1) + PER_THREAD;
    let cache = storeless();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let cache = &cache;
            scope.spawn(move || {
                let window = 100 * thread..100 * thread + PER_THREAD;
                let pending: Vec<_> = window
                    .map(|number| cache.request(FakeKernel::new(number), ()))
                    .collect();
                // Half the threads build first, the others resolve straight
                // away, in their own order.
                if thread % 2 == 0 {
                    let _ = cache.build();
                }
                for (index, kernel) in pending.iter().enumerate().rev() {
                    let loaded = kernel.resolve(DEVICE).expect("fake kernels compile");
                    assert_eq!(loaded.kernel, kernel.id().kernel, "request {index}");
                }
            });
        }
    });
    let n_distinct = usize::try_from(DISTINCT).expect("small");
    assert_eq!(finalized(&cache), n_distinct, "each kernel compiled once");
    assert_eq!(
        cache.with_target(|target| target.fake_compiler().lowered()),
        n_distinct
    );
    assert_eq!(cache.loaded_len(), n_distinct);
    assert_eq!(cache.waiting_len(), 0);
    let statistics = cache.statistics();
    assert_eq!(statistics.compiled, u64::from(DISTINCT));
    let batched: usize = cache.records().iter().map(|batch| batch.kernels).sum();
    assert!(
        batched <= n_distinct,
        "no kernel was in two batches: {batched} for {n_distinct}"
    );
}

// K3, K4
#[test]
fn threads_waiting_for_a_failing_batch_take_its_answer_without_compiling_again() {
    const WAITERS: usize = 4;
    let (cache, gate) = gated(FakeTarget::storeless());
    let failing = cache.request(FakeKernel::new(7).failing(), ());
    std::thread::scope(|scope| {
        let builder = scope.spawn(|| cache.build());
        gate.wait_until_entered();
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| scope.spawn(|| failing.resolve(DEVICE).map(|_| ())))
            .collect();
        while cache.threads_waiting() < WAITERS {
            assert!(
                waiters.iter().all(|waiter| !waiter.is_finished()),
                "a resolve returned while the batch of its kernel was in flight"
            );
            std::thread::yield_now();
        }
        gate.release();
        builder.join().expect("no panic").expect_err("it fails");
        for waiter in waiters {
            let error = waiter.join().expect("no panic").expect_err("it fails");
            let CacheError::Kernel(error) = error else {
                panic!("its own kernel's failure: {error}");
            };
            assert_eq!(error.kernel, failing.id().kernel);
        }
    });
    assert_eq!(
        finalized(&cache),
        1,
        "the waiters took the answer of the batch they waited for"
    );
    assert_eq!(cache.waiting_len(), 1, "the failure is still wanted");
    failing
        .resolve(DEVICE)
        .expect_err("a later resolve tries again");
    assert_eq!(finalized(&cache), 2);
}

// K3
#[test]
fn a_failed_get_is_not_kept_wanted() {
    let cache = storeless();
    let error = cache
        .get(DEVICE, FakeKernel::new(3).failing(), ())
        .expect_err("it fails");
    assert!(matches!(error, CacheError::Kernel(_)), "{error}");
    assert_eq!(cache.waiting_len(), 0, "a get is not a request");
    cache.build().expect("nothing is left to build");
    assert_eq!(finalized(&cache), 1);

    cache
        .get(DEVICE, FakeKernel::new(3).failing(), ())
        .expect_err("the next get compiles it afresh");
    assert_eq!(finalized(&cache), 2);
}

// K3, K4: the batch forgets a kernel only gets asked for, yet the get that
// waited for that batch still has its answer.
#[test]
fn a_get_waiting_for_the_batch_that_fails_its_kernel_takes_that_failure() {
    let (cache, gate) = gated(FakeTarget::storeless());
    std::thread::scope(|scope| {
        let first = scope.spawn(|| cache.get(DEVICE, FakeKernel::new(6).failing(), ()));
        gate.wait_until_entered();
        let second = scope.spawn(|| cache.get(DEVICE, FakeKernel::new(6).failing(), ()));
        while cache.threads_waiting() == 0 {
            assert!(!second.is_finished(), "a get returned during the batch");
            std::thread::yield_now();
        }
        gate.release();
        for getter in [first, second] {
            let error = getter.join().expect("no panic").expect_err("it fails");
            assert!(matches!(error, CacheError::Kernel(_)), "{error}");
        }
    });
    assert_eq!(finalized(&cache), 1, "one batch answered both");
    assert_eq!(cache.waiting_len(), 0, "and nothing stays wanted");
}

// K3
#[test]
fn a_request_made_while_a_get_builds_keeps_the_failure_wanted() {
    let (cache, gate) = gated(FakeTarget::storeless());
    let pending = std::thread::scope(|scope| {
        let getter = scope.spawn(|| cache.get(DEVICE, FakeKernel::new(5).failing(), ()));
        gate.wait_until_entered();
        let pending = cache.request(FakeKernel::new(5).failing(), ());
        gate.release();
        getter.join().expect("no panic").expect_err("it fails");
        pending
    });
    assert_eq!(cache.waiting_len(), 1, "the request keeps it wanted");
    pending.resolve(DEVICE).expect_err("tried again");
    assert_eq!(finalized(&cache), 2);
}

// K3: a kernel fixed after its failure loads on the retry.
#[test]
fn a_failed_request_loads_once_its_target_can_build_it() {
    let (cache, refusals) = refusing_first_loads(1);
    let pending = cache.request(FakeKernel::new(1), ());
    let error = pending.resolve(DEVICE).expect_err("refused once");
    assert!(error.to_string().contains("refused"), "{error}");
    assert_eq!(refusals.load(Ordering::SeqCst), 1);
    assert!(pending.resolve(DEVICE).is_ok(), "the retry loads");
    assert_eq!(cache.waiting_len(), 0);
}

// K5
#[test]
fn keyed_lookups_from_many_threads_build_each_kernel_once() {
    let cache = storeless();
    let keyed = cache.keyed::<u32>();
    let factory_runs = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for key in 0..64 {
                    let loaded = keyed
                        .get_or_insert_with(DEVICE, key, |&key| {
                            factory_runs.fetch_add(1, Ordering::SeqCst);
                            (FakeKernel::new(key), ())
                        })
                        .expect("fake kernels compile");
                    assert_eq!(loaded.kernel, FakeKernel::new(key).artifact_id().kernel);
                }
            });
        }
    });
    assert_eq!(finalized(&cache), 64, "each kernel compiled once");
    assert_eq!(keyed.len(), 64);
    let runs = factory_runs.load(Ordering::SeqCst);
    assert!(
        (64..=8 * 64).contains(&runs),
        "factories run on misses only: {runs}"
    );
    let before = factory_runs.load(Ordering::SeqCst);
    for key in 0..64 {
        keyed
            .get_or_insert_with(DEVICE, key, |_| -> (FakeKernel, ()) {
                panic!("a hit runs no factory")
            })
            .expect("a hit");
    }
    assert_eq!(factory_runs.load(Ordering::SeqCst), before);
}

// K5
#[test]
fn a_keyed_request_that_failed_runs_its_factory_again() {
    let cache = storeless();
    let keyed = cache.keyed::<&'static str>();
    let pending = keyed.request_or_insert_with("bad", |_| (FakeKernel::new(9).failing(), ()));
    pending.resolve(DEVICE).expect_err("it fails");
    let mut ran = false;
    let again = keyed.request_or_insert_with("bad", |_| {
        ran = true;
        (FakeKernel::new(9).failing(), ())
    });
    assert!(ran, "the failed request was not indexed");
    assert_eq!(again.id(), pending.id(), "the same request, still wanted");
    assert_eq!(cache.waiting_len(), 1);
}

// K6
#[test]
fn the_wrong_device_error_says_which_devices_and_what_to_do() {
    let cache = storeless();
    let error = cache
        .get(DeviceId::new("fake", 3), FakeKernel::new(0), ())
        .expect_err("another device");
    assert_eq!(
        error.to_string(),
        "this kernel cache serves device fake:0 and was asked from device fake:3: a kernel \
         loaded on one device cannot launch on another; use the cache of fake:3"
    );
    let other_backend = DeviceId::new("other", 0);
    assert!(cache.get(other_backend, FakeKernel::new(0), ()).is_err());
    assert_eq!(finalized(&cache), 0, "nothing was built");
}

// D3
#[test]
fn the_fake_compilers_remarks_reach_the_reporter_and_hits_stay_silent() {
    let cache = KernelCache::with_config(DEVICE, FakeTarget::persisting(), config());
    let heard = listen(&cache);
    for number in 0..3 {
        cache
            .get(DEVICE, FakeKernel::new(number), ())
            .expect("compiles");
    }
    cache
        .get(DEVICE, FakeKernel::new(0), ())
        .expect("from memory");
    cache
        .get(
            DEVICE,
            FakeKernel::new(10).sharing_source("fake kernel 1"),
            (),
        )
        .expect("rekeyed from the store by its source");
    {
        let heard = heard.lock().expect("no panic");
        assert_eq!(heard.len(), 3, "one report per compiled artifact");
        for record in heard.iter() {
            assert_eq!(record.outcome, KernelOutcome::Compiled);
            assert!(
                record
                    .diagnostics
                    .iter()
                    .any(|diagnostic| diagnostic.message.contains("registers spilled")),
                "the compiler's remark is in the report: {record:?}"
            );
        }
    }
    cache
        .get(DEVICE, FakeKernel::new(4).failing(), ())
        .expect_err("fails");
    assert_eq!(
        heard.lock().expect("no panic").len(),
        3,
        "a failed compile built no artifact"
    );
}

// D3
#[test]
fn a_reporter_may_build_on_its_own_cache() {
    let cache = storeless();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    cache.set_reporter(move |cache, record| {
        counted.fetch_add(1, Ordering::SeqCst);
        // The first report asks for one more kernel and builds it from
        // inside the callback: no lock of the cache is held here.
        if record.kernel == FakeKernel::new(0).artifact_id().kernel {
            cache
                .get(DEVICE, FakeKernel::new(1), ())
                .expect("fake kernels compile");
        }
    });
    cache.get(DEVICE, FakeKernel::new(0), ()).expect("compiles");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(cache.loaded_len(), 2);
    cache.remove_reporter();
    cache.get(DEVICE, FakeKernel::new(2), ()).expect("compiles");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "no reporter, no report");
}

// S1: a request counts with the collector open where it was made, whichever
// thread builds it.
#[test]
fn a_request_counts_where_it_was_made_and_settles_when_another_thread_builds_it() {
    let cache = storeless();
    let collector = StatisticsCollector::new();
    let pending = {
        let _scope = collector.open();
        let pending = cache.request(FakeKernel::new(0), ());
        cache.request(FakeKernel::new(0), ());
        pending
    };
    assert_eq!(
        collector.counts().registered,
        1,
        "a duplicate registers nothing"
    );
    std::thread::scope(|scope| {
        scope.spawn(|| cache.build().expect("compiles"));
    });
    assert!(pending.is_built());
    let counts = collector.counts();
    assert_eq!((counts.registered, counts.compiled), (1, 1));
}

// K4: a target that panics outside the loader's containment leaves every
// request of its batch waiting, and the cache usable.
#[test]
fn a_panicking_target_leaves_its_batch_waiting() {
    let cache = KernelCache::with_config(
        DEVICE,
        Hooked::new(FakeTarget::storeless(), {
            let mut first = true;
            move || {
                if std::mem::take(&mut first) {
                    panic!("the fake store fell over");
                }
            }
        }),
        config(),
    );
    let pending: Vec<_> = (0..3)
        .map(|number| cache.request(FakeKernel::new(number), ()))
        .collect();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cache.build()));
    assert!(panicked.is_err(), "the target's panic reached the builder");
    assert_eq!(cache.waiting_len(), 3, "its batch went back to the queue");
    for kernel in &pending {
        kernel.resolve(DEVICE).expect("the next batch builds it");
    }
}

#[test]
fn a_loaded_kernel_is_shared_not_copied() {
    let cache = storeless();
    let pending = cache.request(FakeKernel::new(0), ());
    let resolved = pending.resolve(DEVICE).expect("compiles").clone();
    let got = cache.get(DEVICE, FakeKernel::new(0), ()).expect("loaded");
    assert!(Arc::ptr_eq(&resolved, &got));
    let ids: HashSet<_> = [pending.id().clone(), pending.clone().id().clone()].into();
    assert_eq!(ids.len(), 1);
}

/// Collects every report of `cache`.
fn listen<T: CompilationTarget>(cache: &KernelCache<T>) -> Arc<Mutex<Vec<KernelRecord>>> {
    let heard: Arc<Mutex<Vec<KernelRecord>>> = Arc::default();
    let listener = heard.clone();
    cache.set_reporter(move |_, record| {
        listener.lock().expect("no panic").push(record.clone());
    });
    heard
}

/// A cache whose first batch stops at its start, before its first store
/// lookup, until the gate releases it.
fn gated(target: FakeTarget) -> (KernelCache<Hooked<FakeTarget>>, Gate) {
    let (entered_sender, entered) = channel();
    let (release, release_receiver) = channel::<()>();
    let mut armed = Some((entered_sender, release_receiver));
    let hook = move || {
        if let Some((entered, release)) = armed.take()
            && entered.send(()).is_ok()
        {
            let _ = release.recv();
        }
    };
    let cache = KernelCache::with_config(DEVICE, Hooked::new(target, hook), config());
    (cache, Gate { entered, release })
}

struct Gate {
    entered: Receiver<()>,
    release: Sender<()>,
}

impl Gate {
    fn wait_until_entered(&self) {
        self.entered.recv().expect("a batch reaches the gate");
    }

    fn release(&self) {
        let _ = self.release.send(());
    }
}

/// A cache whose device refuses the first `count` artifacts it is given.
fn refusing_first_loads(count: usize) -> (KernelCache<Refusing>, Arc<AtomicUsize>) {
    let refusals = Arc::new(AtomicUsize::new(0));
    let target = Refusing {
        inner: FakeTarget::storeless(),
        left: count,
        refusals: refusals.clone(),
    };
    (KernelCache::with_config(DEVICE, target, config()), refusals)
}

/// Gives the fake target behind a wrapper.
trait AsFake: CompilationTarget {
    fn fake(&self) -> &FakeTarget;
}

impl AsFake for FakeTarget {
    fn fake(&self) -> &FakeTarget {
        self
    }
}

/// The fake target, running a hook at the start of every batch: inside it,
/// under the build lock.
struct Hooked<T> {
    inner: T,
    hook: Box<dyn FnMut() + Send>,
}

impl<T> Hooked<T> {
    fn new(inner: T, hook: impl FnMut() + Send + 'static) -> Self {
        Self {
            inner,
            hook: Box::new(hook),
        }
    }
}

impl AsFake for Hooked<FakeTarget> {
    fn fake(&self) -> &FakeTarget {
        &self.inner
    }
}

impl CompilationTarget for Hooked<FakeTarget> {
    type Compiler = <FakeTarget as CompilationTarget>::Compiler;
    type Loaded = <FakeTarget as CompilationTarget>::Loaded;
    type Device = <FakeTarget as CompilationTarget>::Device;

    fn compiler(&self) -> &Arc<Self::Compiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<Self::Device> {
        self.inner.device_step()
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn batch_started(&mut self) {
        (self.hook)();
        self.inner.batch_started();
    }

    fn batch_finished(&mut self) {
        self.inner.batch_finished();
    }

    fn publish(
        &mut self,
        id: &ArtifactId<()>,
        artifact: &FakeArtifact,
        made: FakeModule,
    ) -> Result<Self::Loaded, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

/// The fake target, whose device refuses the first artifacts it is given.
struct Refusing {
    inner: FakeTarget,
    left: usize,
    refusals: Arc<AtomicUsize>,
}

impl CompilationTarget for Refusing {
    type Compiler = <FakeTarget as CompilationTarget>::Compiler;
    type Loaded = <FakeTarget as CompilationTarget>::Loaded;
    type Device = <FakeTarget as CompilationTarget>::Device;

    fn compiler(&self) -> &Arc<Self::Compiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<Self::Device> {
        self.inner.device_step()
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn publish(
        &mut self,
        id: &ArtifactId<()>,
        artifact: &FakeArtifact,
        made: FakeModule,
    ) -> Result<Self::Loaded, DeviceRefusal> {
        if self.left > 0 {
            self.left -= 1;
            self.refusals.fetch_add(1, Ordering::SeqCst);
            return Err(DeviceRefusal::new("the fake device is busy"));
        }
        self.inner.publish(id, artifact, made)
    }
}
