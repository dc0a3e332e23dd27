//! `kiln warm` on kernels as their authors write them, through the real
//! binary and real NVRTC: headers beside the file and in include folders
//! keyed by their text, whatever the working directory (P13); the text
//! compiled is the file, so a program compiling it finds every kernel
//! `kiln warm` stored, and the reverse (P14); several entries per file and
//! options from an allow-list (B6); `.cu` files go to HIP only when asked.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use kiln_engine::{ArtifactId, ArtifactStore, KernelId, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
use serde_json::Value;
use support::kernels::{cxx_kernel, write_kernel};
use support::{Finished, Scratch, backend, cuda_row, finish, kiln};

/// Runs `kiln --dir STORE --json warm ARGUMENTS... FOLDER` in `cwd`.
fn warm_in(cwd: &Path, store: &Path, folder: &Path, arguments: &[&str]) -> Finished {
    finish(
        kiln(store, &["--json", "warm"])
            .args(arguments)
            .arg(folder)
            .current_dir(cwd)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    )
}

fn counts(row: &Value) -> (u64, u64, u64, u64) {
    let count = |name: &str| row[name].as_u64().unwrap_or(u64::MAX);
    (
        count("compiled"),
        count("from_store"),
        count("rekeyed"),
        count("failed"),
    )
}

/// A folder of three CUDA kernels: one including a sibling header, one a
/// header of an include folder its header names, one including nothing.
fn three_kernels(scratch: &Scratch) -> PathBuf {
    let kernels = scratch.folder("project/kernels");
    let include = scratch.folder("project/include");
    std::fs::write(kernels.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
    std::fs::write(include.join("offset.h"), "#define OFFSET 1.0f\n").expect("a header");
    std::fs::write(
        kernels.join("scaled.cu"),
        "// kiln entry: scaled\n#include \"common.h\"\n\
         extern \"C\" __global__ void scaled(float* y) { y[threadIdx.x] *= SCALE; }\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("offset.cu"),
        "/* Copyright the authors. */\n// kiln entry: shifted\n// kiln include: ../include\n\
         #include <offset.h>\n\
         extern \"C\" __global__ void shifted(float* y) { y[threadIdx.x] += OFFSET; }\n",
    )
    .expect("a kernel");
    write_kernel(
        &kernels,
        "plain.cu",
        cxx_kernel("plain", "x[threadIdx.x] = 1.0f;"),
    );
    kernels
}

// P13
#[test]
fn p13_an_edited_header_recompiles_exactly_the_kernels_reaching_it_from_any_working_directory() {
    let scratch = Scratch::new("warm-edited-header");
    let kernels = three_kernels(&scratch);
    let store = scratch.join("store");
    let elsewhere = scratch.folder("elsewhere");
    // Headers of the same names in the working directory are never read.
    std::fs::write(
        elsewhere.join("common.h"),
        "#error read from the working directory\n",
    )
    .expect("a decoy");
    std::fs::write(
        elsewhere.join("offset.h"),
        "#error read from the working directory\n",
    )
    .expect("a decoy");

    let run = warm_in(scratch.path(), &store, Path::new("project/kernels"), &[]);
    let Some(row) = cuda_row(&run.json(), "P13 edited header") else {
        return;
    };
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(counts(&row), (3, 0, 0, 0), "a cold store: {row:#}");

    let run = warm_in(&elsewhere, &store, &kernels, &[]);
    let row = backend(&run.json(), "cuda").clone();
    assert_eq!(
        counts(&row),
        (0, 3, 0, 0),
        "another working directory, with decoy headers, changes nothing: {row:#}"
    );

    std::fs::write(
        scratch.join("project/include/offset.h"),
        "#define OFFSET 4.0f\n",
    )
    .expect("an edited header");
    let run = warm_in(&elsewhere, &store, &kernels, &[]);
    let row = backend(&run.json(), "cuda").clone();
    assert_eq!(
        counts(&row),
        (1, 2, 0, 0),
        "only the kernel reaching the edited header compiles: {row:#}"
    );
}

// P13
#[test]
fn p13_an_include_found_nowhere_names_the_folders_and_include_adds_one() {
    let scratch = Scratch::new("warm-unresolved");
    let kernels = scratch.folder("kernels");
    let shared = scratch.folder("shared");
    std::fs::write(
        kernels.join("uses.cu"),
        "// kiln entry: uses\n#include \"shared.h\"\n\
         extern \"C\" __global__ void uses(float* y) { y[0] = SHARED; }\n",
    )
    .expect("a kernel");
    std::fs::write(shared.join("shared.h"), "#define SHARED 3.0f\n").expect("a header");
    let store = scratch.join("store");
    let run = warm_in(scratch.path(), &store, &kernels, &[]);
    let report = run.json();
    let Some(row) = cuda_row(&report, "P13 unresolved include") else {
        return;
    };
    assert_eq!(run.status.code(), Some(3), "a kernel failed: {report:#}");
    let first = row["failures"][0]["first_diagnostic"]
        .as_str()
        .unwrap_or_default();
    assert!(first.contains("uses.cu line 2: `shared.h`"), "{first}");
    assert!(first.contains(&kernels.display().to_string()), "{first}");
    assert!(first.contains("--include DIR"), "{first}");

    let include = shared.display().to_string();
    let run = warm_in(scratch.path(), &store, &kernels, &["--include", &include]);
    let row = backend(&run.succeeded_json(), "cuda").clone();
    assert_eq!(
        counts(&row),
        (1, 0, 0, 0),
        "not remembered as failed: {row:#}"
    );
}

/// The kernels of `three_kernels`' files as a program builds them from
/// their text (`include_str!`), with its own kernel names.
fn program_kernels(kernels: &Path) -> Vec<CudaKernel> {
    let include = kernels.join("../include");
    [
        ("program.scaled", "scaled.cu", "scaled"),
        ("program.shifted", "offset.cu", "shifted"),
        ("program.plain", "plain.cu", "plain"),
    ]
    .into_iter()
    .map(|(family, file, entry)| {
        let text = std::fs::read_to_string(kernels.join(file)).expect("the kernel file");
        CudaKernel::builder(KernelId::named(family), entry)
            .source_folder(kernels)
            .include_folder(&include)
            .options(CudaOptions::default().define("WIDTH", "4"))
            .source(text)
    })
    .collect()
}

/// Loads `kernels` as a program on a compile-only sm_90 target over the
/// store at `root`: (compiled, rekeyed, from the store).
fn program_loads(root: &Path, kernels: &[CudaKernel]) -> (u64, u64, u64) {
    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(root)).expect("the store opens"));
    let target = CudaTarget::compile_only(Architecture::new(9, 0))
        .expect("NVRTC, which kiln warm used")
        .with_store(store);
    let variant = target.variant();
    let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
    for kernel in kernels {
        let id = ArtifactId::new(kiln_engine::Kernel::id(kernel), variant);
        loader
            .load(kernel, &id)
            .unwrap_or_else(|error| panic!("the program's kernel compiles: {error}"));
    }
    let statistics = loader.statistics();
    (statistics.compiled, statistics.rekeyed, statistics.hits)
}

/// Adds a `WIDTH=4` specialization to every kernel file of the folder, as
/// the program's define.
fn specialize_width(kernels: &Path) {
    for file in ["scaled.cu", "offset.cu", "plain.cu"] {
        let path = kernels.join(file);
        let text = std::fs::read_to_string(&path).expect("the kernel file");
        std::fs::write(&path, format!("// kiln specialize: WIDTH=4\n{text}"))
            .expect("the kernel file");
    }
}

// P14
#[test]
fn p14_a_program_finds_every_kernel_kiln_warm_stored_and_the_reverse() {
    let scratch = Scratch::new("warm-then-program");
    let kernels = three_kernels(&scratch);
    specialize_width(&kernels);
    let store = scratch.join("store");
    let run = warm_in(scratch.path(), &store, &kernels, &["--cuda-arch", "sm_90"]);
    let Some(row) = cuda_row(&run.json(), "P14 warm then program") else {
        return;
    };
    assert_eq!(counts(&row), (3, 0, 0, 0), "{row:#}");
    assert_eq!(
        program_loads(&store, &program_kernels(&kernels)),
        (0, 3, 0),
        "the program compiles nothing: each kernel takes kiln warm's artifact by its text"
    );

    // The reverse: a program fills a store, then kiln warm compiles nothing.
    let store = scratch.join("store-program-first");
    assert_eq!(program_loads(&store, &program_kernels(&kernels)), (3, 0, 0));
    let run = warm_in(scratch.path(), &store, &kernels, &["--cuda-arch", "sm_90"]);
    let row = backend(&run.succeeded_json(), "cuda").clone();
    assert_eq!(
        counts(&row),
        (0, 0, 3, 0),
        "kiln warm compiles nothing: {row:#}"
    );
}

// B6
#[test]
fn b6_several_entries_of_a_file_are_kernels_each_and_options_come_from_the_list() {
    let scratch = Scratch::new("warm-entries");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        kernels.join("pair.cu"),
        "// kiln entry: forward backward\n// kiln entry: scale<float, 128>\n\
         // kiln options: --use_fast_math -std=c++20 --maxrregcount=64\n\
         extern \"C\" __global__ void forward(float* y) { y[threadIdx.x] = __expf(y[threadIdx.x]); }\n\
         extern \"C\" __global__ void backward(float* y) { y[threadIdx.x] *= 2.0f; }\n\
         template <typename T, int B> __global__ void scale(T* y) { y[blockIdx.x * B + threadIdx.x] *= T(3); }\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("refused.cu"),
        "// kiln entry: k\n// kiln options: -Xptxas=-v\n\
         extern \"C\" __global__ void k() {}\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("two.wgsl"),
        "@group(0) @binding(0) var<storage, read_write> data: array<u32>;\n\
         @compute @workgroup_size(64) fn first(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = 1u; }\n\
         @compute @workgroup_size(64) fn second(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = 2u; }\n",
    )
    .expect("a kernel");
    let store = scratch.join("store");
    let run = warm_in(scratch.path(), &store, &kernels, &[]);
    let report = run.json();
    let wgpu = backend(&report, "wgpu");
    assert_eq!(wgpu["kernels"], 2, "every @compute entry: {wgpu:#}");
    assert_eq!(wgpu["failed"], 0, "{wgpu:#}");
    let Some(row) = cuda_row(&report, "B6 entries") else {
        return;
    };
    // One module of three entries, compiled once, and the refused file.
    assert_eq!(row["kernels"], 2, "{row:#}");
    assert_eq!(counts(&row), (1, 0, 0, 1), "{row:#}");
    let failure = &row["failures"][0];
    assert_eq!(failure["kernel"], "refused.cu", "{row:#}");
    let first = failure["first_diagnostic"].as_str().unwrap_or_default();
    assert!(
        first.contains("-Xptxas=-v") && first.contains("--use_fast_math"),
        "the refusal names the allowed options: {first}"
    );
    // `kiln ls` names the module's entries.
    let listed = finish(&mut kiln(&store, &["--json", "ls", "--kernels-only"])).json();
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|entry| entry["key"]["kernel"].as_str())
        .collect();
    assert!(
        names.contains(&"warm/pair.cu:forward,backward,scale<float, 128>"),
        "{names:?}"
    );
    assert!(names.contains(&"warm/two.wgsl:first"), "{names:?}");
}

// B6: a folder of CUDA kernels that compile exits 0; hipRTC is not asked.
#[test]
fn cuda_only_code_goes_to_hip_only_when_asked() {
    let scratch = Scratch::new("warm-cuda-only");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        kernels.join("ptx.cu"),
        "// kiln entry: lane\n\
         extern \"C\" __global__ void lane(unsigned* y) {\n\
         \x20   unsigned id; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(id));\n\
         \x20   y[threadIdx.x] = id;\n}\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("both.cu"),
        "// kiln entry: both\n// kiln backends: cuda hip\n\
         extern \"C\" __global__ void both(float* y) { y[threadIdx.x] = 1.0f; }\n",
    )
    .expect("a kernel");
    let run = warm_in(scratch.path(), &scratch.join("store"), &kernels, &[]);
    let report = run.json();
    if let Some(row) = cuda_row(&report, "CUDA-only code") {
        assert_eq!(row["kernels"], 2, "{row:#}");
        assert_eq!(row["failed"], 0, "{row:#}");
    }
    let hip = backend(&report, "hip");
    assert_eq!(hip["kernels"], 1, "only the file naming hip: {hip:#}");
    if hip["unavailable"].is_null() {
        assert!(run.status.success(), "{report:#}");
    }
}

// D2: hipRTC's diagnostics name the kernel's file, and what comgr writes
// to standard error joins the kernel's failure, never the run's output.
#[test]
fn hip_diagnostics_name_the_file_and_the_compilers_stderr_stays_with_its_kernel() {
    let scratch = Scratch::new("warm-hip-diagnostics");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        kernels.join("bad.hip"),
        "// kiln entry: k\nextern \"C\" __global__ void k(float* y) {\n  y[0] = undefined_name;\n}\n",
    )
    .expect("a kernel");
    std::fs::write(
        kernels.join("ptx.cu"),
        "// kiln entry: lane\nextern \"C\" __global__ void lane(unsigned* y) {\n\
         \x20 unsigned id; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(id));\n\
         \x20 y[threadIdx.x] = id;\n}\n",
    )
    .expect("a kernel");
    let run = warm_in(
        scratch.path(),
        &scratch.join("store"),
        &kernels,
        &["--backend", "hip"],
    );
    let report = run.json();
    let hip = backend(&report, "hip");
    if let Some(reason) = hip["unavailable"].as_str() {
        kiln_engine::conformance::skip("HIP diagnostics", reason);
        return;
    }
    let failed: Vec<(&str, &str)> = hip["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|failure| {
            (
                failure["kernel"].as_str().unwrap_or_default(),
                failure["first_diagnostic"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let bad = failed
        .iter()
        .find(|(kernel, _)| *kernel == "bad.hip")
        .expect("bad.hip failed");
    assert!(bad.1.contains("bad.hip:3:"), "{bad:?}");
    let ptx = failed
        .iter()
        .find(|(kernel, _)| *kernel == "ptx.cu")
        .expect("ptx.cu failed");
    assert!(
        ptx.1.contains("inline assembly") && !ptx.1.contains("refused an option"),
        "{ptx:?}"
    );
    assert!(
        !run.stderr.contains("invalid instruction"),
        "comgr's words stay with the kernel:\n{}",
        run.stderr
    );
}

// P11: a failure the store remembers is printed as remembered, with how to
// compile it again.
#[test]
fn a_remembered_failure_is_printed_as_remembered_with_how_to_retry() {
    let scratch = Scratch::new("warm-remembered");
    let kernels = scratch.folder("kernels");
    std::fs::write(
        kernels.join("broken.wgsl"),
        "@compute @workgroup_size(1) fn main() { let x = 1.0 + ; }\n",
    )
    .expect("a kernel");
    let store = scratch.join("store");
    let first = warm_in(scratch.path(), &store, &kernels, &[]).json();
    assert_eq!(
        backend(&first, "wgpu")["failures"][0]["remembered"],
        false,
        "a fresh failure: {first:#}"
    );
    let second = warm_in(scratch.path(), &store, &kernels, &[]).json();
    assert_eq!(
        backend(&second, "wgpu")["failures"][0]["remembered"],
        true,
        "{second:#}"
    );
    let text = finish(
        kiln(&store, &["warm"])
            .arg(&kernels)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    );
    assert!(
        text.stdout.contains(
            "wgpu failed (remembered from an earlier compile, not compiled again; --retry-failed"
        ),
        "{}",
        text.stdout
    );
}
