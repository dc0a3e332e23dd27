//! Every byte a compile reads is in its key (P13), and one text is one
//! artifact whatever its kernel's name (P14): headers found by kiln beside
//! the file, in include folders and in the toolkit, handed to NVRTC in
//! memory, against real NVRTC and a real disk store.

mod support;

use std::path::Path;
use std::process::Command;

use kiln_cuda::cudarc::driver::PushKernelArg;
use kiln_cuda::{CudaKernel, CudaOptions, CudaTarget};
use kiln_engine::{Kernel, KernelId};

use support::{Scratch, compile, compile_only, disk_store, id_on, loader};

/// Set in a second process: the folder it runs in, which holds a header
/// that must never be read.
const CHILD: &str = "KILN_CUDA_INCLUDES_CHILD";

/// A kernel of `file` in `folder`, as a program that reads its kernel files
/// builds it: the text, and the file's folder for its quoted includes.
fn from_file(family: &'static str, folder: &Path, file: &str, entry: &str) -> CudaKernel {
    let text = std::fs::read_to_string(folder.join(file)).expect("the kernel file");
    CudaKernel::builder(KernelId::named(family), entry)
        .program_name(file)
        .source_folder(folder)
        .source(text)
}

const USES_COMMON: &str = "#include \"common.h\"\n\
     extern \"C\" __global__ void scaled(float* y) { y[threadIdx.x] *= SCALE; }\n";
const USES_NOTHING: &str =
    "extern \"C\" __global__ void plain(float* y) { y[threadIdx.x] = 1.0f; }\n";

fn target_on(store_root: &Path, what: &str) -> Option<CudaTarget> {
    Some(compile_only(what)?.with_store(disk_store(store_root)))
}

/// Loads every kernel on a fresh loader over the store at `store_root` and
/// answers (compiled, from the store, rekeyed).
fn load_all(store_root: &Path, kernels: &[CudaKernel]) -> (u64, u64, u64) {
    let target = target_on(store_root, "P13").expect("NVRTC, checked by the caller");
    let mut loader = loader(target);
    for kernel in kernels {
        let id = id_on(loader.target(), kernel);
        loader
            .load(kernel, &id)
            .unwrap_or_else(|error| panic!("{} compiles: {error}", kernel.program_name()));
    }
    let statistics = loader.statistics();
    (statistics.compiled, statistics.hits, statistics.rekeyed)
}

// P13
#[test]
fn p13_an_edited_header_compiles_again_exactly_the_kernels_that_reach_it() {
    if compile_only("P13 edited header").is_none() {
        return;
    }
    let scratch = Scratch::new("edited-header");
    let kernels = scratch.folder("kernels");
    let store = scratch.folder("store");
    std::fs::write(kernels.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
    std::fs::write(kernels.join("scaled.cu"), USES_COMMON).expect("a kernel");
    std::fs::write(kernels.join("plain.cu"), USES_NOTHING).expect("a kernel");
    let both = || {
        [
            from_file("tests.scaled", &kernels, "scaled.cu", "scaled"),
            from_file("tests.plain", &kernels, "plain.cu", "plain"),
        ]
    };
    assert_eq!(load_all(&store, &both()), (2, 0, 0), "a cold store");
    assert_eq!(load_all(&store, &both()), (0, 2, 0), "nothing changed");
    // The content changes, not only the timestamp: a new macro value.
    std::fs::write(kernels.join("common.h"), "#define SCALE 3.0f\n").expect("a header");
    let edited = both();
    assert_eq!(
        load_all(&store, &edited),
        (1, 1, 0),
        "the kernel including the header compiles again, the other is from the store"
    );
    let target = compile_only("P13 edited header").expect("NVRTC");
    let ptx = compile(&target, &edited[0]).expect("compiles").artifact.ptx;
    assert!(
        ptx.contains("0f40400000"),
        "the new header's 3.0f reached NVRTC:\n{ptx}"
    );
}

// P13
#[test]
fn p13_the_same_text_and_headers_in_two_folders_are_one_artifact() {
    if compile_only("P13 two folders").is_none() {
        return;
    }
    let scratch = Scratch::new("two-folders");
    let store = scratch.folder("store");
    let mut kernels = Vec::new();
    for (index, name) in ["first", "second"].into_iter().enumerate() {
        let folder = scratch.folder(name);
        std::fs::write(folder.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
        std::fs::write(folder.join("scaled.cu"), USES_COMMON).expect("a kernel");
        let family = ["tests.first", "tests.second"][index];
        kernels.push(from_file(family, &folder, "scaled.cu", "scaled"));
    }
    assert_ne!(kernels[0].id(), kernels[1].id(), "two kernels by name");
    assert_eq!(
        load_all(&store, &kernels),
        (1, 0, 1),
        "the second takes the first's artifact by its text, compiling nothing"
    );
}

// P13
#[test]
fn p13_an_include_found_nowhere_fails_naming_the_folders_searched() {
    let Some(target) = compile_only("P13 unresolved include") else {
        return;
    };
    let scratch = Scratch::new("unresolved");
    let kernels = scratch.folder("kernels");
    let include = scratch.folder("include");
    std::fs::write(kernels.join("scaled.cu"), USES_COMMON).expect("a kernel");
    let text = std::fs::read_to_string(kernels.join("scaled.cu")).expect("the kernel");
    let kernel = CudaKernel::builder(KernelId::named("tests.unresolved"), "scaled")
        .program_name("scaled.cu")
        .source_folder(&kernels)
        .include_folder(&include)
        .source(text);
    let error = compile(&target, &kernel)
        .map(|_| ())
        .expect_err("common.h is nowhere");
    let message = error.to_string();
    assert!(
        message.contains("scaled.cu line 1: `common.h`"),
        "{message}"
    );
    assert!(
        message.contains(&kernels.display().to_string())
            && message.contains(&include.display().to_string()),
        "{message}"
    );
    assert!(message.contains("include_folder"), "{message}");
    assert!(error.transient, "never remembered: {message}");

    // Once the header is in the include folder, the kernel compiles.
    std::fs::write(include.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
    let text = std::fs::read_to_string(kernels.join("scaled.cu")).expect("the kernel");
    let kernel = CudaKernel::builder(KernelId::named("tests.unresolved"), "scaled")
        .source_folder(&kernels)
        .include_folder(&include)
        .source(text);
    compile(&target, &kernel).expect("found in the include folder");
}

// P13
#[test]
fn p13_no_include_path_reaches_nvrtc() {
    let Some(target) = compile_only("P13 include flags") else {
        return;
    };
    let scratch = Scratch::new("include-flag");
    let folder = scratch.folder("include");
    std::fs::write(folder.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
    for flag in [
        format!("-I{}", folder.display()),
        format!("--include-path={}", folder.display()),
        "-include".to_owned(),
    ] {
        let kernel = CudaKernel::builder(KernelId::named("tests.flag"), "plain")
            .options(CudaOptions::default().flag(flag.clone()))
            .source(USES_NOTHING);
        let error = compile(&target, &kernel)
            .map(|_| ())
            .expect_err("an include path is refused");
        assert!(
            error
                .to_string()
                .contains("names a file or an include folder"),
            "{flag}: {error}"
        );
    }
}

// P13: the working directory is searched by NVRTC unless told otherwise;
// a second process runs in a folder holding a header of that name.
#[test]
fn p13_the_working_directory_never_changes_an_artifact() {
    if let Some(folder) = std::env::var_os(CHILD) {
        let target = compile_only("P13 working directory").expect("NVRTC in the child");
        // A generated text has no folder: its header must be given.
        let generated = CudaKernel::builder(KernelId::named("tests.cwd"), "scaled")
            .generator(|_architecture| Ok(USES_COMMON.to_owned()));
        let error = compile(&target, &generated)
            .map(|_| ())
            .expect_err("common.h of the working directory is never read");
        assert!(
            error.to_string().contains("common.h"),
            "{error}\nin {folder:?}"
        );
        let given = CudaKernel::builder(KernelId::named("tests.cwd"), "scaled")
            .header("common.h", "#define SCALE 2.5f\n")
            .source(USES_COMMON);
        let ptx = compile(&target, &given).expect("compiles").artifact.ptx;
        assert!(
            ptx.contains("0f40200000"),
            "the given header's 2.5f:\n{ptx}"
        );
        return;
    }
    if compile_only("P13 working directory").is_none() {
        return;
    }
    let scratch = Scratch::new("working-directory");
    let folder = scratch.folder("cwd");
    std::fs::write(folder.join("common.h"), "#define SCALE 5.0f\n").expect("a header");
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "p13_the_working_directory_never_changes_an_artifact",
            "--exact",
            "--nocapture",
        ])
        .current_dir(&folder)
        .env(CHILD, &folder)
        .output()
        .expect("the test binary runs again");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "{text}"
    );
}

// P14
#[test]
fn p14_one_text_is_one_artifact_whatever_the_kernels_name() {
    let Some(target) = compile_only("P14 kernel names") else {
        return;
    };
    // Line info is where NVRTC writes the program's name.
    let options = CudaOptions::default().flag("-lineinfo");
    let cubins: Vec<Vec<u8>> = [("tests.alpha", "alpha.cu"), ("tests.b", "b.cu")]
        .into_iter()
        .map(|(family, program)| {
            let kernel = CudaKernel::builder(KernelId::named(family), "plain")
                .program_name(program)
                .options(options.clone())
                .source(USES_NOTHING);
            compile(&target, &kernel).expect("compiles").artifact.cubin
        })
        .collect();
    assert!(
        cubins[0] == cubins[1],
        "one text, one cubin: {} and {} bytes",
        cubins[0].len(),
        cubins[1].len()
    );
}

// P13: the toolkit's headers are found and handed over like a kernel's.
#[test]
fn p13_toolkit_headers_are_found_and_keyed_by_their_text() {
    let Some(target) = compile_only("P13 toolkit headers") else {
        return;
    };
    let Some(folder) = kiln_cuda::toolkit::include_folder() else {
        let reason = "no CUDA toolkit headers (set KILN_CUDA_INCLUDE to a folder holding \
                      cuda_runtime.h)";
        if support::nvrtc_is_required() {
            panic!("P13 toolkit headers: {reason}, and KILN_REQUIRE_NVRTC=1");
        }
        kiln_engine::conformance::skip("P13 toolkit headers", reason);
        return;
    };
    let nvrtc = kiln_engine::CompilationTarget::compiler(&target).version();
    let headers = kiln_cuda::toolkit::version(folder);
    if headers.map(|(major, _)| major) != Some(nvrtc.major) {
        kiln_engine::conformance::skip(
            "P13 toolkit headers",
            &format!(
                "the toolkit headers at {} are CUDA {headers:?}, NVRTC is {nvrtc}: another \
                 major version does not compile with it",
                folder.display()
            ),
        );
        return;
    }
    let kernel = CudaKernel::builder(KernelId::named("tests.half"), "halves").source(
        "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n\
             extern \"C\" __global__ void halves(__half* y) {\n\
             \x20   cooperative_groups::this_thread_block().sync();\n\
             \x20   y[threadIdx.x] = __float2half(1.5f);\n}\n",
    );
    assert!(
        kernel
            .headers()
            .iter()
            .any(|header| header.name == "cuda_fp16.h"),
        "the toolkit's header is among the kernel's"
    );
    compile(&target, &kernel).unwrap_or_else(|error| panic!("compiles: {error}"));
}

const TWO_ENTRIES: &str = "extern \"C\" __global__ void forward(float* y) { y[threadIdx.x] += 1.0f; }\n\
     template <typename T, int B> __global__ void scale(T* y) { y[blockIdx.x * B + threadIdx.x] *= T(3); }\n";

// B6
#[test]
fn b6_one_compile_makes_one_module_holding_every_entry() {
    let Some(target) = compile_only("B6 entries") else {
        return;
    };
    let kernel = CudaKernel::builder(KernelId::named("tests.entries"), "forward")
        .entry("scale<float, 128>")
        .source(TWO_ENTRIES);
    assert_eq!(
        kernel
            .entries()
            .map(|entry| entry.expression())
            .collect::<Vec<_>>(),
        ["forward", "scale<float, 128>"]
    );
    let artifact = compile(&target, &kernel).expect("compiles").artifact;
    assert_eq!(artifact.lowered_name, "forward");
    let [(expression, symbol)] = artifact.more_entries.as_slice() else {
        panic!("one more entry: {:?}", artifact.more_entries);
    };
    assert_eq!(expression, "scale<float, 128>");
    assert!(symbol.starts_with("_Z5scaleIfLi128E"), "{symbol}");
    assert!(artifact.ptx.contains(&format!(".entry {symbol}(")));
    assert!(artifact.ptx.contains(".entry forward("));

    let twice = CudaKernel::builder(KernelId::named("tests.entries"), "forward")
        .entry("forward")
        .source(TWO_ENTRIES);
    let error = compile(&target, &twice)
        .map(|_| ())
        .expect_err("named twice");
    assert!(error.to_string().contains("named twice"), "{error}");
}

// B6: each entry of the one loaded module launches by name.
#[test]
fn b6_every_entry_loads_by_name_from_the_module_and_launches() {
    let Some((context, target)) = support::on_own_context("B6 entries on a device") else {
        return;
    };
    let mut loader = loader(target);
    let kernel = CudaKernel::builder(KernelId::named("tests.entries.device"), "forward")
        .entry("scale<float, 128>")
        .source(TWO_ENTRIES);
    let id = id_on(loader.target(), &kernel);
    let loaded = loader.load(&kernel, &id).expect("loads");
    let stream = context.default_stream();
    let mut values = stream.clone_htod(&[1.0f32; 128]).expect("a copy");
    let config = kiln_cuda::cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let forward = loaded.function().expect("the first entry");
    let scale = loaded
        .function_of("scale<float, 128>")
        .expect("the second entry");
    for function in [forward, &scale] {
        let mut launch = stream.launch_builder(function);
        launch.arg(&mut values);
        // SAFETY: both entries take one float* of 128 floats, which
        // `values` holds.
        unsafe { launch.launch(config) }.expect("launches");
    }
    let values = stream.clone_dtoh(&values).expect("a copy");
    assert!(
        values.iter().all(|value| *value == 6.0),
        "(1 + 1) * 3: {values:?}"
    );
    assert!(loaded.function_of("backward").is_err(), "no such entry");
}
