//! The wgpu device step on the batch's workers (F9), on a real Vulkan
//! device (lavapipe here): the pipelines of a cold batch's compiled kernels
//! are made on the loader's pool threads, never on the thread that asked;
//! a warm batch's store hits where their cost says (F11); and they launch. Every test skips with a
//! printed reason where there is no Vulkan adapter, and fails instead under
//! `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::sync::Arc;

use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, MemoryStore};
use kiln_test_support::device_step::Watched;
use kiln_wgpu::{WgpuPipeline, WgpuTarget, WgpuVariant};
use support::{bytes_of, floats};

/// A loader of two workers on `target`, its device step watched. A second
/// loader stands in for the next process's batch: no warm-start profile
/// loads its kernels ahead of it.
fn loader(target: WgpuTarget) -> KernelLoader<Watched<WgpuTarget>> {
    kiln_test_support::loader(Watched::new(target), 2)
}

/// Doubles a buffer through `pipeline` (of `support::distinct(index)`),
/// proving a pipeline made on a worker launches.
fn assert_launches(target: &WgpuTarget, pipeline: &WgpuPipeline, index: usize) {
    let device = target.device().expect("a device target");
    let values = [1.0f32, 2.0, 3.0, 4.0];
    let buffer = device
        .storage_buffer("data", &bytes_of(&values))
        .expect("a storage buffer");
    device
        .dispatch(pipeline, &[(0, 0, &buffer)], [1, 1, 1])
        .expect("the dispatch runs");
    let mut read = floats(&device.read(&buffer).expect("the buffer reads back"));
    read.truncate(values.len());
    let expected: Vec<f32> = values
        .iter()
        .map(|value| value * 2.0 + index as f32)
        .collect();
    assert_eq!(read, expected);
}

// F9
#[test]
fn f9_a_cold_batch_makes_its_compiled_kernels_pipelines_on_the_pool_threads() {
    let Some(device) = support::device("F9 cold batch") else {
        return;
    };
    let count = 12;
    let mut loader = loader(WgpuTarget::on_device(device).without_store());
    let kernels: Vec<_> = (0..count).map(support::distinct).collect();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    loader
        .target()
        .assert_made_on_the_pool(count, "pipelines", "F9 cold batch");
    assert_eq!(
        loader.target().inner().pipelines_made().0,
        count,
        "every pipeline published to the target"
    );
    let pipeline = loader
        .load(&kernels[3], &support::id_of(&kernels[3]))
        .expect("loaded");
    assert!(pipeline.pipeline().is_some(), "a real pipeline");
    assert_launches(loader.target().inner(), &pipeline, 3);
}

// F9
#[test]
fn f9_f11_a_warm_batch_makes_its_store_hits_pipelines_where_their_cost_says() {
    let Some(device) = support::device("F9 warm batch") else {
        return;
    };
    let count = 12;
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    let kernels: Vec<_> = (100..100 + count).map(support::distinct).collect();
    {
        let mut first =
            loader(WgpuTarget::on_device(device.clone()).with_store(Arc::clone(&store)));
        for kernel in &kernels {
            first.enqueue(Box::new(kernel.clone()), WgpuVariant);
        }
        first.compile_queued();
    }
    let mut second = loader(WgpuTarget::on_device(device).with_store(store));
    for kernel in &kernels {
        second.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    second.compile_queued();
    let batch = second.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::FromStore), count);
    // F11: a batch with nothing to compile times its first two pipelines
    // on the loader's thread; the rest stay there when they all fit in a
    // moment at the pace of the faster (a warm driver cache), else spread
    // over the pool.
    let made = second.target().made_on();
    assert_eq!(made.len(), count, "every pipeline was made");
    let caller = std::thread::current().id();
    let on_caller = made
        .values()
        .filter(|(thread, _)| *thread == caller)
        .count();
    if batch.workers == 1 {
        assert_eq!(on_caller, count, "one worker: all made where asked");
    } else {
        assert_eq!(
            on_caller, 2,
            "the first two timed where asked, the rest spread"
        );
        assert!(
            made.values()
                .filter(|(thread, _)| *thread != caller)
                .all(|(_, name)| name
                    .as_deref()
                    .is_some_and(|name| name.starts_with("kiln-compile-"))),
            "the rest on the loader's pool"
        );
    }
    let pipeline = second
        .load(&kernels[5], &support::id_of(&kernels[5]))
        .expect("loaded");
    assert_launches(second.target().inner(), &pipeline, 105);
}
