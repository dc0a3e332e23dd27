//! Two devices of one adapter behind one store: on lavapipe (or any
//! adapter) a second `wgpu::Device` stands for a second GPU of one model,
//! so what a machine with two identical GPUs must do runs here without
//! one: each kernel compiled once and each device running its own pipeline
//! (P1, P4), a tune on device 0 answered from the store on device 1 with no
//! launch (T2), and `load_or` serving on both devices while background
//! batches compile each kernel once (R1, R2). Skipped with a printed reason
//! where there is no adapter (a failure under `KILN_REQUIRE_DEVICE=1`).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey, Tuned};
use kiln_engine::{ArtifactStore, KernelId, KernelLoader, KernelOutcome};
use kiln_test_support::Random;
use kiln_wgpu::{WgpuDevice, WgpuPipeline, WgpuTarget, WgpuVariant, WgslKernel};

/// Two devices of the first adapter, or `None` after printing why `what`
/// skips (a failure instead when `KILN_REQUIRE_DEVICE=1`).
fn two_devices(what: &str) -> Option<[WgpuDevice; 2]> {
    let first = support::device(what)?;
    match WgpuDevice::open() {
        Ok(second) => Some([first, second]),
        Err(error) => {
            kiln_engine::conformance::skip(what, &format!("no second device: {error}"));
            None
        }
    }
}

fn saxpy(workgroup: u32) -> WgslKernel {
    support::example_kernel("saxpy.wgsl", &[("WORKGROUP", f64::from(workgroup))])
}

/// Runs saxpy through `pipeline` on `device` and checks it against the CPU.
fn check(what: &str, device: &WgpuDevice, pipeline: &WgpuPipeline) {
    let mut random = Random::fresh(what);
    let workgroup = pipeline.workgroup_size()[0];
    support::check_saxpy(what, device, pipeline, &mut random, 4099, workgroup);
}

#[test]
fn p1_p4_two_devices_on_one_store_compile_each_kernel_once_and_run_it_on_both() {
    let Some(devices) = two_devices("two devices behind one store") else {
        return;
    };
    let store = support::fresh_store("two-devices");
    let workgroups = [32, 64, 128, 256];
    for (number, device) in devices.iter().enumerate() {
        let target = WgpuTarget::on_device(device.clone()).with_store(Arc::clone(&store));
        let mut loader = support::loader(target);
        for workgroup in workgroups {
            loader.enqueue(Box::new(saxpy(workgroup)), WgpuVariant);
        }
        loader.compile_queued();
        let batch = loader.records().back().expect("a batch");
        let counts = (
            batch.count(KernelOutcome::Compiled),
            batch.count(KernelOutcome::FromStore),
        );
        let expected = if number == 0 { (4, 0) } else { (0, 4) };
        assert_eq!(counts, expected, "device {number}: {batch:?}");
        for workgroup in workgroups {
            let kernel = saxpy(workgroup);
            let pipeline = loader
                .load(&kernel, &support::id_of(&kernel))
                .expect("loaded");
            check(
                &format!("device {number}, workgroup {workgroup}"),
                device,
                &pipeline,
            );
        }
        assert_eq!(loader.target().pipelines_made().0, 4, "device {number}");
    }
}

/// Doubles its buffer `STEPS` times; candidates differ in workgroup size.
const DOUBLING: &str = "
override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&data) {
        data[i] = data[i] * 2.0;
    }
}
";

const ELEMENTS: u32 = 1 << 14;

fn candidates() -> Vec<Candidate<WgpuTarget>> {
    [32u32, 64, 128]
        .into_iter()
        .map(|workgroup| {
            let kernel = WgslKernel::builder(
                KernelId::named("tests.multi_device.doubling").parameter(&workgroup),
                "main",
            )
            .constant("WORKGROUP", f64::from(workgroup))
            .source(DOUBLING);
            Candidate::new(Box::new(kernel), WgpuVariant)
        })
        .collect()
}

/// Tunes the candidates on `loader`'s device, counting launches.
fn tune(
    loader: &mut KernelLoader<WgpuTarget>,
    device: &WgpuDevice,
    launches: &AtomicUsize,
) -> Tuned<WgpuPipeline> {
    let data = device
        .storage_buffer("tune", &vec![0u8; ELEMENTS as usize * 4])
        .expect("a storage buffer");
    let mut launch = |pipeline: &WgpuPipeline| {
        launches.fetch_add(1, Ordering::SeqCst);
        let groups = ELEMENTS.div_ceil(pipeline.workgroup_size()[0]);
        device
            .dispatch(pipeline, &[(0, 0, &data)], [groups, 1, 1])
            .map_err(|error| error.to_string())
    };
    let measure = Measure::Timed {
        launch: &mut launch,
        warm_up: 1,
        runs: 3,
    };
    loader
        .tune(&TuneKey::new("tests.multi_device"), &candidates(), measure)
        .expect("three candidates work")
}

#[test]
fn t2_a_tune_on_device_0_is_answered_from_the_store_on_device_1_with_no_launch() {
    let Some([zero, one]) = two_devices("a tune shared by two devices") else {
        return;
    };
    let store = support::fresh_store("tune-two-devices");
    let on = |device: &WgpuDevice, store: &Arc<dyn ArtifactStore>| {
        support::loader(WgpuTarget::on_device(device.clone()).with_store(Arc::clone(store)))
    };
    let zero_launches = AtomicUsize::new(0);
    let measured = tune(&mut on(&zero, &store), &zero, &zero_launches);
    assert_eq!(measured.origin, Origin::Measured);
    assert_eq!(zero_launches.load(Ordering::SeqCst), 3 * 4);

    let one_launches = AtomicUsize::new(0);
    let mut loader = on(&one, &store);
    let answered = tune(&mut loader, &one, &one_launches);
    assert_eq!(
        (answered.winner, answered.origin),
        (measured.winner, Origin::Stored),
        "one identity for both devices of the adapter"
    );
    assert_eq!(
        one_launches.load(Ordering::SeqCst),
        0,
        "no launch on device 1"
    );
    let statistics = loader.statistics();
    assert_eq!(
        (statistics.compiled, statistics.hits),
        (0, 1),
        "only the winner, from the store"
    );
    assert_eq!(loader.target().pipelines_made().0, 1, "one pipeline");
}

#[test]
fn r1_r2_load_or_serves_on_both_devices_and_one_store_compiles_each_kernel_once() {
    let Some(devices) = two_devices("load_or on two devices") else {
        return;
    };
    let store = support::fresh_store("load-or-two-devices");
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(number, device)| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                let target = WgpuTarget::on_device(device.clone()).with_store(store);
                let mut loader = support::loader(target);
                let fallback = saxpy(64);
                let fallback_id = support::id_of(&fallback);
                loader.load(&fallback, &fallback_id).expect("the fallback");
                start.wait();
                let special: Vec<WgslKernel> = [32, 128, 256].map(saxpy).into();
                for kernel in &special {
                    let served = loader
                        .load_or(kernel, &support::id_of(kernel), &fallback_id)
                        .expect("the fallback at once");
                    assert_eq!(
                        served.workgroup_size()[0],
                        64,
                        "device {number}: the fallback"
                    );
                    check(&format!("device {number}, fallback"), &device, &served);
                }
                assert!(
                    loader.wait_for_background(Duration::from_secs(60)),
                    "device {number}: the background batch ends"
                );
                for kernel in &special {
                    let served = loader
                        .load_or(kernel, &support::id_of(kernel), &fallback_id)
                        .expect("loaded");
                    assert_ne!(served.workgroup_size()[0], 64, "device {number}: landed");
                    check(&format!("device {number}, specialized"), &device, &served);
                }
                let statistics = loader.statistics();
                (statistics.compiled, statistics.health.request_path_compiles)
            })
        })
        .collect();
    let counts: Vec<_> = threads
        .into_iter()
        .map(|thread| thread.join().expect("a device's thread"))
        .collect();
    assert_eq!(
        counts[0].0 + counts[1].0,
        4,
        "the fallback and three kernels, each compiled once: {counts:?}"
    );
    assert!(
        counts.iter().all(|(_, request_path)| *request_path <= 1),
        "only the fallback's load may compile on the request path: {counts:?}"
    );
}
