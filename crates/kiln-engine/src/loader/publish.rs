//! A kernel's publication (L9, F9): its device object, made on a worker,
//! handed to the target on the loader's thread; its artifact stored, its
//! claim released, its failure remembered, its outcome counted.

use std::sync::Arc;

use super::job::{Count, Job, JobOutcome, Step, contained, refused};
use crate::error::Stage;
use crate::statistics::{KernelOutcome, KernelRecord, LoaderStatistics};
use crate::store::{BoundStore, PendingRekey, RememberedFailure, StoreOutcome};
use crate::target::CompilationTarget;
use crate::worker::Blame;

impl<T: CompilationTarget> Job<'_, T> {
    /// Publishes the kernel (F9): its device object, made on a worker (or
    /// here, when the driver needs one thread), goes to the target, and its
    /// artifact to the store when it did not come from the store under this
    /// id; a refused artifact is neither kept nor stored (L9). Its outcome
    /// and record are the batch's.
    pub(super) fn publish(
        &mut self,
        target: &mut T,
        store: Option<&BoundStore<T::Compiler>>,
        statistics: &mut LoaderStatistics,
        rekeys: &mut Vec<(usize, PendingRekey)>,
    ) -> (JobOutcome<T>, KernelRecord) {
        if self.made.is_none() {
            let device = Arc::clone(target.device_step());
            self.make_device(&*device);
        }
        // What the batch writes is made durable together, when it waits
        // for others or ends (P3): a few syncs a step, not a few a kernel.
        if let Some(store) = store {
            store.begin_group();
        }
        let mut stored = false;
        let made = self.made.take();
        let (result, outcome) = match std::mem::replace(&mut self.step, Step::Done) {
            Step::Ready {
                artifact,
                origin,
                source,
            } => {
                let id = &self.id;
                let loaded = made
                    .expect("a ready kernel's device object is made before it is published")
                    .and_then(|made| {
                        contained(Stage::Load, id, || {
                            target
                                .publish(id, &artifact, made)
                                .map_err(|refusal| refused(id, refusal))
                        })
                    });
                match loaded {
                    Ok(loaded) => {
                        match origin {
                            KernelOutcome::Compiled => statistics.compiled += 1,
                            KernelOutcome::Rekeyed => statistics.rekeyed += 1,
                            KernelOutcome::FromStore => {}
                            KernelOutcome::Failed | KernelOutcome::Refused => {
                                unreachable!("a ready kernel has an artifact")
                            }
                        }
                        let work = self.compile_work;
                        match (store, origin, source.as_deref()) {
                            (_, KernelOutcome::FromStore, _) => {}
                            // Found by its text: stored under its id with the
                            // round's others, in one put (L11).
                            (Some(store), KernelOutcome::Rekeyed, Some(source)) if self.kept => {
                                rekeys.push((
                                    self.index,
                                    store.rekeyed(
                                        target.compiler(),
                                        id,
                                        &artifact,
                                        self.recipe.as_ref(),
                                        source,
                                        work,
                                        self.claim.take(),
                                    ),
                                ));
                            }
                            (Some(store), _, source) if self.kept => {
                                let outcome = store.put(
                                    target.compiler(),
                                    id,
                                    &artifact,
                                    self.recipe.as_ref(),
                                    source,
                                    origin == KernelOutcome::Rekeyed,
                                    work,
                                    self.claim.take(),
                                );
                                stored = count_put(statistics, id, outcome);
                            }
                            _ => {}
                        }
                        if let (Some(store), Some(_)) = (store, &self.memory) {
                            // Compiled after a crash was counted, or retried:
                            // nothing of its failures is remembered now.
                            store.remember_failure(
                                target.compiler(),
                                id,
                                &RememberedFailure::forgotten(),
                            );
                        }
                        if let (true, Count::Settled(settled)) = (stored, &self.count) {
                            settled.stored();
                        }
                        (Ok(loaded), origin)
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
            Step::Failed(error) => {
                if self.remembered {
                    statistics.remembered += 1;
                } else if let (Some(store), true, false) = (store, self.kept, self.inherited)
                    // A worker lost to its machine says nothing of its kernel.
                    && !matches!(self.lost, Some(Blame::Environment(_)))
                    && let Some(memory) = RememberedFailure::after(
                        self.memory.as_ref(),
                        &error,
                        self.lost.is_some(),
                    )
                {
                    store.remember_failure(target.compiler(), &self.id, &memory);
                }
                (Err(error), KernelOutcome::Failed)
            }
            Step::Missing
            | Step::Elsewhere
            | Step::Lowered { .. }
            | Step::Waiting { .. }
            | Step::Done => {
                unreachable!("every kernel is ready or failed before it loads")
            }
        };
        // Failed or refused: another process may compile it now (P4).
        self.claim = None;
        if let Err(error) = &result {
            statistics.count_failure(error);
        }
        statistics.compile_seconds += self.compile_work.as_secs_f64();
        let record = KernelRecord {
            kernel: self.id.kernel.clone(),
            outcome,
            work: self.compile_work,
            stored,
            diagnostics: std::mem::take(&mut self.diagnostics),
            error: result.as_ref().err().map(ToString::to_string),
            remembered: self.remembered,
        };
        ((self.id.clone(), result), record)
    }

    /// Its rekeyed put, written with its round's others, came to
    /// `outcome`: counted as its own put would have been.
    pub(super) fn rekey_written(
        &self,
        statistics: &mut LoaderStatistics,
        outcome: StoreOutcome,
    ) -> bool {
        let stored = count_put(statistics, &self.id, outcome);
        if let (true, Count::Settled(settled)) = (stored, &self.count) {
            settled.stored();
        }
        stored
    }
}

/// Counts what the store answered a put of `id`: whether it stored it.
pub(super) fn count_put<V: std::fmt::Display>(
    statistics: &mut LoaderStatistics,
    id: &V,
    outcome: StoreOutcome,
) -> bool {
    match outcome {
        StoreOutcome::Stored { bytes } => {
            statistics.stored += 1;
            statistics.bytes_written += bytes;
            true
        }
        StoreOutcome::Skipped => false,
        StoreOutcome::Failed { detail } => {
            statistics.store_errors += 1;
            // The store warns once per cause; a line per kernel would bury
            // that warning under a full disk's worth.
            log::debug!("could not store {id}: {detail}; it still loads");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{load, loader};
    use crate::error::Failure;
    use crate::fake::{FakeKernel, FakeTarget};
    use crate::loader::KernelLoader;
    use crate::statistics::{KernelOutcome, StatisticsCollector};
    use crate::target::CompilationTarget;

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
        let artifact = crate::fake::FakeArtifact {
            text: "fake kernel 1".into(),
            refused: false,
        };
        let encoded = crate::encoding::encode(&artifact).expect("the artifact serializes");
        let kernel = FakeKernel::new(1);
        let id = crate::id::ArtifactId::new(crate::kernel::Kernel::id(&kernel), ());
        let lowered = crate::compiler::ArtifactCompiler::lower(
            &crate::fake::FakeCompiler::default(),
            &kernel,
            &id,
        )
        .expect("lowers");
        let recipe = crate::store::Recipe::of(&id, &lowered).expect("the recipe serializes");
        let recipe = crate::encoding::encode(&recipe).expect("the recipe serializes");
        assert_eq!(
            written,
            (encoded.len() + recipe.len()) as u64,
            "the artifact's stored bytes, then what it was finalized from"
        );
        let mut second = self::loader(first.into_target(), 2);
        load(&mut second, &FakeKernel::new(1)).expect("loads");
        let statistics = second.statistics();
        assert_eq!((statistics.hits, statistics.misses), (1, 0));
        assert_eq!(statistics.bytes_read, written);
        assert!(statistics.saved_seconds > 0.0);
    }

    /// A loader on the same target (and store) as `loader`, as a later
    /// process on the same store is.
    fn again(loader: KernelLoader<FakeTarget>) -> KernelLoader<FakeTarget> {
        self::loader(loader.into_target(), 2)
    }

    // P11
    #[test]
    fn a_compile_that_panics_is_compiled_again_once_then_quarantined() {
        let kernel = FakeKernel::new(5).panicking();
        let mut first = loader(FakeTarget::persisting(), 2);
        load(&mut first, &kernel).expect_err("panics");
        let mut second = again(first);
        load(&mut second, &kernel).expect_err("panics again");
        assert!(
            !second.records()[0].records[0].remembered,
            "one panic may be the machine's: compiled again"
        );
        let finalized = second.target().fake_compiler().finalized();
        let mut third = again(second);
        let error = load(&mut third, &kernel).expect_err("quarantined");
        assert!(error.to_string().contains("quarantined"), "{error}");
        assert!(third.records()[0].records[0].remembered);
        assert_eq!(
            third.target().fake_compiler().finalized(),
            finalized,
            "never handed to the compiler again"
        );
    }

    // P11
    #[test]
    fn a_remembered_failure_compiles_again_under_another_compiler_or_once_forgotten() {
        let kernel = FakeKernel::new(6).failing();
        let mut first = loader(FakeTarget::persisting(), 2);
        load(&mut first, &kernel).expect_err("fails");
        let finalized = first.target().fake_compiler().finalized();
        let mut second = again(first);
        load(&mut second, &kernel).expect_err("remembered");
        assert_eq!(second.target().fake_compiler().finalized(), finalized);

        // Forgotten: compiled again.
        {
            let bound = second.bound_store().expect("a store");
            bound.remember_failure(
                second.target().compiler(),
                &kernel.artifact_id(),
                &crate::store::RememberedFailure::forgotten(),
            );
        }
        let mut third = again(second);
        load(&mut third, &kernel).expect_err("fails when compiled");
        assert!(!third.records()[0].records[0].remembered);

        // Another compiler identity: another key, compiled again.
        let components = crate::store::KeyComponents::new("fake", "kiln-fake 2", "fake_1", "");
        let target = third
            .into_target()
            .with_compiler(crate::fake::FakeCompiler::default().with_key_components(components));
        let mut fourth = loader(target, 2);
        load(&mut fourth, &kernel).expect_err("fails when compiled");
        assert!(!fourth.records()[0].records[0].remembered);
        assert_eq!(fourth.target().fake_compiler().finalized(), 1);
    }
}
