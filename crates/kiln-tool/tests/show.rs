//! `kiln show KERNEL` through the real binary: a stored kernel's recipe
//! and artifact, readable (WGSL; SPIR-V through spirv-dis when found; PTX,
//! and SASS when the CUDA toolkit's disassembler is found), `--raw` its
//! bytes, `--json` the same as one value; a name that matches nothing, or
//! `--raw` of several entries, fails naming why.

mod support;

use std::path::Path;
use std::process::Command;

use kiln_test_support::require::skip_unless;
use support::kernels::{cxx_kernel, write_kernel};
use support::{Scratch, backend, finish, kiln};

const DOUBLE: &str = "// the doubling kernel\n\
@group(0) @binding(0) var<storage, read_write> v: array<f32>;\n\
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) \
{ v[i.x] = v[i.x] * 2.0; }\n";

/// Warms `folder` into `store` with `backend`; the JSON report.
fn warm(store: &Path, folder: &Path, backend: &str) -> serde_json::Value {
    finish(kiln(store, &["--json", "warm", "--backend", backend]).arg(folder)).succeeded_json()
}

/// `kiln show` with standard output in a file: its bytes, and whether it
/// succeeded.
fn raw(store: &Path, arguments: &[&str]) -> (bool, Vec<u8>, String) {
    let output = kiln(store, arguments).output().expect("kiln runs");
    (
        output.status.success(),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn show_prints_a_wgsl_kernel_s_text_and_raw_writes_its_bytes() {
    let scratch = Scratch::new("show-wgsl");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    write_kernel(&folder, "double.wgsl", DOUBLE);
    warm(&store, &folder, "wgpu");

    let shown = finish(&mut kiln(&store, &["show", "double"]));
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(shown.stdout.contains("double.wgsl#"), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("-- WGSL (entry main)"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("v[i.x] * 2.0"), "{}", shown.stdout);
    assert!(shown.stdout.contains("-- raw: "), "{}", shown.stdout);

    let (succeeded, bytes, stderr) = raw(&store, &["show", "double", "--raw"]);
    assert!(succeeded, "{stderr}");
    let text = String::from_utf8(bytes).expect("WGSL is text");
    assert!(text.contains("v[i.x] * 2.0"), "{text}");

    let json = finish(&mut kiln(&store, &["--json", "show", "double"])).succeeded_json();
    let entry = &json[0];
    assert_eq!(entry["backend"], "wgpu");
    assert_eq!(entry["raw_kind"], "WGSL");
    assert_eq!(entry["raw_bytes"].as_u64(), Some(text.len() as u64));
    assert!(
        entry["artifact"][0]["text"]
            .as_str()
            .is_some_and(|wgsl| wgsl.contains("@compute")),
        "{entry}"
    );
}

#[test]
fn a_kernel_the_store_lacks_and_raw_of_several_fail_naming_why() {
    let scratch = Scratch::new("show-missing");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    write_kernel(&folder, "double.wgsl", DOUBLE);
    write_kernel(&folder, "double_too.wgsl", DOUBLE.replace("2.0", "4.0"));
    warm(&store, &folder, "wgpu");

    let missing = finish(&mut kiln(&store, &["show", "no_such_kernel"]));
    assert_eq!(missing.status.code(), Some(1), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("the store holds no such kernel"),
        "{}",
        missing.stderr
    );
    let (succeeded, bytes, stderr) = raw(&store, &["show", "double", "--raw"]);
    assert!(!succeeded && bytes.is_empty(), "{stderr}");
    assert!(
        stderr.contains("--raw writes one entry, and 2 match"),
        "{stderr}"
    );
    assert!(stderr.contains("double_too.wgsl#"), "{stderr}");
}

#[test]
fn show_prints_a_cuda_kernel_s_arguments_source_and_ptx_and_raw_writes_its_cubin() {
    let scratch = Scratch::new("show-cuda");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    write_kernel(
        &folder,
        "triple.cu",
        format!(
            "// kiln specialize: FACTOR=3\n{}",
            cxx_kernel("triple", "x[threadIdx.x] *= FACTOR;")
        ),
    );
    let report = finish(kiln(&store, &["--json", "warm", "--backend", "cuda"]).arg(&folder)).json();
    if let Some(reason) = backend(&report, "cuda")["unavailable"].as_str() {
        skip_unless(
            &["KILN_REQUIRE_NVRTC"],
            "kiln show of a CUDA kernel",
            reason,
        );
        return;
    }
    let shown = finish(&mut kiln(&store, &["show", "triple"]));
    assert!(shown.status.success(), "{}", shown.stderr);
    for part in [
        "-- NVRTC arguments",
        "-DFACTOR=3",
        "x[threadIdx.x] *= FACTOR;",
        "-- PTX (sm_",
        ".entry triple",
        "-- SASS",
    ] {
        assert!(shown.stdout.contains(part), "{part} in:\n{}", shown.stdout);
    }
    let has_disassembler = ["cuobjdump", "nvdisasm"].iter().any(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success())
    });
    if has_disassembler {
        assert!(
            shown.stdout.contains("-- SASS (") && !shown.stdout.contains("-- SASS: not shown"),
            "{}",
            shown.stdout
        );
    } else {
        assert!(
            shown
                .stdout
                .contains("-- SASS: not shown: cuobjdump or nvdisasm not found"),
            "{}",
            shown.stdout
        );
    }
    let (succeeded, bytes, stderr) = raw(&store, &["show", "triple", "--raw"]);
    assert!(succeeded, "{stderr}");
    assert_eq!(&bytes[..4], b"\x7fELF", "a cubin is an ELF image");
}
