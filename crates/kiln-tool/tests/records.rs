//! `kiln records`: the batch records every process that used a store left
//! in it, read by another process after the fact (issue: a slow start read
//! after it ended).

mod support;

use std::path::Path;

use kiln_engine::conformance::skip;
use serde_json::Value;
use support::kernels::{TWO_SPECIALIZATIONS, wgsl_kernels, write_kernel};
use support::{Scratch, finish, run};

fn warm(store: &Path, folder: &Path, backend: &str) -> support::Finished {
    finish(&mut support::warm(store, &["--backend", backend], folder))
}

fn records(store: &Path) -> Vec<Value> {
    let listed = run(store, &["--json", "records", "--slowest", "10"]);
    assert!(listed.status.success(), "{listed:?}");
    let value: Value = serde_json::from_str(&listed.stdout).expect("a JSON array");
    value.as_array().expect("an array").clone()
}

#[test]
fn the_batches_of_every_process_are_kept_in_the_store_and_listed() {
    let scratch = Scratch::new("records-processes");
    let store = scratch.join("store");
    let first = scratch.folder("first");
    let second = scratch.folder("second");
    wgsl_kernels(&first, 3);
    write_kernel(
        &second,
        "broken.wgsl",
        "@compute @workgroup_size(1) fn main() { let x: u32 = not_defined; }\n",
    );
    assert!(warm(&store, &first, "wgpu").status.success());
    let failed = warm(&store, &second, "wgpu");
    assert_eq!(failed.status.code(), Some(3), "{failed:?}");

    let batches = records(&store);
    assert_eq!(batches.len(), 2, "{batches:#?}");
    let (compiled, broken) = (&batches[0], &batches[1]);
    assert_eq!(compiled["backend"], "wgpu");
    assert_eq!(compiled["kernels"], 3);
    assert_eq!(compiled["compiled"], 3);
    assert_eq!(compiled["slowest"].as_array().map(Vec::len), Some(3));
    assert_eq!(broken["failed"], 1);
    assert_eq!(broken["slowest"][0]["outcome"], "failed");
    assert!(
        broken["slowest"][0]["error"]
            .as_str()
            .is_some_and(|error| error.contains("not_defined")),
        "{broken:#}"
    );
    assert_ne!(
        compiled["process"], broken["process"],
        "two processes, each named"
    );
    assert!(compiled["finished"].as_u64().unwrap_or(0) > 0);

    let table = run(&store, &["records"]);
    assert!(table.status.success(), "{table:?}");
    assert!(table.stdout.contains("slowest of pid"), "{}", table.stdout);
    assert!(table.stdout.contains("broken.wgsl"), "{}", table.stdout);
}

#[test]
fn a_cuda_warm_records_that_it_compiled_in_worker_processes() {
    if let Err(reason) = kiln_cuda::CudaCompiler::new() {
        skip(
            "a_cuda_warm_records_that_it_compiled_in_worker_processes",
            &reason.to_string(),
        );
        return;
    }
    let scratch = Scratch::new("records-workers");
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    write_kernel(&folder, "scale.cu", TWO_SPECIALIZATIONS);
    let warmed = warm(&store, &folder, "cuda");
    assert!(warmed.status.success(), "{warmed:?}");
    let batches = records(&store);
    assert_eq!(batches.len(), 1, "{batches:#?}");
    assert_eq!(batches[0]["backend"], "cuda");
    assert_eq!(batches[0]["compiled"], 2);
    assert_eq!(
        batches[0]["mode"], "processes",
        "kiln warm compiles in worker processes: {:#}",
        batches[0]
    );
}

#[test]
fn an_empty_store_has_no_records_and_says_so() {
    let scratch = Scratch::new("records-empty");
    let store = scratch.join("store");
    assert!(records(&store).is_empty());
    let table = run(&store, &["records"]);
    assert!(table.status.success(), "{table:?}");
    assert!(
        table.stdout.contains("no batch records"),
        "{}",
        table.stdout
    );
}
