//! One batch (L5): every kernel asked of the store, the missing ones
//! lowered on the workers, grouped by source, finalized, then loaded in
//! order and recorded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::KernelLoader;
use super::finalize::Finalizer;
use super::job::{Job, JobOutcome, Step};
use super::queue::Request;
use crate::compiler::ArtifactCompiler;
use crate::config::WorkerMode;
use crate::error::KernelError;
use crate::statistics::{BatchRecord, KernelOutcome, KernelRecord, LoaderStatistics};
use crate::store::BoundStore;
use crate::target::{CompilationTarget, VariantOf};

impl<T: CompilationTarget> KernelLoader<T> {
    /// One batch (L5): store, lower, group by source, finalize, load, record.
    pub(super) fn run_batch(&mut self, requests: Vec<Request<'_, T>>) -> Vec<JobOutcome<T>> {
        let started = Instant::now();
        let mut jobs: Vec<Job<'_, T>> = requests.into_iter().map(Job::new).collect();
        let n_kernels = jobs.len();

        // The batch's boundaries are told, never inferred: claims an
        // unwound batch left go before the first lookup (P4).
        if let Some(store) = &mut self.store {
            store.batch_started();
        }
        self.target.batch_started();
        for job in &mut jobs {
            job.look_up(&mut self.target, self.store.as_mut(), &mut self.statistics);
        }

        let used_processes = AtomicBool::new(false);
        let mut workers = 0;
        let mut outcomes: Vec<Option<JobOutcome<T>>> = (0..n_kernels).map(|_| None).collect();
        let mut records: Vec<Option<KernelRecord>> = (0..n_kernels).map(|_| None).collect();
        // P12: compile every key this process claimed, publish it (which
        // releases its claim), and only then wait for the keys others hold;
        // each taken as soon as it is published, or compiled here once its
        // holder released it unpublished or its lease ran out.
        let deadline = self
            .store
            .as_ref()
            .and_then(|store| started.checked_add(store.claim_timeout()));
        loop {
            workers = workers.max(self.compile_round(&mut jobs, n_kernels, &used_processes));
            for (index, job) in jobs.iter_mut().enumerate() {
                if !job.is_settled() {
                    continue;
                }
                let (outcome, record) =
                    job.load(&mut self.target, self.store.as_mut(), &mut self.statistics);
                if let Some(store) = &mut self.store {
                    // Failed or refused: another process may compile it now.
                    store.release(&outcome.0);
                }
                outcomes[index] = Some(outcome);
                records[index] = Some(record);
            }
            if !jobs.iter().any(Job::is_elsewhere) {
                break;
            }
            self.wait_for_others(&mut jobs, deadline);
        }
        let mode = if used_processes.load(Ordering::Relaxed) {
            WorkerMode::Processes
        } else {
            WorkerMode::Threads
        };
        let records: Vec<KernelRecord> = records
            .into_iter()
            .map(|record| record.expect("every kernel of the batch is loaded or failed"))
            .collect();
        let outcomes: Vec<JobOutcome<T>> = outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every kernel of the batch is loaded or failed"))
            .collect();

        if let Some(store) = &mut self.store {
            store.batch_finished();
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

impl<T: CompilationTarget> KernelLoader<T> {
    /// Lowers, groups by source and finalizes the batch's missing kernels
    /// (L5b-e); the number of workers it used.
    fn compile_round(
        &mut self,
        jobs: &mut [Job<'_, T>],
        n_kernels: usize,
        used_processes: &AtomicBool,
    ) -> usize {
        let persists = self.store.is_some();
        let mut missing: Vec<&mut Job<'_, T>> =
            jobs.iter_mut().filter(|job| job.is_missing()).collect();
        let with_processes = !missing.is_empty()
            && self
                .pool
                .prepare_processes(self.target.compiler().worker_recipe());
        let finalizer = Finalizer {
            compiler: &**self.target.compiler(),
            processes: self.pool.process_pool().filter(|_| with_processes),
            used_processes,
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

        if let Some(store) = &self.store {
            group_by_source(jobs, &self.target, store, &mut self.statistics);
        }

        let mut lowered: Vec<&mut Job<'_, T>> =
            jobs.iter_mut().filter(|job| job.is_lowered()).collect();
        workers = workers.max(self.pool.workers_for(lowered.len()));
        self.pool.run(&mut lowered, |job| {
            job.finalize(&finalizer);
            job.settle();
        });
        drop(lowered);

        take_from_leaders(jobs);
        workers
    }

    /// Waits until another holder published, released or lost at least one
    /// of the keys it holds (P12), polling with a short back-off; past
    /// `deadline` (the store's claim timeout) compiles them all here too.
    fn wait_for_others(&mut self, jobs: &mut [Job<'_, T>], deadline: Option<Instant>) {
        let Some(store) = self.store.as_mut() else {
            for job in jobs.iter_mut().filter(|job| job.is_elsewhere()) {
                job.compile_anyway(&mut self.statistics);
            }
            return;
        };
        let mut pause = Duration::from_millis(5);
        loop {
            let mut taken = false;
            for job in jobs.iter_mut().filter(|job| job.is_elsewhere()) {
                taken |= job.take_published(&mut self.target, store, &mut self.statistics);
            }
            if taken {
                return;
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                let held: Vec<_> = jobs.iter_mut().filter(|job| job.is_elsewhere()).collect();
                log::warn!(
                    "another process held {} kernels past the store's claim timeout; compiling them here too",
                    held.len()
                );
                for job in held {
                    job.compile_anyway(&mut self.statistics);
                }
                return;
            }
            let left = deadline.map_or(pause, |deadline| deadline - now);
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

/// Gives each group of lowered kernels with identical source under the same
/// variant one leader: the leader asks the store by source and finalizes
/// only when the store has nothing; every other member waits for the
/// leader's artifact (L5c). The variant is part of the group's key because
/// one text compiled for two architectures is two artifacts.
pub(super) fn group_by_source<T: CompilationTarget>(
    jobs: &mut [Job<'_, T>],
    target: &T,
    store: &BoundStore<T::Compiler>,
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
                job.reuse_stored_source(target, store, statistics);
            }
        }
        job.settle();
    }
}

/// Hands each waiting kernel its leader's artifact, or its leader's failure
/// (L6): the source is finalized once, not once per member.
pub(super) fn take_from_leaders<T: CompilationTarget>(jobs: &mut [Job<'_, T>]) {
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
                origin: KernelOutcome::Rekeyed,
                source: Some(source),
            },
            Step::Failed(error) => Step::Failed(KernelError {
                kernel: member.id.kernel.clone(),
                ..error.clone()
            }),
            Step::Missing
            | Step::Elsewhere
            | Step::Lowered { .. }
            | Step::Waiting { .. }
            | Step::Done => {
                unreachable!("every leader is finalized, taken from the store, or failed")
            }
        };
        member.settle();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{load, loader};
    use crate::error::Stage;
    use crate::fake::{FakeKernel, FakeTarget};
    use crate::kernel::Kernel;
    use crate::statistics::KernelOutcome;

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
                let kernel =
                    FakeKernel::new(round * 10 + number).sleeping(Duration::from_millis(5));
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
        assert_eq!(batch.mode, crate::config::WorkerMode::Threads);
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

    /// A fake compiler whose variant is an architecture number, to prove that
    /// grouping by source never crosses variants.
    mod variants {
        use super::*;
        use crate::compiler::{ArtifactCompiler, Finalized};
        use crate::config::LoaderConfig;
        use crate::diagnostic::CompileFailure;
        use crate::id::ArtifactId;
        use crate::loader::KernelLoader;
        use crate::store::{ArtifactStore, KeyComponents, KeyedCompiler, MemoryStore};
        use crate::target::CompilationTarget;
        use std::sync::Arc;

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

        impl KeyedCompiler for ArchCompiler {
            fn key_components(&self) -> KeyComponents {
                KeyComponents::new("arch", "kiln-arch 1", "any", "")
            }
        }

        /// On an empty store, so that grouping by source is on, and the one
        /// batch finds nothing stored.
        struct ArchTarget(Arc<ArchCompiler>, Arc<dyn ArtifactStore>);

        impl CompilationTarget for ArchTarget {
            type Compiler = ArchCompiler;
            type Loaded = String;

            fn compiler(&self) -> &Arc<ArchCompiler> {
                &self.0
            }

            fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
                Some(&self.1)
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
            let mut loader = KernelLoader::with_config(
                ArchTarget(Arc::new(ArchCompiler), Arc::new(MemoryStore::new())),
                LoaderConfig::default(),
            );
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
}
