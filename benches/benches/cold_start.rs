//! F5: the first batch of a fresh process. This binary is started again
//! as a fresh process, which makes its CUDA target (the device context on a
//! GPU, NVRTC alone on a machine without one), makes a loader with no
//! store, and compiles N GEMM kernels in one batch, then N others in a
//! second batch:
//!
//! - `cold_start`: the first batch, timed from the loader's creation to its
//!   last kernel loaded: it pays for whatever the worker processes still
//!   need to start;
//! - `warm_pool`: the second batch, whose workers are running;
//! - `cold_start_early`: another fresh process's first batch, which
//!   started its compile workers with `kiln_engine::worker::start_early`
//!   before making its target, as a program that knows it will compile
//!   does (F5): they start beside the device context.
//!
//! Each is compared with its ideal, max(slowest kernel, summed work /
//! cores) from the batch's own records (S3). F5's goal: the cold batch
//! within 1.15 × its ideal. `KILN_BENCH_COLD` sets N (default 64).
//!
//! ```text
//! cargo bench -p kiln-benches --bench cold_start
//! ```

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_engine::{BatchRecord, KernelLoader, KernelOutcome};

/// Set on the fresh process.
const COLD_CHILD: &str = "KILN_BENCH_COLD_CHILD";
/// Set on the fresh process that starts its workers before its target.
const COLD_EARLY: &str = "KILN_BENCH_COLD_EARLY";

fn count() -> usize {
    std::env::var("KILN_BENCH_COLD")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(64)
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if std::env::var_os(COLD_CHILD).is_some() {
        cold_child();
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    if cuda_target("cold_start", true).is_some() {
        cold_start(&mut criterion);
    }
    criterion.final_summary();
}

fn record(case: &str, wall: Duration, batch: &BatchRecord, note: &str) -> BenchRecord {
    let slowest = batch
        .records
        .iter()
        .map(|record| record.work)
        .max()
        .unwrap_or_default();
    BenchRecord {
        bench: "cold_start".into(),
        case: case.into(),
        size: Some("gemm".into()),
        kernels: batch.kernels,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        slowest: slowest.as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        compiled: Some(batch.count(KernelOutcome::Compiled)),
        note: Some(note.into()),
        ..BenchRecord::default()
    }
}

/// The fresh process: its first batch and its second, each a record.
fn cold_child() {
    let count = count() as u64;
    // A salt of this process's own, so no two runs share a kernel anywhere.
    let salt = u64::from(std::process::id()) * 1_000_000;
    let early = std::env::var_os(COLD_EARLY).is_some();
    if early {
        // What the target will compile for, asked of the driver without a
        // context (the benchmark's architecture on a machine without a
        // GPU): the recipe its pool will look for.
        let architecture = kiln_cuda::CudaDevice::architecture_of(0)
            .filter(|_| std::env::var("KILN_BENCH_DEVICE").map_or(true, |value| value != "0"))
            .unwrap_or(kiln_benches::BENCH_ARCHITECTURE);
        if let Ok(compiler) = kiln_cuda::CudaCompiler::new() {
            let compiler = compiler.keyed_for(architecture);
            if let Some(recipe) = kiln_engine::ArtifactCompiler::worker_recipe(&compiler) {
                kiln_engine::worker::start_early(recipe, cores());
            }
        }
    }
    let target = cuda_target("cold_start", true).expect("NVRTC is here");
    let note = if target.is_compile_only() {
        "compile-only"
    } else {
        "device"
    };
    let started = Instant::now();
    let mut loader = KernelLoader::new(target).without_profile();
    let variant = loader.target().variant();
    for index in 0..count {
        loader.enqueue(Box::new(KernelSize::Gemm.kernel(salt + index)), variant);
    }
    loader.compile_queued();
    let cold = started.elapsed();
    let first = loader.records().back().expect("a batch").clone();
    for index in count..2 * count {
        loader.enqueue(Box::new(KernelSize::Gemm.kernel(salt + index)), variant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let warm = started.elapsed();
    let second = loader.records().back().expect("a second batch").clone();
    let cases = if early {
        [
            ("cold_start_early", cold, &first),
            ("warm_pool_early", warm, &second),
        ]
    } else {
        [("cold_start", cold, &first), ("warm_pool", warm, &second)]
    };
    for (case, wall, batch) in cases {
        let record = record(case, wall, batch, note);
        println!("{}", serde_json::to_string(&record).expect("serializes"));
    }
}

fn cold_start(criterion: &mut Criterion) {
    let count = count();
    let mut group = criterion.benchmark_group("cold_start");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));
    group.bench_function(BenchmarkId::new("first_batch", count), |bencher| {
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let records = fresh_process(count, false);
                total += Duration::from_secs_f64(records[0].wall);
                // The same first batch with its workers started early, its
                // record beside it (not timed by criterion).
                fresh_process(count, true);
            }
            total
        });
    });
    group.finish();
}

/// Runs the fresh process (starting its workers early when `early`),
/// keeps its two records and returns them.
fn fresh_process(count: usize, early: bool) -> Vec<BenchRecord> {
    let mut command =
        std::process::Command::new(std::env::current_exe().expect("this benchmark's path"));
    command
        .env(COLD_CHILD, "1")
        .env("KILN_BENCH_COLD", count.to_string());
    if early {
        command.env(COLD_EARLY, "1");
    }
    let output = command.output().expect("the fresh process starts");
    let text = String::from_utf8_lossy(&output.stdout);
    let records: Vec<BenchRecord> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
        .collect();
    assert_eq!(
        records.len(),
        2,
        "the fresh process gave its two records ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for record in &records {
        append_record(record);
    }
    records
}
