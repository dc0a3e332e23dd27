//! `kiln warm` under limits that are the machine's, not the kernel's,
//! through the real binary and real hipRTC: a compile cut by a short
//! `KILN_COMPILE_TIMEOUT` or by a file size limit is never remembered as
//! the kernel's failure (P11), and a compiler killed with its worker leaves
//! nothing in the temporary folder.

mod support;

use std::path::Path;

use kiln_test_support::{Limit, child};
use serde_json::Value;
use support::kernels::{scale_kernel, slow_kernel, write_kernel};
use support::{Finished, Scratch, backend, finish, kiln};

/// A folder with one HIP kernel.
fn hip_kernel(scratch: &Scratch) -> std::path::PathBuf {
    let folder = scratch.folder("kernels");
    write_kernel(&folder, "scale.cu", scale_kernel());
    folder
}

/// A folder with one HIP kernel that takes hipRTC a second or more: cut at
/// half a second, its compile is killed well after hipRTC made its folder
/// of temporary files.
fn slow_hip_kernel(scratch: &Scratch) -> std::path::PathBuf {
    let folder = scratch.folder("slow-kernels");
    write_kernel(&folder, "slow.cu", slow_kernel());
    folder
}

/// `kiln --json warm --backend hip FOLDER` with `TMPDIR` set to `temporary`,
/// changed by `adjust`.
fn warm_hip(
    store: &Path,
    folder: &Path,
    temporary: &Path,
    adjust: impl FnOnce(&mut std::process::Command),
) -> Finished {
    let mut command = kiln(store, &["--json", "warm", "--backend", "hip"]);
    command
        .arg(folder)
        .env("TMPDIR", temporary)
        .env_remove("KILN_RETRY_FAILED")
        .env_remove("KILN_COMPILE_TIMEOUT");
    adjust(&mut command);
    finish(&mut command)
}

/// The hip part of a run's report; `None`, after saying why, when hipRTC
/// is not here.
fn hip_part(run: &Finished, what: &str) -> Option<Value> {
    let report = run.json();
    let hip = backend(&report, "hip").clone();
    if let Some(reason) = hip["unavailable"].as_str() {
        kiln_engine::conformance::skip(what, &format!("hipRTC is not here: {reason}"));
        return None;
    }
    Some(hip)
}

/// What is left in `folder` once the run's workers are gone: a worker
/// still idle when `kiln` exits removes its own folder as it sees its pipe
/// close, a moment later.
fn left_in(folder: &Path) -> Vec<String> {
    let list = || -> Vec<String> {
        std::fs::read_dir(folder)
            .expect("the temporary folder lists")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = list();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

// P11, L6
#[test]
fn a_kernel_cut_by_a_short_compile_timeout_twice_compiles_on_the_next_run_and_leaves_no_temporary_files()
 {
    let scratch = Scratch::new("limits-timeout");
    let folder = slow_hip_kernel(&scratch);
    let store = scratch.join("store");
    let temporary = scratch.folder("tmp");
    for run in 0..2 {
        let cut = warm_hip(&store, &folder, &temporary, |command| {
            command.env("KILN_COMPILE_TIMEOUT", "0.5");
        });
        let Some(hip) = hip_part(&cut, "a compile cut by a short timeout") else {
            return;
        };
        assert_eq!(hip["failed"], 1, "run {run}: cut at its timeout: {hip:#}");
        assert!(
            cut.stderr.contains("not held against the kernel"),
            "run {run}: {}",
            cut.stderr
        );
        // hipRTC leaves a folder of its temporary files when it is killed:
        // it was in the worker's own folder, removed with the worker.
        assert_eq!(
            left_in(&temporary),
            Vec::<String>::new(),
            "run {run}: nothing is left in TMPDIR"
        );
    }
    let again = warm_hip(&store, &folder, &temporary, |_| {});
    let hip = hip_part(&again, "a compile cut by a short timeout").expect("hipRTC is here");
    assert_eq!(
        hip["compiled"], 1,
        "compiled, not failed from memory: {hip:#}\n{}",
        again.stderr
    );
    assert!(again.status.success(), "{}", again.stderr);
    assert_eq!(left_in(&temporary), Vec::<String>::new());
}

// P11
#[test]
fn a_kernel_failed_by_a_file_size_limit_twice_compiles_on_the_next_run() {
    let scratch = Scratch::new("limits-fsize");
    let folder = hip_kernel(&scratch);
    let store = scratch.join("store");
    let temporary = scratch.folder("tmp");
    for run in 0..2 {
        let limited = warm_hip(&store, &folder, &temporary, |command| {
            child::limit(command, Limit::FileSize(8192));
        });
        if hip_part(&limited, "a compile under a file size limit").is_none() {
            return;
        }
        assert!(
            !limited.stderr.contains("quarantined"),
            "run {run}: {}",
            limited.stderr
        );
    }
    let again = warm_hip(&store, &folder, &temporary, |_| {});
    let hip = hip_part(&again, "a compile under a file size limit").expect("hipRTC is here");
    assert_eq!(
        hip["compiled"], 1,
        "compiled, not failed from memory: {hip:#}\n{}",
        again.stderr
    );
    assert!(again.status.success(), "{}", again.stderr);
}
