//! P4 and P12 at speed: 1, 2 and 4 processes started together, each asking
//! for the same N kernels of one empty disk store, side by side.
//!
//! Each process is this binary again, which opens the store, loads all N
//! kernels in one batch and prints its record: its wall from opening the
//! store to the last kernel loaded, and how many kernels it compiled. The
//! criterion figure of a run is its slowest process's wall.
//!
//! Two cases:
//!
//! - `fake`: the fake compiler, whose every compile sleeps a fixed time
//!   (`KILN_BENCH_SHARED_COMPILE_MS`, default 20 ms) on the process's worker
//!   threads. A sleep takes no core, so even a 2-core machine shows how the
//!   processes split the work.
//! - `cuda`: real NVRTC compiles in worker processes, each process on a
//!   quarter of the machine's cores, so that four processes together have
//!   the cores one process would. The kernels are GEMMs
//!   (`KILN_BENCH_SHARED_SIZE`: `tiny`, `gemm` or `heavy`): the heavier,
//!   the less a process's fixed costs (its workers' start, NVRTC's first
//!   compile in each) hide how the work splits.
//!
//! The goals (P12): every kernel compiled once across the processes, and
//! each process's wall within 1.25 × (one process's wall / N) + one
//! compile. `KILN_BENCH_SHARED` sets N (default 64).
//!
//! ```text
//! cargo bench -p kiln-benches --bench shared_store
//! ```

use std::num::NonZeroUsize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, LoaderConfig};

/// Set on a child process: the store's root.
const CHILD_ROOT: &str = "KILN_BENCH_SHARED_CHILD";
/// Set on a child process: `fake` or `cuda`.
const CHILD_CASE: &str = "KILN_BENCH_SHARED_CASE";
/// Set on a child process: how many processes share the store.
const CHILD_PROCESSES: &str = "KILN_BENCH_SHARED_PROCESSES";
/// Set on a child process: the run's salt, so that no run compiles a text
/// an earlier run compiled (a compiler or machine cache would hide the
/// compile).
const CHILD_SALT: &str = "KILN_BENCH_SHARED_SALT";

/// The process counts compared.
const PROCESSES: [usize; 3] = [1, 2, 4];

fn count() -> usize {
    std::env::var("KILN_BENCH_SHARED")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(64)
}

fn fake_compile() -> Duration {
    let millis = std::env::var("KILN_BENCH_SHARED_COMPILE_MS")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(20);
    Duration::from_millis(millis)
}

fn size() -> KernelSize {
    std::env::var("KILN_BENCH_SHARED_SIZE")
        .ok()
        .and_then(|name| KernelSize::named(&name))
        .unwrap_or(KernelSize::Gemm)
}

fn open_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(kiln_benches::disk_store(root))
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Some(root) = std::env::var_os(CHILD_ROOT) {
        child(Path::new(&root));
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    shared_store(&mut criterion, "fake");
    if cuda_target("shared_store", false).is_some() {
        shared_store(&mut criterion, "cuda");
    }
    criterion.final_summary();
}

/// One process of a run: loads every kernel in one batch and prints its
/// record, `note` holding how many it compiled.
fn child(root: &Path) {
    let case = std::env::var(CHILD_CASE).unwrap_or_default();
    let processes: usize = std::env::var(CHILD_PROCESSES)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1);
    let count = count();
    let (wall, batch) = match case.as_str() {
        "fake" => {
            let compile = fake_compile();
            let started = Instant::now();
            let mut loader = KernelLoader::with_config(
                FakeTarget::on_store(open_store(root)),
                LoaderConfig::default(),
            )
            .without_profile();
            for number in 0..count as u32 {
                loader.enqueue(Box::new(FakeKernel::new(number).sleeping(compile)), ());
            }
            loader.compile_queued();
            let batch = loader.records().back().expect("a batch").clone();
            (started.elapsed(), batch)
        }
        "cuda" => {
            // NVRTC opens before the clock, as a program pays it anyway.
            let target = cuda_target("shared_store", false).expect("NVRTC is here");
            let started = Instant::now();
            let parallelism =
                NonZeroUsize::new((cores() / PROCESSES[2]).max(1)).expect("at least one worker");
            let mut loader = KernelLoader::with_config(
                target.with_store(open_store(root)),
                LoaderConfig {
                    parallelism,
                    ..LoaderConfig::default()
                },
            )
            .without_profile();
            let variant = loader.target().variant();
            let size = size();
            let run: u64 = std::env::var(CHILD_SALT)
                .ok()
                .and_then(|salt| salt.parse().ok())
                .unwrap_or(0);
            for salt in 0..count as u64 {
                loader.enqueue(Box::new(size.kernel(run * 100_000 + salt)), variant);
            }
            loader.compile_queued();
            let batch = loader.records().back().expect("a batch").clone();
            (started.elapsed(), batch)
        }
        other => panic!("shared_store: unknown case {other:?}"),
    };
    let loaded = batch.count(KernelOutcome::Compiled)
        + batch.count(KernelOutcome::FromStore)
        + batch.count(KernelOutcome::Rekeyed);
    assert_eq!(loaded, count, "every kernel loads: {batch:?}");
    let record = BenchRecord {
        bench: "shared_store".into(),
        case: case.clone(),
        size: Some(processes.to_string()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        compiled: Some(batch.count(KernelOutcome::Compiled)),
        note: (case == "cuda").then(|| size().name().to_owned()),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}

/// Runs `processes` children on one fresh store at once: their records.
fn run(case: &str, processes: usize, root: &Path) -> Vec<BenchRecord> {
    drop(std::fs::remove_dir_all(root));
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64 % 1_000_000_000);
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(std::env::current_exe().expect("this benchmark's path"))
                .env(CHILD_ROOT, root)
                .env(CHILD_CASE, case)
                .env(CHILD_PROCESSES, processes.to_string())
                .env(CHILD_SALT, salt.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a child process starts")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("the child ends");
            let text = String::from_utf8_lossy(&output.stdout);
            text.lines()
                .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
                .unwrap_or_else(|| {
                    panic!(
                        "a child gave no record ({}): {}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr)
                    )
                })
        })
        .collect()
}

fn shared_store(criterion: &mut Criterion, case: &str) {
    let count = count();
    let root = std::env::temp_dir().join(format!("kiln-shared-store-{}", std::process::id()));
    let mut group = criterion.benchmark_group(format!("shared_store_{case}"));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));
    for processes in PROCESSES {
        group.bench_function(BenchmarkId::new(case, processes), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let records = run(case, processes, &root);
                    let slowest = records.iter().map(|record| record.wall).fold(0.0, f64::max);
                    let compiled: usize = records.iter().filter_map(|record| record.compiled).sum();
                    for record in &records {
                        append_record(record);
                    }
                    // The run as a whole: its slowest process, and every
                    // compile of all its processes.
                    append_record(&BenchRecord {
                        bench: "shared_store".into(),
                        case: format!("{case}_run"),
                        size: Some(processes.to_string()),
                        kernels: count,
                        wall: slowest,
                        slowest: if case == "fake" {
                            fake_compile().as_secs_f64()
                        } else {
                            0.0
                        },
                        cores: cores(),
                        compiled: Some(compiled),
                        ..BenchRecord::default()
                    });
                    total += Duration::from_secs_f64(slowest);
                }
                total
            });
        });
    }
    group.finish();
    drop(std::fs::remove_dir_all(&root));
}
