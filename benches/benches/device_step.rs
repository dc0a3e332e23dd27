//! F9: a cold wgpu batch whose device step (naga's module to a compute
//! pipeline, on the driver) runs on the batch's workers, against the same
//! batch with every pipeline made on the loader's thread, one after the
//! other, as a driver that needs one thread has it (and as every batch had
//! it before F9).
//!
//! Each iteration is a fresh storeless loader and `KILN_BENCH_PIPELINES`
//! kernels (default 100) no driver has seen: tiled matmuls and row
//! softmaxes, salted so that each is other SPIR-V. Each batch leaves a
//! record (`device_step`, case `workers` or `loader_thread`) with its wall,
//! its summed naga + pipeline work and its workers; the report's F9 row
//! compares the wall with the summed work over the workers (goal ≤ 1.2×)
//! and with the one-thread batch (goal ≥ 1.8× faster on 2 cores).
//!
//! ```text
//! cargo bench -p kiln-benches --bench device_step
//! ```

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, append_record, cores};
use kiln_engine::{
    ArtifactId, ArtifactOf, CompilationTarget, DeviceRefusal, DeviceStep, KernelId, KernelLoader,
    LoaderConfig, VariantOf,
};
use kiln_test_support::wgsl;
use kiln_wgpu::{
    WgpuCompiler, WgpuDevice, WgpuDeviceStep, WgpuMade, WgpuTarget, WgpuVariant, WgslKernel,
};

fn count() -> usize {
    std::env::var("KILN_BENCH_PIPELINES")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(100)
}

/// `count` kernels no earlier round had: other SPIR-V each.
fn kernels(round: usize, count: usize) -> Vec<WgslKernel> {
    wgsl::salted(round, count, |salt, source| {
        WgslKernel::builder(
            KernelId::named("bench.device_step").parameter(&salt),
            "main",
        )
        .source(source)
    })
}

/// The wgpu device step, answering that the driver needs one thread: the
/// loader's thread makes every pipeline as it publishes it.
struct OneThread(Arc<WgpuDeviceStep>);

impl DeviceStep<WgpuCompiler> for OneThread {
    type Made = WgpuMade;

    fn on_workers(&self) -> bool {
        false
    }

    fn make(
        &self,
        id: &ArtifactId<WgpuVariant>,
        artifact: &kiln_wgpu::WgpuArtifact,
    ) -> Result<WgpuMade, DeviceRefusal> {
        self.0.make(id, artifact)
    }
}

/// A storeless wgpu target whose pipelines are made on the loader's thread.
struct OnLoaderThread {
    inner: WgpuTarget,
    step: Arc<OneThread>,
}

impl CompilationTarget for OnLoaderThread {
    type Compiler = WgpuCompiler;
    type Loaded = kiln_wgpu::WgpuPipeline;
    type Device = OneThread;

    fn compiler(&self) -> &Arc<WgpuCompiler> {
        self.inner.compiler()
    }

    fn device_step(&self) -> &Arc<OneThread> {
        &self.step
    }

    fn publish(
        &mut self,
        id: &ArtifactId<VariantOf<Self>>,
        artifact: &ArtifactOf<Self>,
        made: WgpuMade,
    ) -> Result<Self::Loaded, DeviceRefusal> {
        self.inner.publish(id, artifact, made)
    }
}

/// One cold batch of `count` new kernels on `target`, recorded with the
/// driver's part of its work (`pipeline=` seconds in the note).
fn batch<T>(
    target: T,
    case: &str,
    round: usize,
    count: usize,
    wgpu: impl Fn(&T) -> &WgpuTarget,
) -> Duration
where
    T: CompilationTarget<Compiler = WgpuCompiler>,
{
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(cores()).expect("at least one core"),
            record_limit: 1,
            ..LoaderConfig::default()
        },
    );
    for kernel in kernels(round, count) {
        loader.enqueue(Box::new(kernel), WgpuVariant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let wall = started.elapsed();
    let batch = loader.records().back().expect("one batch").clone();
    let pipelines = wgpu(loader.target()).pipelines_made().1;
    assert_eq!(batch.kernels, count);
    let failed = batch.records.iter().find_map(|record| record.error.clone());
    assert!(failed.is_none(), "a bench kernel failed: {failed:?}");
    let slowest = batch
        .records
        .iter()
        .map(|record| record.work)
        .max()
        .unwrap_or_default();
    append_record(&BenchRecord {
        bench: "device_step".into(),
        case: case.into(),
        kernels: count,
        wall: wall.as_secs_f64(),
        // A kernel's recorded work is its compile; the device step made
        // on the same workers is the driver's time, added here.
        summed_work: batch.summed_work().as_secs_f64() + pipelines.as_secs_f64(),
        slowest: slowest.as_secs_f64(),
        workers: batch.workers,
        mode: "threads".into(),
        cores: cores(),
        note: Some(format!("pipeline={:.6}", pipelines.as_secs_f64())),
        ..BenchRecord::default()
    });
    wall
}

fn device_step(criterion: &mut Criterion, device: &WgpuDevice) {
    let count = count();
    let round = AtomicUsize::new(1);
    let mut group = criterion.benchmark_group("device_step");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.bench_with_input(
        BenchmarkId::new("workers", count),
        &count,
        |bencher, &count| {
            bencher.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| {
                        let target = WgpuTarget::on_device(device.clone()).without_store();
                        batch(
                            target,
                            "workers",
                            round.fetch_add(1, Ordering::Relaxed),
                            count,
                            |target| target,
                        )
                    })
                    .sum()
            });
        },
    );
    group.bench_with_input(
        BenchmarkId::new("loader_thread", count),
        &count,
        |bencher, &count| {
            bencher.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| {
                        let inner = WgpuTarget::on_device(device.clone()).without_store();
                        let step = Arc::new(OneThread(Arc::clone(inner.device_step())));
                        let target = OnLoaderThread { inner, step };
                        batch(
                            target,
                            "loader_thread",
                            round.fetch_add(1, Ordering::Relaxed),
                            count,
                            |target| &target.inner,
                        )
                    })
                    .sum()
            });
        },
    );
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    match WgpuDevice::open() {
        Ok(device) => device_step(&mut criterion, &device),
        Err(error) => eprintln!("device_step: F9 skipped, no Vulkan adapter: {error}"),
    }
    criterion.final_summary();
}
