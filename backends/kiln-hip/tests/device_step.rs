//! The HIP device step on the batch's workers (F9), on a real AMD GPU: a
//! cold batch's code objects are loaded on the loader's pool threads (each
//! making the device current there), never on the thread that asked.
//! Skips with a printed reason where there is no AMD GPU.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use kiln_engine::conformance::skip;
use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, DeviceRefusal, DeviceStep, Kernel, KernelId,
    KernelLoader, KernelOutcome, LoaderConfig,
};
use kiln_hip::{
    HipArtifact, HipCompiler, HipDevice, HipKernel, HipTarget, HipVariant, LoadedKernel,
};

/// The HIP target's own device step.
type Inner = <HipTarget as CompilationTarget>::Device;

/// The HIP target's device step, watched: the name of the thread that
/// loaded each code object.
struct Watched {
    inner: Arc<Inner>,
    loaded_on: Mutex<HashMap<KernelId, Option<String>>>,
}

impl DeviceStep<HipCompiler> for Watched {
    type Made = LoadedKernel;

    fn make(
        &self,
        id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
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
    inner: HipTarget,
    step: Arc<Watched>,
}

impl CompilationTarget for WatchedTarget {
    type Compiler = HipCompiler;
    type Loaded = LoadedKernel;
    type Device = Watched;

    fn compiler(&self) -> &Arc<HipCompiler> {
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
        id: &ArtifactId<HipVariant>,
        artifact: &HipArtifact,
        made: LoadedKernel,
    ) -> Result<LoadedKernel, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

fn distinct(index: usize) -> HipKernel {
    HipKernel::builder(KernelId::named("tests.distinct").parameter(&index), "fill").source(format!(
        "extern \"C\" __global__ void fill(float* y, unsigned n) {{\n\
             \x20   unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20   if (i < n) y[i] = {index}.0f;\n\
             }}\n"
    ))
}

// F9
#[test]
fn f9_a_cold_batch_loads_its_code_objects_on_the_pool_threads() {
    let device = match HipDevice::open(0) {
        Ok(device) => device,
        Err(error) => {
            skip("F9 code objects on the workers", &error.to_string());
            return;
        }
    };
    let target = HipTarget::on(device)
        .expect("hipRTC is installed with the runtime")
        .without_store();
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
    for index in 0..count {
        loader.enqueue(Box::new(distinct(index)), variant.clone());
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
    let id = ArtifactId::new(distinct(2).id(), variant);
    assert!(loader.is_loaded(&id));
}
