//! One batch (L5): every kernel asked of the store, the missing ones
//! claimed, lowered and finalized on the workers, each one's device object
//! made there as soon as its artifact is ready (F9), each published on the
//! loader's thread as soon as it is made, and recorded.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rustc_hash::FxHashMap;

use super::KernelLoader;
use super::finalize::Finalizer;
use super::history::StoredBatch;
use super::job::{Job, JobOutcome, Round, SourceGroups, Step};
use super::queue::Request;
use crate::compiler::ArtifactCompiler;
use crate::config::WorkerMode;
use crate::error::KernelError;
use crate::statistics::{BatchRecord, KernelRecord};
use crate::store::BoundStore;
use crate::target::{ArtifactOf, CompilationTarget, DeviceStep};

/// Orders `jobs` (sorted by their cost hints) longest first by what the
/// store's kept batch records say they took to compile (F2): a kernel
/// compiled before (under another compiler version, or evicted since) goes
/// by its recorded time; one never recorded, by its hint scaled to time by
/// the recorded kernels' median time per unit of hint. With no record at
/// all the order by hint stands.
fn order_by_past_work<T: CompilationTarget>(
    jobs: &mut [&mut Job<'_, T>],
    store: &BoundStore<T::Compiler>,
) {
    let past = super::history::past_work(
        &store.store().parts().kept_batches(),
        &store.components().backend,
    );
    if past.is_empty() {
        return;
    }
    let known: Vec<(u64, u128)> = jobs
        .iter()
        .filter_map(|job| {
            past.get(&job.id.kernel.digest())
                .map(|work| (job.cost_hint(), work.as_nanos()))
        })
        .collect();
    if known.is_empty() {
        return;
    }
    // Nanoseconds per unit of hint, the median over the recorded kernels.
    let mut rates: Vec<f64> = known
        .iter()
        .filter(|(hint, _)| *hint > 0)
        .map(|(hint, nanos)| *nanos as f64 / *hint as f64)
        .collect();
    rates.sort_by(f64::total_cmp);
    let rate = rates.get(rates.len() / 2).copied();
    let expected = |job: &Job<'_, T>| -> u128 {
        match past.get(&job.id.kernel.digest()) {
            Some(work) => work.as_nanos(),
            None => rate.map_or(0, |rate| (job.cost_hint() as f64 * rate) as u128),
        }
    };
    jobs.sort_by_key(|job| std::cmp::Reverse(expected(job)));
}

/// What a batch knows of its kernels across its rounds: their outcomes and
/// records, by place in the batch, and what each source group's leader
/// came to (L5c).
struct Settling<T: CompilationTarget> {
    outcomes: Vec<Option<JobOutcome<T>>>,
    records: Vec<Option<KernelRecord>>,
    groups: Mutex<SourceGroups<T>>,
    /// Each leader's artifact (taken before its load, as every member loads
    /// its own copy) or failure.
    led: FxHashMap<usize, Result<ArtifactOf<T>, KernelError>>,
}

impl<T: CompilationTarget> KernelLoader<T> {
    /// One batch (L5): store, claim, lower, group by source, finalize,
    /// load, publish, record.
    pub(super) fn run_batch(&mut self, requests: Vec<Request<'_, T>>) -> Vec<JobOutcome<T>> {
        let started = Instant::now();
        let mut jobs: Vec<Job<'_, T>> = requests
            .into_iter()
            .enumerate()
            .map(|(index, request)| Job::new(index, request))
            .collect();
        let n_kernels = jobs.len();
        self.progress.started(n_kernels);

        self.target.batch_started();
        // Every kernel the store keeps, asked for at once (P10).
        let asked: Vec<usize> = jobs
            .iter_mut()
            .enumerate()
            .filter_map(|(index, job)| {
                job.asks_store(&self.target, self.store.as_ref(), &mut self.statistics)
                    .then_some(index)
            })
            .collect();
        if let (Some(store), false) = (&self.store, asked.is_empty()) {
            let ids: Vec<_> = asked.iter().map(|&index| jobs[index].id.clone()).collect();
            let ids: Vec<_> = ids.iter().collect();
            // F11: where the driver makes device objects one at a time, this
            // thread makes each hit's as the store hands it over, while the
            // rest are still read: a warm start waits for the reads or the
            // loads, not both.
            let device = Arc::clone(self.target.device_step());
            let make_here = device.on_workers() && !device.spreads();
            let compiler = Arc::clone(self.target.compiler());
            let (target, statistics) = (&mut self.target, &mut self.statistics);
            store.lookup_each(&compiler, &ids, &mut |at, found| {
                let job = &mut jobs[asked[at]];
                job.looked_up(target, found, statistics);
                if make_here && job.needs_device() {
                    job.make_device(&device);
                }
            });
        }

        log::debug!(
            "batch of {n_kernels}: {} missing after the store's answer, {:?} in",
            jobs.iter().filter(|job| job.is_missing()).count(),
            started.elapsed()
        );
        let used_processes = AtomicBool::new(false);
        let mut workers = 0;
        let mut settling = Settling {
            outcomes: (0..n_kernels).map(|_| None).collect(),
            records: (0..n_kernels).map(|_| None).collect(),
            groups: Mutex::new(FxHashMap::default()),
            led: FxHashMap::default(),
        };
        // P12: the workers claim each key as they come to it, skipping the
        // keys others hold, and each kernel is published the moment it
        // loads, which releases its claim; only then does the batch wait
        // for the keys others hold, taking each as soon as it is published,
        // or compiling it here once its holder released it unpublished or
        // its lease ran out. The claim timeout counts from the start of each
        // wait, not of the batch: a batch that compiled for longer than it
        // before it met a key another is compiling waits for that key, and
        // only a holder that publishes nothing for the whole timeout is
        // compiled around.
        loop {
            workers = workers.max(self.compile_round(&mut jobs, &mut settling, &used_processes));
            if !jobs.iter().any(Job::is_elsewhere) {
                break;
            }
            let deadline = self
                .store
                .as_ref()
                .and_then(|store| Instant::now().checked_add(store.claim_timeout()));
            self.wait_for_others(&mut jobs, deadline);
        }
        let settled = started.elapsed();
        let mode = if used_processes.load(Ordering::Relaxed) {
            WorkerMode::Processes
        } else {
            // Nothing compiled in processes: workers started early for a
            // compile that never came are closed (F5).
            if let Some(recipe) = self.target.compiler().worker_recipe()
                && self.pool.worker_processes().running.is_empty()
            {
                crate::worker::release_early(&recipe);
            }
            WorkerMode::Threads
        };
        let records: Vec<KernelRecord> = settling
            .records
            .into_iter()
            .map(|record| record.expect("every kernel of the batch is loaded or failed"))
            .collect();
        let outcomes: Vec<JobOutcome<T>> = settling
            .outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every kernel of the batch is loaded or failed"))
            .collect();

        if let Some(store) = &self.store {
            store.batch_finished();
        }
        self.target.batch_finished();

        let mut batch = BatchRecord {
            kernels: records.len(),
            workers,
            mode,
            wall: started.elapsed(),
            stored: records.iter().any(|record| record.stored),
            records,
            background: false,
            health: crate::statistics::Health::default(),
            profile_hits: 0,
        };
        self.note_health(&mut batch);
        log::debug!(
            "batch of {} kernels: {:?} wall ({settled:?} to the last kernel settled), {:?} work \
             on {} workers ({:?})",
            batch.kernels,
            batch.wall,
            batch.summed_work(),
            batch.workers,
            batch.mode
        );
        // The store keeps the record too, beside other processes' (`kiln
        // records`), so a slow start can be read after the fact.
        if let Some(store) = &self.store
            && StoredBatch::worth_keeping(&batch)
            && let Some(encoded) = StoredBatch::of(&batch, store.components()).encode()
        {
            store.keep_batch(&encoded);
            log::debug!("batch record kept, {:?} in", started.elapsed());
        }
        if self.record_limit > 0 {
            if self.records.len() == self.record_limit {
                self.records.pop_front();
            }
            self.records.push_back(batch);
        }
        outcomes
    }

    /// Compiles the batch's missing kernels on the workers (L5b-e), each
    /// worker making the device object of each artifact as soon as it is
    /// ready, store hits first (F9), while this thread publishes each
    /// kernel the moment its worker hands it back. The number of workers it
    /// used.
    fn compile_round(
        &mut self,
        jobs: &mut [Job<'_, T>],
        settling: &mut Settling<T>,
        used_processes: &AtomicBool,
    ) -> usize {
        let missing = jobs.iter().filter(|job| job.is_missing()).count();
        let with_processes = missing > 0
            && self
                .pool
                .prepare_processes(self.target.compiler().worker_recipe());
        let compiler = Arc::clone(self.target.compiler());
        let finalizer = Finalizer {
            compiler: &*compiler,
            processes: self.pool.process_pool().filter(|_| with_processes),
            used_processes,
            keep_recipes: self.store.is_some(),
        };
        let device = Arc::clone(self.target.device_step());
        let on_workers = device.on_workers();
        // A store hit needs a worker for its device step as a compile does.
        let to_make = jobs.iter().filter(|job| job.needs_device()).count();
        let workers = self.pool.workers_for(if on_workers {
            missing + to_make
        } else {
            missing
        });
        if missing > 1 {
            log::debug!(
                "compiling {missing} of {} kernels on {workers} workers{}",
                jobs.len(),
                if with_processes { " (processes)" } else { "" }
            );
        }
        let round = Round {
            finalizer: &finalizer,
            store: self.store.as_ref(),
            groups: &settling.groups,
            retry_failed: self.retry_failed,
            device: Some(&*device).filter(|_| on_workers),
        };
        // What is ready goes first: the workers hand it straight back, and
        // it loads while they compile the rest, costliest first (a stable
        // sort: equal costs keep the order they were asked in).
        let (mut queue, mut rest): (Vec<_>, Vec<_>) = jobs
            .iter_mut()
            .filter(|job| job.is_settled() || job.is_missing())
            .partition(|job| job.is_settled());
        rest.sort_by_key(|job| std::cmp::Reverse(job.cost_hint()));
        if rest.len() > 1
            && let Some(store) = &self.store
        {
            order_by_past_work(&mut rest, store);
        }
        queue.extend(rest);
        if let Some(store) = &self.store {
            super::job::ahead::look_up_sources(&self.pool, &mut queue, workers, &round, store);
        }
        // F5, F11: the worker processes start as soon as the batch knows it
        // has kernels to compile (missing by id and by text), in the
        // background while the workers take what is ready; a batch the
        // store answers whole, by ids or by texts (a program after `kiln
        // warm`, L11), starts none.
        let to_compile = queue
            .iter()
            .filter(|job| job.is_missing() && !job.found_by_text())
            .count();
        self.pool
            .start_early(self.target.compiler().worker_recipe(), to_compile);
        let target = &mut self.target;
        let statistics = &mut self.statistics;
        let store = self.store.as_ref();
        let progress = &self.progress;
        let Settling {
            outcomes,
            records,
            led,
            ..
        } = settling;
        let mut parked: FxHashMap<usize, Vec<&mut Job<'_, T>>> = FxHashMap::default();
        // The round's kernels found by their text, stored under their ids
        // together once the round is over (L11).
        let mut rekeys = Vec::new();
        let work = |job: &mut Job<'_, T>| {
            job.compile(&round);
            if let Some(device) = round.device {
                job.make_device(device);
            }
        };
        let done = crate::pool::as_done(|job: &mut Job<'_, T>| {
            job.account(target, statistics);
            // Members that took their leader's artifact here: their
            // device objects are made on the workers too.
            let mut again = Vec::new();
            let mut loading = vec![job];
            while let Some(job) = loading.pop() {
                if let Step::Waiting { leader, .. } = job.step {
                    match led.get(&leader) {
                        Some(result) => job.take_from_leader(result),
                        None => {
                            parked.entry(leader).or_default().push(job);
                            continue;
                        }
                    }
                }
                if !job.is_settled() {
                    // Held elsewhere: asked again after the round.
                    continue;
                }
                if job.leads {
                    led.insert(job.index, job.led());
                    loading.extend(parked.remove(&job.index).unwrap_or_default());
                }
                if on_workers && job.needs_device() {
                    again.push(job);
                    continue;
                }
                let (outcome, record) = job.publish(target, store, statistics, &mut rekeys);
                outcomes[job.index] = Some(outcome);
                records[job.index] = Some(record);
                progress.settled_one();
            }
            again
        });
        // Nothing to compile (F11): the device steps go where they are
        // fastest, on this thread when the driver serializes them or they
        // are too cheap to spread.
        // Otherwise, where the workers make device objects, they make them
        // however few there are: a batch of one kernel too (F9).
        // A round the store answered whole, by ids or by texts (L11), is
        // such a round: it compiles nothing.
        let workers = if to_compile == 0 && on_workers && !device.spreads() {
            self.pool.run_with(queue, 1, false, work, done);
            1
        } else if to_compile == 0 && on_workers {
            self.pool.run_device_steps(queue, work, done)
        } else {
            self.pool.run_with(queue, workers, on_workers, work, done);
            workers
        };
        debug_assert!(parked.is_empty(), "every leader of the round settled");
        drop(parked);
        // Before the batch waits for keys others hold: nothing waits while
        // holding a claim (P12), and these hold theirs until written.
        if let (Some(store), false) = (store, rekeys.is_empty()) {
            let (places, pending): (Vec<usize>, Vec<_>) = rekeys.into_iter().unzip();
            for (place, outcome) in places.into_iter().zip(store.put_rekeyed_many(pending)) {
                if jobs[place].rekey_written(statistics, outcome)
                    && let Some(record) = records[place].as_mut()
                {
                    record.stored = true;
                }
            }
        }
        workers
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

    // F2
    #[test]
    fn the_costliest_kernels_are_handed_out_first() {
        let log =
            std::env::temp_dir().join(format!("kiln-costliest-first-{}.log", std::process::id()));
        drop(std::fs::remove_file(&log));
        let target = FakeTarget::storeless()
            .with_compiler(crate::fake::FakeCompiler::default().logging_compiles_to(&log));
        let mut loader = loader(target, 1);
        for (number, millis) in [(0, 1), (1, 5), (2, 0), (3, 3), (4, 5)] {
            let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(millis));
            loader.enqueue(Box::new(kernel), ());
        }
        loader.compile_queued();
        let order: Vec<u32> = crate::fake::FakeCompiler::read_compile_log(&log)
            .expect("the compile log")
            .into_iter()
            .map(|(_, number)| number)
            .collect();
        drop(std::fs::remove_file(&log));
        assert_eq!(
            order,
            [1, 4, 3, 0, 2],
            "costliest first, ties in asked order"
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
        struct ArchTarget(Arc<ArchCompiler>, Arc<dyn ArtifactStore>, Arc<ArchDevice>);

        struct ArchDevice;

        impl crate::target::DeviceStep<ArchCompiler> for ArchDevice {
            type Made = String;

            fn make(
                &self,
                _id: &ArtifactId<u32>,
                artifact: &String,
            ) -> Result<String, crate::error::DeviceRefusal> {
                Ok(artifact.clone())
            }
        }

        impl CompilationTarget for ArchTarget {
            type Compiler = ArchCompiler;
            type Loaded = String;
            type Device = ArchDevice;

            fn compiler(&self) -> &Arc<ArchCompiler> {
                &self.0
            }

            fn device_step(&self) -> &Arc<ArchDevice> {
                &self.2
            }

            fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
                Some(&self.1)
            }

            fn publish(
                &mut self,
                _id: &ArtifactId<u32>,
                _artifact: &String,
                made: String,
            ) -> Result<String, crate::error::DeviceRefusal> {
                Ok(made)
            }
        }

        // L5c
        #[test]
        fn one_text_under_two_variants_is_two_artifacts() {
            let mut loader = KernelLoader::with_config(
                ArchTarget(
                    Arc::new(ArchCompiler),
                    Arc::new(MemoryStore::new()),
                    Arc::new(ArchDevice),
                ),
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
