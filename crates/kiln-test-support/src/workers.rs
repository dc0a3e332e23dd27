//! What the backends' worker-process tests share: the `main` of a test
//! binary that is its own compile worker, and the comparison of one batch
//! compiled in worker processes with the same batch compiled in process
//! (B1, B2, F2). The backends pass in their loaders and kernels: this
//! crate names none of them.

use kiln_engine::{
    ArtifactId, CompilationTarget, Kernel, KernelLoader, KernelOf, KernelOutcome, VariantOf,
    WorkerMode,
};

/// Writes the `main` of a test binary that is its own compile worker: it
/// serves the worker entries `entries` when started as a worker, and
/// otherwise runs the tests named (through [`harness::run`](crate::harness::run)).
///
/// ```ignore
/// kiln_test_support::worker_test_main!([kiln_cuda::worker_entry()], b1_test, l6_test);
/// ```
#[macro_export]
macro_rules! worker_test_main {
    ([$($entry:expr),+ $(,)?], $($test:ident),+ $(,)?) => {
        fn main() {
            ::kiln_engine::worker::run_if_worker(&[$($entry),+]);
            $crate::harness::run($crate::tests![$($test),+]);
        }
    };
}

/// Compiles `kernels` for `variant` in one batch on each loader,
/// `in_workers` (finalizing in worker processes) and `in_process` (on
/// threads), checks that each batch ran as its loader's mode says with
/// every kernel compiled, and that the workers were processes other than
/// this one; returns each kernel as loaded from the workers and from the
/// process, for the backend to compare.
pub fn compile_in_workers_and_in_process<T>(
    in_workers: &mut KernelLoader<T>,
    in_process: &mut KernelLoader<T>,
    kernels: &[KernelOf<T>],
    variant: &VariantOf<T>,
) -> Vec<(T::Loaded, T::Loaded)>
where
    T: CompilationTarget,
    KernelOf<T>: Clone + Sized,
{
    for kernel in kernels {
        in_workers.enqueue(Box::new(kernel.clone()), variant.clone());
        in_process.enqueue(Box::new(kernel.clone()), variant.clone());
    }
    in_workers.compile_queued();
    in_process.compile_queued();

    let batch = in_workers.records().back().expect("a batch");
    assert_eq!(batch.mode, WorkerMode::Processes);
    assert_eq!(
        batch.count(KernelOutcome::Compiled),
        kernels.len(),
        "{batch:#?}"
    );
    assert_eq!(
        in_process.records().back().expect("a batch").mode,
        WorkerMode::Threads
    );
    let workers = in_workers.worker_processes();
    assert!(!workers.running.is_empty(), "{workers:?}");
    assert!(!workers.running.contains(&std::process::id()));
    kernels
        .iter()
        .map(|kernel| {
            let id = ArtifactId::new(kernel.id(), variant.clone());
            let built_there = in_workers.load(kernel, &id).expect("compiled in a worker");
            let built_here = in_process.load(kernel, &id).expect("compiled in process");
            (built_there, built_here)
        })
        .collect()
}
