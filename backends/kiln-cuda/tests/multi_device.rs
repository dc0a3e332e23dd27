//! Two GPUs of one model behind one store, in one process, on what this
//! release added since several GPUs last ran: tuning answers shared by
//! identical GPUs (a tune on GPU 0 answered from the store on GPU 1 with no
//! launch, T2; tuners on both at once measure once, T4), background
//! batches serving `load_or` on both GPUs (R1, R2), each GPU's warm-start
//! profile kept apart (L12), and both GPUs compiling at once through the
//! shared worker pool and its device step, each kernel compiled once (P4,
//! F9). Every kernel a GPU is handed runs there and matches the CPU.
//!
//! Skips with a printed reason on a machine with fewer than two GPUs: no
//! GPU at all fails under `KILN_REQUIRE_DEVICE=1`, as every device test
//! does, and one GPU only fails under `KILN_REQUIRE_GPUS=2`, which `cargo
//! xtask test-backend cuda` sets on the pass that sees every GPU of a
//! machine with two or more (its passes with one GPU visible skip here).
//!
//! With one GPU, `KILN_TEST_SECOND_GPU=0` runs every test with GPU 0
//! standing in for GPU 1 (a second target on the same GPU): a check of
//! this binary on a one-GPU machine, not of two GPUs.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use kiln_cuda::{CudaDevice, CudaKernel, CudaTarget, DeviceBuffer, LaunchConfig, LoadedKernel};
use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey, Tuned};
use kiln_engine::{
    ArtifactStore, DeviceId, Kernel, KernelCache, KernelId, KernelLoader, LoaderConfig,
};
use kiln_test_support::{Random, Scratch};
use support::{id_on, loader};

/// The variable naming the GPU that stands in for GPU 1 on a machine with
/// one (`0`).
const SECOND_GPU: &str = "KILN_TEST_SECOND_GPU";

/// The ordinal "GPU `gpu`" opens: GPU 1 is GPU 0 again where
/// [`SECOND_GPU`] says so.
fn ordinal(gpu: usize) -> usize {
    let stand_in = std::env::var(SECOND_GPU).ok();
    match (gpu, stand_in.as_deref().map(str::trim)) {
        (1, Some("0")) => 0,
        _ => gpu,
    }
}

/// The targets on GPU 0 and GPU 1, or `None` after saying why not.
fn two_gpus(what: &str) -> Option<[CudaTarget; 2]> {
    let first = support::on_device(what)?;
    match CudaTarget::on_device(ordinal(1)) {
        Ok(second) => {
            if ordinal(1) == 0 {
                kiln_test_support::say(&format!(
                    "{what}: GPU 0 stands in for GPU 1 ({SECOND_GPU}=0)"
                ));
            }
            assert_eq!(
                first.architecture(),
                second.architecture(),
                "{what} wants two GPUs of one architecture"
            );
            Some([first, second])
        }
        Err(error) => {
            if std::env::var("KILN_REQUIRE_GPUS").is_ok_and(|value| value.trim() == "2") {
                panic!("{what}: two GPUs are required (KILN_REQUIRE_GPUS=2): {error}");
            }
            kiln_test_support::skipped(
                what,
                &format!("fewer than two CUDA GPUs here (GPU 1: {error})"),
            );
            None
        }
    }
}

fn device_of(target: &CudaTarget) -> CudaDevice {
    target.device().expect("a device target").clone()
}

/// Saxpy under `family`, with `index` in its text: a kernel of its own.
fn saxpy(family: &'static str, index: u32) -> CudaKernel {
    CudaKernel::builder(KernelId::named(family).parameter(&index), "saxpy")
        .source(format!("{}// {family} {index}\n", support::SAXPY))
}

/// Runs `kernel` (a saxpy) on `device` and checks it against the CPU.
fn check(what: &str, device: &CudaDevice, kernel: &LoadedKernel) {
    let stream = device.context().new_stream().expect("a stream");
    let mut random = Random::fresh(what);
    support::check_saxpy(what, device, &stream, kernel, &mut random, 1 << 14);
}

fn a_store(scratch: &Scratch) -> Arc<dyn ArtifactStore> {
    support::disk_store(&scratch.join("store"))
}

fn candidates(target: &CudaTarget) -> Vec<Candidate<CudaTarget>> {
    (0..4)
        .map(|index| {
            Candidate::new(
                Box::new(saxpy("tests.multi_device.tune", index)),
                target.variant(),
            )
        })
        .collect()
}

const ELEMENTS: usize = 1 << 16;

/// Tunes the saxpy candidates on `loader`'s GPU, timed by kiln on the
/// default stream, counting launches.
fn tune(loader: &mut KernelLoader<CudaTarget>, launches: &AtomicUsize) -> Tuned<LoadedKernel> {
    let device = device_of(loader.target());
    let stream = device.context().default_stream();
    let x = device.upload(&vec![1.0f32; ELEMENTS]).expect("upload");
    let y = device.upload(&vec![2.0f32; ELEMENTS]).expect("upload");
    let out: DeviceBuffer<f32> = device.alloc(ELEMENTS).expect("alloc");
    let count = i32::try_from(ELEMENTS).expect("fits");
    let mut launch = |kernel: &LoadedKernel| {
        launches.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the arguments match saxpy(float, const float*, const
        // float*, float*, int), and every buffer holds ELEMENTS floats.
        unsafe {
            kernel.launch(
                &stream,
                LaunchConfig::for_elements(ELEMENTS as u32, 256),
                &[
                    0.5f32.into(),
                    (&x).into(),
                    (&y).into(),
                    (&out).into(),
                    count.into(),
                ],
            )
        }
        .map_err(|error| error.to_string())
    };
    let candidates = candidates(loader.target());
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 1,
        runs: 3,
    };
    loader
        .tune(&TuneKey::new("tests.multi_device"), &candidates, measure)
        .expect("four candidates work")
}

// T2, B4
#[test]
fn t2_a_tune_on_gpu_0_is_answered_from_the_store_on_gpu_1_with_no_launch() {
    let Some([zero, one]) = two_gpus("a tune shared by two GPUs") else {
        return;
    };
    let scratch = Scratch::new("multi-device-tune");
    let store = a_store(&scratch);
    let zero_launches = AtomicUsize::new(0);
    let measured = tune(
        &mut loader(zero.with_store(Arc::clone(&store))),
        &zero_launches,
    );
    assert_eq!(measured.origin, Origin::Measured);
    assert_eq!(zero_launches.load(Ordering::SeqCst), 4 * 4);

    let one_launches = AtomicUsize::new(0);
    let mut second = loader(one.with_store(store));
    let answered = tune(&mut second, &one_launches);
    assert_eq!(
        (answered.winner, answered.origin),
        (measured.winner, Origin::Stored),
        "two GPUs of one model and driver share the answer"
    );
    assert_eq!(one_launches.load(Ordering::SeqCst), 0, "no launch on GPU 1");
    let statistics = second.statistics();
    assert_eq!(
        (statistics.compiled, statistics.hits),
        (0, 1),
        "only the winner, from the store"
    );
    check(
        "GPU 1's winner",
        &device_of(second.target()),
        &answered.loaded,
    );
}

// T4
#[test]
fn t4_tuners_of_one_key_on_two_gpus_at_once_measure_once() {
    let Some(targets) = two_gpus("two GPUs tuning at once") else {
        return;
    };
    let scratch = Scratch::new("multi-device-tune-together");
    let store = a_store(&scratch);
    let launches = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(2));
    let tuners: Vec<_> = targets
        .into_iter()
        .map(|target| {
            let (store, launches, start) = (
                Arc::clone(&store),
                Arc::clone(&launches),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                let mut loader = loader(target.with_store(store));
                start.wait();
                let tuned = tune(&mut loader, &launches);
                check("the winner", &device_of(loader.target()), &tuned.loaded);
                (tuned.winner, tuned.origin)
            })
        })
        .collect();
    let outcomes: Vec<_> = tuners
        .into_iter()
        .map(|tuner| tuner.join().expect("a tuner"))
        .collect();
    let measured = outcomes
        .iter()
        .filter(|(_, origin)| *origin == Origin::Measured)
        .count();
    assert_eq!(measured, 1, "{outcomes:?}");
    assert_eq!(outcomes[0].0, outcomes[1].0, "one winner: {outcomes:?}");
    assert_eq!(launches.load(Ordering::SeqCst), 4 * 4, "measured once");
}

// R1, R2, B4
#[test]
fn r1_r2_load_or_serves_on_both_gpus_while_one_store_compiles_each_kernel_once() {
    const KERNELS: u32 = 8;
    let Some(targets) = two_gpus("load_or on two GPUs") else {
        return;
    };
    let scratch = Scratch::new("multi-device-load-or");
    let store = a_store(&scratch);
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = targets
        .into_iter()
        .enumerate()
        .map(|(gpu, target)| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let device = device_of(&target);
                let mut loader = loader(target.with_store(store));
                let fallback = saxpy("tests.multi_device.generic", 0);
                let fallback_id = id_on(loader.target(), &fallback);
                loader.load(&fallback, &fallback_id).expect("the fallback");
                start.wait();
                let special: Vec<CudaKernel> = (1..=KERNELS)
                    .map(|index| saxpy("tests.multi_device.special", index))
                    .collect();
                for kernel in &special {
                    let id = id_on(loader.target(), kernel);
                    let served = loader.load_or(kernel, &id, &fallback_id).expect("at once");
                    check(
                        &format!("GPU {gpu}, {} served", kernel.id()),
                        &device,
                        &served,
                    );
                }
                assert!(
                    loader.wait_for_background(Duration::from_secs(300)),
                    "GPU {gpu}: the background batches end"
                );
                for kernel in &special {
                    let id = id_on(loader.target(), kernel);
                    assert!(loader.is_loaded(&id), "GPU {gpu}: {} landed", kernel.id());
                    let served = loader.load_or(kernel, &id, &fallback_id).expect("loaded");
                    check(&format!("GPU {gpu}, {}", kernel.id()), &device, &served);
                }
                let statistics = loader.statistics();
                (statistics.compiled, statistics.health.request_path_compiles)
            })
        })
        .collect();
    let counts: Vec<_> = threads
        .into_iter()
        .map(|thread| thread.join().expect("a GPU's thread"))
        .collect();
    assert_eq!(
        counts[0].0 + counts[1].0,
        u64::from(KERNELS) + 1,
        "each kernel and the fallback compiled once: {counts:?}"
    );
    assert!(
        counts.iter().all(|(_, request_path)| *request_path <= 1),
        "only the fallback's load compiles on the request path: {counts:?}"
    );
}

// P4, F9, B4
#[test]
fn p4_two_gpus_compiling_at_once_compile_each_kernel_once_and_each_runs_its_own() {
    const KERNELS: u32 = 16;
    let Some(targets) = two_gpus("two GPUs compiling at once") else {
        return;
    };
    let scratch = Scratch::new("multi-device-at-once");
    let store = a_store(&scratch);
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = targets
        .into_iter()
        .enumerate()
        .map(|(gpu, target)| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let device = device_of(&target);
                let mut loader = loader(target.with_store(store));
                let variant = loader.target().variant();
                let kernels: Vec<CudaKernel> = (0..KERNELS)
                    .map(|index| saxpy("tests.multi_device.at_once", index))
                    .collect();
                for kernel in &kernels {
                    loader.enqueue(Box::new(kernel.clone()), variant);
                }
                start.wait();
                loader.compile_queued();
                for kernel in &kernels {
                    let loaded = loader
                        .load(kernel, &id_on(loader.target(), kernel))
                        .expect("loaded");
                    check(&format!("GPU {gpu}, {}", kernel.id()), &device, &loaded);
                }
                loader.statistics().compiled
            })
        })
        .collect();
    let compiled: Vec<u64> = threads
        .into_iter()
        .map(|thread| thread.join().expect("a GPU's thread"))
        .collect();
    assert_eq!(
        compiled.iter().sum::<u64>(),
        u64::from(KERNELS),
        "each kernel compiled once: {compiled:?}"
    );
}

/// The caches of GPUs 0 and 1 on `store`, keeping their warm-start
/// profiles as a program's do.
fn caches(store: &Arc<dyn ArtifactStore>) -> Vec<KernelCache<CudaTarget>> {
    let config = LoaderConfig {
        profile: true,
        ..LoaderConfig::default()
    };
    (0..2)
        .map(|gpu| {
            let target = CudaTarget::on_device(ordinal(gpu)).expect("the GPU opened before");
            KernelCache::with_config(
                DeviceId::new("cuda", gpu as u64),
                target.with_store(Arc::clone(store)),
                config.clone(),
            )
        })
        .collect()
}

// L12
#[test]
fn l12_each_gpus_cache_keeps_its_own_warm_start_profile() {
    let Some(_) = two_gpus("a warm-start profile per GPU") else {
        return;
    };
    let scratch = Scratch::new("multi-device-profile");
    let store = a_store(&scratch);
    let own =
        |gpu: u32| (gpu * 10..gpu * 10 + 4).map(|index| saxpy("tests.multi_device.profile", index));
    for (gpu, cache) in (0u32..).zip(caches(&store)) {
        let variant = cache.with_target(CudaTarget::variant);
        for kernel in own(gpu) {
            cache.get(cache.device(), kernel, variant).expect("loaded");
        }
    } // Each cache writes its profile as it drops.

    for (gpu, cache) in (0u32..).zip(caches(&store)) {
        let device = cache.with_target(device_of);
        let variant = cache.with_target(CudaTarget::variant);
        let first = own(gpu).next().expect("four kernels");
        let loaded = cache.get(cache.device(), first, variant).expect("loaded");
        check(
            &format!("GPU {gpu}'s first profiled kernel"),
            &device,
            &loaded,
        );
        let statistics = cache.statistics();
        assert_eq!(
            (statistics.profile_hits, statistics.compiled),
            (4, 0),
            "GPU {gpu}: its own four kernels, from the store, before it asked"
        );
    }
}
