//! P11's quarantine through real processes on a real disk store: a
//! compiler that aborts its worker process (SIGABRT, a plain crash, the
//! kernel's own fault) fails the kernel in two separate processes, each
//! compiling it again, and the third process reports it quarantined without
//! handing it to the compiler; the other kernels of each batch load.
//!
//! This binary is its own compile worker (its `main` starts with the
//! worker's hook) and its own child: each "process" of the story is this
//! test run again, alone, on the same store root.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{ArtifactStore, KernelLoader, KernelOutcome, LoaderConfig, WorkerMode};
use kiln_test_support::{Scratch, child};
use kiln_tests::open_store;

fn main() {
    kiln_engine::worker::run_if_worker(&[]);
    let tests: &[(&str, fn())] = &[(
        PROCESSES_TEST,
        p11_a_compile_that_crashes_its_worker_in_two_processes_is_quarantined_in_the_third,
    )];
    kiln_test_support::harness::run(tests);
}

const PROCESSES_TEST: &str =
    "p11_a_compile_that_crashes_its_worker_in_two_processes_is_quarantined_in_the_third";
/// Set in a child: the store root it runs one batch on.
const STORE_ROOT: &str = "KILN_TEST_QUARANTINE_ROOT";
/// The kernel whose compile aborts its worker.
const CRASHING: u32 = 7;

/// What one child process saw, one line of stdout.
#[derive(Debug)]
struct Run {
    /// The crashing kernel's record: whether its failure came from the
    /// store's memory.
    remembered: bool,
    /// Its error.
    error: String,
    /// Whether the batch finalized in worker processes.
    in_processes: bool,
    /// How many kernels of the batch loaded.
    compiled: usize,
}

/// The child: one batch of the crashing kernel and three good ones on the
/// store at `root`, compiled in worker processes that log each compile.
fn one_process(root: &Path) {
    let store: Arc<dyn ArtifactStore> = Arc::new(open_store(root));
    let compiler = FakeCompiler::default()
        .in_worker_processes()
        .logging_compiles_to(compile_log(root));
    let target = FakeTarget::on_store(store).with_compiler(compiler);
    // The third process counts its batch's compiles: no warm-start profile
    // loads the other kernels ahead of it (L12).
    let config = LoaderConfig {
        profile: false,
        ..LoaderConfig::default()
    };
    let mut loader =
        KernelLoader::with_config(target, config).with_worker_mode(WorkerMode::Processes);
    let crashing = FakeKernel::new(CRASHING).aborting();
    loader.enqueue(Box::new(crashing.clone()), ());
    for number in 0..3 {
        loader.enqueue(Box::new(FakeKernel::new(number)), ());
    }
    loader.compile_queued();
    let batch = loader.records().back().expect("one batch").clone();
    let record = batch
        .records
        .iter()
        .find(|record| record.kernel == crashing.artifact_id().kernel)
        .expect("the crashing kernel has a record");
    assert_eq!(record.outcome, KernelOutcome::Failed, "{record:#?}");
    let error = loader
        .load(&crashing, &crashing.artifact_id())
        .expect_err("the crashing kernel fails")
        .to_string();
    let compiled = batch.count(KernelOutcome::Compiled) + batch.count(KernelOutcome::FromStore);
    println!(
        "run: remembered={} in_processes={} compiled={compiled} error={}",
        record.remembered,
        batch.mode == WorkerMode::Processes,
        error.replace('\n', " ")
    );
}

fn compile_log(root: &Path) -> PathBuf {
    root.with_extension("compiles.log")
}

/// Runs [`one_process`] as a child on `root` and reads what it saw.
fn run_a_process(root: &Path) -> Run {
    let mut command = child::rerun(PROCESSES_TEST, STORE_ROOT, root);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let finished = child::wait(
        command.spawn().expect("the test binary starts again"),
        std::time::Duration::from_secs(120),
    );
    assert!(
        finished.status.success(),
        "the process failed: {}\n{}",
        finished.stdout,
        finished.stderr
    );
    let line = finished
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("run: "))
        .unwrap_or_else(|| panic!("the process said what it saw: {}", finished.stdout));
    let (remembered, rest) = line
        .strip_prefix("remembered=")
        .and_then(|rest| rest.split_once(" in_processes="))
        .expect("remembered= in_processes= compiled= error=");
    let (in_processes, rest) = rest.split_once(" compiled=").expect("compiled=");
    let (compiled, error) = rest.split_once(" error=").expect("error=");
    Run {
        remembered: remembered == "true",
        in_processes: in_processes == "true",
        error: error.to_owned(),
        compiled: compiled.parse().expect("a count"),
    }
}

/// How many times a worker was handed kernel `number`.
fn compiles_of(root: &Path, number: u32) -> usize {
    FakeCompiler::read_compile_log(&compile_log(root))
        .unwrap_or_default()
        .iter()
        .filter(|(_, compiled)| *compiled == number)
        .count()
}

// P11, L6
fn p11_a_compile_that_crashes_its_worker_in_two_processes_is_quarantined_in_the_third() {
    if let Some(root) = std::env::var_os(STORE_ROOT) {
        one_process(Path::new(&root));
        return;
    }
    let scratch = Scratch::new("quarantine");
    let root = scratch.join("store");

    let first = run_a_process(&root);
    assert!(
        first.in_processes,
        "the compiles ran in worker processes: {first:?}"
    );
    assert!(!first.remembered, "{first:?}");
    assert!(
        first.error.contains("the compiler crashed") && first.error.contains("SIGABRT"),
        "the first crash is reported as one: {first:?}"
    );
    assert_eq!(first.compiled, 3, "the other kernels load: {first:?}");
    assert_eq!(compiles_of(&root, CRASHING), 1);

    // One crash may be the machine's: the next process compiles it again.
    let second = run_a_process(&root);
    assert!(second.in_processes, "{second:?}");
    assert!(!second.remembered, "compiled again: {second:?}");
    assert!(second.error.contains("SIGABRT"), "{second:?}");
    assert_eq!(
        compiles_of(&root, CRASHING),
        2,
        "compiled in the second too"
    );

    // Twice is the kernel's: quarantined, reported without compiling.
    let third = run_a_process(&root);
    assert!(third.remembered, "{third:?}");
    assert!(
        third.error.contains("quarantined"),
        "the third process says why: {third:?}"
    );
    assert_eq!(
        compiles_of(&root, CRASHING),
        2,
        "the third process never handed it to the compiler"
    );
    assert_eq!(third.compiled, 3, "the other kernels load: {third:?}");
}
