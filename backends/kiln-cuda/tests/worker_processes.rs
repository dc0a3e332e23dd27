//! NVRTC in compile worker processes, for real: this binary's `main` starts
//! with the worker hook, so it is its own worker and needs no harness.
//!
//! What is not here: a kernel whose compile crashes its worker. kiln-hip
//! has one (comgr aborts on a target it does not know), but NVRTC could not
//! be made to crash: a million nested parentheses or blocks compile, a
//! runaway template recursion is an `excessive recursion` error, and an
//! unknown architecture or option is refused with a log. So these tests
//! prove the process mode and its results (the same artifacts as in
//! process, a failure with its diagnostics intact and alone in its batch);
//! kiln-engine's `worker_processes` test proves a crash fails alone on its
//! fake compiler.
//!
//! Each test skips with a printed reason when NVRTC is missing, and fails
//! instead when `KILN_REQUIRE_NVRTC=1`. The binary prints libtest's
//! `test result:` line.

mod support;

use kiln_test_support::workers;

use kiln_cuda::{CudaKernel, CudaTarget, LoadedImage};
use kiln_engine::{Kernel, KernelLoader, KernelOutcome, WorkerMode};
use support::{compile_only, id_on};

kiln_test_support::worker_test_main!(
    [kiln_cuda::worker_entry()],
    b1_nvrtc_in_worker_processes_builds_the_cubins_it_builds_in_process,
    l6_a_kernel_that_fails_in_a_worker_fails_alone_with_its_diagnostics,
);

/// A loader on `target` finalizing in `mode`, two at a time.
fn loader(target: CudaTarget, mode: WorkerMode) -> KernelLoader<CudaTarget> {
    kiln_test_support::loader(target, 2).with_worker_mode(mode)
}

/// Enqueues every kernel of `kernels` on `loader` and compiles the batch.
fn compile_batch(loader: &mut KernelLoader<CudaTarget>, kernels: &[CudaKernel]) {
    let variant = loader.target().variant();
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
}

// B1, F2
fn b1_nvrtc_in_worker_processes_builds_the_cubins_it_builds_in_process() {
    let test = "b1_nvrtc_in_worker_processes_builds_the_cubins_it_builds_in_process";
    let (Some(for_workers), Some(for_process)) = (compile_only(test), compile_only(test)) else {
        return;
    };
    let kernels: Vec<CudaKernel> = (0..4).map(support::distinct).collect();
    let mut in_workers = loader(for_workers, WorkerMode::Processes);
    let mut in_process = loader(for_process, WorkerMode::Threads);
    let variant = in_workers.target().variant();
    let built = workers::compile_in_workers_and_in_process(
        &mut in_workers,
        &mut in_process,
        &kernels,
        &variant,
    );
    let workers = in_workers.worker_processes();
    assert!(workers.unavailable.is_none(), "{workers:?}");
    for (kernel, (built_there, built_here)) in kernels.iter().zip(built) {
        assert_eq!(built_there.image(), LoadedImage::Described);
        assert_eq!(built_there.lowered_name(), built_here.lowered_name());
        assert_eq!(built_there.architecture(), built_here.architecture());
        assert_eq!(
            built_there.artifact_bytes(),
            built_here.artifact_bytes(),
            "a cubin and a PTX of one size each"
        );
        let cubin_bytes = support::compile(in_workers.target(), kernel)
            .expect("the kernel compiles here too")
            .artifact
            .cubin
            .len();
        assert_eq!(built_there.artifact_bytes().0, cubin_bytes);
    }
}

// L6, D2
fn l6_a_kernel_that_fails_in_a_worker_fails_alone_with_its_diagnostics() {
    let test = "l6_a_kernel_that_fails_in_a_worker_fails_alone_with_its_diagnostics";
    let Some(target) = compile_only(test) else {
        return;
    };
    let mut loader = loader(target, WorkerMode::Processes);
    let broken = support::broken(0);
    let mut kernels: Vec<CudaKernel> = (10..14).map(support::distinct).collect();
    kernels.insert(2, broken.clone());
    compile_batch(&mut loader, &kernels);

    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(batch.count(KernelOutcome::Compiled), 4, "{batch:#?}");
    assert_eq!(batch.count(KernelOutcome::Failed), 1, "{batch:#?}");
    let error = support::assert_broken_fails(&mut loader, &broken, "came back from the worker");
    let failure = error.compile_failure().expect("a compile failure");
    assert!(failure.log.contains("2 errors detected"), "the raw log too");
    for kernel in kernels.iter().filter(|kernel| kernel.id() != broken.id()) {
        let id = id_on(loader.target(), kernel);
        assert!(loader.is_loaded(&id), "the rest of the batch compiled");
    }
    let workers = loader.worker_processes();
    assert_eq!(
        workers.replaced, 0,
        "a compile error is no crash: {workers:?}"
    );
}
