//! F7 and F8: what tuning and warm-start profiles cost.
//!
//! - F7, on the first Vulkan adapter (lavapipe on a machine without a GPU),
//!   a tune of `KILN_BENCH_TUNE` (default 32) WGSL candidates, each timed by
//!   one warm-up and three device-timed launches: `tune_cold` (an empty
//!   store: one batch, then the measurements), `sequential_cold` (the loop
//!   a program writes without kiln's tune: compile one candidate, measure
//!   it, the next), and `tune_warm` (the answer stored: a new loader on the
//!   store takes it). Goals: cold ≈ one batch's wall plus the
//!   measurements, warm at least 100× faster than cold.
//! - F8, on the fake target over a disk store, the first launch of each of
//!   `KILN_BENCH_PROFILED` (default 256) kernels in a new process of a
//!   profiled program: `first_launch_profiled` once the profile's
//!   background batch has run (`profile_batch`), `first_launch_unprofiled`
//!   without a profile, `first_launch_batched` (the first launches of
//!   kernels a batch loaded from the store: the same first touch of each
//!   kernel, no profile) and `hot_load` (the second launch). Goal:
//!   profiled within 1.2× of a hot load.
//!
//! Each case appends its records (see `kiln_benches::BenchRecord`);
//! criterion reports the same times.
//!
//! ```text
//! cargo bench -p kiln-benches --bench tuning
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use kiln_benches::{BenchRecord, append_record, cores};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::profile::Program;
use kiln_engine::tune::{Candidate, Measure, Origin, TuneKey};
use kiln_engine::{ArtifactStore, DeviceTimer, KernelId, KernelLoader, TimedTarget};
use kiln_wgpu::{WgpuDevice, WgpuPipeline, WgpuTarget, WgpuVariant, WgslKernel};

const SHADER: &str = "
override WORKGROUP: u32 = 64;
override SCALE: f32 = 1.0;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&data) {
        data[i] = data[i] * SCALE + 1.0;
    }
}
";

const ELEMENTS: u32 = 1 << 14;

fn count(variable: &str, default: usize) -> usize {
    std::env::var(variable)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

fn scratch(what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let folder = std::env::temp_dir().join(format!(
        "kiln-bench-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    drop(std::fs::remove_dir_all(&folder));
    folder
}

fn store_at(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(kiln_benches::disk_store(root))
}

fn record(case: &str, kernels: usize, wall: Duration, note: &str) {
    append_record(&BenchRecord {
        bench: "tuning".into(),
        case: case.into(),
        kernels,
        wall: wall.as_secs_f64(),
        workers: 1,
        cores: cores(),
        note: Some(note.into()),
        ..BenchRecord::default()
    });
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    match WgpuDevice::open() {
        Ok(device) => tuning(&mut criterion, &device),
        Err(error) => eprintln!("tuning: F7 skipped, no Vulkan adapter: {error}"),
    }
    profiles(&mut criterion);
    criterion.final_summary();
}

/// The candidates: workgroup sizes and scales, every one another artifact.
fn candidates(count: usize) -> Vec<Candidate<WgpuTarget>> {
    let workgroups = [16u32, 32, 64, 128];
    (0..count)
        .map(|index| {
            let workgroup = workgroups[index % workgroups.len()];
            let kernel =
                WgslKernel::builder(KernelId::named("bench.tune").parameter(&index), "main")
                    .constant("WORKGROUP", f64::from(workgroup))
                    .constant("SCALE", 1.0 + index as f64 / 1000.0)
                    .source(SHADER);
            Candidate::new(Box::new(kernel), WgpuVariant)
        })
        .collect()
}

/// One launch of `pipeline` over the buffer.
fn launch(
    device: &WgpuDevice,
    data: &kiln_wgpu::wgpu::Buffer,
    pipeline: &WgpuPipeline,
) -> Result<(), String> {
    let groups = ELEMENTS.div_ceil(pipeline.workgroup_size()[0]);
    device
        .dispatch(pipeline, &[(0, 0, data)], [groups, 1, 1])
        .map_err(|error| error.to_string())
}

fn tune(
    loader: &mut KernelLoader<WgpuTarget>,
    device: &WgpuDevice,
    data: &kiln_wgpu::wgpu::Buffer,
    candidates: &[Candidate<WgpuTarget>],
) -> Origin {
    let mut run = |pipeline: &WgpuPipeline| launch(device, data, pipeline);
    let measure = Measure::Timed {
        launch: &mut run,
        warm_up: 1,
        runs: 3,
    };
    loader
        .tune(&TuneKey::new("bench.tune"), candidates, measure)
        .expect("every candidate works")
        .origin
}

/// The loop without kiln's tune: compile one candidate (its own batch),
/// measure it the same way, then the next.
fn sequential(
    loader: &mut KernelLoader<WgpuTarget>,
    device: &WgpuDevice,
    data: &kiln_wgpu::wgpu::Buffer,
    candidates: &[Candidate<WgpuTarget>],
) -> usize {
    let mut timer = loader.target().timer().expect("a device timer");
    let mut best = (Duration::MAX, 0);
    for (index, candidate) in candidates.iter().enumerate() {
        let pipeline = loader
            .load(&candidate.kernel, &candidate.id())
            .expect("the candidate loads");
        launch(device, data, &pipeline).expect("launches");
        let mut samples = Vec::new();
        for _ in 0..3 {
            timer.start().expect("times");
            launch(device, data, &pipeline).expect("launches");
            samples.push(timer.stop().expect("times"));
        }
        samples.sort();
        best = best.min((samples[1], index));
    }
    best.1
}

fn tuning(criterion: &mut Criterion, device: &WgpuDevice) {
    let count = count("KILN_BENCH_TUNE", 32);
    let candidates = candidates(count);
    let data = device
        .storage_buffer("bench", &vec![0u8; ELEMENTS as usize * 4])
        .expect("a buffer");
    let note = device.describe();
    let mut group = criterion.benchmark_group("tuning");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("tune_cold", |bench| {
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let root = scratch("tune-cold");
                let mut loader = KernelLoader::new(
                    WgpuTarget::on_device(device.clone()).with_store(store_at(&root)),
                )
                .without_profile();
                let started = Instant::now();
                assert_eq!(
                    tune(&mut loader, device, &data, &candidates),
                    Origin::Measured
                );
                let wall = started.elapsed();
                record("tune_cold", count, wall, &note);
                total += wall;
                drop(loader);
                drop(std::fs::remove_dir_all(&root));
            }
            total
        });
    });
    group.bench_function("sequential_cold", |bench| {
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let root = scratch("tune-sequential");
                let mut loader = KernelLoader::new(
                    WgpuTarget::on_device(device.clone()).with_store(store_at(&root)),
                )
                .without_profile();
                let started = Instant::now();
                std::hint::black_box(sequential(&mut loader, device, &data, &candidates));
                let wall = started.elapsed();
                record("sequential_cold", count, wall, &note);
                total += wall;
                drop(loader);
                drop(std::fs::remove_dir_all(&root));
            }
            total
        });
    });
    let root = scratch("tune-warm");
    {
        let mut loader =
            KernelLoader::new(WgpuTarget::on_device(device.clone()).with_store(store_at(&root)))
                .without_profile();
        tune(&mut loader, device, &data, &candidates);
    }
    group.bench_function("tune_warm", |bench| {
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                // A new process's loader: made before the clock starts.
                let mut loader = KernelLoader::new(
                    WgpuTarget::on_device(device.clone()).with_store(store_at(&root)),
                )
                .without_profile();
                let started = Instant::now();
                assert_eq!(
                    tune(&mut loader, device, &data, &candidates),
                    Origin::Stored
                );
                let wall = started.elapsed();
                record("tune_warm", count, wall, &note);
                total += wall;
            }
            total
        });
    });
    group.finish();
    drop(std::fs::remove_dir_all(&root));
}

fn profiles(criterion: &mut Criterion) {
    let count = count("KILN_BENCH_PROFILED", 256);
    let kernels: Vec<FakeKernel> = (0..count as u32).map(FakeKernel::new).collect();
    let root = scratch("profiles");
    let program = Program::named("bench-profiled");
    let new_loader = |profiled: bool| {
        let loader = KernelLoader::new(FakeTarget::on_store(store_at(&root)));
        if profiled {
            loader.with_profile(program.clone())
        } else {
            loader.without_profile()
        }
    };
    {
        // The run before the restart: loads every kernel, leaves the profile.
        let mut loader = new_loader(true);
        for kernel in &kernels {
            loader.enqueue(Box::new(kernel.clone()), ());
        }
        loader.compile_queued();
    }
    let first_launches = |loader: &mut KernelLoader<FakeTarget>| {
        let started = Instant::now();
        for kernel in &kernels {
            std::hint::black_box(loader.load(kernel, &kernel.artifact_id()).expect("loads"));
        }
        started.elapsed()
    };
    let mut group = criterion.benchmark_group("profiles");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("first_launch_profiled", |bench| {
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let mut loader = new_loader(true);
                let started = Instant::now();
                // The background batch, taken in at the first access.
                loader.compile_queued();
                record(
                    "profile_batch",
                    count,
                    started.elapsed(),
                    "fake target, disk store",
                );
                assert_eq!(loader.profiled_waiting(), count);
                let wall = first_launches(&mut loader);
                record(
                    "first_launch_profiled",
                    count,
                    wall,
                    "fake target, disk store",
                );
                let hot = first_launches(&mut loader);
                record("hot_load", count, hot, "fake target, disk store");
                total += wall;
            }
            total
        });
    });
    group.bench_function("first_launch_batched", |bench| {
        // The floor F8 is judged against: the first launches of kernels a
        // batch loaded from the store (no profile), the cache as cold.
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let mut loader = new_loader(false);
                for kernel in &kernels {
                    loader.enqueue(Box::new(kernel.clone()), ());
                }
                loader.compile_queued();
                let wall = first_launches(&mut loader);
                record(
                    "first_launch_batched",
                    count,
                    wall,
                    "fake target, disk store",
                );
                total += wall;
            }
            total
        });
    });
    group.bench_function("first_launch_unprofiled", |bench| {
        bench.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let mut loader = new_loader(false);
                let wall = first_launches(&mut loader);
                record(
                    "first_launch_unprofiled",
                    count,
                    wall,
                    "fake target, disk store",
                );
                total += wall;
            }
            total
        });
    });
    group.finish();
    drop(std::fs::remove_dir_all(&root));
}
