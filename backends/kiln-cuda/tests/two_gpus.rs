//! Every GPU of the machine behind one store: loaders on GPU 0 and GPU 1
//! of one architecture share a disk store, so each kernel is compiled once
//! and loaded on each (P1: no device index in a key); each GPU's kernels
//! run and match the CPU; a shared handle of one GPU refuses the other's
//! kernels (K6). Skips with a printed reason on a machine with fewer than
//! two GPUs (no GPU at all fails under `KILN_REQUIRE_DEVICE=1`, one GPU
//! under `KILN_REQUIRE_GPUS=2`).

mod support;

use std::sync::Arc;

use kiln_cuda::{CudaKernel, CudaTarget};
use kiln_engine::{
    ArtifactStore, CacheError, DeviceId, Kernel, KernelCache, KernelId, KernelOutcome,
};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;
use support::{Random, id_on, loader};

/// `count` saxpy kernels, each its own text (and so its own artifact).
fn kernels(count: usize) -> Vec<CudaKernel> {
    (0..count)
        .map(|index| {
            CudaKernel::builder(KernelId::named(format!("tests.two_gpus.{index}")), "saxpy")
                .source(format!("{}// kernel {index}\n", support::SAXPY))
        })
        .collect()
}

/// The targets on GPU 0 and GPU 1, or `None` after saying why not. No GPU
/// at all fails under `KILN_REQUIRE_DEVICE=1`, as every device test does;
/// one GPU only fails under `KILN_REQUIRE_GPUS=2`.
fn two_targets() -> Option<(CudaTarget, CudaTarget)> {
    let first = support::on_device("two GPUs behind one store")?;
    match CudaTarget::on_device(1) {
        Ok(second) => Some((first, second)),
        Err(error) => {
            if std::env::var("KILN_REQUIRE_GPUS").is_ok_and(|value| value.trim() == "2") {
                panic!("two GPUs are required (KILN_REQUIRE_GPUS=2): {error}");
            }
            kiln_test_support::skipped(
                "two GPUs behind one store",
                &format!("this machine has one CUDA GPU: {error}"),
            );
            None
        }
    }
}

// P1, K6, B4
#[test]
fn two_gpus_share_one_store_compile_each_kernel_once_and_run_it_on_both() {
    let Some((first, second)) = two_targets() else {
        return;
    };
    assert_eq!(
        first.architecture(),
        second.architecture(),
        "this test wants two GPUs of one architecture"
    );
    let scratch = Scratch::new("two-gpus");
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(scratch.join("store"))).expect("the store opens"));
    let kernels = kernels(8);
    let mut loaders = [
        loader(first.with_store(Arc::clone(&store))),
        loader(second.with_store(Arc::clone(&store))),
    ];
    for (gpu, loader) in loaders.iter_mut().enumerate() {
        let variant = loader.target().variant();
        for kernel in &kernels {
            loader.enqueue(Box::new(kernel.clone()), variant);
        }
        loader.compile_queued();
        let batch = loader.records().back().expect("a batch");
        let (compiled, from_store) = (
            batch.count(KernelOutcome::Compiled),
            batch.count(KernelOutcome::FromStore),
        );
        if gpu == 0 {
            assert_eq!((compiled, from_store), (8, 0), "GPU 0 compiles: {batch:?}");
        } else {
            assert_eq!(
                (compiled, from_store),
                (0, 8),
                "GPU 1 takes GPU 0's: {batch:?}"
            );
        }
        println!(
            "GPU {gpu}: {} ({}): {compiled} compiled, {from_store} from the store",
            loader.target().device().expect("a device").name(),
            loader.target().architecture()
        );
    }

    let mut random = Random::fresh("two-gpus");
    let n = 1 << 16;
    for (gpu, loader) in loaders.iter_mut().enumerate() {
        let device = loader.target().device().expect("a device").clone();
        let stream = device.context().new_stream().expect("a stream");
        for kernel in &kernels {
            let loaded = loader
                .load(kernel, &id_on(loader.target(), kernel))
                .expect("loaded");
            let what = format!("GPU {gpu}, {}", kernel.id());
            support::check_saxpy(&what, &device, &stream, &loaded, &mut random, n);
        }
    }

    // K6 on real devices: GPU 0's shared handle refuses GPU 1.
    let [zero, _] = loaders;
    let cache = KernelCache::new(DeviceId::new("cuda", 0), zero.into_target());
    let variant = cache.with_target(|target| target.variant());
    match cache.get(DeviceId::new("cuda", 1), kernels[0].clone(), variant) {
        Err(CacheError::WrongDevice { owner, used }) => {
            assert_eq!(
                (owner, used),
                (DeviceId::new("cuda", 0), DeviceId::new("cuda", 1))
            );
        }
        Err(other) => panic!("expected a refusal of GPU 1, got {other}"),
        Ok(_) => panic!("GPU 0's cache served a kernel for GPU 1"),
    }
}
