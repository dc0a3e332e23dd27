//! `kiln warm` on SPIR-V modules (`.spv`, B3) born in GLSL, through the
//! real binary: every `GLCompute` entry is a kernel unless a sidecar
//! `NAME.spv.kiln` names some (B6), its `specialize` lines set constants by
//! `constant_id` or by name, a cold run compiles and a warm one loads every
//! kernel from the store; the sidecar's comments are in no key (P14); a
//! module naga refuses and a malformed sidecar fail alone, naming why (L6).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_engine::KernelId;
use kiln_store::{DiskStore, StoreConfig};
use kiln_wgpu::WgslKernel;
use serde_json::Value;
use support::{
    Finished, Scratch, backend, failure_of, finish, kiln, program_loads_without_compiling,
};

/// `kiln --dir STORE --json warm FOLDER`, run to its end.
fn warm(store: &Path, folder: &Path) -> Finished {
    finish(&mut support::warm(store, &[], folder))
}

/// The GLSL-born module `name`, or `None` after printing why `what` skips
/// (glslangValidator was absent where the kernels were built; their build
/// fails instead when `KILN_REQUIRE_GLSLANG=1`, and the skip does when
/// `KILN_REQUIRE_DEVICE=1`).
fn module(name: &str, what: &str) -> Option<&'static [u8]> {
    match kiln_spirv_kernels::module(name) {
        Ok(bytes) => Some(bytes),
        Err(reason) => {
            kiln_engine::conformance::skip(what, &reason);
            None
        }
    }
}

/// A test's scratch folder, its folder of modules and its store.
struct Folders {
    _scratch: Scratch,
    kernels: PathBuf,
    store: PathBuf,
}

impl Folders {
    fn new(name: &str) -> Self {
        let scratch = Scratch::new(name);
        Self {
            kernels: scratch.folder("kernels"),
            store: scratch.path().join("store"),
            _scratch: scratch,
        }
    }
}

/// The module `scale_bias` and the folders of the test `name`, or `None`
/// after printing why `what` skips.
fn scale_bias_in(name: &str, what: &str) -> Option<(&'static [u8], Folders)> {
    Some((module("scale_bias", what)?, Folders::new(name)))
}

/// `kiln warm` on a folder in which some modules fail: the report, after
/// checking the run failed.
fn failed_warm(folders: &Folders) -> Value {
    let finished = warm(&folders.store, &folders.kernels);
    assert!(!finished.status.success(), "{}", finished.stdout);
    finished.json()
}

/// Writes `bytes` as `NAME.spv` in `folder`, with `sidecar` as its
/// `NAME.spv.kiln` when given.
fn write_module(folder: &Path, name: &str, bytes: &[u8], sidecar: Option<&str>) -> PathBuf {
    let path = folder.join(format!("{name}.spv"));
    std::fs::write(&path, bytes).expect("a module");
    if let Some(text) = sidecar {
        std::fs::write(folder.join(format!("{name}.spv.kiln")), text).expect("a sidecar");
    }
    path
}

/// How many stored kernels each name has in the store at `store`.
fn stored_names(store: &Path) -> BTreeMap<String, usize> {
    let listed = finish(&mut kiln(store, &["--json", "ls", "--kernels-only"])).json();
    let mut names = BTreeMap::new();
    for entry in listed.as_array().expect("a list") {
        if let Some(name) = entry["key"]["kernel"].as_str() {
            *names.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    names
}

/// The wgpu row's (kernels, compiled, from store, failed).
fn counts(report: &Value) -> (u64, u64, u64, u64) {
    let row = backend(report, "wgpu");
    let count = |name: &str| row[name].as_u64().unwrap_or(u64::MAX);
    (
        count("kernels"),
        count("compiled"),
        count("from_store"),
        count("failed"),
    )
}

/// The first diagnostic of the failed kernel `label` in the wgpu row.
fn kernel_failure<'a>(report: &'a Value, label: &str) -> &'a str {
    backend(report, "wgpu")["failures"]
        .as_array()
        .and_then(|failures| failures.iter().find(|failure| failure["kernel"] == label))
        .and_then(|failure| failure["first_diagnostic"].as_str())
        .unwrap_or_else(|| panic!("{label} failed: {report:#}"))
}

// B3, B6, P14: a cold run compiles every entry and specialization of each
// module, a warm one loads them all from the store, and a sidecar's
// comment is in no key.
#[test]
fn spv_files_compile_cold_per_entry_and_specialization_and_load_warm_from_the_store() {
    const WHAT: &str = "kiln warm on .spv files";
    let (Some(scale_bias), Some(passes), Some(saxpy)) = (
        module("scale_bias", WHAT),
        module("passes", WHAT),
        module("saxpy", WHAT),
    ) else {
        return;
    };
    let folders = Folders::new("warm-spirv");
    let (kernels, store) = (&folders.kernels, &folders.store);
    // Two kernels: constants by `constant_id`, then by name.
    write_module(
        kernels,
        "scale_bias",
        scale_bias,
        Some(
            "// FACTOR is constant_id 0, BIAS 1\n// kiln specialize: 0=3 1=0.5\n\n\
              // kiln specialize: FACTOR=4\n",
        ),
    );
    // No sidecar: both compute entries, default constants.
    write_module(kernels, "passes", passes, None);
    let saxpy_sidecar = "// kiln entry: main\n";
    write_module(kernels, "saxpy", saxpy, Some(saxpy_sidecar));

    let cold = warm(store, kernels).succeeded_json();
    assert_eq!(counts(&cold), (5, 5, 0, 0), "{cold:#}");
    assert_eq!(cold["failed_files"].as_array().map(Vec::len), Some(0));
    let expected: BTreeMap<String, usize> = [
        ("warm/passes.spv:backward", 1),
        ("warm/passes.spv:forward", 1),
        ("warm/saxpy.spv", 1),
        ("warm/scale_bias.spv", 2),
    ]
    .into_iter()
    .map(|(name, count)| (name.to_owned(), count))
    .collect();
    assert_eq!(stored_names(store), expected);

    let warm_run = warm(store, kernels).succeeded_json();
    assert_eq!(counts(&warm_run), (5, 0, 5, 0), "{warm_run:#}");

    // A comment added to a sidecar changes no entry and no constant.
    std::fs::write(
        kernels.join("saxpy.spv.kiln"),
        format!("// y = a * x + y\n{saxpy_sidecar}"),
    )
    .expect("a sidecar");
    let commented = warm(store, kernels).succeeded_json();
    assert_eq!(counts(&commented), (5, 0, 5, 0), "{commented:#}");
}

// P14: a program giving wgpu the same module, entry and constants, under
// its own kernel names, takes what `kiln warm` stored without compiling.
#[test]
fn p14_a_program_loading_the_same_module_finds_what_kiln_warm_stored() {
    let Some((scale_bias, folders)) = scale_bias_in("warm-spirv-program", "P14 on .spv files")
    else {
        return;
    };
    write_module(
        &folders.kernels,
        "scale_bias",
        scale_bias,
        Some("// kiln specialize: 0=3 BIAS=0.5\n"),
    );
    let cold = warm(&folders.store, &folders.kernels).succeeded_json();
    assert_eq!(counts(&cold), (1, 1, 0, 0), "{cold:#}");

    let shared = DiskStore::open(StoreConfig::at(&folders.store)).expect("the store opens");
    let kernel = WgslKernel::builder(KernelId::named("program.scale_bias"), "main")
        .constant("0", 3.0)
        .constant("BIAS", 0.5)
        .spirv(scale_bias.to_vec());
    program_loads_without_compiling(Arc::new(shared), &kernel);
}

// L6, B6: bytes naga refuses fail alone, with naga's reason, whether the
// walk or the compile meets them; a constant the module lacks fails its
// kernel alone.
#[test]
fn a_spv_file_that_is_not_spirv_fails_alone_with_the_reason() {
    let Some((scale_bias, folders)) = scale_bias_in("warm-spirv-garbage", "a garbage .spv file")
    else {
        return;
    };
    let kernels = &folders.kernels;
    write_module(kernels, "good", scale_bias, None);
    // Whole words, so it is the magic number naga misses.
    let garbage = b"a text file, saved as .spv by mistake, 48 bytes\n";
    assert_eq!(garbage.len(), 48);
    write_module(kernels, "garbage", garbage, None);
    // Named entries: naga meets the bytes when the kernel compiles.
    write_module(kernels, "named", garbage, Some("// kiln entry: main\n"));
    write_module(
        kernels,
        "unknown_id",
        scale_bias,
        Some("// kiln specialize: 9=1\n"),
    );

    let report = failed_warm(&folders);
    let reason = failure_of(&report, "garbage.spv");
    assert!(
        reason.contains("not SPIR-V") && reason.contains("magic number"),
        "{reason}"
    );
    let named = kernel_failure(&report, "named.spv");
    assert!(
        named.contains("not SPIR-V") && named.contains("`main`"),
        "{named}"
    );
    let unknown = kernel_failure(&report, "unknown_id.spv [9=1]");
    assert!(unknown.contains('9'), "{unknown}");
    // good.spv compiled beside them.
    assert_eq!(counts(&report), (3, 1, 0, 2), "{report:#}");
}

// L6: a sidecar is all header; a bad line fails its module, naming the
// sidecar and the line, and the modules beside it still compile.
#[test]
fn a_sidecar_with_a_bad_line_fails_its_module_naming_the_line() {
    let Some((scale_bias, folders)) = scale_bias_in("warm-spirv-sidecar", "a bad sidecar") else {
        return;
    };
    let kernels = &folders.kernels;
    // Each bad module: its sidecar, and what its failure says.
    let bad: [(&str, &str, &[&str]); 3] = [
        (
            "pairless",
            "// kiln entry: main\n// kiln specialize: FACTOR\n",
            &["pairless.spv.kiln", "line 2: `// kiln specialize: FACTOR`"],
        ),
        (
            "prose",
            "// kiln entry: main\n\nmain\n",
            &["prose.spv.kiln", "line 3: `main` is not a comment"],
        ),
        ("options", "// kiln options: -O3\n", &["line 1", "SPIR-V"]),
    ];
    write_module(kernels, "good", scale_bias, Some("// kiln entry: main\n"));
    for (name, sidecar, _) in bad {
        write_module(kernels, name, scale_bias, Some(sidecar));
    }
    let linked = write_module(kernels, "linked", scale_bias, None);
    std::os::unix::fs::symlink(
        kernels.join("good.spv.kiln"),
        linked.with_extension("spv.kiln"),
    )
    .expect("a link");

    let report = failed_warm(&folders);
    for (name, _, said) in bad {
        let reason = failure_of(&report, &format!("{name}.spv"));
        assert!(
            said.iter().all(|part| reason.contains(part)),
            "{name}.spv's failure says {said:?}: {reason}"
        );
    }
    let linked = failure_of(&report, "linked.spv");
    assert!(linked.contains("symbolic link"), "{linked}");
    assert_eq!(counts(&report), (1, 1, 0, 0), "{report:#}");
}
