//! `kiln warm` on the project's corpus of kernels in the shape of real ones
//! (`tests/corpus`): license blocks, several kernels per file, sibling
//! headers and an include folder, the CUDA toolkit's headers, CUDA-only
//! code, templated entries, WGSL with several `@compute` entries, an `@id`
//! override and wide types. Each kernel's outcome is asserted on NVRTC,
//! hipRTC and lavapipe (P13, P14, B6).

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use support::{Scratch, backend, finish, kiln};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus")
}

/// How many stored kernels each name has in the store at `store`.
fn stored_names(store: &std::path::Path) -> BTreeMap<String, usize> {
    let listed = finish(&mut kiln(store, &["--json", "ls", "--kernels-only"])).json();
    let mut names = BTreeMap::new();
    for entry in listed.as_array().expect("a list") {
        if let Some(name) = entry["key"]["kernel"].as_str() {
            *names.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    names
}

/// The failures of `row`, by kernel label: their first diagnostics.
fn failures(row: &Value) -> BTreeMap<String, String> {
    row["failures"]
        .as_array()
        .map(|failures| {
            failures
                .iter()
                .map(|failure| {
                    (
                        failure["kernel"].as_str().unwrap_or_default().to_owned(),
                        failure["first_diagnostic"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the backend of `row` ran; prints why it did not, failing when
/// `required` names a variable set to 1.
fn ran(row: &Value, what: &str, required: Option<&str>) -> bool {
    let Some(reason) = row["unavailable"].as_str() else {
        return true;
    };
    if let Some(required) = required {
        assert!(
            std::env::var_os(required).is_none_or(|value| value != "1"),
            "{what} needs its compiler, and {required}=1: {reason}"
        );
    }
    kiln_engine::conformance::skip(what, reason);
    false
}

// P13, P14, B6
#[test]
fn the_corpus_warms_with_each_kernels_outcome_on_nvrtc_hiprtc_and_lavapipe() {
    let scratch = Scratch::new("corpus");
    let store = scratch.join("store");
    let run = finish(
        kiln(&store, &["--json", "warm"])
            .arg(corpus())
            .env("MESA_SHADER_CACHE_DIR", scratch.join("mesa")),
    );
    let report = run.json();
    // broken_include.cu fails on purpose; so may the wide WGSL types.
    assert_eq!(run.status.code(), Some(3), "{report:#}");
    let stored = stored_names(&store);

    let cuda = backend(&report, "cuda");
    if ran(cuda, "the corpus on NVRTC", Some("KILN_REQUIRE_NVRTC")) {
        // One module per specialization of each file's entries (B6).
        assert_eq!(cuda["kernels"], 6, "{cuda:#}");
        assert_eq!(cuda["compiled"], 5, "{cuda:#}");
        let failed = failures(cuda);
        assert_eq!(
            failed.keys().collect::<Vec<_>>(),
            ["cuda/broken_include.cu"],
            "{cuda:#}"
        );
        let reason = &failed["cuda/broken_include.cu"];
        assert!(
            reason.contains("`nowhere.h` is in no include folder") && reason.contains("--include"),
            "{reason}"
        );
        for (name, count) in [
            ("warm/cuda/attention.cu:softmax_forward,softmax_backward", 2),
            (
                "warm/cuda/reduce_cg.cu:block_reduce<float, 128>,block_reduce<double, 128>,lane_ids",
                1,
            ),
        ] {
            assert!(
                stored.get(name).copied().unwrap_or(0) >= count,
                "{name} stored {count} times: {stored:#?}"
            );
        }
    }

    let hip = backend(&report, "hip");
    if ran(hip, "the corpus on hipRTC", None) {
        // portable.cu (asked for by its header) twice, and scan.hip's
        // module of three entries; reduce_cg.cu's CUDA-only code never
        // reaches hipRTC.
        assert_eq!(hip["kernels"], 3, "{hip:#}");
        assert_eq!(hip["compiled"], 3, "{hip:#}");
        assert!(failures(hip).is_empty(), "{hip:#}");
        let name = "warm/hip/scan.hip:block_scan<64>,block_scan<256>,add_offsets";
        assert!(stored.contains_key(name), "{name}: {stored:#?}");
    }

    let wgpu = backend(&report, "wgpu");
    // Every @compute entry of passes.wgsl, for each specialization; the
    // override set by its number; the wide types compile or fail naming
    // what the device lacks; tonemap.wgsl with the modules it imports
    // (the modules themselves are no kernels, B9).
    assert_eq!(wgpu["kernels"], 8, "{wgpu:#}");
    assert_eq!(
        stored.get("warm/wgsl/passes.wgsl:scale_pass").copied(),
        Some(2),
        "{stored:#?}"
    );
    assert_eq!(
        stored.get("warm/wgsl/passes.wgsl:clamp_pass").copied(),
        Some(2),
        "{stored:#?}"
    );
    assert!(
        stored.contains_key("warm/wgsl/gain_by_id.wgsl"),
        "the override set by its number: {stored:#?}"
    );
    let failed = failures(wgpu);
    for (file, feature) in [("wgsl/wide_int.wgsl", "INT64"), ("wgsl/half.wgsl", "f16")] {
        match failed.get(file) {
            Some(reason) => assert!(reason.contains(feature), "{file}: {reason}"),
            None => assert!(
                stored.contains_key(&format!("warm/{file}")),
                "{file} neither failed nor was stored: {wgpu:#}"
            ),
        }
    }
    assert!(
        failed
            .keys()
            .all(|file| file == "wgsl/wide_int.wgsl" || file == "wgsl/half.wgsl"),
        "{wgpu:#}"
    );
}

/// `tests/corpus/wgsl`'s kernel that imports modules, and its modules, in
/// a folder of their own under `scratch`.
fn wgsl_modules_folder(scratch: &Scratch) -> PathBuf {
    let folder = scratch.join("kernels");
    std::fs::create_dir_all(folder.join("shared")).expect("a kernel folder");
    for file in ["tonemap.wgsl", "shared/color.wgsl", "shared/tonemap.wesl"] {
        std::fs::copy(corpus().join("wgsl").join(file), folder.join(file)).expect("a copy");
    }
    folder
}

// B9, P13: WGSL modules (one a .wesl file) are listed as modules, not
// failures, and the run exits 0; the kernel that imports them compiles;
// an edit of a module it imports through another recompiles it, and a run
// without an edit compiles nothing.
#[test]
fn b9_wgsl_modules_are_no_failures_and_an_edit_of_one_recompiles_its_importers() {
    let scratch = Scratch::new("corpus-wgsl-modules");
    let folder = wgsl_modules_folder(&scratch);
    let store = scratch.join("store");
    let warmed = |expected_compiled: u64| {
        let run = finish(&mut support::warm(&store, &["--backend", "wgpu"], &folder));
        let report = run.json();
        assert_eq!(run.status.code(), Some(0), "{report:#}");
        let wgpu = backend(&report, "wgpu");
        assert_eq!(wgpu["kernels"], 1, "{wgpu:#}");
        assert_eq!(wgpu["compiled"], expected_compiled, "{wgpu:#}");
        assert!(failures(wgpu).is_empty(), "{wgpu:#}");
        for module in ["shared/color.wgsl", "shared/tonemap.wesl"] {
            let reason = support::skip_of(&report, module);
            assert!(reason.contains("module"), "{module}: {reason}");
        }
    };
    warmed(1);
    warmed(0);
    // color.wgsl reaches the kernel directly and through tonemap.wesl.
    let color = folder.join("shared/color.wgsl");
    let mut text = std::fs::read_to_string(&color).expect("the module");
    text = text.replace("0.0722", "0.0723");
    std::fs::write(&color, text).expect("the edited module");
    warmed(1);
}

// B9, D1: an import no module answers fails its kernel alone, at the
// file, line and column of the use, in words rather than Rust's Debug.
#[test]
fn b9_a_missing_import_fails_alone_at_its_file_line_and_column() {
    let scratch = Scratch::new("corpus-wgsl-missing-import");
    let folder = wgsl_modules_folder(&scratch);
    std::fs::write(
        folder.join("lost.wgsl"),
        "#import shared::nowhere\n\n@compute @workgroup_size(1)\nfn main() {\n    let x = nowhere::f();\n}\n",
    )
    .expect("a kernel");
    let store = scratch.join("store");
    let run = finish(&mut support::warm(&store, &["--backend", "wgpu"], &folder));
    let report = run.json();
    assert_eq!(run.status.code(), Some(3), "{report:#}");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 1, "tonemap.wgsl still compiles: {wgpu:#}");
    let failed = failures(wgpu);
    let reason = &failed["lost.wgsl"];
    assert!(
        reason.contains("lost.wgsl:5:") && reason.contains("shared::nowhere"),
        "{reason}"
    );
    assert!(!reason.contains("Error {"), "{reason}");
}

// B7 (untrusted SPIR-V): modules that panic naga's SPIR-V front end fail
// alone, with naga's message, in kiln warm's compile workers, within the
// timeout; a good kernel beside them compiles and the run reports.
#[test]
fn b7_spirv_that_panics_naga_fails_alone_beside_good_kernels() {
    let scratch = Scratch::new("corpus-spirv-hostile");
    let folder = wgsl_modules_folder(&scratch);
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../backends/kiln-wgpu/tests/fixtures");
    for fixture in std::fs::read_dir(&fixtures).expect("the fixtures") {
        let path = fixture.expect("a fixture").path();
        let name = path.file_name().expect("a name").to_owned();
        std::fs::copy(&path, folder.join(name)).expect("a copy");
    }
    let store = scratch.join("store");
    let child = support::warm(&store, &["--backend", "wgpu"], &folder)
        .env("KILN_COMPILE_TIMEOUT", "60")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kiln starts");
    let run = support::wait(child, std::time::Duration::from_secs(120));
    let report = run.json();
    assert_eq!(run.status.code(), Some(3), "{report:#}");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["compiled"], 1, "tonemap.wgsl compiles: {wgpu:#}");
    let failed = failures(wgpu);
    let reason = &failed["naga_panics_too_large.spv"];
    assert!(reason.contains("naga panicked"), "{reason}");
    // The others fail in the kernel or in the walk, each alone.
    for file in ["naga_panics_out_of_bounds.spv", "naga_panics_selector.spv"] {
        let listed = failed.contains_key(file)
            || report["failed_files"]
                .as_array()
                .is_some_and(|files| files.iter().any(|entry| entry["file"] == file));
        assert!(listed, "{file} fails alone: {report:#}");
    }
}
