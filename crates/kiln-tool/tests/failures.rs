//! Failure memory through the real binary (P11): a CUDA kernel that does
//! not compile (real NVRTC) is compiled once; the next `kiln warm` reports
//! the same failure without compiling it; `kiln ls` and `kiln explain`
//! show it; `kiln forget` and `kiln warm --retry-failed` compile it again.

mod support;

use std::path::Path;

use kiln_engine::conformance::skip;
use serde_json::Value;
use support::kernels::{cxx_kernel, write_kernel};
use support::{Finished, Scratch, backend, finish, kiln, run};

/// The exit code of a run where kernels failed (docs/CLI.md).
const KERNELS_FAILED: i32 = 3;

fn warm(store: &Path, folder: &Path, options: &[&str]) -> Finished {
    finish(
        kiln(store, &["--json", "warm", "--backend", "cuda"])
            .args(options)
            .arg(folder),
    )
}

/// The CUDA counts of `kiln stats --json`.
fn cuda_activity(store: &Path) -> Value {
    let stats = run(store, &["--json", "stats"]).succeeded_json();
    backend(&stats["activity"], "cuda").clone()
}

// P11
#[test]
fn a_kernel_that_failed_is_reported_from_memory_until_forgotten_or_retried() {
    if let Err(why) = kiln_cuda::CudaCompiler::new() {
        skip("failure memory through kiln warm", &why.to_string());
        return;
    }
    let scratch = Scratch::new("failure-memory");
    let folder = scratch.folder("kernels");
    write_kernel(
        &folder,
        "broken.cu",
        cxx_kernel("broken", "x[threadIdx.x] = undeclared;"),
    );
    write_kernel(
        &folder,
        "fine.cu",
        cxx_kernel("fine", "x[threadIdx.x] *= 2.0f;"),
    );
    let store = scratch.join("store");

    let first = warm(&store, &folder, &[]);
    assert_eq!(
        first.status.code(),
        Some(KERNELS_FAILED),
        "{}",
        first.stderr
    );
    let activity = cuda_activity(&store);
    assert_eq!(activity["compiles"], 1, "the fine kernel: {activity:#}");
    assert_eq!(activity["failures"], 1, "{activity:#}");
    assert_eq!(activity["failures_remembered"], 0, "{activity:#}");

    // A second process: the same failure, without compiling.
    let second = warm(&store, &folder, &[]);
    assert_eq!(
        second.status.code(),
        Some(KERNELS_FAILED),
        "{}",
        second.stderr
    );
    assert!(
        second.stdout.contains("undeclared"),
        "the same error, with its diagnostic: {}",
        second.stdout
    );
    let activity = cuda_activity(&store);
    assert_eq!(
        activity["failures_remembered"], 1,
        "reported from memory: {activity:#}"
    );
    assert_eq!(activity["failures"], 1, "not compiled again: {activity:#}");

    // At full width, so that the row is one line.
    let listed = run(&store, &["ls", "--wide"]).stdout;
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with("remembered failure") && line.contains("broken")),
        "ls lists the memory under its kernel:\n{listed}"
    );
    let explained = run(&store, &["explain", "broken"]).stdout;
    assert!(
        explained.contains("remembers its failure") && explained.contains("undeclared"),
        "{explained}"
    );

    // An empty pattern names no kernel: refused, nothing forgotten.
    for empty in ["", "  "] {
        let refused = run(&store, &["forget", empty]);
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        assert!(
            refused.stderr.contains("all"),
            "says what to type: {refused:?}"
        );
    }
    assert!(
        run(&store, &["ls"]).stdout.contains("remembered failure"),
        "the memory is kept"
    );

    // Forgotten: the next warm compiles it again (and it fails again).
    let forgot = run(&store, &["--json", "forget", "broken"]).succeeded_json();
    assert_eq!(
        forgot["forgotten"].as_array().map(Vec::len),
        Some(1),
        "{forgot:#}"
    );
    let listed = run(&store, &["ls"]).stdout;
    assert!(
        !listed.contains("remembered failure"),
        "a forgotten memory is not listed:\n{listed}"
    );
    let again = run(&store, &["--json", "forget", "broken"]).succeeded_json();
    assert_eq!(
        again["forgotten"],
        serde_json::json!([]),
        "nothing left to forget"
    );
    let third = warm(&store, &folder, &[]);
    assert_eq!(third.status.code(), Some(KERNELS_FAILED));
    let activity = cuda_activity(&store);
    assert_eq!(activity["failures"], 2, "compiled again: {activity:#}");
    assert_eq!(activity["failures_remembered"], 1, "{activity:#}");

    // Retried: compiled again although remembered.
    let retried = warm(&store, &folder, &["--retry-failed"]);
    assert_eq!(retried.status.code(), Some(KERNELS_FAILED));
    let activity = cuda_activity(&store);
    assert_eq!(activity["failures"], 3, "retried: {activity:#}");
    assert_eq!(activity["failures_remembered"], 1, "{activity:#}");
}
