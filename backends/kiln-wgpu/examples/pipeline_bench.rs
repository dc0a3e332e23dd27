//! What the driver's pipeline cache saves, and whether pipelines made on
//! several threads of one device finish sooner: the two measurements behind
//! kiln-wgpu's pipeline cache and its one-thread loads.
//!
//! Each mode runs in its own process, so that no driver state of an earlier
//! run is in memory; turn the driver's own disk cache off around it
//! (`__GL_SHADER_DISK_CACHE=0` for NVIDIA, `MESA_SHADER_CACHE_DISABLE=true`
//! for Mesa), or a "cold" run is warm already.
//!
//! ```sh
//! pipeline_bench cold DIR [KERNELS]   # fresh store in DIR: compile, build, save the cache
//! pipeline_bench warm DIR [KERNELS]   # same kernels from DIR, through the stored cache
//! pipeline_bench parallel [KERNELS]   # the same pipelines built on 1, 2, 4, ... threads
//! ```

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::wgsl;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};

/// `count` kernels no earlier `round` had: other SPIR-V each.
fn kernels(round: usize, count: usize) -> Vec<WgslKernel> {
    wgsl::salted(round, count, |salt, source| {
        WgslKernel::builder(KernelId::named("bench.pipeline").parameter(&salt), "main")
            .source(source)
    })
}

fn store(dir: &str) -> Arc<DiskStore> {
    Arc::new(DiskStore::open(StoreConfig::at(dir)).expect("the store opens"))
}

/// One loader batch of `count` kernels on a store in `dir`: the time the
/// device spent making pipelines is the figure.
fn batch(device: WgpuDevice, dir: &str, count: usize, mode: &str) {
    let target = WgpuTarget::on_device(device.clone()).with_store(store(dir));
    let cache_state = target.pipeline_cache_state().to_string();
    let mut loader = KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(
                std::thread::available_parallelism().map_or(4, NonZeroUsize::get),
            )
            .expect("at least one"),
            ..LoaderConfig::default()
        },
    );
    let kernels = kernels(0, count);
    let started = Instant::now();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();
    let wall = started.elapsed();
    for kernel in &kernels {
        loader
            .load(kernel, &ArtifactId::new(kernel.id(), WgpuVariant))
            .expect("every bench kernel loads");
    }
    let statistics = loader.statistics();
    let (pipelines, pipeline_time) = loader.target().pipelines_made();
    println!(
        "{mode}: {count} kernels on {}; pipeline cache {cache_state}; batch wall {:.1} ms; {pipelines} \
         pipelines made in {:.1} ms ({:.2} ms each); from store {}, compiled {}",
        device.describe(),
        wall.as_secs_f64() * 1e3,
        pipeline_time.as_secs_f64() * 1e3,
        pipeline_time.as_secs_f64() * 1e3 / pipelines.max(1) as f64,
        statistics.hits,
        statistics.compiled,
    );
}

/// The same `count` pipelines (new SPIR-V each round) made on 1, 2, 4, ...
/// threads of one device, without a pipeline cache.
fn parallel(device: WgpuDevice, count: usize) {
    let most = std::thread::available_parallelism().map_or(4, NonZeroUsize::get);
    let mut threads = 1;
    let mut round = 1;
    let mut single = None;
    while threads <= most.max(1) {
        let sources: Vec<String> = kernels(round, count)
            .iter()
            .map(|kernel| kernel.generate().expect("a fixed source"))
            .collect();
        let next = AtomicUsize::new(0);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(source) = sources.get(index) else {
                            break;
                        };
                        let ((), error) = device.capture(|| {
                            let module = device.device().create_shader_module(
                                kiln_wgpu::wgpu::ShaderModuleDescriptor {
                                    label: None,
                                    source: kiln_wgpu::wgpu::ShaderSource::Wgsl(
                                        source.as_str().into(),
                                    ),
                                },
                            );
                            let _pipeline = device.device().create_compute_pipeline(
                                &kiln_wgpu::wgpu::ComputePipelineDescriptor {
                                    label: None,
                                    layout: None,
                                    module: &module,
                                    entry_point: Some("main"),
                                    compilation_options: Default::default(),
                                    cache: None,
                                },
                            );
                        });
                        assert!(error.is_none(), "a bench pipeline failed: {error:?}");
                    }
                });
            }
        });
        let wall = started.elapsed().as_secs_f64() * 1e3;
        let single_wall = *single.get_or_insert(wall);
        println!(
            "parallel: {count} pipelines on {threads} threads: {wall:.1} ms wall \
             ({:.2}x one thread)",
            single_wall / wall
        );
        threads *= 2;
        round += 1;
    }
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let device = match WgpuDevice::open() {
        Ok(device) => device,
        Err(error) => {
            eprintln!("pipeline_bench: {error}");
            std::process::exit(2);
        }
    };
    let count = |at: usize| {
        arguments
            .get(at)
            .and_then(|text| text.parse().ok())
            .unwrap_or(100)
    };
    match arguments.first().map(String::as_str) {
        Some(mode @ ("cold" | "warm")) => {
            let dir = arguments.get(1).expect("a store folder");
            batch(device, dir, count(2), mode);
        }
        Some("parallel") => parallel(device, count(1)),
        _ => {
            eprintln!("usage: pipeline_bench cold|warm DIR [KERNELS] | parallel [KERNELS]");
            std::process::exit(2);
        }
    }
}
