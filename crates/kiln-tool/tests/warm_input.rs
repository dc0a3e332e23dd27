//! `kiln warm` on bad input, through the real binary: a bad file fails
//! alone, never the run, and nothing in the folder can make the walk loop,
//! block or read without end (L6). Every run has a deadline, so a
//! regression fails a test instead of hanging the suite.

mod support;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use kiln_test_support::{Limit, child};
use serde_json::Value;
use support::{Scratch, backend, failure_of, finish, kiln, skip_of, wgsl_kernel};

/// `kiln --dir STORE --json warm FOLDER`, run to its end.
fn warm(store: &Path, folder: &Path) -> support::Finished {
    finish(kiln(store, &["--json", "warm"]).arg(folder))
}

/// Checks the one good WGSL kernel of a folder compiled.
fn assert_the_good_kernel_compiled(report: &Value) {
    let wgpu = backend(report, "wgpu");
    assert_eq!(wgpu["kernels"], 1, "{wgpu:#}");
    assert_eq!(wgpu["compiled"], 1, "{wgpu:#}");
    assert_eq!(wgpu["failed"], 0, "{wgpu:#}");
}

// L6
#[test]
fn a_file_that_is_not_utf8_fails_alone_and_the_files_beside_it_compile() {
    let scratch = Scratch::new("input-encoding");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    std::fs::write(
        folder.join("latin1.cu"),
        b"// kiln entry: k\n// r\xe9sum\xe9 of the kernel\n__global__ void k() {}\n",
    )
    .expect("a kernel file");
    std::fs::write(
        folder.join("binary.cu"),
        b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe",
    )
    .expect("a kernel file");

    let run = warm(&scratch.join("store"), &folder);
    let report = run.json();
    assert!(!run.status.success(), "a failed file fails the command");
    assert_the_good_kernel_compiled(&report);
    let latin1 = failure_of(&report, "latin1.cu");
    assert!(
        latin1.contains("line 2") && latin1.contains("UTF-8"),
        "names the line and the encoding: {latin1}"
    );
    assert!(
        failure_of(&report, "binary.cu").contains("line 1"),
        "{report:#}"
    );
}

// L6
#[test]
fn a_specialize_line_that_is_not_name_value_fails_its_file_naming_the_line() {
    let scratch = Scratch::new("input-specialize");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    std::fs::write(
        folder.join("include.cu"),
        "// kiln entry: k\n// kiln specialize: -include /etc/passwd\n__global__ void k() {}\n",
    )
    .expect("a kernel file");
    // A value with a flag after it: the flag is no pair of its own, so it
    // never reaches the compiler as a flag.
    std::fs::write(
        folder.join("value.cu"),
        "// kiln entry: k\n// kiln specialize: N=1 -include /etc/passwd\n__global__ void k() {}\n",
    )
    .expect("a kernel file");
    std::fs::write(
        folder.join("name.wgsl"),
        "// kiln specialize: 2N=1\n@compute @workgroup_size(1) fn main() {}\n",
    )
    .expect("a kernel file");

    let run = warm(&scratch.join("store"), &folder);
    let report = run.json();
    assert!(!run.status.success(), "a failed file fails the command");
    let include = failure_of(&report, "include.cu");
    assert!(
        include.contains("line 2: `// kiln specialize: -include /etc/passwd`"),
        "names the line and its text: {include}"
    );
    assert!(
        failure_of(&report, "value.cu").contains("`-include` is not NAME=VALUE"),
        "{report:#}"
    );
    assert!(
        failure_of(&report, "name.wgsl").contains("`2N=1` is not NAME=VALUE"),
        "a name is an identifier: {report:#}"
    );
    assert_the_good_kernel_compiled(&report);
}

#[test]
fn a_symbolic_link_loop_is_not_followed_and_each_file_is_one_kernel() {
    let scratch = Scratch::new("input-loops");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    // Two loops: following them finds the file at every path of up to 40
    // links through either, more paths than the run can ever walk.
    symlink(".", folder.join("loop")).expect("a link");
    symlink(".", folder.join("again")).expect("a link");
    let outside = scratch.folder("outside");
    std::fs::write(outside.join("outside.wgsl"), wgsl_kernel(2)).expect("a kernel file");
    symlink(&outside, folder.join("out")).expect("a link");
    symlink(outside.join("outside.wgsl"), folder.join("linked.wgsl")).expect("a link");

    let run = warm(&scratch.join("store"), &folder);
    let report = run.succeeded_json();
    assert_the_good_kernel_compiled(&report);
    for link in ["loop", "again", "out", "linked.wgsl"] {
        assert!(
            skip_of(&report, link).contains("symbolic link"),
            "{report:#}"
        );
    }
}

#[test]
fn a_fifo_named_like_a_kernel_is_skipped_without_blocking() {
    let scratch = Scratch::new("input-fifo");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    let fifo = CString::new(folder.join("x.cu").as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) };
    assert_eq!(made, 0, "a FIFO: {}", std::io::Error::last_os_error());

    let run = warm(&scratch.join("store"), &folder);
    let report = run.succeeded_json();
    assert_the_good_kernel_compiled(&report);
    assert!(skip_of(&report, "x.cu").contains("FIFO"), "{report:#}");
}

#[test]
fn a_link_to_an_endless_device_is_not_read() {
    let scratch = Scratch::new("input-zero");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    symlink("/dev/zero", folder.join("z.cu")).expect("a link");

    let mut command = kiln(&scratch.join("store"), &["--json", "warm"]);
    command.arg(&folder);
    // A kiln that reads the link fills memory until it dies: give it a
    // bound, so the test fails quickly rather than the machine.
    child::limit(&mut command, Limit::AddressSpace(16 << 30));
    let run = finish(&mut command);
    let report = run.succeeded_json();
    assert_the_good_kernel_compiled(&report);
    assert!(
        skip_of(&report, "z.cu").contains("symbolic link"),
        "{report:#}"
    );
}

// L6
#[test]
fn a_kernel_file_over_the_size_limit_fails_alone_naming_the_limit() {
    let scratch = Scratch::new("input-large");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("good.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    let mut large = wgsl_kernel(2);
    while large.len() <= 5 << 20 {
        large.push_str("// padding, line after line, to pass the limit on kernel files\n");
    }
    std::fs::write(folder.join("large.wgsl"), large).expect("a kernel file");

    let run = warm(&scratch.join("store"), &folder);
    let report = run.json();
    assert!(!run.status.success(), "a failed file fails the command");
    assert_the_good_kernel_compiled(&report);
    assert!(
        failure_of(&report, "large.wgsl").contains("4 MiB"),
        "{report:#}"
    );
}

// L6, B3: a specialization's value is typed by its constant. `true` and
// `false` make two kernels of a `bool` override, each compiled (never one
// rekeyed onto the other); a value that is no number, or one the constant's
// type cannot hold, fails its kernel alone, naming the constant and the
// value.
#[test]
fn specialization_values_are_typed_by_their_constant() {
    let scratch = Scratch::new("input-typed-constants");
    let folder = scratch.folder("kernels");
    std::fs::write(
        folder.join("pick.wgsl"),
        "// kiln specialize: WG=64 USE_MAX=true\n\
         // kiln specialize: WG=64 USE_MAX=false\n\
         // kiln specialize: WG=64 USE_MAX=maybe\n\
         // kiln specialize: WG=64 USE_MAX=2\n\
         override WG: u32 = 64u;\n\
         override USE_MAX: bool = false;\n\
         @group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
         @compute @workgroup_size(WG) fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
             var v = out[id.x];\n\
             if USE_MAX { v = max(v, 0.0); }\n\
             out[id.x] = v;\n\
         }\n",
    )
    .expect("a kernel file");
    let run = warm(&scratch.join("store"), &folder);
    let report = run.json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["kernels"], 4, "{wgpu:#}");
    assert_eq!(wgpu["compiled"], 2, "true and false each compile: {wgpu:#}");
    assert_eq!(
        wgpu["rekeyed"], 0,
        "neither takes the other's artifact: {wgpu:#}"
    );
    assert_eq!(wgpu["failed"], 2, "{wgpu:#}");
    let failures = wgpu["failures"].to_string();
    assert!(
        failures.contains("USE_MAX=maybe") && failures.contains("USE_MAX is a bool"),
        "each failure names its constant and value: {failures}"
    );
    assert!(
        !run.status.success(),
        "failed kernels fail the run's status"
    );
}
