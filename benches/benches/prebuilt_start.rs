//! L11: a program's warm start on a store another run prebuilt, next to its
//! own second run. The program (this binary started again) loads N GEMM
//! kernels on the GPU (or, without one, on a compile-only sm_90 target):
//!
//! - `prebuild`: the program run once in compile-only mode
//!   (`KILN_MODE=compile-only`, the GPU's architecture named), as a build
//!   machine without the GPU runs it;
//! - `after_prebuild`: the program on that store, as the GPU machine's
//!   first run: what it compiled (nothing) and how long its start took;
//! - `cold`, then `second_run`: the program twice on a store of its own.
//!
//! Each start is timed inside the program, from the target put on its
//! store to the last kernel loaded. `KILN_BENCH_PREBUILT` sets N (default
//! 32).
//!
//! ```text
//! cargo bench -p kiln-benches --bench prebuilt_start
//! ```

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_engine::{Kernel, KernelLoader, KernelOutcome};

/// Set on the program: the store's root.
const PROGRAM: &str = "KILN_BENCH_PREBUILT_PROGRAM";
/// Set on the program: the case its record names.
const CASE: &str = "KILN_BENCH_PREBUILT_CASE";

fn count() -> usize {
    std::env::var("KILN_BENCH_PREBUILT")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(32)
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Some(root) = std::env::var_os(PROGRAM) {
        let case = std::env::var(CASE).unwrap_or_default();
        return program(Path::new(&root), &case);
    }
    // Criterion's arguments (`--bench`) are not this benchmark's.
    let Some(target) = cuda_target("prebuilt_start", true) else {
        return;
    };
    let architecture = target.architecture().to_string();
    drop(target);
    let folder = std::env::temp_dir().join(format!("kiln-prebuilt-{}", std::process::id()));
    drop(std::fs::remove_dir_all(&folder));
    let (prebuilt, own) = (folder.join("prebuilt"), folder.join("own"));
    let run = |root: &Path, case: &str, compile_only: bool| {
        let mut command = Command::new(std::env::current_exe().expect("this benchmark's path"));
        command.env(PROGRAM, root).env(CASE, case);
        command.env_remove(kiln_engine::mode::MODE_VARIABLE);
        if compile_only {
            command
                .env(kiln_engine::mode::MODE_VARIABLE, "compile-only")
                .env(kiln_engine::mode::CUDA_ARCH_VARIABLE, &architecture);
        }
        let output = command.output().expect("the program starts");
        let text = String::from_utf8_lossy(&output.stdout);
        let record = text
            .lines()
            .find_map(|line| serde_json::from_str::<BenchRecord>(line).ok())
            .unwrap_or_else(|| {
                panic!(
                    "the program gave no record ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        append_record(&record);
        record
    };
    run(&prebuilt, "prebuild", true);
    let after = run(&prebuilt, "after_prebuild", false);
    run(&own, "cold", false);
    let second = run(&own, "second_run", false);
    println!(
        "prebuilt_start: after a compile-only run {:.1} ms ({} compiled), own second run {:.1} ms \
         ({} compiled), {} kernels",
        after.wall * 1e3,
        after.compiled.unwrap_or(0),
        second.wall * 1e3,
        second.compiled.unwrap_or(0),
        after.kernels,
    );
    drop(std::fs::remove_dir_all(&folder));
}

/// The program: every kernel loaded through a target on the store at
/// `root`, and its record printed.
fn program(root: &Path, case: &str) {
    let count = count();
    let kernels: Vec<_> = (0..count as u64)
        .map(|index| KernelSize::Gemm.kernel(3_000_000 + index))
        .collect();
    // The CUDA context (or NVRTC) is made before the clock starts: a
    // program pays it with or without kiln.
    let target = cuda_target("prebuilt_start", true).expect("NVRTC is here");
    let started = Instant::now();
    let target = target.with_store(std::sync::Arc::new(kiln_benches::disk_store(root)));
    let compile_only = target.is_compile_only();
    let mut loader = KernelLoader::new(target);
    let variant = loader.target().variant();
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    for kernel in &kernels {
        let id = kiln_engine::ArtifactId::new(kernel.id(), variant);
        loader
            .load(kernel, &id)
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let wall = started.elapsed();
    let batch = loader.records().back().expect("a batch");
    let record = BenchRecord {
        bench: "prebuilt_start".into(),
        case: case.into(),
        size: Some("gemm".into()),
        kernels: count,
        wall: wall.as_secs_f64(),
        summed_work: batch.summed_work().as_secs_f64(),
        workers: batch.workers,
        mode: format!("{:?}", batch.mode).to_lowercase(),
        cores: cores(),
        compiled: Some(batch.count(KernelOutcome::Compiled)),
        note: Some(if compile_only {
            "compile-only".into()
        } else {
            "device".into()
        }),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}
