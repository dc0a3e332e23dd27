//! `kiln warm` on the project's corpus of kernels in the shape of real ones
//! (`tests/corpus`): license blocks, several kernels per file, sibling
//! headers and an include folder, the CUDA toolkit's headers, CUDA-only
//! code, templated entries, WGSL with several `@compute` entries, an `@id`
//! override and wide types. Each kernel's outcome is asserted on NVRTC,
//! hipRTC and lavapipe (P13, P14, B6).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
        // sgemm.cuh twice; host_only.cu fails (B8).
        assert_eq!(cuda["kernels"], 9, "{cuda:#}");
        assert_eq!(cuda["compiled"], 7, "{cuda:#}");
        let failed = failures(cuda);
        assert_eq!(
            failed.keys().collect::<Vec<_>>(),
            ["cuda/broken_include.cu", "cuda/host_only.cu"],
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
        // portable.cu (asked for by its header) twice, scan.hip's module
        // of three entries, conv.hip's, and decoy.hip twice (one fails on
        // purpose); reduce_cg.cu's CUDA-only code never reaches hipRTC.
        assert_eq!(hip["kernels"], 6, "{hip:#}");
        assert_eq!(hip["compiled"], 5, "{hip:#}");
        assert_eq!(
            failures(hip).keys().collect::<Vec<_>>(),
            ["hip/decoy.hip [WITH_EXTRA=1]"],
            "{hip:#}"
        );
        let name = "warm/hip/scan.hip:block_scan<64>,block_scan<256>,add_offsets";
        assert!(stored.contains_key(name), "{name}: {stored:#?}");
    }

    let wgpu = backend(&report, "wgpu");
    // Every @compute entry of passes.wgsl, for each specialization; the
    // override set by its number; the wide types compile or fail naming
    // what the device lacks; tonemap.wgsl with the modules it imports
    // (the modules themselves are no kernels, B9); spec_shared_u8.spv for
    // the driver, once per specialization (B7).
    assert_eq!(wgpu["kernels"], 10, "{wgpu:#}");
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

/// Copies the corpus's `folders` into `into`, as a tree of their own.
fn copy_corpus(folders: &[&str], into: &Path) {
    for folder in folders {
        let target = into.join(folder);
        std::fs::create_dir_all(&target).expect("a folder");
        for entry in std::fs::read_dir(corpus().join(folder)).expect("the corpus") {
            let entry = entry.expect("an entry");
            std::fs::copy(entry.path(), target.join(entry.file_name())).expect("a copy");
        }
    }
}

/// `kiln warm` of `folder` into `store`, its HIP row, and the run.
fn warm_hip(store: &Path, folder: &Path, environment: &[(&str, &Path)]) -> Value {
    let mut command = kiln(store, &["--json", "warm"]);
    command.arg(folder);
    for variable in ["CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"] {
        command.env_remove(variable);
    }
    for (variable, value) in environment {
        command.env(variable, value);
    }
    let report = finish(&mut command).json();
    backend(&report, "hip").clone()
}

// P13, B6: hipRTC searches CPATH, CPLUS_INCLUDE_PATH and the system's
// folder for any include it is not handed. Every folder those variables
// name here holds a decoy of each name the kernels include (hipRTC's own
// headers, a sibling, a standard header, the include under `#if`), each
// stopping the compile that reads it: a kernel that compiles read none of
// them, and its code object is the one an environment without them makes
// (the same key: found in the store). The include no folder holds fails
// its specialization naming it, and `convolution<5>` names a template of
// `size_t` as C++ writes it.
#[test]
fn p13_hip_reads_no_byte_outside_its_key_whatever_cpath_names() {
    let scratch = Scratch::new("corpus-hip-decoy");
    let tree = scratch.folder("tree");
    copy_corpus(&["hip", "include"], &tree);
    let decoys = scratch.folder("decoys");
    for name in [
        "hip/hip_runtime.h",
        "hip/hip_fp16.h",
        "extra.h",
        "conv_common.h",
        "tiles.h",
        "cstdint",
    ] {
        let path = decoys.join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("a folder");
        std::fs::write(&path, "#error \"decoy: read from the environment\"\n").expect("a decoy");
    }
    let store = scratch.join("store");
    let hip = warm_hip(
        &store,
        &tree,
        &[
            ("CPATH", &decoys),
            ("CPLUS_INCLUDE_PATH", &decoys),
            ("C_INCLUDE_PATH", &decoys),
        ],
    );
    if !ran(&hip, "HIP's includes under CPATH", None) {
        return;
    }
    // scan.hip, conv.hip, decoy.hip twice.
    assert_eq!(hip["kernels"], 4, "{hip:#}");
    assert_eq!(hip["compiled"], 3, "{hip:#}");
    let failed = failures(&hip);
    assert_eq!(
        failed.keys().collect::<Vec<_>>(),
        ["hip/decoy.hip [WITH_EXTRA=1]"],
        "{hip:#}"
    );
    let reason = &failed["hip/decoy.hip [WITH_EXTRA=1]"];
    assert!(
        reason.contains("'extra.h' is in no include folder kiln searched"),
        "{reason}"
    );
    assert!(!reason.contains("decoy:"), "{reason}");
    // The same keys without the variables: nothing compiles again.
    let again = warm_hip(&store, &tree, &[]);
    assert_eq!(again["from_store"], 3, "{again:#}");
    assert_eq!(again["compiled"], 0, "{again:#}");
    let stored = stored_names(&store);
    let conv = "warm/hip/conv.hip:convolution<5>,convolution<9>,window<3, 2, 1>,blend<Mode::Fast>";
    assert!(stored.contains_key(conv), "{conv}: {stored:#?}");
}

// P13 (SPEC #38 item 5): a quoted include that resolves outside the folder
// warmed and its include folders is refused before it is read, even under
// `#if 0`, so none of its bytes reaches the store; an explicit option
// allows it.
#[test]
fn p13_an_include_outside_the_folder_warmed_is_refused_unread() {
    let scratch = Scratch::new("corpus-outside");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        scratch.join("secret.h"),
        "#define SECRET_MARKER_4f1d 1.0f\n",
    )
    .expect("a file outside");
    std::fs::write(
        kernels.join("k.cu"),
        "// kiln entry: k\n\n#if 0\n#include \"../secret.h\"\n#endif\n\
         extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }\n",
    )
    .expect("a kernel");
    let store = scratch.join("store");
    let run = finish(kiln(&store, &["--json", "warm", "--backend", "cuda"]).arg(&kernels));
    let report = run.json();
    let cuda = backend(&report, "cuda");
    if !ran(
        cuda,
        "an include outside the tree",
        Some("KILN_REQUIRE_NVRTC"),
    ) {
        return;
    }
    let reason = &failures(cuda)["k.cu"];
    assert!(
        reason.contains("`../secret.h` resolves to") && reason.contains("kiln does not read it"),
        "{reason}"
    );
    let mut held = Vec::new();
    let mut folders = vec![store.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                held.push(bytes);
            }
        }
    }
    assert!(
        !held.iter().any(|bytes| bytes
            .windows(18)
            .any(|window| window == b"SECRET_MARKER_4f1d")),
        "a byte of the file outside reached the store"
    );
    let allowed = finish(
        kiln(
            &store,
            &[
                "--json",
                "warm",
                "--backend",
                "cuda",
                "--allow-outside-includes",
            ],
        )
        .arg(&kernels),
    )
    .json();
    assert_eq!(backend(&allowed, "cuda")["compiled"], 1, "{allowed:#}");
}

// B8, B9, B6: header lines. A `kiln define` holds for every
// specialization; a `backends` line wins over --backend unless --force; a
// `kiln include` folder that does not exist fails its file naming it; a
// `.cuh` without a kiln header is a header, not a kernel file.
#[test]
fn b8_header_lines_define_backends_force_and_missing_include_folders() {
    let scratch = Scratch::new("corpus-header-lines");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        kernels.join("cuda_only.cu"),
        "// kiln entry: k\n// kiln backends: cuda\n// kiln define: SCALE=2.0f\n\
         // kiln specialize: BIAS=1.0f\n// kiln specialize: BIAS=2.0f\n\n#include <cstdint>\n\
         extern \"C\" __global__ void k(float* y) { y[0] = SCALE + BIAS; }\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("lost.cu"),
        "// kiln entry: k\n// kiln include: nowhere\n",
    )
    .expect("a kernel");
    std::fs::write(kernels.join("plain.cuh"), "#pragma once\n#define PLAIN 1\n").expect("a header");
    let store = scratch.join("store");
    let report = finish(kiln(&store, &["--json", "warm", "--backend", "hip"]).arg(&kernels)).json();
    assert!(
        report["backends"]
            .as_array()
            .is_some_and(|backends| backends.is_empty()),
        "the backends line wins over --backend: {report:#}"
    );
    let failed = report["failed_files"].as_array().expect("a list");
    assert_eq!(failed.len(), 1, "{report:#}");
    assert_eq!(failed[0]["file"], "lost.cu", "{report:#}");
    let reason = failed[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("`// kiln include: nowhere`: there is no folder"),
        "{reason}"
    );
    assert_eq!(
        report["files"], 2,
        "plain.cuh is no kernel file: {report:#}"
    );
    let forced = finish(
        kiln(
            &store,
            &["--json", "warm", "--backend", "cuda,hip", "--force"],
        )
        .arg(&kernels),
    )
    .json();
    let cuda = backend(&forced, "cuda");
    if ran(cuda, "kiln define on NVRTC", Some("KILN_REQUIRE_NVRTC")) {
        assert_eq!(cuda["compiled"], 2, "{cuda:#}");
    }
    let hip = backend(&forced, "hip");
    if ran(hip, "--force on hipRTC", None) {
        assert_eq!(hip["kernels"], 2, "--force sends it to HIP: {hip:#}");
        assert_eq!(hip["compiled"], 2, "{hip:#}");
    }
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

// B7: the corpus's SPIR-V module that naga cannot read (8-bit storage, a
// shared array sized by a specialization constant) compiles for the
// driver once per specialization of its sidecar, and the run exits 0.
#[test]
fn b7_spirv_naga_cannot_read_compiles_for_the_driver_per_specialization() {
    let scratch = Scratch::new("corpus-spirv-passthrough");
    let folder = scratch.join("kernels");
    std::fs::create_dir_all(&folder).expect("a kernel folder");
    for file in ["spec_shared_u8.spv", "spec_shared_u8.spv.kiln"] {
        std::fs::copy(corpus().join("spirv").join(file), folder.join(file)).expect("a copy");
    }
    let store = scratch.join("store");
    let run = finish(&mut support::warm(&store, &["--backend", "wgpu"], &folder));
    let report = run.json();
    assert_eq!(run.status.code(), Some(0), "{report:#}");
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["kernels"], 2, "{wgpu:#}");
    assert_eq!(wgpu["compiled"], 2, "{wgpu:#}");
    assert!(failures(wgpu).is_empty(), "{wgpu:#}");
    let stored = stored_names(&store);
    assert_eq!(
        stored.get("warm/spec_shared_u8.spv").copied(),
        Some(2),
        "{stored:#?}"
    );
}
