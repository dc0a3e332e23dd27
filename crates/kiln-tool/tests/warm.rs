//! `kiln warm` on the example kernels and on bad ones, through the real
//! binary, a fresh store each time (B3, B4).

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{backend, finish, kiln};

fn fresh_folder(what: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("kiln-tool-warm-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).expect("the temporary folder is writable");
    folder
}

/// Runs `kiln --dir STORE --json warm FOLDER`: its JSON and whether it
/// succeeded.
fn warm(store: &Path, folder: &Path) -> (Value, bool) {
    warm_with(store, folder, &[])
}

/// Runs `kiln --dir STORE --json warm FOLDER` with each `(variable, value)`
/// of `environment` set: its JSON and whether it succeeded.
fn warm_with(store: &Path, folder: &Path, environment: &[(&str, &str)]) -> (Value, bool) {
    let run = finish(
        kiln(store, &["--json", "warm"])
            .arg(folder)
            .envs(environment.iter().copied()),
    );
    (run.json(), run.status.success())
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/kernels")
}

// B3, B4, L5a
#[test]
fn every_example_kernel_warms_and_a_second_run_reads_them_all_from_the_store() {
    let store = fresh_folder("examples");
    let (first, succeeded) = warm(&store, &examples());
    assert!(succeeded, "every example kernel compiles: {first:#}");
    let wgpu = backend(&first, "wgpu");
    let kernels = wgpu["kernels"].as_u64().expect("a count");
    assert!(kernels >= 30, "at least 30 WGSL kernels: {wgpu:#}");
    assert_eq!(wgpu["failed"], 0, "{wgpu:#}");
    assert_eq!(
        wgpu["compiled"].as_u64().unwrap_or(0) + wgpu["rekeyed"].as_u64().unwrap_or(0),
        kernels,
        "a fresh store compiles everything: {wgpu:#}"
    );
    if wgpu["on_device"] == true {
        kiln_test_support::say(&format!("the example kernels loaded on {}", wgpu["target"]));
    } else {
        kiln_engine::conformance::skip(
            "loading the example kernels on a device",
            &format!("wgpu ran {}", wgpu["target"]),
        );
    }
    let row = backend(&first, "cuda");
    if let Some(reason) = row["unavailable"].as_str() {
        // `cargo xtask test` installs NVRTC and requires it.
        kiln_test_support::skip_unless(
            &["KILN_REQUIRE_NVRTC"],
            "the example kernels on cuda",
            reason,
        );
    } else {
        assert_eq!(row["failed"], 0, "{row:#}");
    }
    // B6: the examples' `.cu` files name no HIP backend, and none is asked.
    assert!(
        first["backends"]
            .as_array()
            .is_some_and(|rows| rows.iter().all(|row| row["backend"] != "hip")),
        "a .cu file goes to hipRTC only when asked: {first:#}"
    );

    let (second, succeeded) = warm(&store, &examples());
    assert!(succeeded, "{second:#}");
    for row in second["backends"].as_array().expect("backends") {
        if row["unavailable"].is_null() {
            assert_eq!(
                row["from_store"], row["kernels"],
                "the second run reads everything from the store: {row:#}"
            );
            assert_eq!(row["compiled"], 0, "{row:#}");
        }
    }
}

// D2, L6
#[test]
fn a_broken_kernel_fails_alone_with_its_first_diagnostic() {
    let folder = fresh_folder("broken-kernels");
    std::fs::write(
        folder.join("good.wgsl"),
        "// kiln entry: main\n\
         @group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = 1.0; }\n",
    )
    .expect("a kernel file");
    std::fs::write(
        folder.join("broken.wgsl"),
        "// kiln entry: main\n\
         @compute @workgroup_size(64)\n\
         fn main() {\n    let x = 1.0 + ;\n}\n",
    )
    .expect("a kernel file");
    std::fs::write(
        folder.join("constant.wgsl"),
        "// kiln specialize: MISSING=3\n@compute @workgroup_size(1) fn main() {}\n",
    )
    .expect("a kernel file");
    let (report, succeeded) = warm(&fresh_folder("broken-store"), &folder);
    assert!(!succeeded, "a failed kernel fails the command");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["kernels"], 3);
    assert_eq!(wgpu["failed"], 2, "{wgpu:#}");
    let failures = wgpu["failures"].as_array().expect("failures");
    let broken = failures
        .iter()
        .find(|failure| failure["kernel"] == "broken.wgsl")
        .expect("broken.wgsl failed");
    let first = broken["first_diagnostic"].as_str().expect("a diagnostic");
    assert!(
        first.contains("4:"),
        "the first error with its line: {first}"
    );
    let constant = failures
        .iter()
        .find(|failure| failure["kernel"] == "constant.wgsl [MISSING=3]")
        .expect("constant.wgsl failed");
    assert!(
        constant["first_diagnostic"]
            .as_str()
            .is_some_and(|text| text.contains("MISSING")),
        "{constant:#}"
    );
}

// S4, L7
#[test]
fn counts_and_failures_do_not_depend_on_the_batch_records_kept() {
    let folder = fresh_folder("record-limit-kernels");
    std::fs::write(
        folder.join("good.wgsl"),
        "@compute @workgroup_size(1) fn main() {}\n",
    )
    .expect("a kernel file");
    std::fs::write(
        folder.join("broken.wgsl"),
        "@compute @workgroup_size(1) fn main() { let x = 1.0 + ; }\n",
    )
    .expect("a kernel file");
    let store = fresh_folder("record-limit-store");
    let (report, succeeded) = warm_with(&store, &folder, &[("KILN_RECORD_LIMIT", "0")]);
    assert!(!succeeded, "a failed kernel fails the command: {report:#}");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 1, "{wgpu:#}");
    assert_eq!(wgpu["failed"], 1, "{wgpu:#}");
    assert_eq!(
        wgpu["failures"][0]["kernel"], "broken.wgsl",
        "the failure is named: {wgpu:#}"
    );
}

// B3
#[test]
fn after_a_warm_start_ls_shows_the_pipeline_cache_as_a_blob_and_no_kernel_for_it() {
    let folder = fresh_folder("pipeline-cache-kernels");
    std::fs::write(
        folder.join("double.wgsl"),
        "// kiln entry: main\n\
         @group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] *= 2.0; }\n",
    )
    .expect("a kernel file");
    let store = fresh_folder("pipeline-cache-store");
    let (first, succeeded) = warm(&store, &folder);
    assert!(succeeded, "{first:#}");
    let cache = backend(&first, "wgpu")["pipeline_cache"]
        .as_str()
        .unwrap_or("none")
        .to_owned();
    if backend(&first, "wgpu")["on_device"] != true || cache.starts_with("unavailable") {
        kiln_engine::conformance::skip(
            "the pipeline cache listed as a blob",
            &format!("wgpu ran without a pipeline cache: {cache}"),
        );
        return;
    }
    // The warm start: the kernel and the driver's cache come from the store.
    let (second, succeeded) = warm(&store, &folder);
    assert!(succeeded, "{second:#}");
    let wgpu = backend(&second, "wgpu");
    assert_eq!(wgpu["from_store"], 1, "{wgpu:#}");
    assert!(
        wgpu["pipeline_cache"]
            .as_str()
            .is_some_and(|cache| cache.contains("read from the store")),
        "the second run read the pipeline cache: {wgpu:#}"
    );

    let entries = finish(&mut kiln(&store, &["--json", "ls"])).json();
    let entries = entries.as_array().expect("a list");
    let blobs: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["key"].is_null())
        .collect();
    assert_eq!(blobs.len(), 1, "one pipeline cache: {entries:#?}");
    assert_eq!(blobs[0]["kind"], "wgpu pipeline cache", "{blobs:#?}");
    assert!(blobs[0]["size"].as_u64().is_some_and(|size| size > 0));
    let kernels: Vec<&str> = entries
        .iter()
        .filter_map(|entry| entry["key"]["kernel"].as_str())
        .collect();
    assert_eq!(
        kernels,
        ["warm/double.wgsl"],
        "no kernel entry but the kernel's"
    );
    for entry in entries.iter().filter(|entry| entry["key"].is_object()) {
        let backend = entry["key"]["backend"].as_str().unwrap_or("");
        assert!(
            !backend.contains("pipeline"),
            "no artifact record holds the pipeline cache: {entry:#}"
        );
    }

    let table = finish(&mut kiln(&store, &["ls"]));
    let text = &table.stdout;
    assert!(
        text.lines()
            .any(|line| line.starts_with("wgpu pipeline cache")),
        "the table lists the blob by its kind:\n{text}"
    );
}

// The README's first command, `cargo run --release -p kiln-tool -- warm
// examples/kernels`: the package has two binaries (the command and the
// worker program), and `cargo run` must know to run the command.
#[test]
fn cargo_run_of_the_package_runs_the_kiln_command() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo's JSON");
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| {
            packages
                .iter()
                .find(|package| package["name"] == env!("CARGO_PKG_NAME"))
        })
        .expect("this package in the metadata");
    assert_eq!(package["default_run"], "kiln", "{package:#}");
}
