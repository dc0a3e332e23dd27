//! F3: a warm start. A store is filled with N GEMM kernels (compiled once,
//! in worker processes: the `compile` record), then, side by side:
//!
//! - `fresh_process`: this binary started again, which opens the store and
//!   loads all N kernels from it in one batch — timed inside that process
//!   from opening the store to the last kernel loaded (the CUDA context it
//!   makes first is not kiln's and is not timed);
//! - `read_verify_load`: the floor, in this process: each artifact's bytes
//!   read from a plain file, digested with BLAKE3 (what verifying them
//!   costs), decoded, and loaded on the device (`cuModuleLoadData`; on a
//!   machine without a GPU, the compile-only target's check).
//!
//! F3's goals: warm per kernel within 1.5× of the floor, and at least 50×
//! faster than compiling. `KILN_BENCH_WARM` sets N (default 32).
//!
//! ```text
//! cargo bench -p kiln-benches --bench warm_start
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_cuda::{CudaArtifact, CudaKernel, CudaTarget};
use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, Kernel, KernelLoader, KernelOutcome, Lookup,
};

/// Set on the fresh process: the store's root.
const WARM_CHILD: &str = "KILN_BENCH_WARM_CHILD";

/// The kernels of the warm start: the same in every process.
fn kernels(count: usize) -> Vec<CudaKernel> {
    (0..count as u64)
        .map(|index| KernelSize::Gemm.kernel(1_000_000 + index))
        .collect()
}

fn count() -> usize {
    std::env::var("KILN_BENCH_WARM")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(32)
}

fn open_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(kiln_benches::disk_store(root))
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Some(root) = std::env::var_os(WARM_CHILD) {
        warm_child(Path::new(&root));
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    if let Some(target) = cuda_target("warm_start", true) {
        warm_start(&mut criterion, target);
    }
    criterion.final_summary();
}

/// The fresh process: loads every kernel from the store and prints its
/// record.
fn warm_child(root: &Path) {
    let count = count();
    let kernels = kernels(count);
    // The CUDA context (or NVRTC, compile-only) is made before the clock
    // starts: a program pays it with or without kiln.
    let target = cuda_target("warm_start", true).expect("NVRTC is here");
    let started = Instant::now();
    let target = target.with_store(open_store(root));
    let mut loader = KernelLoader::new(target).without_profile();
    let variant = loader.target().variant();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
    let wall = started.elapsed();
    let batch = loader.records().back().expect("a batch");
    let from_store = batch.count(KernelOutcome::FromStore);
    assert_eq!(from_store, count, "every kernel came from the store");
    let record = BenchRecord {
        bench: "warm_start".into(),
        case: "fresh_process".into(),
        size: Some("gemm".into()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        note: Some(if loader.target().is_compile_only() {
            "compile-only".into()
        } else {
            "device".into()
        }),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}

fn warm_start(criterion: &mut Criterion, target: CudaTarget) {
    let count = count();
    let root = std::env::temp_dir().join(format!("kiln-warm-start-{}", std::process::id()));
    drop(std::fs::remove_dir_all(&root));
    let kernels = kernels(count);

    // Fill the store: the compile a warm start saves.
    // F3 measures a batch from the store: no warm-start profile (F8's)
    // loads ahead of it.
    let mut loader = KernelLoader::new(target.with_store(open_store(&root))).without_profile();
    let variant = loader.target().variant();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let compile = started.elapsed();
    let batch = loader.records().back().expect("a batch").clone();
    assert_eq!(batch.count(KernelOutcome::Compiled), count);
    append_record(&BenchRecord {
        bench: "warm_start".into(),
        case: "compile".into(),
        size: Some("gemm".into()),
        kernels: count,
        wall: compile.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        ..BenchRecord::default()
    });

    // The floor's inputs: each artifact's bytes as the store holds them,
    // copied to plain files.
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).expect("a folder for the plain files");
    let mut files: Vec<(ArtifactId<_>, PathBuf)> = Vec::with_capacity(count);
    {
        let target = loader.target();
        let bound = loader.bound_store().expect("the target is on a store");
        for (index, kernel) in kernels.iter().enumerate() {
            let id = ArtifactId::new(kernel.id(), variant);
            let key = bound.artifact_key(target.compiler(), &id);
            let Lookup::Hit { artifact, .. } = bound.store().lookup(&key) else {
                panic!("{id} is in the store");
            };
            let path = plain.join(format!("{index}.bin"));
            std::fs::write(&path, artifact).expect("the plain copy");
            files.push((id, path));
        }
    }
    let mut target = loader.into_target();

    let mut group = criterion.benchmark_group("warm_start");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));

    group.bench_function(BenchmarkId::new("fresh_process", count), |bencher| {
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let output = std::process::Command::new(
                    std::env::current_exe().expect("this benchmark's path"),
                )
                .env(WARM_CHILD, &root)
                .env("KILN_BENCH_WARM", count.to_string())
                .output()
                .expect("the fresh process starts");
                let text = String::from_utf8_lossy(&output.stdout);
                let record = text
                    .lines()
                    .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
                    .unwrap_or_else(|| {
                        panic!(
                            "the fresh process gave no record ({}): {}",
                            output.status,
                            String::from_utf8_lossy(&output.stderr)
                        )
                    });
                total += Duration::from_secs_f64(record.wall);
                append_record(&record);
            }
            total
        });
    });

    group.bench_function(BenchmarkId::new("read_verify_load", count), |bencher| {
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let mut loaded = Vec::with_capacity(files.len());
                let started = Instant::now();
                for (id, path) in &files {
                    let bytes = std::fs::read(path).expect("the plain copy");
                    std::hint::black_box(blake3::hash(&bytes));
                    let (artifact, _): (CudaArtifact, usize) =
                        bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
                            .expect("an artifact");
                    loaded.push(target.load(id, &artifact).expect("the device loads it"));
                }
                let took = started.elapsed();
                // Unloading is not part of a start: outside the clock.
                drop(loaded);
                total += took;
                append_record(&BenchRecord {
                    bench: "warm_start".into(),
                    case: "read_verify_load".into(),
                    size: Some("gemm".into()),
                    kernels: files.len(),
                    wall: took.as_secs_f64(),
                    cores: cores(),
                    ..BenchRecord::default()
                });
            }
            total
        });
    });
    group.finish();
    drop(std::fs::remove_dir_all(&root));
}
