//! F11: the main job's whole warm start. A folder holds one tiled GEMM
//! file with N `specialize` lines; after one cold run fills a store, side
//! by side, in one run:
//!
//! - `cli`: `kiln --json warm --backend cuda FOLDER`, the whole warm run as
//!   kiln times it (its batch), and `cli_process` the process from spawn
//!   to exit;
//! - `program`: a fresh process (this binary again) loading the same N
//!   kernels through its own loader, timed from the loader's creation
//!   (the store opened with it) to the last kernel loaded;
//!   `program_profiled` the same with its warm-start profile, and
//!   `program_ahead` the same having read its kernels with
//!   `ReadAhead::start` before making its device, as `kiln warm` does;
//! - `floor`: in this process, the same artifacts' bytes read from plain
//!   files, digested with BLAKE3 (what verifying costs), decoded and
//!   loaded on the device (`cuModuleLoadData`; on a machine without a
//!   GPU, the compile-only target's check);
//! - `device_threads`: the device step alone for the N artifacts on 1, 2,
//!   4 and 16 threads (`KILN_BENCH_DEVICE_THREADS`), to choose where module
//!   loads go on each driver (F9).
//!
//! F11's goal: `cli` and `program` within 1.5× of `floor`; on the H200, 64
//! kernels in at most 3 ms. `KILN_BENCH_WARM_RUN` sets the counts (default
//! 64,256); `KILN_BENCH_KILN` names the `kiln` binary (default: the one
//! beside this benchmark's folder, `target/release/kiln`).
//!
//! ```text
//! cargo build --release -p kiln-tool
//! cargo bench -p kiln-benches --bench warm_run
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kiln_benches::{BenchRecord, append_record, cores, counts_from_env, cuda_target};
use kiln_cuda::{CudaArtifact, CudaKernel, CudaOptions, CudaTarget, CudaVariant};
use kiln_engine::store::ReadAhead;
use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, DeviceStep, Kernel, KernelId, KernelLoader,
    LoaderConfig, Lookup,
};

/// Set on the fresh process: the store's root, then the count.
const CHILD: &str = "KILN_BENCH_WARM_RUN_CHILD";
const CHILD_COUNT: &str = "KILN_BENCH_WARM_RUN_COUNT";
/// Set on the fresh process: its loader keeps and uses a warm-start
/// profile (F8) instead of none.
const CHILD_PROFILED: &str = "KILN_BENCH_WARM_RUN_PROFILED";
/// Set on the fresh process: it reads its kernels ahead, before making
/// its device (`ReadAhead`).
const CHILD_AHEAD: &str = "KILN_BENCH_WARM_RUN_AHEAD";

/// How the program's fresh process starts.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    Plain,
    Profiled,
    Ahead,
}

/// The tiled GEMM of the examples, each specialization a tile and an
/// unroll factor (the text `benches/main_job/run.sh` warms too).
const GEMM: &str = include_str!("../main_job/matmul_tiled.cu");

/// The specializations of `count` kernels: (tile, unroll).
fn specializations(count: usize) -> Vec<(u32, usize)> {
    let per_tile = count.div_ceil(3);
    (0..count)
        .map(|index| ([8, 16, 32][index / per_tile], index % per_tile + 1))
        .collect()
}

/// The program's kernels: the folder's text, each specialization's
/// defines, under the program's own ids.
fn kernels(count: usize) -> Vec<CudaKernel> {
    specializations(count)
        .into_iter()
        .map(|(tile, unroll)| {
            CudaKernel::builder(
                KernelId::named("kiln.bench.warm_run")
                    .parameter(&tile)
                    .parameter(&unroll),
                "matmul_tiled",
            )
            .options(
                CudaOptions::default()
                    .define("TILE", tile.to_string())
                    .define("UNROLL", unroll.to_string()),
            )
            .source(GEMM)
        })
        .collect()
}

/// The folder `kiln warm` reads: one file, `count` specializations.
fn folder(root: &Path, count: usize) -> PathBuf {
    let folder = root.join("kernels");
    std::fs::create_dir_all(&folder).expect("a folder for the kernels");
    let mut text = String::from("// kiln entry: matmul_tiled\n");
    for (tile, unroll) in specializations(count) {
        text.push_str(&format!(
            "// kiln specialize: TILE={tile} UNROLL={unroll}\n"
        ));
    }
    text.push_str("//\n");
    text.push_str(GEMM);
    std::fs::write(folder.join("gemm.cu"), text).expect("the kernel file");
    folder
}

fn open_store(root: &Path) -> Arc<dyn ArtifactStore> {
    Arc::new(kiln_benches::disk_store(root))
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Some(root) = std::env::var_os(CHILD) {
        let count = std::env::var(CHILD_COUNT)
            .ok()
            .and_then(|count| count.parse().ok())
            .unwrap_or(64);
        program_child(Path::new(&root), count);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    for count in counts_from_env("KILN_BENCH_WARM_RUN", &[64, 256]) {
        if let Some(target) = cuda_target("warm_run", true) {
            warm_run(&mut criterion, target, count);
        }
    }
    criterion.final_summary();
}

/// The fresh process: a loader made, every kernel loaded from the store;
/// prints its record.
fn program_child(root: &Path, count: usize) {
    let kernels = kernels(count);
    let profiled = std::env::var_os(CHILD_PROFILED).is_some();
    // Read ahead: the device's architecture asked of the driver (the
    // benchmark's on a machine without a GPU), the kernels read while the
    // context is made.
    let ahead = std::env::var_os(CHILD_AHEAD).is_some().then(|| {
        let architecture = kiln_cuda::CudaDevice::architecture_of(0)
            .filter(|_| std::env::var("KILN_BENCH_DEVICE").map_or(true, |value| value != "0"))
            .unwrap_or(kiln_benches::BENCH_ARCHITECTURE);
        let compiler = kiln_cuda::CudaCompiler::new()
            .expect("NVRTC is here")
            .keyed_for(architecture);
        let variant = kiln_cuda::CudaVariant { architecture };
        let ids: Vec<_> = kernels
            .iter()
            .map(|kernel| ArtifactId::new(kernel.id(), variant))
            .collect();
        ReadAhead::start(open_store(root), &compiler, &ids)
    });
    // The CUDA context (or NVRTC, compile-only) is made before the clock
    // starts: a program pays it with or without kiln.
    let target = cuda_target("warm_run", true).expect("NVRTC is here");
    let started = Instant::now();
    let store = match &ahead {
        Some(ahead) => Arc::clone(ahead) as Arc<dyn ArtifactStore>,
        None => open_store(root),
    };
    // Without its profile, the loader is made as a program that keeps
    // none makes it (`KILN_PROFILE=0`): no profile's thread started and
    // given up.
    let config = LoaderConfig {
        profile: profiled,
        ..LoaderConfig::from_env_or_default()
    };
    let mut loader = KernelLoader::with_config(target.with_store(store), config);
    let variant = loader.target().variant();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
    let wall = started.elapsed();
    // With a profile, its background batch may have loaded every kernel
    // before they were queued: the program's own call then runs none.
    let all_loaded = kernels
        .iter()
        .all(|kernel| loader.is_loaded(&ArtifactId::new(kernel.id(), variant)));
    let compiled = usize::try_from(loader.statistics().compiled).unwrap_or(usize::MAX);
    let batch = loader.records().back();
    let record = BenchRecord {
        bench: "warm_run".into(),
        case: match (all_loaded && compiled == 0, profiled, ahead.is_some()) {
            (true, true, _) => "program_profiled",
            (true, false, true) => "program_ahead",
            (true, false, false) => "program",
            (false, _, _) => "program_cold",
        }
        .into(),
        size: Some("gemm".into()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.map_or(0.0, |batch| batch.summed_work().as_secs_f64()),
        workers: batch.map_or(0, |batch| batch.workers),
        mode: batch
            .map(|batch| format!("{:?}", batch.mode).to_lowercase())
            .unwrap_or_default(),
        cores: cores(),
        compiled: Some(compiled),
        note: Some(place(loader.target()).into()),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}

fn place(target: &CudaTarget) -> &'static str {
    if target.is_compile_only() {
        "compile-only"
    } else {
        "device"
    }
}

/// Runs the program's fresh process on the store at `root`; its record.
fn run_program(root: &Path, count: usize, start: Start) -> BenchRecord {
    let mut command = std::process::Command::new(std::env::current_exe().expect("this benchmark"));
    command.env(CHILD, root).env(CHILD_COUNT, count.to_string());
    match start {
        Start::Plain => {}
        Start::Profiled => {
            command.env(CHILD_PROFILED, "1");
        }
        Start::Ahead => {
            command.env(CHILD_AHEAD, "1");
        }
    }
    let output = command.output().expect("the fresh process starts");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
        .unwrap_or_else(|| {
            panic!(
                "the fresh process gave no record ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

/// The `kiln` binary: `KILN_BENCH_KILN`, else `target/release/kiln` beside
/// this benchmark's folder.
fn kiln_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KILN_BENCH_KILN") {
        return Some(path.into());
    }
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent()?.parent()?.join("kiln");
    beside.is_file().then_some(beside)
}

/// One `kiln --json warm` of `folder` on the store at `root`: kiln's own
/// wall, the process's, and the kernels from the store.
fn run_cli(kiln: &Path, folder: &Path, root: &Path) -> (f64, f64, u64) {
    let started = Instant::now();
    let output = std::process::Command::new(kiln)
        .args(["--json", "warm", "--backend", "cuda"])
        .arg(folder)
        .env("KILN_CACHE_DIR", root)
        .output()
        .expect("kiln starts");
    let process = started.elapsed().as_secs_f64();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "kiln warm gave no report ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let backend = &report["backends"][0];
    (
        backend["wall_seconds"].as_f64().unwrap_or(0.0),
        process,
        backend["from_store"].as_u64().unwrap_or(0),
    )
}

fn record(case: &str, count: usize, wall: f64, workers: usize, note: &str) -> BenchRecord {
    BenchRecord {
        bench: "warm_run".into(),
        case: case.into(),
        size: Some("gemm".into()),
        kernels: count,
        wall,
        workers,
        cores: cores(),
        note: Some(note.into()),
        ..BenchRecord::default()
    }
}

fn warm_run(criterion: &mut Criterion, target: CudaTarget, count: usize) {
    let root = std::env::temp_dir().join(format!("kiln-warm-run-{}-{count}", std::process::id()));
    drop(std::fs::remove_dir_all(&root));
    let note = place(&target);
    // Fill the program's store: the cold run a warm start saves.
    let program_store = root.join("program-store");
    let cold = run_program(&program_store, count, Start::Plain);
    assert_eq!(cold.compiled, Some(count), "the first run compiles");
    append_record(&cold);

    // The floor's inputs: each artifact's bytes as the store holds them,
    // copied to plain files.
    let plain = root.join("plain");
    std::fs::create_dir_all(&plain).expect("a folder for the plain files");
    let variant = target.variant();
    let loader = KernelLoader::new(target.with_store(open_store(&program_store))).without_profile();
    let mut files: Vec<(ArtifactId<_>, PathBuf)> = Vec::with_capacity(count);
    {
        let target = loader.target();
        let bound = loader.bound_store().expect("the target is on a store");
        for (index, kernel) in kernels(count).iter().enumerate() {
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

    // The CLI's store, filled by `kiln warm` once.
    let kiln = kiln_binary();
    let cli_store = root.join("cli-store");
    let kernel_folder = folder(&root, count);
    match &kiln {
        Some(kiln) => {
            let (_, _, _) = run_cli(kiln, &kernel_folder, &cli_store);
        }
        None => eprintln!(
            "warm_run: cli skipped: no kiln binary (build it with `cargo build --release -p \
             kiln-tool`, or name it in KILN_BENCH_KILN)"
        ),
    }

    let mut group = criterion.benchmark_group("warm_run");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_secs(1));

    if let Some(kiln) = &kiln {
        group.bench_function(BenchmarkId::new("cli", count), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let (wall, process, from_store) = run_cli(kiln, &kernel_folder, &cli_store);
                    assert_eq!(from_store, count as u64, "every kernel from the store");
                    append_record(&record("cli", count, wall, 1, note));
                    append_record(&record("cli_process", count, process, 1, note));
                    total += Duration::from_secs_f64(wall);
                }
                total
            });
        });
    }

    group.bench_function(BenchmarkId::new("program", count), |bencher| {
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let record = run_program(&program_store, count, Start::Plain);
                assert_eq!(record.case, "program", "every kernel from the store");
                total += Duration::from_secs_f64(record.wall);
                append_record(&record);
                // The same start reading its kernels ahead, beside it (not
                // timed by criterion).
                let ahead = run_program(&program_store, count, Start::Ahead);
                assert_eq!(ahead.case, "program_ahead", "every kernel read ahead");
                append_record(&ahead);
            }
            total
        });
    });

    // The same program keeping a warm-start profile (on by default with a
    // store): a store of its own, its profile written by a first run.
    let profiled_store = root.join("profiled-store");
    run_program(&profiled_store, count, Start::Profiled);
    run_program(&profiled_store, count, Start::Profiled);
    group.bench_function(BenchmarkId::new("program_profiled", count), |bencher| {
        bencher.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let record = run_program(&profiled_store, count, Start::Profiled);
                assert_eq!(
                    record.case, "program_profiled",
                    "every kernel from the store"
                );
                total += Duration::from_secs_f64(record.wall);
                append_record(&record);
            }
            total
        });
    });

    group.bench_function(BenchmarkId::new("floor", count), |bencher| {
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
                append_record(&record("floor", count, took.as_secs_f64(), 1, note));
            }
            total
        });
    });

    // The device step alone on T threads: where module loads are fastest.
    let artifacts: Vec<(ArtifactId<_>, CudaArtifact)> = files
        .iter()
        .map(|(id, path)| {
            let bytes = std::fs::read(path).expect("the plain copy");
            let (artifact, _): (CudaArtifact, usize) =
                bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
                    .expect("an artifact");
            (id.clone(), artifact)
        })
        .collect();
    let step = Arc::clone(target.device_step());
    for threads in counts_from_env("KILN_BENCH_DEVICE_THREADS", &[1, 2, 4, 16]) {
        group.bench_function(
            BenchmarkId::new(format!("device_threads/{threads}"), count),
            |bencher| {
                bencher.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let took = device_steps(&step, &artifacts, threads);
                        append_record(&record(
                            "device_threads",
                            count,
                            took.as_secs_f64(),
                            threads,
                            note,
                        ));
                        total += took;
                    }
                    total
                });
            },
        );
    }
    group.finish();
    drop(std::fs::remove_dir_all(&root));
}

/// Makes every artifact's device object on `threads` threads, each taking
/// the next; the time from their common start to the last one made (the
/// threads started before the clock, the objects dropped after it).
fn device_steps(
    step: &<CudaTarget as CompilationTarget>::Device,
    artifacts: &[(ArtifactId<CudaVariant>, CudaArtifact)],
    threads: usize,
) -> Duration {
    let threads = threads.max(1);
    let next = AtomicUsize::new(0);
    let start = Barrier::new(threads + 1);
    let mut made = Vec::new();
    let took = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    let mut made = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some((id, artifact)) = artifacts.get(index) else {
                            break;
                        };
                        made.push(step.make(id, artifact).expect("the device loads it"));
                    }
                    made
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        for worker in workers {
            made.extend(worker.join().expect("a device step thread"));
        }
        started.elapsed()
    });
    drop(made);
    took
}
