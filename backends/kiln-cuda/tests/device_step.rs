//! The CUDA device step on the batch's workers (F9), on a real GPU: a cold
//! batch's modules are loaded on the loader's pool threads (each binding
//! the device's context there), never on the thread that asked, and launch.
//! Skips with a printed reason where there is no GPU, and fails instead
//! under `KILN_REQUIRE_DEVICE=1`.

mod support;

use kiln_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use kiln_engine::{ArtifactId, KernelOutcome};
use kiln_test_support::device_step::Watched;

// F9
#[test]
fn f9_a_cold_batch_loads_its_modules_on_the_pool_threads() {
    let Some(target) = support::on_device("F9 modules on the workers") else {
        return;
    };
    let target = target.without_store();
    let variant = target.variant();
    let mut loader = kiln_test_support::loader(Watched::new(target), 2);
    let count = 6;
    let kernels: Vec<_> = (0..count).map(support::distinct).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    loader
        .target()
        .assert_made_on_the_pool(count, "modules", "F9 modules on the workers");
    // A module loaded on a worker launches from this thread.
    let kernel = loader
        .load(
            &kernels[4],
            &ArtifactId::new(kiln_engine::Kernel::id(&kernels[4]), variant),
        )
        .expect("loaded");
    let device = loader.target().inner().device().expect("a GPU").clone();
    let stream = device.context().new_stream().expect("a stream");
    let n = 64i32;
    let mut values = stream.alloc_zeros::<f32>(64).expect("device memory");
    let mut launch = stream.launch_builder(kernel.function().expect("a function"));
    launch.arg(&mut values).arg(&n);
    // SAFETY: fill(float* y, int n) writes the 64 floats of `values`.
    unsafe { launch.launch(LaunchConfig::for_num_elems(64)) }.expect("the launch runs");
    let values = stream.clone_dtoh(&values).expect("copied back");
    assert!(values.iter().all(|&value| value == 4.0), "{values:?}");
}
