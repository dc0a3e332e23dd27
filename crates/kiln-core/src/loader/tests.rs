//! The loader's rules proved on the fake target, where every step can be
//! counted. The same rules run against real compilers through the
//! conformance suite.

use std::num::NonZeroUsize;
use std::time::Duration;

use super::*;
use crate::fake::{FakeKernel, FakeTarget};
use crate::statistics::StatisticsCollector;

fn loader(target: FakeTarget, parallelism: usize) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(parallelism).expect("parallelism is at least 1"),
            record_limit: 16,
        },
    )
}

fn load(loader: &mut KernelLoader<FakeTarget>, kernel: &FakeKernel) -> Result<Arc, KernelError> {
    loader.load(kernel, &kernel.artifact_id())
}

type Arc = std::sync::Arc<crate::fake::FakeModule>;

// L1
#[test]
fn queuing_lowers_nothing() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    for number in 0..10 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    assert_eq!(loader.target().fake_compiler().lowered(), 0);
    assert_eq!(loader.queued_len(), 10);
}

// L1, L3
#[test]
fn a_load_compiles_the_queue_with_its_kernel() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    for number in 0..3 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    let module = load(&mut loader, &FakeKernel::new(3)).expect("a fake kernel loads");
    assert_eq!(module.text, "fake kernel 3");
    let compiler = loader.target().fake_compiler();
    assert_eq!((compiler.lowered(), compiler.finalized()), (4, 4));
    assert_eq!(loader.records().len(), 1, "one batch");
}

// L2
#[test]
fn a_loaded_kernel_is_one_lookup_and_compiles_nothing() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    let kernel = FakeKernel::new(1);
    let first = load(&mut loader, &kernel).expect("loads");
    for _ in 0..10 {
        let again = load(&mut loader, &kernel).expect("loads");
        assert!(
            std::sync::Arc::ptr_eq(&first, &again),
            "the same loaded handle, cloned"
        );
    }
    assert_eq!(loader.target().fake_compiler().lowered(), 1);
    assert_eq!(loader.target().loaded(), 1);
}

// L3
#[test]
fn a_queued_kernel_asked_for_compiles_once() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    loader.enqueue(Box::new(FakeKernel::new(0)), ());
    load(&mut loader, &FakeKernel::new(0)).expect("loads");
    assert_eq!(loader.target().fake_compiler().lowered(), 1);
    assert_eq!(loader.records()[0].kernels, 1);
}

// L4
#[test]
fn compile_queued_compiles_without_a_launch() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    loader.enqueue(Box::new(FakeKernel::new(0)), ());
    loader.enqueue(Box::new(FakeKernel::new(1)), ());
    loader.compile_queued();
    assert_eq!(loader.target().loaded(), 2);
    loader.compile_queued();
    assert_eq!(loader.records().len(), 1, "an empty queue runs no batch");
}

// L5b
#[test]
fn a_batch_runs_on_the_shared_workers_at_once() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    for number in 0..8 {
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(30));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    let compiler = loader.target().fake_compiler();
    assert!(compiler.most_at_once() > 1, "steps overlapped");
    assert!(
        compiler.most_at_once() <= 4,
        "never more than the parallelism"
    );
    assert_eq!(loader.records()[0].workers, 4);
    let caller = std::thread::current().id();
    assert_ne!(
        compiler.finalized_on(0),
        Some(caller),
        "compiled on a worker"
    );
}

// L5b
#[test]
fn batches_reuse_the_same_worker_threads() {
    let mut loader = loader(FakeTarget::storeless(), 3);
    let mut threads = std::collections::HashSet::new();
    for round in 0..5 {
        for number in 0..6 {
            let kernel = FakeKernel::new(round * 10 + number).sleeping(Duration::from_millis(5));
            loader.enqueue(Box::new(kernel), ());
        }
        loader.compile_queued();
        for number in 0..6 {
            let thread = loader
                .target()
                .fake_compiler()
                .finalized_on(round * 10 + number);
            threads.insert(format!("{:?}", thread.expect("finalized")));
        }
    }
    assert!(
        threads.len() <= 3,
        "30 kernels in 5 batches ran on {} threads",
        threads.len()
    );
}

// L5c, P7
#[test]
fn one_source_finalizes_once_per_batch() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    for number in 0..5 {
        loader.enqueue(
            Box::new(FakeKernel::new(number).sharing_source("same text")),
            (),
        );
    }
    loader.compile_queued();
    let compiler = loader.target().fake_compiler();
    assert_eq!(compiler.lowered(), 5);
    assert_eq!(compiler.finalized_source("same text"), 1);
    let batch = &loader.records()[0];
    assert_eq!(batch.count(KernelOutcome::Compiled), 1);
    assert_eq!(batch.count(KernelOutcome::Rekeyed), 4);
    assert_eq!(loader.statistics().rekeyed, 4);
}

// L5c, P7
#[test]
fn a_stored_source_serves_a_new_kernel_id() {
    let mut loader = loader(FakeTarget::persisting(), 2);
    load(&mut loader, &FakeKernel::new(1).sharing_source("shared")).expect("loads");
    // Another kernel with the same text, as a rebuilt program with new ids
    // would ask for: it takes the stored artifact instead of finalizing.
    load(&mut loader, &FakeKernel::new(2).sharing_source("shared")).expect("loads");
    assert_eq!(loader.target().fake_compiler().finalized(), 1);
    assert_eq!(loader.records()[1].count(KernelOutcome::Rekeyed), 1);
    assert!(
        loader.target().holds(&FakeKernel::new(2).artifact_id()),
        "stored under its id"
    );
}

// L5
#[test]
fn without_a_store_each_kernel_finalizes_where_it_lowered() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    for number in 0..6 {
        let kernel = FakeKernel::new(number)
            .sharing_source("same")
            .sleeping(Duration::from_millis(5));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    let compiler = loader.target().fake_compiler();
    assert_eq!(compiler.finalized_source("same"), 6);
    for number in 0..6 {
        assert_eq!(compiler.lowered_on(number), compiler.finalized_on(number));
    }
}

// L5
#[test]
fn a_kernel_without_source_finalizes_where_it_lowered() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    for number in 0..4 {
        let kernel = FakeKernel::new(number)
            .without_source()
            .sleeping(Duration::from_millis(5));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    let compiler = loader.target().fake_compiler();
    assert_eq!(compiler.finalized(), 4);
    for number in 0..4 {
        assert_eq!(compiler.lowered_on(number), compiler.finalized_on(number));
    }
}

// L5a
#[test]
fn a_stored_kernel_skips_lowering() {
    let mut first = loader(FakeTarget::persisting(), 2);
    load(&mut first, &FakeKernel::new(7)).expect("loads");
    let mut second = loader(first.into_target(), 2);
    let lowered_before = second.target().fake_compiler().lowered();
    load(&mut second, &FakeKernel::new(7)).expect("loads from the store");
    assert_eq!(second.target().fake_compiler().lowered(), lowered_before);
    assert_eq!(second.records()[0].count(KernelOutcome::FromStore), 1);
    assert!(
        !second.records()[0].stored,
        "what came from the store is not stored again"
    );
}

// L6
#[test]
fn a_failed_source_is_finalized_once_and_fails_its_whole_group() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    for number in 0..4 {
        let kernel = FakeKernel::new(number).sharing_source("bad text").failing();
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    assert_eq!(
        loader.target().fake_compiler().finalized_source("bad text"),
        1
    );
    for number in 0..4 {
        let kernel = FakeKernel::new(number).sharing_source("bad text").failing();
        let error = load(&mut loader, &kernel).expect_err("the group fails");
        assert_eq!(
            error.kernel,
            kernel.id(),
            "each member's error names itself"
        );
        assert_eq!(error.stage, Stage::Finalize);
    }
}

// L6
#[test]
fn failing_kernels_of_every_kind_fail_alone() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    let bad = [
        FakeKernel::new(10).failing_to_lower(),
        FakeKernel::new(11).failing(),
        FakeKernel::new(12).panicking_in_lower(),
        FakeKernel::new(13).panicking(),
        FakeKernel::new(14).refused(),
    ];
    for number in 0..4 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    for kernel in &bad {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();
    for number in 0..4 {
        assert!(loader.is_loaded(&FakeKernel::new(number).artifact_id()));
    }
    let stages: Vec<Stage> = bad
        .iter()
        .map(|kernel| load(&mut loader, kernel).expect_err("fails").stage)
        .collect();
    assert_eq!(
        stages,
        [
            Stage::Lower,
            Stage::Finalize,
            Stage::Lower,
            Stage::Finalize,
            Stage::Load
        ]
    );
    load(&mut loader, &FakeKernel::new(20)).expect("the loader is still usable");
}

// L7
#[test]
fn a_failure_is_reported_by_its_own_launch_without_compiling_again() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    let failing = FakeKernel::new(1).failing();
    loader.enqueue(Box::new(failing.clone()), ());
    loader.enqueue(Box::new(FakeKernel::new(2)), ());
    loader.compile_queued();
    assert_eq!(loader.target().fake_compiler().finalized(), 2);
    load(&mut loader, &FakeKernel::new(2)).expect("its neighbour loaded");
    load(&mut loader, &failing).expect_err("reported by its own launch");
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        2,
        "not compiled again"
    );
    load(&mut loader, &failing).expect_err("tried again");
    assert_eq!(
        loader.target().fake_compiler().finalized(),
        3,
        "the next load compiled it"
    );
}

// L7
#[test]
fn a_fixed_kernel_loads_on_the_retry() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    load(&mut loader, &FakeKernel::new(1).failing()).expect_err("fails");
    // The same id, now generating valid code (the user fixed a parameter).
    load(&mut loader, &FakeKernel::new(1)).expect("the retry compiles afresh");
}

// L7
#[test]
fn a_batch_drops_unreported_failures() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    loader.enqueue(Box::new(FakeKernel::new(1).failing()), ());
    loader.compile_queued();
    loader.enqueue(Box::new(FakeKernel::new(2)), ());
    loader.compile_queued();
    // The failure of kernel 1 was never reported: it compiles afresh.
    load(&mut loader, &FakeKernel::new(1)).expect("no stale error");
}

// L8
#[test]
fn a_panic_carries_its_message_and_fails_only_its_kernel() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    loader.enqueue(Box::new(FakeKernel::new(0)), ());
    let error = load(&mut loader, &FakeKernel::new(1).panicking()).expect_err("fails");
    match &error.failure {
        Failure::Panicked { message } => {
            assert_eq!(message, "fake compiler crashed on kernel 1");
        }
        other => panic!("expected a panic, got {other}"),
    }
    assert!(loader.is_loaded(&FakeKernel::new(0).artifact_id()));
}

// L9
#[test]
fn a_refused_artifact_is_not_kept_or_stored() {
    let mut loader = loader(FakeTarget::persisting(), 2);
    let refused = FakeKernel::new(3).refused();
    let error = load(&mut loader, &refused).expect_err("refused");
    assert!(
        matches!(&error.failure, Failure::Refused(refusal) if refusal.code == Some(200)),
        "the driver's code stays on the error: {error}"
    );
    assert!(!loader.is_loaded(&refused.artifact_id()));
    assert!(!loader.target().holds(&refused.artifact_id()));
    assert_eq!(loader.records()[0].count(KernelOutcome::Refused), 1);
}

// L10
#[test]
fn a_store_switch_drops_every_loaded_kernel() {
    let mut loader = loader(FakeTarget::persisting(), 2);
    let kernel = FakeKernel::new(1);
    load(&mut loader, &kernel).expect("loads");
    loader.target_mut().switch_store();
    assert_eq!(
        loader.get(&kernel.artifact_id()),
        None,
        "dropped on the next access"
    );
    load(&mut loader, &kernel).expect("loads from the new store");
    assert_eq!(loader.target().fake_compiler().finalized(), 2);
    assert!(
        loader.target().holds(&kernel.artifact_id()),
        "and is written to it"
    );
}

// L10
#[test]
fn a_storeless_loader_never_resets() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    let kernel = FakeKernel::new(1);
    load(&mut loader, &kernel).expect("loads");
    loader.target_mut().switch_store();
    assert!(loader.is_loaded(&kernel.artifact_id()));
}

// S1
#[test]
fn kernels_settle_to_the_collector_open_when_they_were_queued() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    let first = StatisticsCollector::new();
    let second = StatisticsCollector::new();
    {
        let _scope = first.open();
        loader.enqueue(Box::new(FakeKernel::new(0)), ());
        loader.enqueue(Box::new(FakeKernel::new(1).failing()), ());
    }
    {
        let _scope = second.open();
        loader.enqueue(Box::new(FakeKernel::new(2).refused()), ());
        // Loaded under the second scope, queued under the first: it counts
        // where it was queued.
        load(&mut loader, &FakeKernel::new(0)).expect("loads");
    }
    let first = first.counts();
    assert_eq!((first.registered, first.compiled, first.failed), (2, 1, 1));
    assert_eq!(first.stored, 1);
    let second = second.counts();
    assert_eq!(
        (second.registered, second.compiled, second.refused),
        (1, 1, 1)
    );
    assert_eq!(second.stored, 0);
}

// S1
#[test]
fn a_kernel_queued_with_no_collector_counts_nowhere() {
    let mut loader = loader(FakeTarget::storeless(), 2);
    loader.enqueue(Box::new(FakeKernel::new(0)), ());
    let collector = StatisticsCollector::new();
    let _scope = collector.open();
    loader.compile_queued();
    assert_eq!(collector.counts(), Default::default());
}

// S1
#[test]
fn a_store_hit_and_a_rekey_settle_as_loaded() {
    let mut loader = loader(FakeTarget::persisting(), 2);
    load(&mut loader, &FakeKernel::new(1).sharing_source("s")).expect("loads");
    let mut loader = self::loader(loader.into_target(), 2);
    let collector = StatisticsCollector::new();
    let _scope = collector.open();
    load(&mut loader, &FakeKernel::new(1).sharing_source("s")).expect("from the store");
    load(&mut loader, &FakeKernel::new(2).sharing_source("s")).expect("rekeyed");
    let counts = collector.counts();
    assert_eq!(
        (counts.registered, counts.loaded, counts.compiled),
        (2, 2, 0)
    );
    assert_eq!(
        counts.stored, 1,
        "the rekeyed kernel is stored under its own id"
    );
}

// S2
#[test]
fn a_panicking_batch_settles_every_kernel_once() {
    let mut loader = loader(FakeTarget::persisting(), 4);
    let collector = StatisticsCollector::new();
    let _scope = collector.open();
    loader.enqueue(Box::new(FakeKernel::new(0).panicking_in_lower()), ());
    loader.enqueue(Box::new(FakeKernel::new(1).panicking()), ());
    for number in 2..6 {
        loader.enqueue(
            Box::new(FakeKernel::new(number).sharing_source("group")),
            (),
        );
    }
    loader.compile_queued();
    let counts = collector.counts();
    assert_eq!(counts.registered, 6);
    assert_eq!(
        counts.compiled + counts.loaded + counts.failed,
        6,
        "{counts:?}"
    );
    assert_eq!(counts.abandoned, 0);
}

// S3
#[test]
fn a_batch_record_shows_wall_under_summed_work_on_several_workers() {
    let mut loader = loader(FakeTarget::storeless(), 4);
    for number in 0..8 {
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(20));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.workers, 4);
    assert_eq!(batch.mode, crate::statistics::WorkerMode::Threads);
    assert!(
        batch.wall < batch.summed_work(),
        "wall {:?} against work {:?}",
        batch.wall,
        batch.summed_work()
    );
    assert!(
        batch
            .records
            .iter()
            .all(|record| record.work >= Duration::from_millis(20))
    );
    assert_eq!(
        batch.records[0].diagnostics.len(),
        1,
        "warnings stay on the record"
    );
}

// S3
#[test]
fn records_are_bounded_by_the_limit() {
    let mut loader = loader(FakeTarget::storeless(), 1);
    for number in 0..20 {
        load(&mut loader, &FakeKernel::new(number)).expect("loads");
    }
    assert_eq!(loader.records().len(), 16);
    assert_eq!(loader.take_records().len(), 16);
    assert!(loader.records().is_empty());
}

// S4, P5
#[test]
fn statistics_count_hits_bytes_and_failed_writes() {
    let mut loader = loader(FakeTarget::persisting().with_failing_writes(), 2);
    load(&mut loader, &FakeKernel::new(1)).expect("a failed write still loads");
    let statistics = loader.statistics();
    assert_eq!(statistics.store_errors, 1);
    assert_eq!(statistics.stored, 0);

    let mut first = self::loader(FakeTarget::persisting(), 2);
    load(&mut first, &FakeKernel::new(1)).expect("loads");
    let written = first.statistics().bytes_written;
    assert_eq!(written, "fake kernel 1".len() as u64);
    let mut second = self::loader(first.into_target(), 2);
    load(&mut second, &FakeKernel::new(1)).expect("loads");
    let statistics = second.statistics();
    assert_eq!((statistics.hits, statistics.misses), (1, 0));
    assert_eq!(statistics.bytes_read, written);
    assert!(statistics.saved_seconds > 0.0);
}

// D2
#[test]
fn a_compile_error_leads_with_the_first_error_and_counts_the_rest() {
    let mut loader = loader(FakeTarget::storeless(), 1);
    let error = load(&mut loader, &FakeKernel::new(1).failing()).expect_err("fails");
    let message = error.to_string();
    assert!(
        message.ends_with("2:7: error: unexpected token (2 more errors suppressed)"),
        "{message}"
    );
    assert_eq!(
        error
            .compile_failure()
            .expect("a compile failure")
            .diagnostics
            .len(),
        4
    );
}

// D2
#[test]
fn a_configuration_mistake_says_what_to_change() {
    let mut loader = loader(FakeTarget::storeless(), 1);
    let error = load(&mut loader, &FakeKernel::new(1).misconfigured()).expect_err("fails");
    assert!(
        error
            .to_string()
            .contains("hint: choose an architecture the fake compiler lists"),
        "{error}"
    );
}

/// A fake compiler whose variant is an architecture number, to prove that
/// grouping by source never crosses variants.
mod variants {
    use super::*;
    use crate::target::{ArtifactCompiler, CompilationTarget, Finalized, Lookup, Miss};

    struct ArchCompiler;

    impl ArtifactCompiler for ArchCompiler {
        type Kernel = FakeKernel;
        type Variant = u32;
        type Lowered = String;
        type Artifact = String;

        fn lower(
            &self,
            _kernel: &FakeKernel,
            _id: &ArtifactId<u32>,
        ) -> Result<String, CompileFailure> {
            Ok("one text for every architecture".into())
        }

        fn source(lowered: &String) -> Option<&str> {
            Some(lowered)
        }

        fn finalize(
            &self,
            id: &ArtifactId<u32>,
            lowered: String,
        ) -> Result<Finalized<String>, CompileFailure> {
            Ok(Finalized::quiet(format!(
                "{lowered} for arch {}",
                id.variant
            )))
        }
    }

    /// Persists, so that grouping by source is on, with nothing stored.
    struct ArchTarget(ArchCompiler);

    impl CompilationTarget for ArchTarget {
        type Compiler = ArchCompiler;
        type Loaded = String;

        fn compiler(&self) -> &ArchCompiler {
            &self.0
        }

        fn persists(&self) -> bool {
            true
        }

        fn lookup(&mut self, _id: &ArtifactId<u32>) -> Lookup<String> {
            Lookup::Miss(Miss::Absent)
        }

        fn lookup_source(&mut self, _id: &ArtifactId<u32>, _source: &str) -> Lookup<String> {
            Lookup::Miss(Miss::Absent)
        }

        fn store(
            &mut self,
            _id: &ArtifactId<u32>,
            _artifact: &String,
            _source: Option<&str>,
            _work: Duration,
        ) -> StoreOutcome {
            StoreOutcome::Skipped
        }

        fn load(
            &mut self,
            _id: &ArtifactId<u32>,
            artifact: &String,
        ) -> Result<String, crate::error::DeviceRefusal> {
            Ok(artifact.clone())
        }
    }

    // L5c
    #[test]
    fn one_text_under_two_variants_is_two_artifacts() {
        let mut loader =
            KernelLoader::with_config(ArchTarget(ArchCompiler), LoaderConfig::default());
        let kernel = FakeKernel::new(1);
        loader.enqueue(Box::new(kernel.clone()), 90);
        loader.enqueue(Box::new(kernel.clone()), 80);
        loader.enqueue(Box::new(FakeKernel::new(2)), 90);
        loader.compile_queued();
        let batch = &loader.records()[0];
        assert_eq!(batch.count(KernelOutcome::Compiled), 2, "one per variant");
        assert_eq!(
            batch.count(KernelOutcome::Rekeyed),
            1,
            "same text, same variant"
        );
        let for_80 = loader
            .get(&ArtifactId::new(kernel.id(), 80))
            .expect("loaded");
        assert_eq!(for_80, "one text for every architecture for arch 80");
        let for_90 = loader
            .get(&ArtifactId::new(kernel.id(), 90))
            .expect("loaded");
        assert_eq!(for_90, "one text for every architecture for arch 90");
    }
}
