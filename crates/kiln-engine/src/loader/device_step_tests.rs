//! The device step on the batch's workers (F9), proved on the fake target,
//! whose device step records the thread of each device object and how
//! many were being made at once.

use std::time::Duration;

use super::tests::{load, loader};
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
    assert!(!by_caller, "a hit is made on a worker too");
    assert_eq!(threads.len(), 2);
    assert_eq!(second.target().fake_device_step().most_at_once(), 2);
    assert_eq!(
        second.records()[0].workers,
        2,
        "a warm batch uses the workers"
    );
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
