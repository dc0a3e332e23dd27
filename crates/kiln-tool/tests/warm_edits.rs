//! Editing a kernel file recompiles what its compiler gets: the file's
//! whole text (its header is a comment the compiler sees, P14) and the
//! kernel's own specialization, never the file's name.

mod support;

use std::path::Path;

use kiln_engine::conformance::skip;
use serde_json::Value;
use support::{Scratch, finish, kiln};

/// A WGSL file with one `specialize` line per value of `sizes`.
fn wgsl_file(sizes: &[u32], description: &str) -> String {
    let mut text = format!("// kiln entry: main\n// {description}\n");
    for size in sizes {
        text.push_str(&format!("// kiln specialize: SCALE={size}\n"));
    }
    text.push_str(
        "override SCALE: u32 = 1u;\n\
         @group(0) @binding(0) var<storage, read_write> data: array<u32>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = data[id.x] * SCALE; }\n",
    );
    text
}

/// A CUDA file with two specializations.
const CUDA_FILE: &str = "// kiln entry: scale\n\
                         // kiln specialize: FACTOR=2\n\
                         // kiln specialize: FACTOR=3\n\
                         extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= FACTOR; }\n";

/// The one backend row of `kiln --json warm --backend BACKEND FOLDER`.
fn warm(store: &Path, folder: &Path, backend: &str) -> Value {
    let run = finish(
        kiln(store, &["--json", "warm", "--backend", backend])
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let report: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    report["backends"][0].clone()
}

fn counts(row: &Value) -> (u64, u64, u64) {
    let count = |name: &str| row[name].as_u64().unwrap_or(0);
    (count("compiled"), count("rekeyed"), count("from_store"))
}

// P14: the text compiled is the file, header included, so an edited header
// is another text: every kernel of the file compiles again, and a program
// compiling the edited file finds them.
#[test]
fn a_specialization_added_and_a_comment_reworded_compile_the_files_text_again() {
    let scratch = Scratch::new("warm-edits-header");
    let folder = scratch.folder("kernels");
    let store = scratch.join("store");
    let file = folder.join("scale.wgsl");
    std::fs::write(&file, wgsl_file(&[2, 3, 4], "scales every element")).expect("a kernel file");
    let first = warm(&store, &folder, "wgpu");
    assert_eq!(counts(&first), (3, 0, 0), "{first:#}");

    std::fs::write(
        &file,
        wgsl_file(&[2, 3, 4, 5], "multiplies every element by SCALE"),
    )
    .expect("a kernel file");
    let second = warm(&store, &folder, "wgpu");
    assert_eq!(
        counts(&second),
        (4, 0, 0),
        "the file's text changed, so each kernel of it is compiled from the new text: \
         {second:#}"
    );
    let third = warm(&store, &folder, "wgpu");
    assert_eq!(counts(&third), (0, 0, 4), "and then found: {third:#}");
}

#[test]
fn an_edit_of_the_code_compiles_every_kernel_of_the_file_again() {
    let scratch = Scratch::new("warm-edits-code");
    let folder = scratch.folder("kernels");
    let store = scratch.join("store");
    let file = folder.join("scale.wgsl");
    let text = wgsl_file(&[2, 3], "scales");
    std::fs::write(&file, &text).expect("a kernel file");
    assert_eq!(counts(&warm(&store, &folder, "wgpu")), (2, 0, 0));
    std::fs::write(
        &file,
        text.replace("data[id.x] * SCALE", "SCALE * data[id.x]"),
    )
    .expect("a kernel file");
    let edited = warm(&store, &folder, "wgpu");
    assert_eq!(counts(&edited), (2, 0, 0), "{edited:#}");
}

#[test]
fn a_renamed_cuda_file_takes_its_artifacts_without_compiling() {
    if let Err(reason) = kiln_cuda::CudaCompiler::new() {
        skip(
            "a_renamed_cuda_file_takes_its_artifacts_without_compiling",
            &reason.to_string(),
        );
        return;
    }
    let scratch = Scratch::new("warm-edits-rename");
    let folder = scratch.folder("kernels");
    let store = scratch.join("store");
    std::fs::write(folder.join("scale.cu"), CUDA_FILE).expect("a kernel file");
    let first = warm(&store, &folder, "cuda");
    assert_eq!(counts(&first), (2, 0, 0), "{first:#}");
    std::fs::rename(folder.join("scale.cu"), folder.join("renamed.cu")).expect("a rename");
    let renamed = warm(&store, &folder, "cuda");
    assert_eq!(
        counts(&renamed),
        (0, 2, 0),
        "the text compiled names no file, so the renamed kernels are rekeyed: {renamed:#}"
    );
}
