//! The HIP device step on the batch's workers (F9), on a real AMD GPU: a
//! cold batch's code objects are loaded on the loader's pool threads (each
//! making the device current there), never on the thread that asked.
//! Skips with a printed reason where there is no AMD GPU.

use kiln_engine::conformance::skip;
use kiln_engine::{ArtifactId, Kernel, KernelId, KernelOutcome};
use kiln_hip::{HipDevice, HipKernel, HipTarget};
use kiln_test_support::device_step::Watched;

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
    let mut loader = kiln_test_support::loader(Watched::new(target), 2);
    let count = 6;
    for index in 0..count {
        loader.enqueue(Box::new(distinct(index)), variant.clone());
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    loader.target().assert_made_on_the_pool(
        count,
        "code objects",
        "F9 code objects on the workers",
    );
    let id = ArtifactId::new(distinct(2).id(), variant);
    assert!(loader.is_loaded(&id));
}
