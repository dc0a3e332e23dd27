//! The conformance suite: the loader's rules (L), statistics (S),
//! diagnostics (D) and the shared handle's rules (K), proved against any
//! [`CompilationTarget`].
//!
//! Every backend runs the same checks against its real compiler, so a rule
//! holds on every backend or the backend's tests fail. A backend describes
//! how to make its kernels with a [`ConformanceSubject`] and instantiates
//! the suite with [`conformance_suite!`](crate::conformance_suite):
//!
//! ```
//! # mod example {
//! use kiln_core::conformance::ConformanceSubject;
//! use kiln_core::fake::{FakeKernel, FakeTarget};
//!
//! struct FakeSubject;
//!
//! impl ConformanceSubject for FakeSubject {
//!     type Target = FakeTarget;
//!     fn target(&self) -> FakeTarget { FakeTarget::persisting() }
//!     fn variant(&self) {}
//!     fn distinct(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(index as u32))
//!     }
//!     fn sharing_source(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(1000 + index as u32).sharing_source("shared"))
//!     }
//!     fn failing(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(2000 + index as u32).failing())
//!     }
//! }
//!
//! // In a test module: one `#[test]` per rule.
//! kiln_core::conformance_suite!(Ok::<_, String>(FakeSubject));
//! # }
//! ```
//!
//! A subject that needs hardware returns `Err(reason)` when it is missing:
//! each test then prints that it skipped and why, or fails when
//! `KILN_REQUIRE_DEVICE=1`.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::LoaderConfig;
use crate::diagnostic::Severity;
use crate::error::{CacheError, DeviceRefusal, Failure, KernelError, Stage};
use crate::handle::{DeviceId, KernelCache, PendingKernel};
use crate::id::{ArtifactId, KernelId};
use crate::kernel::Kernel;
use crate::loader::KernelLoader;
use crate::statistics::{KernelOutcome, KernelRecord, StatisticsCollector};
use crate::target::{ArtifactOf, CompilationTarget, KernelOf, Lookup, StoreOutcome, VariantOf};

/// How the suite makes kernels for one backend.
pub trait ConformanceSubject {
    /// The target under test. It is `Send`, and so are its loaded kernels,
    /// because the shared [`KernelCache`] builds on whichever thread asks
    /// first and hands loaded kernels to every thread (the K rules).
    type Target: CompilationTarget<Loaded: Send + Sync> + Send;

    /// A fresh target: its store, if it has one, holds nothing.
    fn target(&self) -> Self::Target;

    /// The variant kernels are compiled under.
    fn variant(&self) -> VariantOf<Self::Target>;

    /// A valid kernel; different indices give different ids and different
    /// source text.
    fn distinct(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// A valid kernel; different indices give different ids and identical
    /// source text.
    fn sharing_source(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// A kernel whose source fails to compile with located errors;
    /// different indices give different ids.
    fn failing(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// A kernel whose generator panics, if the backend's kernels run user
    /// generators.
    fn panicking(&self, _index: usize) -> Option<Box<KernelOf<Self::Target>>> {
        None
    }

    /// A kernel that compiles and that the device refuses, if the backend
    /// can make one.
    fn refused(&self, _index: usize) -> Option<Box<KernelOf<Self::Target>>> {
        None
    }

    /// Switches `target` to another store, as opening another root does;
    /// `false` when the target cannot.
    fn switch_store(&self, _target: &mut Self::Target) -> bool {
        false
    }
}

/// The subject, or `None` after printing why the suite skips; panics instead
/// when `KILN_REQUIRE_DEVICE=1`.
pub fn available<S>(subject: Result<S, String>) -> Option<S> {
    match subject {
        Ok(subject) => Some(subject),
        Err(reason) => {
            skip("the conformance suite", &reason);
            None
        }
    }
}

/// Prints that `what` is skipped and why, or panics when
/// `KILN_REQUIRE_DEVICE=1` asks for every test to run.
///
/// The line goes straight to the process's standard error rather than
/// through `eprintln!`, which the test harness captures and shows only for
/// failing tests: a skip must be visible in every log, passing runs too.
pub fn skip(what: &str, reason: &str) {
    if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
        panic!("{what} cannot run and KILN_REQUIRE_DEVICE=1: {reason}");
    }
    say(&format!("skipped {what}: {reason}"));
}

/// Prints that `rule` does not apply to this subject and why. Unlike
/// [`skip`], this is no missing hardware: a storeless target has no store
/// hits to prove, whatever machine runs it, so it never fails the run.
fn not_applicable(rule: &str, reason: &str) {
    say(&format!("{rule} does not apply here: {reason}"));
}

/// Writes one line to standard error, past the test harness's capture.
fn say(line: &str) {
    use std::io::Write;
    // A closed standard error leaves nowhere to say it: nothing to do.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn loader<S: ConformanceSubject>(subject: &S) -> KernelLoader<S::Target> {
    loader_on(subject.target())
}

fn loader_on<T: CompilationTarget>(target: T) -> KernelLoader<T> {
    KernelLoader::with_config(target, config())
}

fn config() -> LoaderConfig {
    LoaderConfig {
        parallelism: NonZeroUsize::new(4).expect("4 is not zero"),
        ..LoaderConfig::default()
    }
}

fn id_of<S: ConformanceSubject>(
    subject: &S,
    kernel: &KernelOf<S::Target>,
) -> ArtifactId<VariantOf<S::Target>> {
    ArtifactId::new(kernel.id(), subject.variant())
}

/// L1: queuing compiles nothing, and a kernel loaded or queued is not
/// queued twice.
pub fn l1_queuing_compiles_nothing<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    let collector = StatisticsCollector::new();
    let _scope = collector.open();
    for index in 0..3 {
        loader.enqueue(subject.distinct(index), subject.variant());
        loader.enqueue(subject.distinct(index), subject.variant());
    }
    assert_eq!(loader.queued_len(), 3, "each kernel is queued once");
    assert!(loader.records().is_empty(), "queuing ran no batch");
    assert_eq!(collector.counts().compiled, 0, "queuing compiled nothing");
    assert_eq!(collector.counts().registered, 3);

    loader.compile_queued();
    loader.enqueue(subject.distinct(0), subject.variant());
    assert_eq!(
        loader.queued_len(),
        0,
        "a loaded kernel is not queued again"
    );
}

/// L1, L7: queuing a kernel whose failure is unreported drops the failure
/// and tries it again.
pub fn l1_a_failure_queued_again_is_retried<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    loader.enqueue(subject.failing(0), subject.variant());
    loader.compile_queued();
    loader.enqueue(subject.failing(0), subject.variant());
    assert_eq!(loader.queued_len(), 1, "the failed kernel is queued again");
    loader.compile_queued();
    assert_eq!(loader.records().len(), 2, "it compiled again");
    assert_eq!(loader.records()[1].count(KernelOutcome::Failed), 1);
}

/// L2: a loaded kernel with nothing queued is served without a batch.
pub fn l2_a_loaded_kernel_is_served_without_a_batch<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    let kernel = subject.distinct(0);
    let id = id_of(subject, &kernel);
    loader.load(&kernel, &id).expect("a valid kernel loads");
    let collector = StatisticsCollector::new();
    let _scope = collector.open();
    for _ in 0..100 {
        loader.load(&kernel, &id).expect("a loaded kernel loads");
    }
    assert_eq!(
        loader.records().len(),
        1,
        "no batch ran for a loaded kernel"
    );
    assert_eq!(
        collector.counts().registered,
        0,
        "a kernel served from memory is not registered again"
    );
}

/// L3: a load compiles the whole queue with the kernel asked for, in one
/// batch.
pub fn l3_a_load_compiles_the_whole_queue_in_one_batch<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    for index in 0..3 {
        loader.enqueue(subject.distinct(index), subject.variant());
    }
    let asked = subject.distinct(3);
    let asked_id = id_of(subject, &asked);
    loader
        .load(&asked, &asked_id)
        .expect("a valid kernel loads");
    assert_eq!(loader.records().len(), 1);
    assert_eq!(
        loader.records()[0].kernels,
        4,
        "the queue and the asked kernel"
    );
    for index in 0..3 {
        let kernel = subject.distinct(index);
        assert!(
            loader.is_loaded(&id_of(subject, &kernel)),
            "queued kernel {index} loaded"
        );
    }
}

/// L3: a loaded kernel still compiles a non-empty queue before it answers.
pub fn l3_a_loaded_kernel_still_compiles_the_queue<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    let kernel = subject.distinct(0);
    let id = id_of(subject, &kernel);
    loader.load(&kernel, &id).expect("a valid kernel loads");
    loader.enqueue(subject.distinct(1), subject.variant());
    loader.load(&kernel, &id).expect("a loaded kernel loads");
    assert_eq!(
        loader.queued_len(),
        0,
        "the queue compiled before the launch"
    );
    assert_eq!(loader.records().len(), 2);
    assert_eq!(
        loader.records()[1].kernels,
        1,
        "only the queued kernel compiled"
    );
}

/// L4: `compile_queued` compiles the queue without a launch; the launch
/// after it runs no batch.
pub fn l4_compile_queued_leaves_one_lookup<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    for index in 0..3 {
        loader.enqueue(subject.distinct(index), subject.variant());
    }
    loader.compile_queued();
    assert_eq!(loader.records().len(), 1);
    for index in 0..3 {
        let kernel = subject.distinct(index);
        loader
            .load(&kernel, &id_of(subject, &kernel))
            .expect("a compiled kernel loads");
    }
    assert_eq!(loader.records().len(), 1, "the launches ran no batch");
}

/// L5: a batch of several missing kernels runs on several workers, and wall
/// time stays under the summed work (S3).
pub fn l5_a_batch_runs_on_several_workers<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    for index in 0..6 {
        loader.enqueue(subject.distinct(index), subject.variant());
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.kernels, 6);
    assert!(
        batch.workers > 1,
        "6 kernels on 4 workers used {}",
        batch.workers
    );
    assert_eq!(batch.count(KernelOutcome::Compiled), 6);
}

/// L5c, P7: kernels with identical source share one artifact when the target
/// persists; every kernel finalizes its own when it does not.
pub fn l5_kernels_sharing_a_source_share_one_artifact<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    for index in 0..4 {
        loader.enqueue(subject.sharing_source(index), subject.variant());
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    if loader.target().persists() {
        assert_eq!(
            batch.count(KernelOutcome::Compiled),
            1,
            "one source, one compile"
        );
        assert_eq!(batch.count(KernelOutcome::Rekeyed), 3);
    } else {
        assert_eq!(
            batch.count(KernelOutcome::Compiled),
            4,
            "no store to share by"
        );
    }
    for index in 0..4 {
        let kernel = subject.sharing_source(index);
        assert!(loader.is_loaded(&id_of(subject, &kernel)));
    }
}

/// L5a: a kernel the store holds is read from it, not compiled, by the next
/// loader on the same store.
pub fn l5_a_stored_kernel_is_not_compiled_again<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    if !loader.target().persists() {
        not_applicable("L5a (store hits)", "the target keeps nothing");
        return;
    }
    loader.enqueue(subject.distinct(0), subject.variant());
    loader.compile_queued();
    assert!(loader.records()[0].stored, "a compiled kernel is stored");

    let mut next = loader_on(loader.into_target());
    let kernel = subject.distinct(0);
    next.load(&kernel, &id_of(subject, &kernel))
        .expect("a stored kernel loads");
    assert_eq!(next.records()[0].count(KernelOutcome::FromStore), 1);
    assert_eq!(next.statistics().hits, 1);
    assert_eq!(next.statistics().compiled, 0);
}

/// L6: a kernel that fails fails alone; the rest of its batch loads and the
/// loader stays usable.
pub fn l6_a_failure_fails_alone<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    loader.enqueue(subject.distinct(0), subject.variant());
    loader.enqueue(subject.failing(0), subject.variant());
    loader.enqueue(subject.distinct(1), subject.variant());
    loader.compile_queued();
    let failing = subject.failing(0);
    let error = loader
        .load(&failing, &id_of(subject, &failing))
        .expect_err("an invalid kernel fails");
    assert_eq!(error.kernel, failing.id(), "the error names its own kernel");
    for index in 0..2 {
        let kernel = subject.distinct(index);
        assert!(
            loader.is_loaded(&id_of(subject, &kernel)),
            "kernel {index} loaded"
        );
    }
    let later = subject.distinct(2);
    loader
        .load(&later, &id_of(subject, &later))
        .expect("the loader is still usable");
}

/// L7: a failure is reported once by its own load without compiling again;
/// the load after that tries again.
pub fn l7_a_failure_is_reported_once_then_retried<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    loader.enqueue(subject.failing(0), subject.variant());
    loader.compile_queued();
    let failing = subject.failing(0);
    let id = id_of(subject, &failing);
    loader
        .load(&failing, &id)
        .expect_err("it failed in the batch");
    assert_eq!(loader.records().len(), 1, "reporting compiled nothing");
    loader.load(&failing, &id).expect_err("it fails again");
    assert_eq!(loader.records().len(), 2, "the next load tried again");
}

/// L7: a batch drops failures left unreported, so a kernel whose load never
/// came compiles afresh.
pub fn l7_a_stale_failure_compiles_again<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    loader.enqueue(subject.failing(0), subject.variant());
    loader.compile_queued();
    loader.enqueue(subject.distinct(0), subject.variant());
    loader.compile_queued();
    let failing = subject.failing(0);
    loader
        .load(&failing, &id_of(subject, &failing))
        .expect_err("it still fails");
    assert_eq!(
        loader.records().len(),
        3,
        "the stale failure compiled afresh"
    );
}

/// L8: a panicking generator fails only its own kernel, with the panic's
/// message.
pub fn l8_a_panic_fails_only_its_kernel<S: ConformanceSubject>(subject: &S) {
    let Some(panicking) = subject.panicking(0) else {
        not_applicable("L8", "the subject has no panicking kernel");
        return;
    };
    let mut loader = loader(subject);
    loader.enqueue(subject.distinct(0), subject.variant());
    let id = id_of(subject, &panicking);
    let error = loader
        .load(&panicking, &id)
        .expect_err("a panic is a failure");
    assert!(
        matches!(error.failure, Failure::Panicked { .. }),
        "a panic fails as a panic: {error}"
    );
    let kernel = subject.distinct(0);
    assert!(
        loader.is_loaded(&id_of(subject, &kernel)),
        "its batch loaded"
    );
}

/// L9: an artifact the device refuses is that kernel's failure, neither kept
/// loaded nor stored.
pub fn l9_a_refused_kernel_is_neither_kept_nor_stored<S: ConformanceSubject>(subject: &S) {
    let Some(refused) = subject.refused(0) else {
        not_applicable("L9", "the subject cannot make a kernel the device refuses");
        return;
    };
    let mut loader = loader(subject);
    let id = id_of(subject, &refused);
    let error = loader
        .load(&refused, &id)
        .expect_err("the device refuses it");
    assert_eq!(error.stage, Stage::Load);
    assert!(matches!(error.failure, Failure::Refused(_)), "{error}");
    assert!(!loader.is_loaded(&id), "a refused kernel is not kept");
    assert!(
        !loader.records()[0].stored,
        "a refused artifact is not stored"
    );
    assert_eq!(loader.statistics().refused, 1);
}

/// L10: when the store switches, the next access drops every loaded kernel
/// and loads from the new store.
pub fn l10_a_store_switch_reloads<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    if !loader.target().persists() {
        not_applicable("L10", "a storeless loader never resets");
        return;
    }
    let kernel = subject.distinct(0);
    let id = id_of(subject, &kernel);
    loader.load(&kernel, &id).expect("a valid kernel loads");
    if !subject.switch_store(loader.target_mut()) {
        not_applicable("L10", "the subject cannot switch its target's store");
        return;
    }
    assert!(
        !loader.is_loaded(&id),
        "the switch dropped the loaded kernel"
    );
    loader
        .load(&kernel, &id)
        .expect("it loads from the new store");
    assert_eq!(
        loader.records().len(),
        2,
        "it loaded again after the switch"
    );
}

/// S1, S2: a collector counts what registered in its scope, each kernel
/// settles once per attempt, and a retry registers again.
pub fn s1_a_collector_counts_what_registered_in_its_scope<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    let collector = StatisticsCollector::new();
    {
        let _scope = collector.open();
        loader.enqueue(subject.distinct(0), subject.variant());
        loader.enqueue(subject.failing(0), subject.variant());
    }
    // Queued with no collector open: counts nowhere.
    loader.enqueue(subject.distinct(1), subject.variant());
    // The batch runs after the scope closed; its kernels still settle there.
    loader.compile_queued();
    let counts = collector.counts();
    assert_eq!(counts.registered, 2);
    assert_eq!(counts.compiled + counts.loaded, 1);
    assert_eq!(counts.failed, 1);

    // S2: a retry registers and settles again.
    let _scope = collector.open();
    let failing = subject.failing(0);
    let id = id_of(subject, &failing);
    loader.load(&failing, &id).expect_err("reported");
    loader.load(&failing, &id).expect_err("retried");
    let counts = collector.counts();
    assert_eq!(counts.registered, 3, "the retry registered");
    assert_eq!(counts.failed, 2, "each attempt settled once");
}

/// S1: a queue dropped with its loader leaves its kernels abandoned.
pub fn s1_a_dropped_queue_is_abandoned<S: ConformanceSubject>(subject: &S) {
    let collector = StatisticsCollector::new();
    {
        let mut loader = loader(subject);
        let _scope = collector.open();
        loader.enqueue(subject.distinct(0), subject.variant());
    }
    assert_eq!(collector.counts().abandoned, 1);
}

/// S3: records hold each kernel's outcome and work, and the batch's wall
/// time and workers.
pub fn s3_records_hold_outcomes_and_work<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    loader.enqueue(subject.distinct(0), subject.variant());
    loader.enqueue(subject.failing(0), subject.variant());
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.kernels, 2);
    assert_eq!(batch.records.len(), 2);
    let compiled = &batch.records[0];
    assert_eq!(compiled.kernel, subject.distinct(0).id());
    assert_eq!(compiled.outcome, KernelOutcome::Compiled);
    assert!(!compiled.work.is_zero(), "a compile takes time");
    assert_eq!(compiled.stored, loader.target().persists());
    let failed = &batch.records[1];
    assert_eq!(failed.outcome, KernelOutcome::Failed);
    assert!(failed.error.is_some());
    assert!(!batch.wall.is_zero());
}

/// S4: the statistics snapshot adds up the batches.
pub fn s4_statistics_add_up<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    for index in 0..3 {
        loader.enqueue(subject.distinct(index), subject.variant());
    }
    loader.enqueue(subject.failing(0), subject.variant());
    loader.compile_queued();
    let statistics = loader.statistics();
    assert_eq!(statistics.compiled, 3);
    assert_eq!(statistics.failed, 1);
    assert_eq!(statistics.misses, 4);
    assert!(statistics.compile_seconds > 0.0);
    if loader.target().persists() {
        assert_eq!(statistics.stored, 3);
        assert!(statistics.bytes_written > 0);
    }
}

/// D1, D2: a compile failure leads with its first error, located, and keeps
/// every diagnostic with its severity.
pub fn d2_a_failure_leads_with_its_first_error<S: ConformanceSubject>(subject: &S) {
    let mut loader = loader(subject);
    let failing = subject.failing(0);
    let error = loader
        .load(&failing, &id_of(subject, &failing))
        .expect_err("an invalid kernel fails");
    let failure = error
        .compile_failure()
        .unwrap_or_else(|| panic!("a compile error carries its diagnostics: {error}"));
    let first = failure
        .first_error()
        .expect("a failed compile has an error");
    assert_eq!(first.severity, Severity::Error);
    assert!(
        first.location.is_some(),
        "the first error is located: {first}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&first.to_string()),
        "the message leads with the first error: {message}"
    );
    if failure.suppressed_errors() > 0 {
        assert!(
            message.contains("suppressed"),
            "the cascade is counted: {message}"
        );
    }
}

/// The device the suite's caches serve.
const DEVICE: DeviceId = DeviceId::new("conformance", 0);
/// A device the suite's caches do not serve.
const OTHER_DEVICE: DeviceId = DeviceId::new("conformance", 1);

fn cache<S: ConformanceSubject>(subject: &S) -> KernelCache<S::Target> {
    KernelCache::with_config(DEVICE, subject.target(), config())
}

/// A cache whose first batch stops at its first store lookup until the
/// returned gate releases it, so that a test can act while a batch is
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

/// A target that stops its first store lookup until the test releases it;
/// everything else goes to the target it wraps.
struct Gated<T> {
    inner: T,
    gate: Option<(Sender<()>, Receiver<()>)>,
}

impl<T: CompilationTarget> CompilationTarget for Gated<T> {
    type Compiler = T::Compiler;
    type Loaded = T::Loaded;

    fn compiler(&self) -> &Self::Compiler {
        self.inner.compiler()
    }

    fn persists(&self) -> bool {
        self.inner.persists()
    }

    fn generation(&self) -> u64 {
        self.inner.generation()
    }

    fn batch_finished(&mut self) {
        self.inner.batch_finished();
    }

    fn lookup(&mut self, id: &ArtifactId<VariantOf<T>>) -> Lookup<ArtifactOf<T>> {
        if let Some((entered, release)) = self.gate.take() {
            // A test that stopped listening (it panicked) must not block the
            // batch for ever: either end hung up lets it go on.
            if entered.send(()).is_ok() {
                let _ = release.recv();
            }
        }
        self.inner.lookup(id)
    }

    fn lookup_source(
        &mut self,
        id: &ArtifactId<VariantOf<T>>,
        source: &str,
    ) -> Lookup<ArtifactOf<T>> {
        self.inner.lookup_source(id, source)
    }

    fn store(
        &mut self,
        id: &ArtifactId<VariantOf<T>>,
        artifact: &ArtifactOf<T>,
        source: Option<&str>,
        work: Duration,
    ) -> StoreOutcome {
        self.inner.store(id, artifact, source, work)
    }

    fn load(
        &mut self,
        id: &ArtifactId<VariantOf<T>>,
        artifact: &ArtifactOf<T>,
    ) -> Result<T::Loaded, DeviceRefusal> {
        self.inner.load(id, artifact)
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

    if !cache.with_target(|target| target.persists()) {
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

/// Instantiates the conformance suite: one `#[test]` per rule, each making
/// its subject with `$subject`, an expression of type
/// `Result<impl ConformanceSubject, String>` (`Err` says why the suite
/// cannot run here).
#[macro_export]
macro_rules! conformance_suite {
    ($subject:expr) => {
        $crate::conformance_suite!(@tests $subject;
            l1_queuing_compiles_nothing,
            l1_a_failure_queued_again_is_retried,
            l2_a_loaded_kernel_is_served_without_a_batch,
            l3_a_load_compiles_the_whole_queue_in_one_batch,
            l3_a_loaded_kernel_still_compiles_the_queue,
            l4_compile_queued_leaves_one_lookup,
            l5_a_batch_runs_on_several_workers,
            l5_kernels_sharing_a_source_share_one_artifact,
            l5_a_stored_kernel_is_not_compiled_again,
            l6_a_failure_fails_alone,
            l7_a_failure_is_reported_once_then_retried,
            l7_a_stale_failure_compiles_again,
            l8_a_panic_fails_only_its_kernel,
            l9_a_refused_kernel_is_neither_kept_nor_stored,
            l10_a_store_switch_reloads,
            s1_a_collector_counts_what_registered_in_its_scope,
            s1_a_dropped_queue_is_abandoned,
            s3_records_hold_outcomes_and_work,
            s4_statistics_add_up,
            d2_a_failure_leads_with_its_first_error,
            d3_a_reporter_hears_each_built_artifact_once,
            d3_a_reporter_replaces_itself_from_inside,
            k1_requests_compile_nothing_until_one_batch_builds_them_all,
            k2_a_request_is_not_added_twice,
            k2_requests_made_during_a_build_survive_it,
            k3_a_failed_request_stays_wanted_and_resolves_to_its_own_failure,
            k4_a_concurrent_build_waits_for_the_batch_in_flight_then_retries_its_failure,
            k5_a_keyed_hit_runs_no_factory_and_a_failure_is_not_indexed,
            k6_a_cache_refuses_another_device,
        );
    };
    (@tests $subject:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                if let Some(subject) = $crate::conformance::available($subject) {
                    $crate::conformance::$rule(&subject);
                }
            }
        )*
    };
}
