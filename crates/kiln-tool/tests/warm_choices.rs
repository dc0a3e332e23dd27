//! `kiln warm`'s choices (`--backend`, `--cuda-arch` and `--hip-arch`
//! lists, `--require`) and the documented exit codes, through the real
//! binary; `kiln ls` names the architectures warmed as their vendors do.

mod support;

use std::path::{Path, PathBuf};

use kiln_engine::conformance::skip;
use serde_json::Value;
use support::kernels::{scale_kernel, write_kernel};
use support::{Finished, Scratch, finish, kiln, wgsl_kernel};

/// The exit codes `kiln --help` and docs/CLI.md list.
const USAGE: i32 = 2;
const ERROR: i32 = 1;
const KERNELS_FAILED: i32 = 3;
const REQUIRED_UNAVAILABLE: i32 = 4;

/// A folder with one WGSL kernel and one CUDA kernel.
fn mixed_folder(scratch: &Scratch) -> PathBuf {
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("fill.wgsl"), wgsl_kernel(3)).expect("a kernel file");
    write_kernel(&folder, "scale.cu", scale_kernel());
    folder
}

fn warm(store: &Path, folder: &Path, options: &[&str]) -> Finished {
    finish(
        kiln(store, &["--json", "warm"])
            .args(options)
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    )
}

/// The rows of a `kiln warm --json` report.
fn rows(report: &Value) -> Vec<(String, Option<String>, bool)> {
    report["backends"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| {
                    (
                        row["backend"].as_str().unwrap_or_default().to_owned(),
                        row["architecture"].as_str().map(str::to_owned),
                        row["unavailable"].is_null(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether NVRTC can be used here, or why not.
fn nvrtc() -> Result<(), String> {
    kiln_cuda::CudaCompiler::new()
        .map(drop)
        .map_err(|error| error.to_string())
}

#[test]
fn bad_choices_are_usage_errors_with_exit_code_2_and_json_says_so() {
    let scratch = Scratch::new("warm-usage");
    let folder = mixed_folder(&scratch);
    let store = scratch.join("store");
    for options in [
        &["--backend", "metal"][..],
        &["--cuda-arch", "sm_9x"],
        &["--hip-arch", "sm_90"],
        &["--backend", "wgpu", "--require", "cuda"],
        &["--no-such-option"],
    ] {
        let run = warm(&store, &folder, options);
        assert_eq!(
            run.status.code(),
            Some(USAGE),
            "{options:?}: {}",
            run.stderr
        );
        let error = run.json();
        assert_eq!(error["error"]["exit_code"], USAGE, "{options:?}: {error:#}");
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|message| !message.is_empty()),
            "{error:#}"
        );
    }
    assert!(
        !store.exists(),
        "nothing ran, so no store was made at {}",
        store.display()
    );
}

#[test]
fn a_store_that_cannot_be_opened_is_exit_code_1_and_a_json_error() {
    let scratch = Scratch::new("warm-error");
    let folder = mixed_folder(&scratch);
    let not_a_store = scratch.folder("project");
    std::fs::write(not_a_store.join("notes.txt"), "mine").expect("a file");
    let run = finish(&mut kiln(&not_a_store, &["--json", "stats"]));
    assert_eq!(run.status.code(), Some(ERROR), "{}", run.stderr);
    let error = run.json();
    assert_eq!(error["error"]["exit_code"], ERROR);
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("not a kiln store")),
        "says why: {error:#}"
    );
    let run = warm(&scratch.join("store"), &scratch.join("no-such-folder"), &[]);
    assert_eq!(run.status.code(), Some(ERROR), "{}", run.stderr);
    drop(folder);
}

// L6
#[test]
fn a_failed_kernel_is_exit_code_3_and_the_others_are_stored() {
    let scratch = Scratch::new("warm-failed");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    std::fs::write(
        folder.join("broken.wgsl"),
        "@compute @workgroup_size(1) fn main() { let x = 1.0 + ; }\n",
    )
    .expect("a kernel file");
    let run = warm(&scratch.join("store"), &folder, &[]);
    assert_eq!(run.status.code(), Some(KERNELS_FAILED), "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["backends"][0]["compiled"], 1, "{report:#}");
    assert_eq!(report["backends"][0]["failed"], 1, "{report:#}");
}

// B1
#[test]
fn a_required_backend_that_is_unavailable_is_exit_code_4_and_a_note_otherwise() {
    let scratch = Scratch::new("warm-require");
    let folder = mixed_folder(&scratch);
    let store = scratch.join("store");
    let missing = scratch.join("no-nvrtc-here");
    let missing = missing.to_str().expect("a UTF-8 path");
    let without_nvrtc = |options: &[&str]| {
        finish(
            kiln(&store, &["--json", "warm"])
                .args(options)
                .arg(&folder)
                .env("KILN_NVRTC_PATH", missing)
                .env("MESA_SHADER_CACHE_DIR", scratch.join("mesa")),
        )
    };
    let run = without_nvrtc(&["--backend", "wgpu,cuda"]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "unavailable is a note: {}",
        run.stderr
    );
    let report = run.json();
    assert_eq!(
        rows(&report)
            .iter()
            .map(|row| row.0.as_str())
            .collect::<Vec<_>>(),
        ["wgpu", "cuda"],
        "hip left out: {report:#}"
    );
    if rows(&report)[1].2 {
        skip(
            "a required backend that is unavailable",
            "CUDA ran without NVRTC at the path given (a GPU driver may provide it)",
        );
        return;
    }
    let run = without_nvrtc(&["--backend", "wgpu,cuda", "--require", "cuda"]);
    assert_eq!(
        run.status.code(),
        Some(REQUIRED_UNAVAILABLE),
        "{}",
        run.stderr
    );
    // The report is the one JSON value; standard error says why it failed.
    let report = run.json();
    assert!(
        !rows(&report)[1].2,
        "the cuda row says unavailable: {report:#}"
    );
    assert!(
        run.stderr.contains("required backend") && run.stderr.contains("cuda"),
        "{}",
        run.stderr
    );
    let run = without_nvrtc(&["--backend", "wgpu,cuda", "--require", "wgpu"]);
    assert_eq!(run.status.code(), Some(0), "wgpu ran: {}", run.stderr);
}

// P1, B1
#[test]
fn one_folder_compiles_for_several_cuda_architectures_and_ls_names_them() {
    if let Err(why) = nvrtc() {
        skip("compiling for several CUDA architectures", &why);
        return;
    }
    let scratch = Scratch::new("warm-archs");
    let folder = mixed_folder(&scratch);
    let store = scratch.join("store");
    let run = warm(
        &store,
        &folder,
        &["--backend", "cuda", "--cuda-arch", "sm_80,sm_90"],
    );
    let report = run.succeeded_json();
    assert_eq!(
        rows(&report),
        [
            ("cuda".to_owned(), Some("sm_80".to_owned()), true),
            ("cuda".to_owned(), Some("sm_90".to_owned()), true)
        ],
        "{report:#}"
    );
    for row in report["backends"].as_array().into_iter().flatten() {
        assert_eq!(row["compiled"], 1, "one kernel per architecture: {row:#}");
    }
    let listed = finish(&mut kiln(&store, &["ls", "--kernels-only"]));
    let table = &listed.stdout;
    let variants: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().find(|word| word.starts_with("sm_")))
        .collect();
    let mut sorted = variants.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["sm_80", "sm_90"], "the TARGET column:\n{table}");
    let listed = finish(&mut kiln(&store, &["--json", "ls", "--kernels-only"])).succeeded_json();
    let mut labels: Vec<&str> = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry["key"]["variant"].as_str())
        .collect();
    labels.sort_unstable();
    assert_eq!(labels, ["sm_80", "sm_90"], "{listed:#}");

    // The second run finds both.
    let again = warm(
        &store,
        &folder,
        &["--backend", "cuda", "--cuda-arch", "sm_80,sm_90"],
    );
    let report = again.succeeded_json();
    for row in report["backends"].as_array().into_iter().flatten() {
        assert_eq!(row["from_store"], 1, "{row:#}");
    }
}
