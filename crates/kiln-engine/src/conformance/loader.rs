//! The loader's rules (L), its statistics (S) and its diagnostics (D2),
//! each proved through a [`KernelLoader`] of the subject's target.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{ConformanceSubject, config, not_applicable};
use crate::config::LoaderConfig;
use crate::diagnostic::Severity;
use crate::error::{Failure, Stage};
use crate::id::ArtifactId;
use crate::kernel::Kernel;
use crate::loader::KernelLoader;
use crate::statistics::{KernelOutcome, StatisticsCollector};
use crate::target::{CompilationTarget, KernelOf, VariantOf};

fn loader<S: ConformanceSubject>(subject: &S) -> KernelLoader<S::Target> {
    loader_on(subject.target())
}

fn loader_on<T: CompilationTarget>(target: T) -> KernelLoader<T> {
    KernelLoader::with_config(target, config())
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
    // The loaders of a process share one pool of threads per parallelism,
    // so a test running beside this one could hold its workers: a
    // parallelism no other loader of this process asks for gives the
    // batch a pool of its own.
    static POOLS_TAKEN: AtomicUsize = AtomicUsize::new(0);
    let parallelism = 5 + POOLS_TAKEN.fetch_add(1, Ordering::SeqCst);
    let mut loader = KernelLoader::with_config(
        subject.target(),
        LoaderConfig {
            parallelism: NonZeroUsize::new(parallelism).expect("5 or more is not zero"),
            ..config()
        },
    );
    for index in 0..6 {
        loader.enqueue(subject.lasting(index), subject.variant());
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.kernels, 6);
    assert!(
        batch.workers > 1,
        "6 kernels on {parallelism} workers were planned on {}",
        batch.workers
    );
    assert_eq!(batch.count(KernelOutcome::Compiled), 6);
    // Measured, not planned: one worker doing all six, whatever the record
    // says, fails here.
    match subject.most_at_once(loader.target()) {
        Some(most) => assert!(
            most > 1,
            "6 kernels planned on {} workers were worked on {most} at a time",
            batch.workers
        ),
        // Every kernel's work (lowering, compiling, loading) lies inside
        // the batch's wall time, so work that adds up to more than the wall
        // overlapped: at some moment two kernels were worked on at once.
        None => assert!(
            batch.summed_work() > batch.wall,
            "6 kernels on {} workers did {:?} of work in {:?}: they never overlapped",
            batch.workers,
            batch.summed_work(),
            batch.wall
        ),
    }
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
    if loader.target().store().is_some() {
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
    if loader.target().store().is_none() {
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

/// P11: a kernel that failed to compile is remembered in the store, and a
/// later loader on that store reports the same failure without compiling
/// it; a loader told to retry failures compiles it again.
pub fn p11_a_failure_is_remembered_and_reported_without_compiling<S: ConformanceSubject>(
    subject: &S,
) {
    let target = subject.target();
    if target.store().is_none() {
        not_applicable("P11", "the target keeps no store to remember failures in");
        return;
    }
    let failing = subject.failing(0);
    let id = id_of(subject, &failing);
    let mut first = loader_on(target);
    let error = first.load(&failing, &id).expect_err("it fails to compile");
    let compiled = first.records()[0].records[0].clone();
    assert!(!compiled.remembered, "the first failure is compiled");

    let mut second = loader_on(first.into_target());
    let again = second
        .load(&failing, &id)
        .expect_err("the second loader reports it too");
    assert_eq!(again.to_string(), error.to_string(), "the same failure");
    let record = &second.records()[0].records[0];
    assert_eq!(record.outcome, KernelOutcome::Failed);
    assert!(
        record.remembered,
        "reported from the store's memory: {record:?}"
    );
    let statistics = second.statistics();
    assert_eq!((statistics.remembered, statistics.failed), (1, 1));
    assert_eq!(statistics.compiled, 0);

    let mut retrying = KernelLoader::with_config(
        second.into_target(),
        crate::config::LoaderConfig {
            retry_failed: true,
            ..config()
        },
    );
    let retried = retrying
        .load(&failing, &id)
        .expect_err("compiled again, it fails again");
    assert_eq!(retried.to_string(), error.to_string());
    assert!(
        !retrying.records()[0].records[0].remembered,
        "a retry compiles"
    );
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
    if loader.target().store().is_none() {
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
    assert_eq!(compiled.stored, loader.target().store().is_some());
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
    if loader.target().store().is_some() {
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
    if subject.failures_have_lines() {
        assert!(
            first.location.is_some(),
            "the first error is located: {first}"
        );
    }
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
