//! The loader's rules proved on the fake target, where every step can be
//! counted: the rules of [`KernelLoader`]'s own calls here, those of a
//! batch and of one kernel's way through it beside `batch` and `job`. The
//! same rules run against real compilers through the conformance suite.

use std::num::NonZeroUsize;

use super::*;
use crate::fake::{FakeKernel, FakeTarget};

/// A loader of `target` on `parallelism` workers, keeping 16 records.
pub(super) fn loader(target: FakeTarget, parallelism: usize) -> KernelLoader<FakeTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(parallelism).expect("parallelism is at least 1"),
            record_limit: 16,
            // A loader after `into_target` stands in for the next process
            // on the same store: no warm-start profile loads ahead of what
            // these tests count (L12 has tests of its own).
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// `kernel` loaded under the fake target's only variant.
pub(super) fn load(
    loader: &mut KernelLoader<FakeTarget>,
    kernel: &FakeKernel,
) -> Result<Arc, KernelError> {
    loader.load(kernel, &kernel.artifact_id())
}

pub(super) type Arc = std::sync::Arc<crate::fake::FakeModule>;

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
