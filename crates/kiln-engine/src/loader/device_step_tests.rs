//! The device step on the batch's workers (F9), proved on the fake target,
//! whose device step records the thread of each device object and how
//! many were being made at once.

use std::time::Duration;

use super::tests::{Arc, load, loader};
use crate::error::Stage;
use crate::fake::{FakeKernel, FakeTarget};
use crate::kernel::Kernel;
use crate::statistics::KernelOutcome;

/// The threads that made the device objects of kernels `numbers`, and
/// whether the calling thread made any.
fn device_threads(
    loader: &crate::loader::KernelLoader<FakeTarget>,
    numbers: impl IntoIterator<Item = u32>,
) -> (std::collections::HashSet<std::thread::ThreadId>, bool) {
    let step = loader.target().fake_device_step();
    let caller = std::thread::current().id();
    let threads: std::collections::HashSet<_> = numbers
        .into_iter()
        .map(|number| {
            step.made_on(&FakeKernel::new(number).id())
                .expect("its device object was made")
        })
        .collect();
    let by_caller = threads.contains(&caller);
    (threads, by_caller)
}

// F9
#[test]
fn f9_a_cold_batch_makes_its_device_objects_on_the_workers_at_once() {
    let target = FakeTarget::storeless().with_device_time(Duration::from_millis(30));
    let mut loader = loader(target, 2);
    for number in 0..8 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let (threads, by_caller) = device_threads(&loader, 0..8);
    assert!(!by_caller, "the loader's thread only publishes");
    assert_eq!(threads.len(), 2, "both workers made device objects");
    assert_eq!(
        loader.target().fake_device_step().most_at_once(),
        2,
        "two were being made at the same moment"
    );
    assert_eq!(loader.target().loaded(), 8, "every one published");
    assert!(
        loader.records()[0]
            .records
            .iter()
            .all(|record| record.work < Duration::from_millis(30)),
        "a kernel's work is its compile (what a store hit saves), not its device step"
    );
}

// F9
#[test]
fn f9_store_hits_make_their_device_objects_on_the_workers() {
    let mut first = loader(FakeTarget::persisting(), 2);
    for number in 0..6 {
        first.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    first.compile_queued();
    let target = first
        .into_target()
        .with_device_time(Duration::from_millis(30));
    let mut second = loader(target, 2);
    for number in 0..6 {
        second.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    second.compile_queued();
    assert_eq!(second.records()[0].count(KernelOutcome::FromStore), 6);
    let (threads, by_caller) = device_threads(&second, 0..6);
    // F11: the first two are timed on the loader's thread; steps this costly
    // spread over the workers.
    assert!(by_caller, "the first hits are timed where they are asked");
    assert_eq!(threads.len(), 3, "the loader's thread and both workers");
    assert_eq!(second.target().fake_device_step().most_at_once(), 2);
    assert_eq!(
        second.records()[0].workers,
        2,
        "a warm batch of costly device steps uses the workers"
    );
}

// F11, F9
#[test]
fn f11_store_hits_whose_device_steps_are_cheap_are_made_on_the_loader_s_thread() {
    let mut first = loader(FakeTarget::persisting(), 2);
    for number in 0..6 {
        first.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    first.compile_queued();
    let target = first.into_target().with_device_time(Duration::ZERO);
    let mut second = loader(target, 2);
    for number in 0..6 {
        second.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    second.compile_queued();
    assert_eq!(second.records()[0].count(KernelOutcome::FromStore), 6);
    let (threads, by_caller) = device_threads(&second, 0..6);
    assert!(by_caller, "made where they are asked: {threads:?}");
    assert_eq!(threads.len(), 1, "no worker woken for them");
    assert_eq!(second.records()[0].workers, 1);
}

// F11, F9: a driver that serializes its device objects (CUDA's and HIP's
// module loads) has a warm batch make every one on the loader's thread,
// however costly each is.
#[test]
fn f11_store_hits_on_a_serializing_driver_are_made_on_the_loader_s_thread() {
    let mut first = loader(FakeTarget::persisting(), 2);
    for number in 0..6 {
        first.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    first.compile_queued();
    let target = first
        .into_target()
        .with_device_time(Duration::from_millis(30))
        .with_serialized_device();
    let mut second = loader(target, 2);
    for number in 0..6 {
        second.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    second.compile_queued();
    assert_eq!(second.records()[0].count(KernelOutcome::FromStore), 6);
    let (threads, by_caller) = device_threads(&second, 0..6);
    assert!(by_caller, "made where they are asked: {threads:?}");
    assert_eq!(threads.len(), 1, "no worker woken for them");
    assert_eq!(second.target().fake_device_step().most_at_once(), 1);
    assert_eq!(second.records()[0].workers, 1);
}

// F9, L5c
#[test]
fn f9_kernels_taking_their_leader_s_artifact_make_their_own_device_objects_on_the_workers() {
    let target = FakeTarget::persisting().with_device_time(Duration::from_millis(20));
    let mut loader = loader(target, 2);
    for number in 0..6 {
        loader.enqueue(
            Box::new(FakeKernel::new(number).sharing_source("one text")),
            (),
        );
    }
    loader.compile_queued();
    assert_eq!(loader.records()[0].count(KernelOutcome::Rekeyed), 5);
    let (threads, by_caller) = device_threads(&loader, 0..6);
    assert!(!by_caller, "members are made on the workers too");
    assert_eq!(threads.len(), 2);
    assert_eq!(loader.target().fake_device_step().made(), 6, "one each");
}

// F9
#[test]
fn f9_a_driver_that_needs_one_thread_has_the_loader_s_thread_make_every_device_object() {
    let target = FakeTarget::storeless()
        .with_device_on_one_thread()
        .with_device_time(Duration::from_millis(5));
    let mut loader = loader(target, 2);
    for number in 0..6 {
        let kernel = FakeKernel::new(number).sleeping(Duration::from_millis(5));
        loader.enqueue(Box::new(kernel), ());
    }
    loader.compile_queued();
    let (threads, by_caller) = device_threads(&loader, 0..6);
    assert!(by_caller);
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(loader.target().fake_device_step().most_at_once(), 1);
    let compiler = loader.target().fake_compiler();
    assert_ne!(
        compiler.finalized_on(0),
        Some(std::thread::current().id()),
        "the compiles still ran on the workers"
    );
}

// F9, L6, L9
#[test]
fn f9_a_refusal_on_a_worker_fails_that_kernel_alone_reported_once() {
    let mut loader = loader(FakeTarget::persisting(), 2);
    for number in 0..4 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    let refused = FakeKernel::new(9).refused();
    loader.enqueue(Box::new(refused.clone()), ());
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.count(KernelOutcome::Refused), 1);
    assert_eq!(batch.count(KernelOutcome::Compiled), 4);
    let statistics = loader.statistics();
    assert_eq!(
        (statistics.refused, statistics.failed, statistics.compiled),
        (1, 0, 4),
        "one refusal, counted once"
    );
    let (_, by_caller) = device_threads(&loader, [0, 1, 2, 3, 9]);
    assert!(!by_caller);
    let error = load(&mut loader, &refused).expect_err("refused");
    assert_eq!(error.stage, Stage::Load);
    assert!(!loader.target().holds(&refused.artifact_id()), "not stored");
    for number in 0..4 {
        assert!(loader.is_loaded(&FakeKernel::new(number).artifact_id()));
    }
}

/// A store holding kernels `0..count` and the profile of `program` that
/// names them all, as a first process of the program leaves it (L12).
fn profiled_store(program: &str, count: u32) -> std::sync::Arc<dyn crate::store::ArtifactStore> {
    let store: std::sync::Arc<dyn crate::store::ArtifactStore> =
        std::sync::Arc::new(crate::store::MemoryStore::new());
    let mut first = loader(FakeTarget::on_store(std::sync::Arc::clone(&store)), 2)
        .with_profile(crate::profile::Program::named(program));
    for number in 0..count {
        first.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    first.compile_queued();
    drop(first);
    store
}

// F9, L12
#[test]
fn f9_a_profiled_background_load_makes_its_device_objects_on_the_pool_threads() {
    let store = profiled_store("f9 profiled", 6);
    let target = FakeTarget::on_store(store).with_device_time(Duration::from_millis(30));
    let mut next = loader(target, 2).with_profile(crate::profile::Program::named("f9 profiled"));
    load(&mut next, &FakeKernel::new(0)).expect("loads");
    assert!(
        next.records().is_empty(),
        "no batch ran: the profile loaded them"
    );
    assert_eq!(
        next.target().loaded(),
        6,
        "every profiled kernel is on the device"
    );
    assert_eq!(next.profiled_waiting(), 5, "kernel 0 was asked for");
    let (threads, by_caller) = device_threads(&next, 0..6);
    assert!(!by_caller, "the loader's thread only publishes them");
    assert_eq!(threads.len(), 2, "both pool threads made device objects");
    assert_eq!(next.target().fake_device_step().most_at_once(), 2);
}

// F9, L12
#[test]
fn f9_a_profiled_background_load_on_a_one_thread_driver_stays_on_the_loader_s_thread() {
    let store = profiled_store("f9 profiled one thread", 4);
    let target = FakeTarget::on_store(store).with_device_on_one_thread();
    let mut next =
        loader(target, 2).with_profile(crate::profile::Program::named("f9 profiled one thread"));
    load(&mut next, &FakeKernel::new(0)).expect("loads");
    assert!(next.records().is_empty());
    assert_eq!(next.target().loaded(), 4);
    let (threads, by_caller) = device_threads(&next, 0..4);
    assert!(
        by_caller,
        "a driver of one thread has the loader's thread make them"
    );
    assert_eq!(threads.len(), 1, "{threads:?}");
}

// F11, L12: a driver that makes device objects one at a time (CUDA's and
// HIP's module loads) has the profile's loads made on the loader's
// thread, as a warm batch's are, with no worker woken for them.
#[test]
fn f11_a_profiled_load_on_a_serializing_driver_stays_on_the_loader_s_thread() {
    let store = profiled_store("f11 profiled serialized", 6);
    let target = FakeTarget::on_store(store)
        .with_device_time(Duration::from_millis(5))
        .with_serialized_device();
    let mut next =
        loader(target, 2).with_profile(crate::profile::Program::named("f11 profiled serialized"));
    load(&mut next, &FakeKernel::new(0)).expect("loads");
    assert!(next.records().is_empty());
    assert_eq!(next.target().loaded(), 6);
    let (threads, by_caller) = device_threads(&next, 0..6);
    assert!(by_caller && threads.len() == 1, "{threads:?}");
    assert_eq!(next.target().fake_device_step().most_at_once(), 1);
}

// F9
#[test]
fn f9_a_compiled_kernel_alone_is_made_on_a_pool_thread_and_a_hit_alone_on_the_loader_s() {
    let caller = std::thread::current().id();
    let mut cold = loader(FakeTarget::persisting(), 2);
    load(&mut cold, &FakeKernel::new(1)).expect("loads");
    let step = cold.target().fake_device_step();
    let made = step.made_on(&FakeKernel::new(1).id()).expect("made");
    assert_ne!(made, caller, "a compiled kernel alone is made on the pool");
    assert_eq!(cold.records()[0].workers, 1);
    // Alone and from the store: the same.
    let mut warm = loader(cold.into_target().with_device_time(Duration::ZERO), 2);
    load(&mut warm, &FakeKernel::new(1)).expect("loads");
    assert_eq!(warm.records()[0].count(KernelOutcome::FromStore), 1);
    let made = warm
        .target()
        .fake_device_step()
        .made_on(&FakeKernel::new(1).id())
        .expect("made");
    assert_eq!(
        made, caller,
        "a store hit alone is made on the loader's thread: nothing to compile, no thread \
         woken (F11)"
    );
}

// F9, T1, T2
#[test]
fn f9_a_tune_s_candidates_are_made_on_the_pool_threads_and_its_stored_winner_where_asked() {
    use crate::tune::{Candidate, Measure, Origin, TuneKey};
    let target = FakeTarget::persisting().with_device_time(Duration::from_millis(10));
    let device = target.device().clone();
    let candidates: Vec<Candidate<FakeTarget>> = (1..=6)
        .map(|number| Candidate::new(Box::new(FakeKernel::new(number)), ()))
        .collect();
    let key = TuneKey::new("f9.tune");
    let mut launch = |module: &Arc| {
        let fast = module.text.ends_with('3');
        device.run(Duration::from_micros(if fast { 5 } else { 50 }));
        Ok(())
    };
    let mut first = loader(target, 2);
    let tuned = first
        .tune(
            &key,
            &candidates,
            Measure::Timed {
                launch: &mut launch,
                warm_up: 1,
                runs: 3,
            },
        )
        .expect("tunes");
    assert_eq!((tuned.winner, tuned.origin), (2, Origin::Measured));
    let (threads, by_caller) = device_threads(&first, 1..=6);
    assert!(!by_caller, "no candidate is made on the loader's thread");
    assert_eq!(threads.len(), 2, "both pool threads made candidates");
    // The next process finds the answer: the winner alone, a store hit
    // made on the loader's thread (F11).
    let target = first.into_target().with_device_time(Duration::ZERO);
    let device = target.device().clone();
    let mut launch = |_: &Arc| {
        device.run(Duration::from_micros(5));
        Ok(())
    };
    let mut next = loader(target, 2);
    let tuned = next
        .tune(
            &key,
            &candidates,
            Measure::Timed {
                launch: &mut launch,
                warm_up: 1,
                runs: 3,
            },
        )
        .expect("tunes");
    assert_eq!((tuned.winner, tuned.origin), (2, Origin::Stored));
    let step = next.target().fake_device_step();
    assert_eq!(step.made(), 1, "the winner alone");
    let made = step.made_on(&FakeKernel::new(3).id()).expect("made");
    assert_eq!(made, std::thread::current().id(), "on the loader's thread");
}

/// A store in memory that hands its answers over one at a time, as the
/// disk store's lookup threads do, and notes how many device objects the
/// batch had made by the time each hand-over returned.
#[derive(Debug)]
struct HandingOver {
    inner: crate::store::MemoryStore,
    device: std::sync::OnceLock<std::sync::Arc<crate::fake::FakeDeviceStep>>,
    made_after_each: std::sync::Mutex<Vec<usize>>,
    /// After its first answer, waits (up to 5 s) for a device object to be
    /// made before it hands over the next: for a caller that takes the
    /// answers on another thread.
    paced: bool,
}

impl crate::store::ArtifactStore for HandingOver {
    fn lookup_many(&self, keys: &[crate::store::StoreKey]) -> Vec<crate::store::Lookup<Vec<u8>>> {
        self.inner.lookup_many(keys)
    }

    fn lookup_each(
        &self,
        keys: &[crate::store::StoreKey],
        found: &mut dyn FnMut(usize, crate::store::Lookup<Vec<u8>>),
    ) {
        for (at, answer) in self.inner.lookup_many(keys).into_iter().enumerate() {
            found(at, answer);
            if self.paced && at == 0 {
                let waited = std::time::Instant::now();
                while self.device.get().is_some_and(|device| device.made() == 0)
                    && waited.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let made = self.device.get().map_or(0, |device| device.made());
            self.made_after_each
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(made);
        }
    }

    fn put_many(&self, puts: &[crate::store::Put<'_>]) -> Vec<crate::store::StoreOutcome> {
        self.inner.put_many(puts)
    }

    fn remove(&self, key: &crate::store::StoreKey) {
        self.inner.remove(key);
    }

    fn generation(&self) -> crate::store::Generation {
        self.inner.generation()
    }

    fn statistics(&self) -> crate::store::StoreStatistics {
        self.inner.statistics()
    }

    fn parts(&self) -> crate::store::StoreParts<'_> {
        self.inner.parts()
    }
}

impl HandingOver {
    /// A store holding kernels `0..count`, stored by a first loader (with
    /// `program`'s profile when given), and the target of a next process
    /// on it whose driver makes device objects one at a time, watched by
    /// the store.
    fn filled(
        count: u32,
        paced: bool,
        program: Option<&crate::profile::Program>,
    ) -> (std::sync::Arc<Self>, FakeTarget) {
        use crate::target::CompilationTarget;
        let store = std::sync::Arc::new(HandingOver {
            inner: crate::store::MemoryStore::new(),
            device: std::sync::OnceLock::new(),
            made_after_each: std::sync::Mutex::default(),
            paced,
        });
        let shared: std::sync::Arc<dyn crate::store::ArtifactStore> = store.clone();
        let first = loader(FakeTarget::on_store(std::sync::Arc::clone(&shared)), 2);
        let mut first = match program {
            Some(program) => first.with_profile(program.clone()),
            None => first,
        };
        for number in 0..count {
            first.enqueue(Box::new(FakeKernel::new(number)), ());
        }
        first.compile_queued();
        drop(first);
        store.made().clear();
        let target = FakeTarget::on_store(shared).with_serialized_device();
        store
            .device
            .set(std::sync::Arc::clone(target.device_step()))
            .expect("set once");
        (store, target)
    }

    /// How many device objects were made by the end of each hand-over.
    fn made(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.made_after_each
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// F11: on a driver that makes device objects one at a time, a warm batch
// makes each hit's while the store is still reading the others, not
// after the whole lookup: each hand-over of the store returns with that
// kernel's device object made.
#[test]
fn f11_a_warm_batch_makes_each_hit_s_device_object_as_the_store_hands_it_over() {
    let (store, target) = HandingOver::filled(6, false, None);
    let mut second = loader(target, 2);
    for number in 0..6 {
        second.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    second.compile_queued();
    assert_eq!(second.records()[0].count(KernelOutcome::FromStore), 6);
    assert_eq!(*store.made(), [1, 2, 3, 4, 5, 6], "made as handed over");
    let (threads, by_caller) = device_threads(&second, 0..6);
    assert!(by_caller && threads.len() == 1, "on the loader's thread");
}

// F11, L12: on a driver that makes device objects one at a time, a
// warm-start profile's kernels are made on the loader's thread as the
// profile's thread reads them, not after its whole lookup: the store
// hands over its second answer only once the first one's object is made.
#[test]
fn f11_a_profiled_load_makes_each_kernel_as_the_profile_s_thread_reads_it() {
    let program = crate::profile::Program::named("f11 profiled as read");
    let (store, target) = HandingOver::filled(4, true, Some(&program));
    let mut next = loader(target, 2).with_profile(program);
    load(&mut next, &FakeKernel::new(0)).expect("loads");
    assert_eq!(next.target().loaded(), 4);
    let made = store.made().clone();
    assert_eq!(made.len(), 4, "{made:?}");
    assert!(
        made[0] >= 1,
        "the first was made before the rest were read: {made:?}"
    );
    let (threads, by_caller) = device_threads(&next, 0..4);
    assert!(by_caller && threads.len() == 1, "{threads:?}");
}
