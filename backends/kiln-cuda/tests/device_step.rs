//! The CUDA device step on the batch's workers (F9), on a real GPU: a cold
//! batch's modules are loaded on the loader's pool threads (each binding
//! the device's context there), never on the thread that asked, and launch.
//! Skips with a printed reason where there is no GPU, and fails instead
//! under `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use kiln_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use kiln_cuda::{CudaArtifact, CudaCompiler, CudaTarget, CudaVariant, LoadedKernel};
use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, DeviceRefusal, DeviceStep, KernelId,
    KernelLoader, KernelOutcome, LoaderConfig,
};

/// The CUDA target's own device step.
type Inner = <CudaTarget as CompilationTarget>::Device;

/// The CUDA target's device step, watched: the name of the thread that
/// loaded each module.
struct Watched {
    inner: Arc<Inner>,
    loaded_on: Mutex<HashMap<KernelId, Option<String>>>,
}

impl DeviceStep<CudaCompiler> for Watched {
    type Made = LoadedKernel;

    fn make(
        &self,
        id: &ArtifactId<CudaVariant>,
        artifact: &CudaArtifact,
    ) -> Result<LoadedKernel, DeviceRefusal> {
        let made = self.inner.make(id, artifact);
        self.loaded_on.lock().expect("not poisoned").insert(
            id.kernel.clone(),
            std::thread::current().name().map(str::to_owned),
        );
        made
    }
}

struct WatchedTarget {
    inner: CudaTarget,
    step: Arc<Watched>,
}

impl CompilationTarget for WatchedTarget {
    type Compiler = CudaCompiler;
    type Loaded = LoadedKernel;
    type Device = Watched;

    fn compiler(&self) -> &Arc<CudaCompiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<Watched> {
        &self.step
    }

    fn store(&self) -> Option<&Arc<dyn ArtifactStore>> {
        self.inner.store()
    }

    fn publish(
        &mut self,
        id: &ArtifactId<CudaVariant>,
        artifact: &CudaArtifact,
        made: LoadedKernel,
    ) -> Result<LoadedKernel, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

// F9
#[test]
fn f9_a_cold_batch_loads_its_modules_on_the_pool_threads() {
    let Some(target) = support::on_device("F9 modules on the workers") else {
        return;
    };
    let target = target.without_store();
    let variant = target.variant();
    let step = Arc::new(Watched {
        inner: Arc::clone(target.device_step()),
        loaded_on: Mutex::new(HashMap::new()),
    });
    let mut loader = KernelLoader::with_config(
        WatchedTarget {
            inner: target,
            step,
        },
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            ..LoaderConfig::default()
        },
    );
    let count = 6;
    let kernels: Vec<_> = (0..count).map(support::distinct).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    let loaded_on = loader
        .target()
        .step
        .loaded_on
        .lock()
        .expect("not poisoned")
        .clone();
    assert_eq!(loaded_on.len(), count);
    for (kernel, thread) in &loaded_on {
        assert!(
            thread
                .as_deref()
                .is_some_and(|name| name.starts_with("kiln-compile-")),
            "{kernel} was loaded on {thread:?}, not a thread of the loader's pool"
        );
    }
    // A module loaded on a worker launches from this thread.
    let kernel = loader
        .load(
            &kernels[4],
            &ArtifactId::new(kiln_engine::Kernel::id(&kernels[4]), variant),
        )
        .expect("loaded");
    let device = loader.target().inner.device().expect("a GPU").clone();
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
