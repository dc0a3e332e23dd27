//! A HIP kernel's includes are resolved by kiln and keyed by their text
//! (P13): a header beside the file, edited, compiles again; a header found
//! nowhere fails naming where kiln looked; no include path reaches hipRTC.

mod support;

use std::path::Path;

use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader};
use kiln_hip::{Architecture, HipKernel, HipOptions, HipVariant};
use kiln_test_support::Scratch;
use support::{compile_only, compiler};

const SOURCE: &str = "#include <hip/hip_runtime.h>\n#include \"common.h\"\n\
     extern \"C\" __global__ void scaled(float* y) { y[threadIdx.x] *= SCALE; }\n";

fn kernel(folder: &Path) -> HipKernel {
    HipKernel::builder(KernelId::named("tests.includes"), "scaled")
        .source_folder(folder)
        .source(SOURCE)
}

// P13
#[test]
fn p13_a_header_beside_the_file_is_keyed_by_its_text_and_found_nowhere_names_the_folders() {
    let Some(compiler) = compiler("P13 HIP includes") else {
        return;
    };
    let scratch = Scratch::new("hip-includes");
    let folder = scratch.folder("kernels");
    let mut loader = kiln_test_support::loader(compile_only(&compiler, "gfx90a"), 2);
    let variant = HipVariant::new(Architecture::new("gfx90a").expect("a name"));

    let missing = kernel(&folder);
    let error = loader
        .load(&missing, &ArtifactId::new(missing.id(), variant.clone()))
        .expect_err("common.h is nowhere yet");
    let message = error.to_string();
    assert!(message.contains("line 2: `common.h`"), "{message}");
    assert!(message.contains(&folder.display().to_string()), "{message}");

    std::fs::write(folder.join("common.h"), "#define SCALE 2.0f\n").expect("a header");
    let first = kernel(&folder);
    loader
        .load(&first, &ArtifactId::new(first.id(), variant.clone()))
        .expect("found beside the file; <hip/hip_runtime.h> is hipRTC's own");
    std::fs::write(folder.join("common.h"), "#define SCALE 3.0f\n").expect("an edit");
    let edited = kernel(&folder);
    assert_ne!(first.id(), edited.id(), "the header's text is in the id");
    loader
        .load(&edited, &ArtifactId::new(edited.id(), variant.clone()))
        .expect("compiles again");
    assert_eq!(loader.statistics().compiled, 2);

    let flagged = HipKernel::builder(KernelId::named("tests.includes"), "scaled")
        .options(HipOptions::new().flag(format!("-I{}", folder.display())))
        .header("common.h", "#define SCALE 2.0f\n")
        .source(SOURCE);
    let error = loader
        .load(&flagged, &ArtifactId::new(flagged.id(), variant))
        .expect_err("an include path is refused");
    assert!(
        error
            .to_string()
            .contains("names a file or an include folder"),
        "{error}"
    );
}

// B2: `k<64>` names `template <unsigned N>` on hipRTC as in C++ (and on
// NVRTC), though hipRTC spells the instantiation `k<64u>`.
#[test]
fn b2_an_unsigned_template_argument_is_written_as_in_cpp() {
    let Some(compiler) = compiler("B2 unsigned template arguments") else {
        return;
    };
    let mut loader = KernelLoader::new(compile_only(&compiler, "gfx90a"));
    let variant = HipVariant::new(Architecture::new("gfx90a").expect("a name"));
    let source = "template <unsigned N> __global__ void fill(float* y) { y[threadIdx.x % N] = N; }\n\
                  template <int N> __global__ void signed_fill(float* y) { y[0] = N; }\n";
    for entry in ["fill<64>", "fill<64u>", "signed_fill<8>"] {
        let kernel = HipKernel::builder(KernelId::named("tests.unsigned"), entry).source(source);
        loader
            .load(&kernel, &ArtifactId::new(kernel.id(), variant.clone()))
            .unwrap_or_else(|error| panic!("{entry} names its instantiation: {error}"));
    }
}

// B6: one compile, one code object holding every entry, each by name.
#[test]
fn b6_one_compile_makes_one_code_object_holding_every_entry() {
    let Some(compiler) = compiler("B6 HIP entries") else {
        return;
    };
    let mut loader = KernelLoader::new(compile_only(&compiler, "gfx90a"));
    let variant = HipVariant::new(Architecture::new("gfx90a").expect("a name"));
    let source = "extern \"C\" __global__ void forward(float* y) { y[threadIdx.x] += 1.0f; }\n\
                  template <unsigned B> __global__ void scale(float* y) { y[blockIdx.x * B + threadIdx.x] *= 3.0f; }\n";
    let kernel = HipKernel::builder(KernelId::named("tests.entries"), "forward")
        .entry("scale<128>")
        .source(source);
    let loaded = loader
        .load(&kernel, &ArtifactId::new(kernel.id(), variant.clone()))
        .unwrap_or_else(|error| panic!("both entries compile: {error}"));
    assert_eq!(loaded.lowered_name(), "forward");
    let symbol = loaded
        .lowered_name_of("scale<128>")
        .expect("the second entry");
    assert!(
        loaded
            .kernels()
            .iter()
            .any(|kernel| kernel.starts_with(symbol)),
        "{symbol} in {:?}",
        loaded.kernels()
    );
    assert_eq!(loader.statistics().compiled, 1, "one compile");

    let twice = HipKernel::builder(KernelId::named("tests.entries"), "forward")
        .entry("forward")
        .source(source);
    let error = loader
        .load(&twice, &ArtifactId::new(twice.id(), variant))
        .expect_err("named twice");
    assert!(error.to_string().contains("named twice"), "{error}");
}
