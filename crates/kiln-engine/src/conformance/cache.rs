//! The shared handle's rules (K) and its reporter (D3), each proved through
//! a [`KernelCache`] of the subject's target.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use super::{ConformanceSubject, config};
use crate::error::{CacheError, DeviceRefusal, KernelError};
use crate::handle::{KernelCache, PendingKernel};
use crate::id::{ArtifactId, DeviceId, KernelId};
use crate::kernel::Kernel;
use crate::statistics::{KernelOutcome, KernelRecord};
use crate::store::ArtifactStore;
use crate::target::{ArtifactOf, CompilationTarget, KernelOf, MadeOf, VariantOf};

/// The device the suite's caches serve.
const DEVICE: DeviceId = DeviceId::new("conformance", 0);
/// A device the suite's caches do not serve.
const OTHER_DEVICE: DeviceId = DeviceId::new("conformance", 1);

fn cache<S: ConformanceSubject>(subject: &S) -> KernelCache<S::Target> {
    KernelCache::with_config(DEVICE, subject.target(), config())
}

/// A cache whose first batch stops where it starts, before its first store
/// lookup, until the returned gate releases it, so that a test can act while a batch is
/// certainly in flight, on any backend.
fn gated_cache<S: ConformanceSubject>(subject: &S) -> (KernelCache<Gated<S::Target>>, Gate) {
    let (entered_sender, entered) = channel();
    let (release, release_receiver) = channel();
    let target = Gated {
        inner: subject.target(),
        gate: Some((entered_sender, release_receiver)),
    };
    let cache = KernelCache::with_config(DEVICE, target, config());
    (cache, Gate { entered, release })
}

/// The test's side of a [`Gated`] target.
struct Gate {
    entered: Receiver<()>,
    release: Sender<()>,
}

impl Gate {
    /// Returns once a batch is stopped inside the gate.
    fn wait_until_entered(&self) {
        self.entered
            .recv()
            .expect("a batch reaches the gated target's first lookup");
    }

    /// Lets the stopped batch go on.
    fn release(&self) {
        // A batch that already went on (its thread panicked) needs nothing.
        let _ = self.release.send(());
    }
}

/// A target that stops its first batch at its start, before its first store
/// lookup, until the test releases it; everything else goes to the target
/// it wraps.
struct Gated<T> {
    inner: T,
    gate: Option<(Sender<()>, Receiver<()>)>,
}

impl<T: CompilationTarget> CompilationTarget for Gated<T> {
    type Compiler = T::Compiler;
    type Loaded = T::Loaded;
    type Device = T::Device;

    fn compiler(&self) -> &Arc<Self::Compiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<T::Device> {
        self.inner.device_step()
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn keeps(&self, variant: &VariantOf<T>) -> bool {
        self.inner.keeps(variant)
    }

    fn batch_started(&mut self) {
        if let Some((entered, release)) = self.gate.take() {
            // A test that stopped listening (it panicked) must not block the
            // batch for ever: either end hung up lets it go on.
            if entered.send(()).is_ok() {
                let _ = release.recv();
            }
        }
        self.inner.batch_started();
    }

    fn found(&mut self, id: &ArtifactId<VariantOf<T>>, artifact: &ArtifactOf<T>) {
        self.inner.found(id, artifact);
    }

    fn batch_finished(&mut self) {
        self.inner.batch_finished();
    }

    fn publish(
        &mut self,
        id: &ArtifactId<VariantOf<T>>,
        artifact: &ArtifactOf<T>,
        made: MadeOf<T>,
    ) -> Result<T::Loaded, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

/// The kernel error inside `error`, which must be one kernel's failure.
fn kernel_error(error: CacheError) -> KernelError {
    match error {
        CacheError::Kernel(error) => error,
        other => panic!("a kernel's own failure was expected: {other}"),
    }
}

/// The failed kernels of a build's error, which must be a batch failure.
fn failed_kernels(error: CacheError) -> Vec<KernelId> {
    match error {
        CacheError::Build(failure) => failure
            .failures
            .into_iter()
            .map(|failure| failure.kernel)
            .collect(),
        other => panic!("a build's failure was expected: {other}"),
    }
}

/// K1: a request compiles nothing; the first resolve of any pending kernel
/// builds every outstanding request, in one batch.
pub fn k1_requests_compile_nothing_until_one_batch_builds_them_all<S: ConformanceSubject>(
    subject: &S,
) {
    let cache = cache(subject);
    let pending: Vec<_> = (0..3)
        .map(|index| cache.request(subject.distinct(index), subject.variant()))
        .collect();
    assert_eq!(cache.waiting_len(), 3);
    assert!(cache.records().is_empty(), "a request ran no batch");
    assert_eq!(cache.statistics().compiled, 0, "a request compiled nothing");
    assert!(pending.iter().all(|kernel| !kernel.is_built()));

    pending[2].resolve(DEVICE).expect("a valid kernel loads");
    assert_eq!(cache.records().len(), 1, "one batch");
    assert_eq!(cache.records()[0].kernels, 3, "every outstanding request");
    assert!(pending.iter().all(PendingKernel::is_built));

    pending[0].resolve(DEVICE).expect("a built kernel resolves");
    cache.build().expect("nothing is left to build");
    assert_eq!(
        cache.records().len(),
        1,
        "a built kernel and an empty build ran no batch"
    );
}

/// K2: a request already waiting or loaded is not added twice.
pub fn k2_a_request_is_not_added_twice<S: ConformanceSubject>(subject: &S) {
    let cache = cache(subject);
    let first = cache.request(subject.distinct(0), subject.variant());
    let second = cache.request(subject.distinct(0), subject.variant());
    assert_eq!(
        cache.waiting_len(),
        1,
        "a waiting request is not added again"
    );
    assert_eq!(first.id(), second.id());

    second.resolve(DEVICE).expect("a valid kernel loads");
    assert!(first.is_built(), "both handles name the one request");
    let third = cache.request(subject.distinct(0), subject.variant());
    assert_eq!(cache.waiting_len(), 0, "a loaded kernel is not added again");
    assert!(third.is_built());
    assert_eq!(cache.records()[0].kernels, 1);
}

/// K2: requests made while a batch builds are accepted at once; the kernel
/// being built is not added again, and a new one survives into the next
/// batch.
pub fn k2_requests_made_during_a_build_survive_it<S: ConformanceSubject>(subject: &S) {
    let (cache, gate) = gated_cache(subject);
    let building = cache.request(subject.distinct(0), subject.variant());
    let (again, later) = std::thread::scope(|scope| {
        let builder = scope.spawn(|| cache.build());
        gate.wait_until_entered();
        assert_eq!(cache.waiting_len(), 0, "the batch took every request");
        // The batch is stopped inside the build lock: these return at once
        // or the test never ends.
        let again = cache.request(subject.distinct(0), subject.variant());
        let later = cache.request(subject.distinct(1), subject.variant());
        assert_eq!(
            cache.waiting_len(),
            1,
            "the kernel being built was not added again"
        );
        gate.release();
        builder
            .join()
            .expect("the build does not panic")
            .expect("a valid kernel builds");
        (again, later)
    });
    assert!(building.is_built() && again.is_built());
    assert!(
        !later.is_built(),
        "a request made during a batch is not in it"
    );
    assert_eq!(cache.waiting_len(), 1, "it survived the batch");

    later.resolve(DEVICE).expect("a valid kernel loads");
    let records = cache.records();
    assert_eq!(records.len(), 2);
    assert_eq!((records[0].kernels, records[1].kernels), (1, 1));
}

/// K3: a failed request stays wanted and is reported by every build until
/// it succeeds; a resolve returns its own kernel's failure, not the first of
/// its batch.
pub fn k3_a_failed_request_stays_wanted_and_resolves_to_its_own_failure<S: ConformanceSubject>(
    subject: &S,
) {
    let cache = cache(subject);
    let good = cache.request(subject.distinct(0), subject.variant());
    let first_failing = cache.request(subject.failing(0), subject.variant());
    let second_failing = cache.request(subject.failing(1), subject.variant());

    let error = kernel_error(
        second_failing
            .resolve(DEVICE)
            .expect_err("an invalid kernel fails"),
    );
    assert_eq!(
        error.kernel,
        subject.failing(1).id(),
        "its own failure, not the first of the batch"
    );
    assert!(good.is_built(), "the rest of the batch loaded");
    assert_eq!(cache.waiting_len(), 2, "both failures are wanted still");

    let failed = failed_kernels(cache.build().expect_err("the failures fail again"));
    assert_eq!(failed, [subject.failing(0).id(), subject.failing(1).id()]);
    assert_eq!(cache.records().len(), 2, "the build tried them again");
    assert_eq!(cache.records()[1].kernels, 2);

    let error = kernel_error(
        first_failing
            .resolve(DEVICE)
            .expect_err("it fails every time"),
    );
    assert_eq!(error.kernel, subject.failing(0).id());
    assert_eq!(cache.records().len(), 3, "the resolve tried again");
    assert_eq!(cache.waiting_len(), 2);
}

/// K4: a build that starts while a batch is in flight waits for it, then
/// looks for more work, finds the failure that batch put back, and tries it
/// again.
pub fn k4_a_concurrent_build_waits_for_the_batch_in_flight_then_retries_its_failure<
    S: ConformanceSubject,
>(
    subject: &S,
) {
    let (cache, gate) = gated_cache(subject);
    let failing = cache.request(subject.failing(0), subject.variant());
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| cache.build());
        gate.wait_until_entered();
        let second = scope.spawn(|| cache.build());
        // Bounded by progress, not by time: the second build either blocks
        // behind the batch in flight, or returns, which is the bug.
        while cache.threads_waiting() == 0 {
            assert!(
                !second.is_finished(),
                "a build returned while a batch was in flight"
            );
            std::thread::yield_now();
        }
        gate.release();
        let first = first.join().expect("the first build does not panic");
        let second = second.join().expect("the second build does not panic");
        (first, second)
    });
    let own = [subject.failing(0).id()];
    assert_eq!(failed_kernels(first.expect_err("it fails")), own);
    assert_eq!(
        failed_kernels(second.expect_err("it waited, then tried the failure again")),
        own
    );
    let records = cache.records();
    assert_eq!(records.len(), 2, "two batches, one after the other");
    assert_eq!(records[1].count(KernelOutcome::Failed), 1);
    assert!(!failing.is_built());
    assert_eq!(cache.waiting_len(), 1, "still wanted");
}

/// K5: a keyed lookup runs its factory only on a miss, and a failed kernel
/// is not indexed.
pub fn k5_a_keyed_hit_runs_no_factory_and_a_failure_is_not_indexed<S: ConformanceSubject>(
    subject: &S,
) {
    let cache = cache(subject);
    let keyed = cache.keyed::<u32>();
    let factory_runs = AtomicUsize::new(0);
    let make = |kernel: Box<KernelOf<S::Target>>| {
        factory_runs.fetch_add(1, Ordering::SeqCst);
        (kernel, subject.variant())
    };
    let no_factory = |_: &u32| -> (Box<KernelOf<S::Target>>, VariantOf<S::Target>) {
        panic!("a hit runs no factory")
    };

    keyed
        .get_or_insert_with(DEVICE, 7, |_| make(subject.distinct(0)))
        .expect("a valid kernel loads");
    keyed
        .get_or_insert_with(DEVICE, 7, no_factory)
        .expect("a hit");
    let pending = keyed.request_or_insert_with(8, |_| make(subject.distinct(1)));
    let hit = keyed.request_or_insert_with(8, no_factory);
    assert_eq!(pending.id(), hit.id());
    keyed
        .get_or_insert_with(DEVICE, 8, no_factory)
        .expect("an indexed request builds");
    assert_eq!(factory_runs.load(Ordering::SeqCst), 2);
    assert_eq!(cache.records().len(), 2);

    for attempt in 1..=2 {
        keyed
            .get_or_insert_with(DEVICE, 9, |_| make(subject.failing(0)))
            .expect_err("an invalid kernel fails");
        assert_eq!(
            factory_runs.load(Ordering::SeqCst),
            2 + attempt,
            "the failed kernel was not indexed"
        );
    }
    assert_eq!(keyed.len(), 2);
}

/// K6: a cache serves one device; asked from another, it says so, builds
/// nothing and hands out nothing.
pub fn k6_a_cache_refuses_another_device<S: ConformanceSubject>(subject: &S) {
    let cache = cache(subject);
    assert_eq!(cache.device(), DEVICE);
    let pending = cache.request(subject.distinct(0), subject.variant());
    let refused = |error: CacheError| {
        assert_eq!(
            error,
            CacheError::WrongDevice {
                owner: DEVICE,
                used: OTHER_DEVICE
            }
        );
        let message = error.to_string();
        assert!(
            message.contains(&DEVICE.to_string()) && message.contains(&OTHER_DEVICE.to_string()),
            "the error names both devices: {message}"
        );
    };
    refused(pending.resolve(OTHER_DEVICE).expect_err("another device"));
    refused(
        cache
            .get(OTHER_DEVICE, subject.distinct(1), subject.variant())
            .expect_err("another device"),
    );
    refused(
        cache
            .keyed::<u8>()
            .get_or_insert_with(OTHER_DEVICE, 0, |_| {
                (subject.distinct(2), subject.variant())
            })
            .expect_err("another device"),
    );
    assert!(cache.records().is_empty(), "nothing was built for it");

    pending.resolve(DEVICE).expect("its own device");
    refused(
        pending
            .resolve(OTHER_DEVICE)
            .expect_err("a built kernel is not handed to another device either"),
    );
}

/// D3: a reporter hears the record of each artifact a build compiled, once,
/// with the compiler's warnings; never a kernel served from memory, sharing
/// another's artifact, or read from the store.
pub fn d3_a_reporter_hears_each_built_artifact_once<S: ConformanceSubject>(subject: &S) {
    let cache = cache(subject);
    let heard: Arc<Mutex<Vec<KernelRecord>>> = Arc::default();
    let listener = heard.clone();
    cache.set_reporter(move |_, record| {
        listener
            .lock()
            .expect("the listener does not panic")
            .push(record.clone());
    });
    let mut pending: Vec<_> = (0..3)
        .map(|index| cache.request(subject.distinct(index), subject.variant()))
        .collect();
    for index in 0..2 {
        pending.push(cache.request(subject.sharing_source(index), subject.variant()));
    }
    cache.build().expect("valid kernels build");
    for kernel in &pending {
        kernel.resolve(DEVICE).expect("built");
    }
    cache.build().expect("nothing is left to build");

    let batch = &cache.records()[0];
    let compiled: Vec<&KernelRecord> = batch
        .records
        .iter()
        .filter(|record| record.outcome == KernelOutcome::Compiled)
        .collect();
    {
        let heard = heard.lock().expect("the listener does not panic");
        assert_eq!(heard.len(), compiled.len(), "once per built artifact");
        for (reported, record) in heard.iter().zip(&compiled) {
            assert_eq!(reported.kernel, record.kernel);
            assert_eq!(
                reported.diagnostics, record.diagnostics,
                "the compile's warnings reach the reporter"
            );
        }
    }

    if !cache.with_target(|target| target.store().is_some()) {
        return;
    }
    drop(pending);
    let target = cache
        .into_target()
        .unwrap_or_else(|_| panic!("no other handle of the cache lives"));
    let warm = KernelCache::with_config(DEVICE, target, config());
    let listener = heard.clone();
    warm.set_reporter(move |_, record| {
        listener
            .lock()
            .expect("the listener does not panic")
            .push(record.clone());
    });
    warm.get(DEVICE, subject.distinct(0), subject.variant())
        .expect("a stored kernel loads");
    assert_eq!(warm.records()[0].count(KernelOutcome::FromStore), 1);
    assert_eq!(
        heard.lock().expect("the listener does not panic").len(),
        compiled.len(),
        "a store hit is not reported"
    );
}

/// D3: a reporter can replace itself from inside its own call, without
/// deadlock; the next artifact goes to the new one.
pub fn d3_a_reporter_replaces_itself_from_inside<S: ConformanceSubject>(subject: &S) {
    let cache = cache(subject);
    let calls = Arc::new(AtomicUsize::new(0));
    let first_calls = calls.clone();
    cache.set_reporter(move |cache, _| {
        first_calls.fetch_add(1, Ordering::SeqCst);
        let next_calls = first_calls.clone();
        cache.set_reporter(move |_, _| {
            next_calls.fetch_add(10, Ordering::SeqCst);
        });
    });
    cache
        .get(DEVICE, subject.distinct(0), subject.variant())
        .expect("a valid kernel loads");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the first reporter heard it"
    );
    cache
        .get(DEVICE, subject.distinct(1), subject.variant())
        .expect("a valid kernel loads");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        11,
        "the reporter it put in its place heard the next"
    );
}
