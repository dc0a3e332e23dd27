//! `kiln warm` against stores that cannot take what it writes, through the
//! real binary: a write that fails is counted and reported once with its
//! cause, and the kernels still compile (P5); a read-only store still
//! serves what it holds; the store keeps to its size limit (P6).

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use kiln_test_support::{Limit, Tmpfs, child};
use serde_json::Value;
use support::kernels::{scale_kernel, write_kernel};
use support::{Finished, Scratch, backend, finish, kiln, kiln_lines, wgsl_kernel};

/// A folder of `count` WGSL kernels, each about `padding` bytes larger than
/// its code (a comment the artifact carries with the source).
fn padded_kernels(folder: &Path, count: u32, padding: usize) {
    std::fs::create_dir_all(folder).expect("the kernel folder can be created");
    for number in 0..count {
        let mut text = wgsl_kernel(number);
        let line = format!("// padding of kernel {number}, to give its artifact some size\n");
        while text.len() < padding {
            text.push_str(&line);
        }
        std::fs::write(folder.join(format!("k{number:03}.wgsl")), text).expect("a kernel file");
    }
}

/// The one cause of failed store writes a report lists, after checking it
/// is `cause` and that standard error says so in one warning.
fn reported_once<'a>(report: &'a Value, stderr: &str, cause: &str) -> &'a Value {
    let causes = report["store_write_failures"]
        .as_array()
        .unwrap_or_else(|| panic!("the report lists failed store writes: {report:#}"));
    assert_eq!(causes.len(), 1, "one cause, reported once: {report:#}");
    assert_eq!(causes[0]["cause"], cause, "{report:#}");
    // Other warnings may come with it (under a file size limit, the claim
    // of each key cannot write its lease): the cause is said once.
    let warnings: Vec<&str> = kiln_lines(stderr)
        .into_iter()
        .filter(|line| line.contains(cause))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning of the cause: {stderr}");
    &causes[0]
}

/// Runs `kiln --dir STORE --json warm FOLDER` under a file size limit of
/// 8 KiB, after checking that the limit did not kill it.
fn warm_under_a_file_size_limit(store: &Path, folder: &Path) -> Finished {
    let mut command = kiln(store, &["--json", "warm"]);
    command.arg(folder);
    child::limit(&mut command, Limit::FileSize(8192));
    let run = finish(&mut command);
    assert_eq!(
        run.status.signal(),
        None,
        "kiln is not killed by the file size limit: {}",
        run.stderr
    );
    run
}

// P5, L6
#[test]
fn a_compiler_that_exits_under_the_file_size_limit_fails_its_kernels_not_the_run() {
    // hipRTC writes temporary files as it compiles, and exits the process
    // from inside when one passes the limit (its LLVM stops on "File too
    // large"): in a worker process of its own that fails the kernel it held
    // as a compiler crash, the other backends' kernels still compile, and
    // the run reports them and ends with code 3 (a kernel failed).
    let scratch = Scratch::new("store-fsize-compiler");
    let folder = scratch.folder("kernels");
    write_kernel(&folder, "scale.hip", scale_kernel());
    let run = warm_under_a_file_size_limit(&scratch.join("store"), &folder);
    let report = run.json();
    let hip = backend(&report, "hip");
    if let Some(reason) = hip["unavailable"].as_str() {
        kiln_engine::conformance::skip(
            "a compiler that exits under the file size limit",
            &format!("hipRTC is not here: {reason}"),
        );
        return;
    }
    assert_eq!(hip["kernels"], 1, "{hip:#}");
    assert_eq!(
        hip["failed"], 1,
        "the compiler's exit fails its kernel: {hip:#}"
    );
    assert_eq!(hip["compiled"], 0, "{hip:#}");
    let failure = hip["failures"][0]["first_diagnostic"]
        .as_str()
        .unwrap_or_else(|| panic!("the failure is reported: {hip:#}"));
    assert!(
        failure.contains("the compiler crashed") && failure.contains("worker process"),
        "the failure says the compiler's process ended: {failure}"
    );
    assert_eq!(
        run.status.code(),
        Some(3),
        "a kernel failed: {}",
        run.stderr
    );
}

// P5
#[test]
fn a_file_size_limit_fails_store_writes_and_the_run_ends_as_it_would() {
    let scratch = Scratch::new("store-fsize");
    let folder = scratch.join("kernels");
    padded_kernels(&folder, 3, 32 << 10);
    let run = warm_under_a_file_size_limit(&scratch.join("store"), &folder);
    let report = run.succeeded_json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 3, "every kernel still compiles: {wgpu:#}");
    assert_eq!(wgpu["store_write_failures"], 3, "{wgpu:#}");
    reported_once(&report, &run.stderr, "file size limit");
}

// P5
#[test]
fn a_full_disk_is_reported_once_with_its_cause_and_the_kernels_still_compile() {
    let scratch = Scratch::new("store-full");
    let what = "filling a 2 MB tmpfs store";
    let Some(disk) = Tmpfs::mount_or_skip(what, &scratch.join("disk"), "2m") else {
        return;
    };
    let folder = scratch.join("kernels");
    padded_kernels(&folder, 60, 64 << 10);
    let run = finish(kiln(&disk.path().join("store"), &["--json", "warm"]).arg(&folder));
    let report = run.succeeded_json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(
        wgpu["compiled"], 60,
        "every kernel still compiles: {wgpu:#}"
    );
    let failed = wgpu["store_write_failures"].as_u64().unwrap_or(0);
    assert!(failed > 0, "writes failed and are counted: {wgpu:#}");
    assert_eq!(
        wgpu["stored"].as_u64().unwrap_or(0) + failed,
        60,
        "each kernel stored or counted: {wgpu:#}"
    );
    let cause = reported_once(&report, &run.stderr, "disk full");
    // The store counts every write of the cause: the kernels', and those
    // of its own that fail with them when the disk is already full (the
    // driver's pipeline cache, the store's activity counts).
    let counted = cause["count"].as_u64().unwrap_or(0);
    assert!(
        (failed..=failed + 3).contains(&counted),
        "the {failed} failed kernel writes, and a few of the store's own: {report:#}"
    );
}

// P5
#[test]
fn an_empty_read_only_store_folder_makes_the_run_storeless_with_one_warning() {
    let scratch = Scratch::new("store-ro-empty");
    let what = "warming into an empty read-only store";
    let Some(disk) = Tmpfs::mount_or_skip(what, &scratch.join("disk"), "2m") else {
        return;
    };
    disk.remount_read_only();
    let folder = scratch.join("kernels");
    padded_kernels(&folder, 2, 0);
    let run = finish(kiln(disk.path(), &["--json", "warm"]).arg(&folder));
    let report = run.succeeded_json();
    assert!(report["store"].is_null(), "{report:#}");
    assert!(report["storeless"].is_string(), "says why: {report:#}");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 2, "{wgpu:#}");
    assert_eq!(
        kiln_lines(&run.stderr).len(),
        1,
        "one warning: {}",
        run.stderr
    );
}

// P5
#[test]
fn a_populated_read_only_store_serves_hits_and_can_be_inspected() {
    let scratch = Scratch::new("store-ro-full");
    let what = "reading a read-only store";
    let Some(disk) = Tmpfs::mount_or_skip(what, &scratch.join("disk"), "4m") else {
        return;
    };
    let folder = scratch.join("kernels");
    padded_kernels(&folder, 3, 0);
    let store = disk.path().join("store");
    finish(kiln(&store, &["--json", "warm"]).arg(&folder)).succeeded_json();
    disk.remount_read_only();

    let run = finish(kiln(&store, &["--json", "warm"]).arg(&folder));
    let report = run.succeeded_json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["from_store"], 3, "every kernel is a hit: {wgpu:#}");
    assert_eq!(wgpu["store_write_failures"], 0, "{wgpu:#}");
    assert!(
        report["store_write_failures"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "{report:#}"
    );

    let stats = finish(&mut kiln(&store, &["--json", "stats"])).succeeded_json();
    assert!(stats["entries"].as_u64().unwrap_or(0) >= 3, "{stats:#}");
    let listed =
        finish(&mut kiln(&store, &["--json", "ls", "--kernel", "warm/k"])).succeeded_json();
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed:#}");
    let explained = finish(&mut kiln(&store, &["--json", "explain", "warm/k000"])).succeeded_json();
    assert_eq!(explained.as_array().map(Vec::len), Some(1), "{explained:#}");
    let verified = finish(&mut kiln(&store, &["--json", "verify"])).succeeded_json();
    assert_eq!(verified["bad_objects"], 0, "{verified:#}");
}

// P6
#[test]
fn warm_leaves_the_store_within_its_size_limit() {
    let scratch = Scratch::new("store-limit");
    let folder = scratch.join("kernels");
    padded_kernels(&folder, 40, 16 << 10);
    let store = scratch.join("store");
    let limit: u64 = 256 << 10;
    let run = finish(
        kiln(&store, &["--json", "warm"])
            .arg(&folder)
            .env("KILN_CACHE_MAX_SIZE", limit.to_string()),
    );
    let report = run.succeeded_json();
    assert_eq!(backend(&report, "wgpu")["compiled"], 40, "{report:#}");
    let stats =
        finish(kiln(&store, &["--json", "stats"]).env("KILN_CACHE_MAX_SIZE", limit.to_string()))
            .succeeded_json();
    let bytes = stats["bytes"].as_u64().expect("a size");
    assert!(
        bytes <= limit,
        "{bytes} bytes stored, over the limit of {limit}: {stats:#}"
    );
}
