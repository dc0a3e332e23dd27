//! Real hipRTC compiles through the loader and the compile-only target
//! (B2): the three architectures Debian's ROCm 5.2 compiles for, template
//! entry points, headers, options, bad source, unknown entry points, an
//! unsupported target, and a batch of 32.
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use kiln_engine::{
    ArtifactCompiler, ArtifactId, CompileFailure, Kernel, KernelId, KernelLoader, KernelOutcome,
    Severity,
};
use kiln_hip::{
    Architecture, CxxStandard, HipCompiler, HipKernel, HipOptions, HipTarget, HipVariant,
};
use support::{compile_only, compiler};

fn loader(compiler: &HipCompiler) -> KernelLoader<HipTarget> {
    kiln_test_support::loader(compile_only(compiler, "gfx90a"), 4)
}

fn variant(arch: &str) -> HipVariant {
    HipVariant::new(Architecture::new(arch).expect("a valid architecture name"))
}

fn id(kernel: &HipKernel, arch: &str) -> ArtifactId<HipVariant> {
    ArtifactId::new(kernel.id(), variant(arch))
}

/// A kernel of the fixed `source`, in the family `name`.
fn fixed(name: &'static str, entry: &str, source: impl Into<String>) -> HipKernel {
    HipKernel::builder(KernelId::named(name), entry).source(source)
}

fn scale(index: usize) -> HipKernel {
    fixed(
        "tests.scale",
        &format!("scale_{index}"),
        format!(
            "extern \"C\" __global__ void scale_{index}(float* x, float by, unsigned n) {{\n\
             \x20   unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20   if (i < n) x[i] *= by + {index}.0f;\n\
             }}\n"
        ),
    )
}

// B2
#[test]
fn b2_hiprtc_compiles_code_objects_for_gfx90a_gfx908_and_gfx1030() {
    let Some(compiler) = compiler("B2 compiles for three architectures") else {
        return;
    };
    let mut loader = loader(&compiler);
    let kernel = scale(0);
    let architectures = ["gfx90a", "gfx908", "gfx1030"];
    for arch in architectures {
        loader.enqueue(Box::new(kernel.clone()), variant(arch));
    }
    loader.compile_queued();
    assert_eq!(loader.records()[0].count(KernelOutcome::Compiled), 3);
    let mut flags = Vec::new();
    for arch in architectures {
        let compiled = loader
            .load(&kernel, &id(&kernel, arch))
            .unwrap_or_else(|error| panic!("{arch}: {error}"));
        assert_eq!(compiled.architecture().as_str(), arch);
        assert_eq!(compiled.lowered_name(), "scale_0");
        assert!(compiled.kernels().contains(&"scale_0".to_owned()));
        assert!(compiled.code_object_bytes() > 0);
        assert!(compiled.device().is_none(), "described, not loaded");
        flags.push(compiled.elf_flags() & 0xff);
    }
    flags.dedup();
    assert_eq!(
        flags.len(),
        3,
        "each code object names its own processor in its ELF flags"
    );
}

// B2
#[test]
fn b2_a_template_entry_point_loads_by_the_name_hiprtc_lowered_it_to() {
    let Some(compiler) = compiler("B2 template entry points") else {
        return;
    };
    let source = r#"
namespace ops {
template <typename T, int N>
__global__ void fill(T* x) { x[threadIdx.x % N] = T(N); }
}
"#;
    let mut loader = loader(&compiler);
    let float_kernel = fixed("tests.fill", "ops::fill<float, 4>", source);
    let int_kernel = fixed("tests.fill", "ops::fill<int, 8>", source);
    let float_fill = loader
        .load(&float_kernel, &id(&float_kernel, "gfx90a"))
        .expect("fill<float, 4> compiles");
    let int_fill = loader
        .load(&int_kernel, &id(&int_kernel, "gfx90a"))
        .expect("fill<int, 8> compiles");
    assert!(
        float_fill.lowered_name().starts_with("_ZN3ops4fill"),
        "{}",
        float_fill.lowered_name()
    );
    assert_ne!(float_fill.lowered_name(), int_fill.lowered_name());
    assert!(
        float_fill
            .kernels()
            .contains(&float_fill.lowered_name().to_owned())
    );
}

// B2, D2
#[test]
fn b2_d2_a_syntax_error_fails_with_its_first_error_located() {
    let Some(compiler) = compiler("D2 syntax errors") else {
        return;
    };
    let mut loader = loader(&compiler);
    let broken = fixed(
        "tests.broken",
        "broken",
        "extern \"C\" __global__ void broken(float* x) {\n    x[0] = 1.0f\n    undeclared_name(x);\n}\n",
    );
    let error = loader
        .load(&broken, &id(&broken, "gfx90a"))
        .expect_err("the source does not compile");
    let failure = error.compile_failure().expect("a compile failure");
    let first = failure.first_error().expect("an error");
    let location = first.location.as_ref().expect("the first error is located");
    assert_eq!((location.line, location.column), (2, Some(16)), "{first}");
    assert_eq!(location.file, None, "the program's own file has no name");
    let message = error.to_string();
    assert!(
        message.contains("2:16: error: expected ';'"),
        "the message leads with the first error: {message}"
    );
    assert!(message.contains("1 more error suppressed"), "{message}");
    assert!(!failure.log.is_empty(), "hipRTC's log stays on the failure");
}

// B2
#[test]
fn b2_an_unsupported_target_fails_its_kernel_and_the_process_goes_on() {
    let Some(compiler) = compiler("B2 unsupported targets") else {
        return;
    };
    // kiln refuses it before hipRTC.
    let unsupported = support::unsupported_processor(&compiler);
    let mut loader = loader(&compiler);
    let kernel = scale(1);
    loader.enqueue(Box::new(kernel.clone()), variant("gfx90a"));
    loader.enqueue(Box::new(kernel.clone()), variant(unsupported));
    // A feature the processor lacks aborts hipRTC too: refused the same way.
    loader.enqueue(Box::new(kernel.clone()), variant("gfx1030:xnack+"));
    loader.enqueue(Box::new(kernel.clone()), variant("gfx908"));
    loader.compile_queued();

    let error = loader
        .load(&kernel, &id(&kernel, unsupported))
        .expect_err("the unsupported target fails");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "{unsupported} is not a target this hipRTC can compile for"
        )),
        "{message}"
    );
    assert!(
        message.contains("gfx90a") && message.contains("gfx1030"),
        "the error lists the supported targets: {message}"
    );
    let features = loader
        .load(&kernel, &id(&kernel, "gfx1030:xnack+"))
        .expect_err("gfx1030 has no xnack");
    assert!(
        features.to_string().contains("refuses its features"),
        "{features}"
    );

    for arch in ["gfx90a", "gfx908"] {
        loader
            .load(&kernel, &id(&kernel, arch))
            .unwrap_or_else(|error| panic!("the rest of the batch loads ({arch}): {error}"));
    }
    // And hipRTC still compiles afterwards: the process was never at risk.
    let later = scale(2);
    loader
        .load(&later, &id(&later, "gfx90a"))
        .expect("the next compile works");
}

// B2, D2
#[test]
fn b2_d2_an_entry_point_the_source_lacks_fails_with_a_hint() {
    let Some(compiler) = compiler("B2 unknown entry points") else {
        return;
    };
    let mut loader = loader(&compiler);
    let kernel = fixed(
        "tests.unknown_entry",
        "missing",
        "extern \"C\" __global__ void present(float* x) { x[0] = 1.0f; }\n",
    );
    let error = loader
        .load(&kernel, &id(&kernel, "gfx90a"))
        .expect_err("the entry point does not exist");
    let message = error.to_string();
    assert!(
        message.contains("in the entry point `missing`"),
        "{message}"
    );
    assert!(
        message.contains("hint: the entry point `missing`"),
        "{message}"
    );

    let device_function = fixed(
        "tests.device_function_entry",
        "helper",
        "__device__ float helper(float x) { return x; }\n",
    );
    let error = loader
        .load(&device_function, &id(&device_function, "gfx90a"))
        .expect_err("a device function is not an entry point");
    assert!(
        error
            .to_string()
            .contains("is not a kernel hipRTC can name"),
        "{error}"
    );
}

// B2, L5, L6
#[test]
fn b2_thirty_two_kernels_compile_in_one_batch() {
    let Some(compiler) = compiler("B2 a batch of 32") else {
        return;
    };
    let mut loader = loader(&compiler);
    for index in 0..32 {
        loader.enqueue(Box::new(scale(100 + index)), variant("gfx90a"));
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.kernels, 32);
    assert_eq!(batch.count(KernelOutcome::Compiled), 32);
    assert!(batch.workers > 1, "the batch lowered on several workers");
    for index in 0..32 {
        let kernel = scale(100 + index);
        assert!(loader.is_loaded(&id(&kernel, "gfx90a")), "kernel {index}");
    }
}

// B2, D2
#[test]
fn b2_headers_compile_from_their_text_and_an_error_in_one_names_it() {
    let Some(compiler) = compiler("B2 headers") else {
        return;
    };
    let source = "#include \"ops/twice.h\"\nextern \"C\" __global__ void twice_all(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n";
    let mut loader = loader(&compiler);
    let good = HipKernel::builder(KernelId::named("tests.header"), "twice_all")
        .header(
            "ops/twice.h",
            "__device__ inline float twice(float x) { return 2.0f * x; }\n",
        )
        .source(source);
    loader
        .load(&good, &id(&good, "gfx90a"))
        .expect("the header is found by its include name");

    let bad = HipKernel::builder(KernelId::named("tests.header"), "twice_all")
        .header(
            "ops/twice.h",
            "__device__ inline float twice(float x) { return 2.0f * x }\n",
        )
        .source(source);
    assert_ne!(good.id(), bad.id(), "the header's text is part of the id");
    let error = loader
        .load(&bad, &id(&bad, "gfx90a"))
        .expect_err("the header does not compile");
    let first = error
        .compile_failure()
        .and_then(|failure| failure.first_error())
        .expect("a located error")
        .clone();
    let location = first.location.expect("located");
    assert_eq!(location.file.as_deref(), Some("ops/twice.h"), "{error}");
    assert_eq!(location.line, 1);
}

// B2
#[test]
fn b2_options_reach_hiprtc() {
    let Some(compiler) = compiler("B2 options") else {
        return;
    };
    let source = "#ifndef SCALE\n#error SCALE is not defined\n#endif\n\
                  extern \"C\" __global__ void scaled(float* x) { x[threadIdx.x] *= SCALE; }\n";
    let mut loader = loader(&compiler);
    let defined = HipKernel::builder(KernelId::named("tests.options"), "scaled")
        .options(
            HipOptions::new()
                .define("SCALE", "3.0f")
                .standard(CxxStandard::Cxx17)
                .fast_math(true),
        )
        .source(source);
    loader
        .load(&defined, &id(&defined, "gfx90a"))
        .expect("the definition reaches the preprocessor");

    let undefined = fixed("tests.options", "scaled", source);
    let error = loader
        .load(&undefined, &id(&undefined, "gfx90a"))
        .expect_err("without the definition the source refuses to compile");
    assert!(
        error.to_string().contains("SCALE is not defined"),
        "{error}"
    );

    let bad_flag = HipKernel::builder(KernelId::named("tests.options"), "scaled")
        .options(
            HipOptions::new()
                .define("SCALE", "1.0f")
                .flag("--no-such-flag"),
        )
        .source(source);
    let error = loader
        .load(&bad_flag, &id(&bad_flag, "gfx90a"))
        .expect_err("hipRTC refuses the flag");
    assert!(
        error.to_string().contains("hint: hipRTC refused an option"),
        "{error}"
    );

    let arch_flag = HipKernel::builder(KernelId::named("tests.options"), "scaled")
        .options(HipOptions::new().flag("--offload-arch=gfx1100"))
        .source(source);
    let error = loader
        .load(&arch_flag, &id(&arch_flag, "gfx90a"))
        .expect_err("a flag cannot choose the architecture");
    assert!(
        error.to_string().contains("would choose the architecture"),
        "{error}"
    );
}

// B2, D3
#[test]
fn b2_warnings_of_a_successful_compile_are_kept_on_its_record() {
    let Some(compiler) = compiler("B2 warnings") else {
        return;
    };
    let mut loader = loader(&compiler);
    let kernel = fixed(
        "tests.warning",
        "warned",
        "#warning this kernel is only a test\nextern \"C\" __global__ void warned(float* x) { x[0] = 1.0f; }\n",
    );
    loader
        .load(&kernel, &id(&kernel, "gfx90a"))
        .expect("a warning does not fail the compile");
    let record = &loader.records()[0].records[0];
    let warning = record
        .diagnostics
        .iter()
        .find(|diagnostic| diagnostic.severity == Severity::Warning)
        .unwrap_or_else(|| panic!("the warning reached the record: {record:?}"));
    assert!(
        warning.message.contains("this kernel is only a test"),
        "{warning}"
    );
    assert_eq!(
        warning.location.as_ref().map(|location| location.line),
        Some(1)
    );
}

// B2, L6
#[test]
fn b2_a_generator_runs_per_variant_and_its_failure_fails_its_kernel() {
    let Some(compiler) = compiler("B2 generators") else {
        return;
    };
    let mut loader = loader(&compiler);
    let wavefront = HipKernel::builder(KernelId::named("tests.wavefront"), "lanes").generator(
        |architecture: Architecture| {
            // gfx10 and later run 32-wide wavefronts, gfx9 64-wide.
            let lanes = if architecture.processor().len() > 6 {
                32
            } else {
                64
            };
            Ok(format!(
                "extern \"C\" __global__ void lanes(int* x) {{ x[0] = {lanes}; }}\n"
            ))
        },
    );
    let refusing = HipKernel::builder(KernelId::named("tests.refusing"), "never").generator(
        |architecture: Architecture| {
            Err(
                CompileFailure::message(format!("no tile size fits {architecture}"))
                    .with_hint("choose a tile size for it"),
            )
        },
    );
    loader.enqueue(Box::new(refusing.clone()), variant("gfx90a"));
    loader
        .load(&wavefront, &id(&wavefront, "gfx1030"))
        .expect("the generator's source compiles");
    let error = loader
        .load(&refusing, &id(&refusing, "gfx90a"))
        .expect_err("the generator refused");
    // The generator's own failure, message and hint, is the kernel's.
    assert!(
        error.to_string().contains("no tile size fits gfx90a"),
        "{error}"
    );
    assert_eq!(
        error
            .compile_failure()
            .and_then(|failure| failure.hint.as_deref()),
        Some("choose a tile size for it"),
        "{error}"
    );

    let lowered = compiler
        .lower(&wavefront, &id(&wavefront, "gfx1030"))
        .expect("lowers");
    assert!(lowered.source().contains("x[0] = 32"));
}

// P1, B2
#[test]
fn b2_the_artifact_key_follows_the_compiler_the_target_and_the_source() {
    let Some(compiler) = compiler("P1 artifact keys") else {
        return;
    };
    let kernel = scale(3);
    let lowered = |arch| compiler.lower(&kernel, &id(&kernel, arch)).expect("lowers");
    let key = compiler
        .artifact_key(&id(&kernel, "gfx90a"), &lowered("gfx90a"))
        .expect("a key");
    let again = compiler
        .artifact_key(&id(&kernel, "gfx90a"), &lowered("gfx90a"))
        .expect("a key");
    let other_arch = compiler
        .artifact_key(&id(&kernel, "gfx908"), &lowered("gfx908"))
        .expect("a key");
    assert_eq!(key.digest(), again.digest(), "the same inputs, one key");
    assert_ne!(key.digest(), other_arch.digest());
    assert_eq!(
        key.components,
        kiln_engine::KeyedCompiler::key_components(&compiler)
    );
    assert_eq!(
        key.components.compiler,
        format!(
            "{} / artifact {}",
            compiler.identity(),
            kiln_hip::HipKey::ARTIFACT_FORMAT
        )
    );
    assert!(!compiler.identity().hiprtc_version.is_empty());
    assert!(
        compiler.identity().hiprtc_library.name.contains(".so"),
        "{:?}",
        compiler.identity()
    );
    assert_eq!(key.options[0], "--gpu-architecture=gfx90a");
    assert_eq!(key.entry_point, "scale_3");

    let finalized = compiler
        .finalize(&id(&kernel, "gfx90a"), lowered("gfx90a"))
        .expect("compiles");
    assert_eq!(finalized.artifact.key, key, "the artifact carries its key");
}

// B2, L9
#[test]
fn b2_a_truncated_code_object_never_reaches_a_device() {
    let Some(compiler) = compiler("B2 code object checks") else {
        return;
    };
    let kernel = scale(4);
    let artifact_id = id(&kernel, "gfx90a");
    let lowered = compiler.lower(&kernel, &artifact_id).expect("lowers");
    let mut artifact = compiler
        .finalize(&artifact_id, lowered)
        .expect("compiles")
        .artifact;
    let info = kiln_hip::code_object::inspect(&artifact.code_object).expect("a whole object");
    assert!(info.has_kernel("scale_4"));

    artifact
        .code_object
        .truncate(artifact.code_object.len() / 2);
    let error = kiln_hip::code_object::inspect(&artifact.code_object)
        .expect_err("half an object is refused");
    assert!(error.to_string().contains("truncated"), "{error}");
    let mut target = compile_only(&compiler, "gfx90a");
    let refusal = kiln_engine::CompilationTarget::load(&mut target, &artifact_id, &artifact)
        .expect_err("the target refuses it");
    assert!(refusal.message.contains("truncated"), "{refusal}");
}
