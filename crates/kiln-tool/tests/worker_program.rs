//! kiln's own worker program: a program whose `main` does not call the
//! worker hook (a libtest binary is one) compiles in `kiln-worker`
//! processes found on `PATH` or beside it, checked to be of the same kiln;
//! with none anywhere it compiles on threads and says so once per process,
//! on standard error when it has no logger.

use std::process::Command;

use kiln_cuda::{Architecture, CudaKernel, CudaTarget};
use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader, LoaderConfig, WorkerMode};
use kiln_test_support::require::is_required;
use kiln_test_support::{child, skip};

const CHILD: &str = "KILN_CLI_WORKER_PROGRAM_CHILD";

/// Two loaders, one batch each, on NVRTC in worker mode `processes`.
fn program() {
    for round in 0..2 {
        let target = CudaTarget::compile_only(Architecture::new(9, 0))
            .expect("NVRTC opens")
            .without_store();
        let variant = target.variant();
        let config = LoaderConfig {
            worker_mode: WorkerMode::Processes,
            ..LoaderConfig::default()
        };
        let mut loader = KernelLoader::with_config(target, config);
        let kernels: Vec<CudaKernel> = (0..2)
            .map(|number: i32| {
                CudaKernel::builder(
                    KernelId::named("worker_program.fill").parameter(&(round * 10 + number)),
                    "fill",
                )
                .source(format!(
                    "extern \"C\" __global__ void fill(float* y) {{ y[threadIdx.x] = {number}.0f; }}"
                ))
            })
            .collect();
        for kernel in &kernels {
            loader.enqueue(Box::new(kernel.clone()), variant);
        }
        for kernel in &kernels {
            loader
                .load(kernel, &ArtifactId::new(kernel.id(), variant))
                .unwrap_or_else(|error| panic!("{error}"));
        }
        let record = &loader.records()[0];
        println!("report: mode={:?}", record.mode);
    }
}

fn nvrtc_or_skip(what: &str) -> bool {
    match CudaTarget::compile_only(Architecture::new(9, 0)) {
        Ok(_) => true,
        Err(error) => {
            if is_required(&["KILN_REQUIRE_NVRTC"]) {
                panic!("KILN_REQUIRE_NVRTC=1 and {error}");
            }
            skip(what, &error.to_string());
            false
        }
    }
}

/// This test binary again as the program, with `PATH` set to `path`.
fn run_with_path(test: &str, path: &std::ffi::OsStr) -> (Vec<String>, String) {
    let mut command: Command = child::rerun(test, CHILD, "program");
    command
        .env_remove("KILN_WORKER_PROGRAM")
        .env_remove("KILN_WORKER_MODE")
        .env("PATH", path);
    let output = command.output().expect("the test binary starts again");
    assert!(output.status.success(), "{}", child::describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let modes = stdout
        .lines()
        .filter_map(|line| line.split_once("report: ").map(|(_, rest)| rest.to_owned()))
        .collect();
    (modes, String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_program_without_the_hook_compiles_in_kiln_worker_found_on_path() {
    const TEST: &str = "a_program_without_the_hook_compiles_in_kiln_worker_found_on_path";
    if child::is_child(CHILD, "program") {
        return program();
    }
    if !nvrtc_or_skip("kiln-worker on PATH") {
        return;
    }
    let worker = std::path::Path::new(env!("CARGO_BIN_EXE_kiln-worker"));
    let folder = worker.parent().expect("the worker is in a folder");
    let (modes, stderr) = run_with_path(TEST, folder.as_os_str());
    assert_eq!(
        modes,
        ["mode=Processes", "mode=Processes"],
        "compiled in kiln-worker processes: {stderr}"
    );
    assert!(
        !stderr.contains("compile on threads"),
        "no warning when workers run: {stderr}"
    );
}

#[test]
fn with_no_worker_program_a_batch_runs_on_threads_and_says_so_once() {
    const TEST: &str = "with_no_worker_program_a_batch_runs_on_threads_and_says_so_once";
    if child::is_child(CHILD, "program") {
        return program();
    }
    if !nvrtc_or_skip("no worker program") {
        return;
    }
    let (modes, stderr) = run_with_path(TEST, std::ffi::OsStr::new(""));
    assert_eq!(modes, ["mode=Threads", "mode=Threads"]);
    assert_eq!(
        stderr.matches("compile on threads").count(),
        1,
        "one warning per process: {stderr}"
    );
    assert!(stderr.contains("cargo install kiln-tool"), "{stderr}");
}
