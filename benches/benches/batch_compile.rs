//! F2: a batch compile of N distinct CUDA kernels, side by side in one run:
//!
//! - `processes`: a loader finalizing in its compile worker processes (this
//!   binary is its own worker: `main` starts with the hook);
//! - `threads`: the same loader kept on threads of its own process;
//! - `sequential`: a plain loop of cudarc NVRTC calls on one thread, timed
//!   per kernel (a loop of N takes N times as long: it has nothing to share
//!   between kernels), so its N-kernel figure is N × the per-kernel median.
//!
//! Each batch leaves a record of its wall time, its summed work and its
//! slowest kernel (S3) in the records file, from which
//! `cargo xtask bench-report` computes F2's ideal, max(slowest, Σwork /
//! cores), and wall / ideal. Before the timings, `compile_memory` compiles
//! one batch of heavy kernels in a fresh, compile-only process (this binary
//! again) and records the peak resident memory of that host process and of
//! each of its workers.
//!
//! Every batch compiles for sm_90 on a compile-only target, also on a GPU
//! machine: a kernel's load is then the check a device would make, so the
//! batch is the compile, and every batch starts from the same state. (On
//! the H200, loading on the device, the gap between wall and ideal of
//! successive 256-kernel batches of one loader grew from 62 to 261 ms as
//! the loader came to hold thousands of modules. Device loads are
//! `warm_start`'s subject; `KILN_BENCH_ON_DEVICE=1` loads on the GPU here
//! too.)
//!
//! What runs is chosen by the environment, because criterion owns the
//! arguments:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `KILN_BENCH_BATCH` | `tiny:16;gemm:16;heavy:16` | sizes and kernel counts |
//! | `KILN_BENCH_MODES` | `sequential,threads,processes` | what to compare |
//! | `KILN_BENCH_MEMORY` | `heavy:16` | the memory run (empty: none) |
//! | `KILN_BENCH_MEMORY_MODES` | `threads,processes` | the memory run's modes |
//! | `KILN_BENCH_ON_DEVICE` | unset | `1`: batches load on GPU 0 instead |
//!
//! ```text
//! cargo bench -p kiln-benches --bench batch_compile
//! KILN_BENCH_BATCH='gemm:16,64,256' cargo bench -p kiln-benches --bench batch_compile
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{
    BenchRecord, KernelSize, append_record, cores, cuda_target, peak_resident_bytes, plain_nvrtc,
};
use kiln_cuda::CudaTarget;
use kiln_engine::{KernelLoader, KernelOutcome, WorkerMode};

/// Set on the fresh process of the memory run: `size:count:mode`.
const MEMORY_CHILD: &str = "KILN_BENCH_MEMORY_CHILD";

/// Every kernel compiled gets a new salt, so none is ever loaded already or
/// shares a text with another, in this process or an earlier one: the salts
/// start from the clock (0 until the first call).
static NEXT_SALT: AtomicU64 = AtomicU64::new(0);

fn salt() -> u64 {
    if NEXT_SALT.load(Ordering::Relaxed) == 0 {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| since.as_micros() as u64 % 1_000_000_000_000)
            .max(1);
        let _ = NEXT_SALT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    NEXT_SALT.fetch_add(1, Ordering::Relaxed)
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Ok(spec) = std::env::var(MEMORY_CHILD) {
        memory_child(&spec);
        return;
    }
    let testing = std::env::args().any(|argument| argument == "--test");
    let mut criterion = Criterion::default().configure_from_args();
    let plan = plan_from_env();
    let modes = std::env::var("KILN_BENCH_MODES")
        .unwrap_or_else(|_| "sequential,threads,processes".to_owned());
    if let Some(probe) = cuda_target("batch_compile", false) {
        drop(probe);
        // First, so that a run cut short by a time limit still has it.
        if !testing {
            compile_memory();
        }
        batch_compile(&mut criterion, &plan, &modes);
    }
    criterion.final_summary();
}

/// `size:count,count;size:count` from `KILN_BENCH_BATCH`.
fn plan_from_env() -> Vec<(KernelSize, Vec<usize>)> {
    let text =
        std::env::var("KILN_BENCH_BATCH").unwrap_or_else(|_| "tiny:16;gemm:16;heavy:16".into());
    text.split(';')
        .filter_map(|part| {
            let (size, counts) = part.split_once(':')?;
            let size = KernelSize::named(size)?;
            let counts = counts
                .split(',')
                .filter_map(|count| count.trim().parse().ok())
                .collect();
            Some((size, counts))
        })
        .collect()
}

fn loader(mode: WorkerMode) -> KernelLoader<CudaTarget> {
    let on_device = std::env::var("KILN_BENCH_ON_DEVICE").is_ok_and(|value| value == "1");
    let target = cuda_target("batch_compile", on_device).expect("NVRTC was found a moment ago");
    KernelLoader::new(target)
        .without_profile()
        .with_worker_mode(mode)
}

/// Compiles `count` fresh kernels of `size` in one batch; records it and
/// returns its wall time.
fn one_batch(
    loader: &mut KernelLoader<CudaTarget>,
    size: KernelSize,
    count: usize,
    case: &str,
) -> Duration {
    let variant = loader.target().variant();
    for _ in 0..count {
        loader.enqueue(Box::new(size.kernel(salt())), variant);
    }
    let started = Instant::now();
    loader.compile_queued();
    let wall = started.elapsed();
    let batch = loader.records().back().expect("the batch left a record");
    assert_eq!(
        batch.count(KernelOutcome::Compiled),
        count,
        "every kernel compiles: {:?}",
        batch
            .records
            .iter()
            .find_map(|record| record.error.as_ref())
    );
    let mode = match batch.mode {
        WorkerMode::Threads => "threads",
        WorkerMode::Processes => "processes",
    };
    if case.starts_with("processes") && batch.mode != WorkerMode::Processes {
        eprintln!(
            "batch_compile: the processes case ran on threads: {:?}",
            loader.worker_processes()
        );
    }
    append_record(&BenchRecord {
        bench: "batch_compile".into(),
        case: case.into(),
        size: Some(size.name().into()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        slowest: batch
            .records
            .iter()
            .map(|record| record.work)
            .max()
            .unwrap_or_default()
            .as_secs_f64(),
        workers: batch.workers,
        mode: mode.into(),
        cores: cores(),
        // F2's tail: the last worker's finish less the one before it.
        note: loader
            .last_batch_tail()
            .map(|tail| format!("tail={}", tail.as_secs_f64())),
        ..BenchRecord::default()
    });
    wall
}

fn batch_compile(criterion: &mut Criterion, plan: &[(KernelSize, Vec<usize>)], modes: &str) {
    let architecture = loader(WorkerMode::Threads).target().architecture();
    for (size, counts) in plan {
        let size = *size;
        let mut group = criterion.benchmark_group(format!("batch_compile/{}", size.name()));
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(1));
        group.measurement_time(Duration::from_secs(1));

        if modes.contains("sequential") {
            group.bench_function(BenchmarkId::new("sequential_per_kernel", 1), |bencher| {
                bencher.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let salt = salt();
                        let started = Instant::now();
                        std::hint::black_box(plain_nvrtc::compile(size, salt, architecture));
                        let took = started.elapsed();
                        total += took;
                        append_record(&BenchRecord {
                            bench: "batch_compile".into(),
                            case: "sequential_per_kernel".into(),
                            size: Some(size.name().into()),
                            kernels: 1,
                            wall: took.as_secs_f64(),
                            summed_work: took.as_secs_f64(),
                            slowest: took.as_secs_f64(),
                            workers: 1,
                            mode: "sequential".into(),
                            cores: cores(),
                            ..BenchRecord::default()
                        });
                    }
                    total
                });
            });
        }
        for &count in counts {
            for (name, mode) in [
                ("threads", WorkerMode::Threads),
                ("processes", WorkerMode::Processes),
            ] {
                if !modes.contains(name) {
                    continue;
                }
                let mut loader = loader(mode);
                let mut first = true;
                group.bench_function(BenchmarkId::new(name, count), |bencher| {
                    bencher.iter_custom(|iterations| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iterations {
                            // The first batch of a processes loader starts
                            // its workers: recorded apart from the warm ones.
                            let case = match (first, mode) {
                                (true, WorkerMode::Processes) => "processes_cold",
                                _ => name,
                            };
                            first = false;
                            total += one_batch(&mut loader, size, count, case);
                        }
                        total
                    });
                });
            }
        }
        group.finish();
    }
}

/// Runs one batch per `KILN_BENCH_MEMORY` entry in a fresh process (this
/// binary again), compile-only like every batch here, for threads and for
/// processes, and records the peak memory each reports.
fn compile_memory() {
    let spec = std::env::var("KILN_BENCH_MEMORY").unwrap_or_else(|_| "heavy:16".into());
    for entry in spec.split(';').filter(|entry| !entry.trim().is_empty()) {
        let modes =
            std::env::var("KILN_BENCH_MEMORY_MODES").unwrap_or_else(|_| "threads,processes".into());
        for mode in modes
            .split(',')
            .map(str::trim)
            .filter(|mode| !mode.is_empty())
        {
            let executable = std::env::current_exe().expect("this benchmark's path");
            // Compile-only: the figure is kiln's and the compiler's, without
            // a CUDA context in the host.
            let output = std::process::Command::new(executable)
                .env(MEMORY_CHILD, format!("{}:{mode}", entry.trim()))
                .output()
                .expect("the memory run starts");
            let text = String::from_utf8_lossy(&output.stdout);
            let Some(record) = text
                .lines()
                .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
            else {
                eprintln!(
                    "compile_memory {entry} {mode}: no record ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
                continue;
            };
            println!(
                "compile_memory/{entry}/{mode}: host peak {:.0} MiB, workers' peaks {:?} MiB",
                record.host_peak_bytes.unwrap_or(0) as f64 / 1048576.0,
                record
                    .worker_peak_bytes
                    .iter()
                    .map(|bytes| (*bytes as f64 / 1048576.0).round())
                    .collect::<Vec<_>>()
            );
            append_record(&record);
        }
    }
}

/// The fresh process of the memory run: one batch, then the peaks.
fn memory_child(spec: &str) {
    let mut parts = spec.split(':');
    let (Some(size), Some(count), Some(mode)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("{MEMORY_CHILD}={spec} is not size:count:mode");
    };
    let size = KernelSize::named(size).expect("a kernel size");
    let count: usize = count.parse().expect("a kernel count");
    let worker_mode = if mode == "threads" {
        WorkerMode::Threads
    } else {
        WorkerMode::Processes
    };
    let mut loader = loader(worker_mode);
    let wall = one_batch(&mut loader, size, count, &format!("memory_{mode}"));
    let workers = loader.worker_processes();
    let batch = loader.records().back().expect("a batch");
    let record = BenchRecord {
        bench: "compile_memory".into(),
        case: mode.into(),
        size: Some(size.name().into()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        host_peak_bytes: peak_resident_bytes(std::process::id()),
        worker_peak_bytes: workers
            .running
            .iter()
            .filter_map(|pid| peak_resident_bytes(*pid))
            .collect(),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}
