//! L11: a program's warm start on a store another run prebuilt, next to its
//! own second run. The program (this binary started again) loads the N
//! specializations of one GEMM file, `gemm.cu` (its text read from the
//! file as `include_str!` would, one `-DKILN_BENCH_SALT=i` each, built
//! with `CudaKernel::of_file` as a kernel file's module), on the GPU (or,
//! without one, on a compile-only sm_90 target):
//!
//! - `prebuild`: the program run once in compile-only mode
//!   (`KILN_MODE=compile-only`, the GPU's architecture named), as a build
//!   machine without the GPU runs it; `after_prebuild`: the program on that
//!   store, as the GPU machine's first run;
//! - `kiln_warm`: the `kiln` binary's `kiln warm DIR` on the file's folder,
//!   whose `// kiln specialize:` lines name the same N defines (P14);
//!   `after_warm`: the program on that store, asking for the ids `kiln
//!   warm` stored under (L11);
//! - `cold`, then `second_run`: the program twice on a store of its own.
//!
//! Each program's start is timed inside the program, from the target put
//! on its store to the last kernel loaded; `kiln warm`'s whole run is timed
//! from here. A start on a prebuilt store that compiled anything panics.
//! The stores are filled first (the cold run among them, so that no start
//! measured is the device's first since the benchmark began), then each
//! start runs `KILN_BENCH_PREBUILT_ROUNDS` times (default 5), alternating:
//! each first start on a fresh copy of its prebuilt store, so that every
//! one is a first start on that store, and the program's next start on
//! its own. `KILN_BENCH_PREBUILT` sets N (default 32); `KILN_BENCH_KILN`
//! names the `kiln` binary, else the one beside this binary (`cargo xtask
//! bench-report` builds it: `cargo build --profile bench -p kiln-tool`).
//!
//! ```text
//! cargo build --profile bench -p kiln-tool --bin kiln
//! cargo bench -p kiln-benches --bench prebuilt_start
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kiln_benches::{BenchRecord, KernelSize, append_record, cores, cuda_target};
use kiln_cuda::{CudaKernel, CudaOptions};
use kiln_engine::{Kernel, KernelLoader, KernelOutcome};

/// Set on the program: the store's root.
const PROGRAM: &str = "KILN_BENCH_PREBUILT_PROGRAM";
/// Set on the program: the case its record names.
const CASE: &str = "KILN_BENCH_PREBUILT_CASE";
/// Set on the program: the kernel file it loads.
const FILE: &str = "KILN_BENCH_PREBUILT_FILE";
/// The define each specialization sets.
const SALT: &str = "KILN_BENCH_SALT";

fn count() -> usize {
    std::env::var("KILN_BENCH_PREBUILT")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(32)
}

/// How many times each start is measured.
fn rounds() -> usize {
    std::env::var("KILN_BENCH_PREBUILT_ROUNDS")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(5)
        .max(1)
}

/// A copy of the store at `from`, folders and files, at `to` (replaced).
fn copy_store(from: &Path, to: &Path) {
    drop(std::fs::remove_dir_all(to));
    std::fs::create_dir_all(to).expect("a folder for the store's copy");
    for entry in std::fs::read_dir(from).expect("the store's folder") {
        let entry = entry.expect("a store's entry");
        let kind = entry.file_type().expect("an entry's kind");
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_store(&entry.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).expect("a store's file copied");
        }
    }
}

/// The kernel file: `kiln warm`'s header (the entry and one `specialize`
/// line per kernel), then the GEMM template, whose salt is the define.
fn kernel_file(count: usize) -> String {
    let mut text = format!("// kiln entry: {}\n", KernelSize::Gemm.entry());
    for salt in 0..count {
        text.push_str(&format!("// kiln specialize: {SALT}={salt}\n"));
    }
    text.push_str(KernelSize::Gemm.template());
    text
}

/// The `kiln` binary: `KILN_BENCH_KILN`, else beside this binary (packed
/// runs) or in its profile's folder (`target/release/deps/..`).
fn kiln_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KILN_BENCH_KILN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("this benchmark's path");
    let here = exe.parent().expect("a folder");
    [here.join("kiln"), here.join("../kiln")]
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "prebuilt_start needs the kiln binary: build it with `cargo build --profile \
                 bench -p kiln-tool --bin kiln`, or name it with KILN_BENCH_KILN"
            )
        })
}

fn main() {
    kiln_engine::worker::run_if_worker(&[kiln_cuda::worker_entry()]);
    if let Some(root) = std::env::var_os(PROGRAM) {
        let case = std::env::var(CASE).unwrap_or_default();
        let file = std::env::var_os(FILE).expect("the program's kernel file");
        return program(Path::new(&root), &case, Path::new(&file));
    }
    // Criterion's arguments (`--bench`) are not this benchmark's.
    let Some(target) = cuda_target("prebuilt_start", true) else {
        return;
    };
    let architecture = target.architecture().to_string();
    drop(target);
    let kiln = kiln_binary();
    let folder = std::env::temp_dir().join(format!("kiln-prebuilt-{}", std::process::id()));
    drop(std::fs::remove_dir_all(&folder));
    let kernels = folder.join("kernels");
    std::fs::create_dir_all(&kernels).expect("the kernels' folder");
    let file = kernels.join("gemm.cu");
    std::fs::write(&file, kernel_file(count())).expect("the kernel file");
    let (prebuilt, warmed, own) = (
        folder.join("prebuilt"),
        folder.join("warmed"),
        folder.join("own"),
    );
    let run = |root: &Path, case: &str, compile_only: bool| {
        let mut command = Command::new(std::env::current_exe().expect("this benchmark's path"));
        command.env(PROGRAM, root).env(CASE, case).env(FILE, &file);
        // Each start is measured as its batch: no warm-start profile loads
        // the kernels ahead of it.
        command.env("KILN_PROFILE", "0");
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
    let prebuilt_start = |record: &BenchRecord, how: &str| {
        assert_eq!(
            record.compiled,
            Some(0),
            "the program compiled on a store {how} filled: {record:?}"
        );
    };
    run(&prebuilt, "prebuild", true);
    let warm = kiln_warm(&kiln, &warmed, &kernels, &architecture);
    run(&own, "cold", false);
    let first_start = folder.join("first-start");
    for _ in 0..rounds() {
        copy_store(&prebuilt, &first_start);
        let after = run(&first_start, "after_prebuild", false);
        prebuilt_start(&after, "a compile-only run");
        copy_store(&warmed, &first_start);
        let after_warm = run(&first_start, "after_warm", false);
        prebuilt_start(&after_warm, "kiln warm");
        let second = run(&own, "second_run", false);
        println!(
            "prebuilt_start: after a compile-only run {:.1} ms, after kiln warm ({:.2} s) {:.1} \
             ms (0 compiled each), own next run {:.1} ms ({} compiled), {} kernels",
            after.wall * 1e3,
            warm.wall,
            after_warm.wall * 1e3,
            second.wall * 1e3,
            second.compiled.unwrap_or(0),
            after.kernels,
        );
    }
    drop(std::fs::remove_dir_all(&folder));
}

/// `kiln --dir ROOT warm --cuda-arch ARCHITECTURE KERNELS`, timed and
/// recorded as `kiln_warm`.
fn kiln_warm(kiln: &Path, root: &Path, kernels: &Path, architecture: &str) -> BenchRecord {
    let started = Instant::now();
    let output = Command::new(kiln)
        .arg("--dir")
        .arg(root)
        .args(["warm", "--cuda-arch", architecture])
        .arg(kernels)
        .env_remove(kiln_engine::mode::MODE_VARIABLE)
        .env_remove("KILN_CACHE_DISABLE")
        .output()
        .unwrap_or_else(|error| panic!("{} does not start: {error}", kiln.display()));
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "kiln warm failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let record = BenchRecord {
        bench: "prebuilt_start".into(),
        case: "kiln_warm".into(),
        size: Some("gemm".into()),
        kernels: count(),
        wall: wall.as_secs_f64(),
        cores: cores(),
        note: Some(format!("kiln warm --cuda-arch {architecture}")),
        ..BenchRecord::default()
    };
    append_record(&record);
    record
}

/// The program: every specialization of the kernel file at `file` loaded
/// through a target on the store at `root`, and its record printed.
fn program(root: &Path, case: &str, file: &Path) {
    let count = count();
    let text = std::fs::read_to_string(file).expect("the kernel file");
    let folder = file.parent().expect("the file's folder");
    // The documented way to build a kernel file's module (`of_file`, the
    // file's path under the folder `kiln warm` is given): after `kiln
    // warm`, the program asks for the ids it stored under.
    let name = file.file_name().expect("a file").to_string_lossy();
    let kernels: Vec<CudaKernel> = (0..count)
        .map(|salt| {
            CudaKernel::of_file(name.as_ref(), KernelSize::Gemm.entry())
                .source_folder(folder)
                .options(CudaOptions::default().define(SALT, salt.to_string()))
                .source(text.clone())
        })
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
        // A kernel `kiln warm` stored is found by its id; one a program
        // names itself would be found by its text and stored again under
        // the program's key (rekeyed, P14), on its first start.
        note: Some(format!(
            "{}, {} rekeyed",
            if compile_only {
                "compile-only"
            } else {
                "device"
            },
            batch.count(KernelOutcome::Rekeyed)
        )),
        ..BenchRecord::default()
    };
    println!("{}", serde_json::to_string(&record).expect("serializes"));
}
