//! A background batch (R2) on a real disk store, in real worker processes:
//! the loader dropped while the batch compiles leaves no worker running
//! and a store that verifies whole, and the next loader finds every kernel
//! the batch stored.
//!
//! This binary is its own compile worker (its `main` starts with the
//! worker's hook).

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use kiln_engine::fake::{FakeCompiler, FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, KernelOutcome, LoaderConfig, Loading, WorkerMode};
use kiln_test_support::Scratch;
use kiln_tests::{open_store, shared_store};

fn main() {
    kiln_engine::worker::run_if_worker(&[]);
    let tests: &[(&str, fn())] = &[(
        "r2_a_loader_dropped_mid_batch_leaves_no_worker_and_a_store_that_verifies",
        r2_a_loader_dropped_mid_batch_leaves_no_worker_and_a_store_that_verifies,
    )];
    kiln_test_support::harness::run(tests);
}

fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

fn r2_a_loader_dropped_mid_batch_leaves_no_worker_and_a_store_that_verifies() {
    let scratch = Scratch::new("background-store");
    let root = scratch.join("store");
    let log = scratch.join("compiles.log");
    let shapes: Vec<FakeKernel> = (1..=6)
        .map(|number| FakeKernel::new(number).sleeping(Duration::from_millis(700)))
        .collect();
    {
        let target = FakeTarget::on_store(shared_store(&root)).with_compiler(
            FakeCompiler::default()
                .in_worker_processes()
                .logging_compiles_to(&log),
        );
        let mut loader = KernelLoader::with_config(
            target,
            LoaderConfig {
                parallelism: NonZeroUsize::new(2).expect("2"),
                profile: false,
                ..LoaderConfig::default()
            },
        )
        .with_worker_mode(WorkerMode::Processes);
        for shape in &shapes {
            assert_eq!(
                loader.try_load(shape, &shape.artifact_id()),
                Loading::Pending
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while FakeCompiler::read_compile_log(&log)
            .unwrap_or_default()
            .is_empty()
        {
            assert!(Instant::now() < deadline, "the background batch started");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Dropped here, its batch compiling in the worker processes.
    }
    let pids: Vec<u32> = FakeCompiler::read_compile_log(&log)
        .unwrap_or_default()
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    assert!(!pids.is_empty());
    assert!(!pids.contains(&std::process::id()), "compiled in workers");
    for pid in &pids {
        assert!(!is_running(*pid), "worker {pid} ended with its loader");
    }

    let report = open_store(&root).verify(&mut |_| {}).expect("verifies");
    assert_eq!(
        (
            report.bad_objects,
            report.bad_records,
            report.dangling_records,
            report.staging_removed
        ),
        (0, 0, 0, 0),
        "{report:?}"
    );
    assert!(
        report.records > 0,
        "the batch stored its kernels: {report:?}"
    );

    let mut next = KernelLoader::with_config(
        FakeTarget::on_store(shared_store(&root)),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Threads);
    for shape in &shapes {
        next.enqueue(Box::new(shape.clone()), ());
    }
    next.compile_queued();
    let batch = next.records().back().expect("one batch").clone();
    assert_eq!(batch.count(KernelOutcome::Failed), 0, "{batch:?}");
    assert!(
        batch.count(KernelOutcome::FromStore) >= 1,
        "the kernels the dropped batch finished are hits: {batch:?}"
    );
}
