//! Real compiles with no device: the CUDA backend against the real NVRTC,
//! kernels to cubin and PTX, diagnostics, entry points, options, batches,
//! keys and missing libraries.

mod support;

use kiln_cuda::{
    Architecture, CudaKernel, CudaLibrary, CudaOptions, CudaTarget, CxxStandard, Error, LoadedImage,
};
use kiln_engine::{CompilationTarget, Failure, Kernel, KernelId, KernelOutcome, Severity, Stage};
use support::{compile, compile_only, fixed, id_on, loader};

// B1
#[test]
fn b1_a_valid_kernel_compiles_to_a_cubin_for_the_exact_architecture_and_its_ptx() {
    let Some(target) = compile_only("B1 compile") else {
        return;
    };
    let saxpy = fixed("tests.saxpy", "saxpy", support::SAXPY);
    let finalized = compile(&target, &saxpy).expect("saxpy compiles");
    let artifact = &finalized.artifact;
    assert_eq!(
        &artifact.cubin[..4],
        b"\x7fELF",
        "the cubin is an ELF image"
    );
    assert_eq!(artifact.architecture, Architecture::new(9, 0));
    assert!(artifact.ptx.contains(".target sm_90"), "{}", artifact.ptx);
    assert!(artifact.ptx.contains(".entry saxpy("), "{}", artifact.ptx);
    assert_eq!(artifact.lowered_name, "saxpy");
    assert!(
        artifact.key.components.compiler.starts_with("nvrtc "),
        "{}",
        artifact.key
    );
    assert!(
        finalized.diagnostics.is_empty(),
        "{:?}",
        finalized.diagnostics
    );

    let mut loader = loader(target);
    let loaded = loader
        .load(&saxpy, &id_on(loader.target(), &saxpy))
        .expect("a compile-only target describes what it compiled");
    assert_eq!(loaded.image(), LoadedImage::Described);
    assert!(loaded.device().is_none());
    // B5: a described kernel has no cudarc module or function to give out,
    // and says why.
    let function = loaded.function();
    assert!(
        matches!(function, Err(Error::CompileOnly { .. })),
        "{function:?}"
    );
    let module = loaded.module();
    assert!(
        matches!(module, Err(Error::CompileOnly { .. })),
        "{module:?}"
    );
}

// D2
#[test]
fn d2_a_syntax_error_names_its_line_and_column_and_counts_the_cascade() {
    let Some(target) = compile_only("D2 syntax error") else {
        return;
    };
    let mut loader = loader(target);
    let broken = support::broken(0);
    let error = support::assert_broken_fails(&mut loader, &broken, "stays on the value");
    let message = error.to_string();
    assert!(
        message.contains("(1 more error suppressed)"),
        "the cascade is counted: {message}"
    );
    assert!(
        !message.contains("expected an expression"),
        "the cascade is not printed: {message}"
    );
    let failure = error.compile_failure().expect("a compile failure");
    assert!(
        failure.log.contains("2 errors detected"),
        "the raw log is kept"
    );
}

// B1
#[test]
fn b1_a_template_entry_point_resolves_to_its_lowered_name() {
    let Some(target) = compile_only("B1 template entry point") else {
        return;
    };
    let scale = CudaKernel::builder(KernelId::named("tests.scale"), "scale<float, 128>")
        .header("common.cuh", "#define OFFSET 1\n")
        .source(
            "#include \"common.cuh\"\n\
             template <typename T, int B>\n\
             __global__ void scale(T* y, T a) {\n\
             \x20   int i = blockIdx.x * B + threadIdx.x;\n\
             \x20   y[i] = y[i] * a + OFFSET;\n\
             }\n",
        );
    let artifact = compile(&target, &scale)
        .expect("the template compiles")
        .artifact;
    assert_eq!(artifact.lowered_name, "_Z5scaleIfLi128EEvPT_S0_");
    assert!(
        artifact
            .ptx
            .contains(&format!(".entry {}(", artifact.lowered_name)),
        "{}",
        artifact.ptx
    );
    assert_eq!(artifact.key.entry_point, "scale<float, 128>");
    assert_eq!(artifact.key.headers.len(), 1);
    assert_eq!(artifact.key.headers[0].include_name, "common.cuh");
}

// B1
#[test]
fn b1_every_option_is_spelled_as_nvrtc_takes_it() {
    let Some(target) = compile_only("B1 options") else {
        return;
    };
    let options = CudaOptions::default()
        .standard(CxxStandard::Cxx20)
        .fast_math(true)
        .define("SCALE", "2.0f")
        .define_name("WITH_OFFSET")
        .max_registers(32)
        .flag("-lineinfo");
    let kernel = CudaKernel::builder(KernelId::named("tests.options"), "scaled")
        .options(options.clone())
        .source(
            "extern \"C\" __global__ void scaled(float* y) {\n\
             #ifdef WITH_OFFSET\n\
             \x20   y[threadIdx.x] = SCALE * __expf(y[threadIdx.x]) + 1.0f;\n\
             #endif\n\
             }\n",
        );
    let artifact = compile(&target, &kernel)
        .unwrap_or_else(|failure| panic!("NVRTC takes every option: {failure}"))
        .artifact;
    // P13: past the kernel's own, NVRTC is told not to search the
    // program's folder (for a program of no folder, the working directory).
    let mut expected = options.arguments(support::ARCHITECTURE);
    expected.push("--no-source-include".to_owned());
    assert_eq!(artifact.key.options, expected);
    assert!(artifact.ptx.contains(".loc"), "-lineinfo reached NVRTC");
}

// B1
#[test]
fn b1_every_cxx_standard_is_one_nvrtc_compiles_in() {
    let Some(target) = compile_only("B1 C++ standards") else {
        return;
    };
    for (standard, cplusplus) in CxxStandard::ALL
        .into_iter()
        .zip(["199711L", "201103L", "201402L", "201703L", "202002L"])
    {
        let kernel = CudaKernel::builder(
            KernelId::named("tests.standard").parameter(&standard.flag()),
            "probe",
        )
        .options(CudaOptions::default().standard(standard))
        .source(format!(
            "#if __cplusplus != {cplusplus}\n\
             #error the standard is not {standard:?}\n\
             #endif\n\
             extern \"C\" __global__ void probe(int* y) {{ y[0] = 1; }}\n"
        ));
        let artifact = compile(&target, &kernel)
            .unwrap_or_else(|failure| panic!("NVRTC compiles in {standard:?}: {failure}"))
            .artifact;
        assert!(
            artifact
                .key
                .options
                .iter()
                .any(|option| option == standard.flag()),
            "{:?}",
            artifact.key.options
        );
    }
    let unchosen = CudaOptions::default().arguments_past_architecture();
    assert_eq!(unchosen[0], kiln_cuda::DEFAULT_STANDARD.flag());
    assert_eq!(unchosen[0], "-std=c++17");
}

// L5, S3
#[test]
fn l5_sixty_four_kernels_compile_in_one_batch() {
    let Some(target) = compile_only("L5 64 kernels") else {
        return;
    };
    let mut loader = loader(target);
    for index in 0..64 {
        let variant = loader.target().variant();
        loader.enqueue(Box::new(support::distinct(index)), variant);
    }
    loader.compile_queued();
    assert_eq!(loader.records().len(), 1, "one batch");
    let batch = &loader.records()[0];
    assert_eq!(batch.kernels, 64);
    assert_eq!(batch.count(KernelOutcome::Compiled), 64);
    assert!(
        batch.workers > 1,
        "the batch ran on {} workers",
        batch.workers
    );
    let summed: std::time::Duration = batch.records.iter().map(|record| record.work).sum();
    assert!(
        batch.wall < summed,
        "wall {:?} < work {summed:?}",
        batch.wall
    );
    for index in 0..64 {
        let kernel = support::distinct(index);
        assert!(
            loader.is_loaded(&id_on(loader.target(), &kernel)),
            "kernel {index}"
        );
    }
}

// D2
#[test]
fn d2_an_unknown_architecture_is_a_clear_error_with_a_hint() {
    let Some(target) = compile_only("D2 unknown architecture") else {
        return;
    };
    let ancient = CudaKernel::builder(KernelId::named("tests.ancient"), "saxpy")
        .options(CudaOptions::default().architecture(Architecture::new(1, 0)))
        .source(support::SAXPY);
    let mut loader = loader(target);
    let error = loader
        .load(&ancient, &id_on(loader.target(), &ancient))
        .expect_err("NVRTC knows no sm_10");
    let message = error.to_string();
    assert!(
        message.contains("invalid value for --gpu-architecture"),
        "the compiler's error leads: {message}"
    );
    assert!(
        message.contains("hint: NVRTC") && message.contains("does not compile for sm_10"),
        "the hint names the architecture: {message}"
    );
    assert!(
        message.contains("sm_90"),
        "the hint lists the known ones: {message}"
    );
}

// D2
#[test]
fn d2_an_unknown_entry_point_is_an_error_with_a_hint() {
    let Some(target) = compile_only("D2 unknown entry point") else {
        return;
    };
    let misnamed = fixed("tests.misnamed", "sxapy", support::SAXPY);
    let failure = compile(&target, &misnamed).expect_err("there is no sxapy");
    let message = failure.to_string();
    assert!(
        message.starts_with(r#"error: entry point `sxapy`: identifier "sxapy" is undefined"#),
        "{message}"
    );
    assert!(
        message.contains("hint: the entry point `sxapy`"),
        "{message}"
    );
}

// D1, D3
#[test]
fn d1_warnings_of_a_successful_compile_stay_on_the_record() {
    let Some(target) = compile_only("D1 warnings") else {
        return;
    };
    let unused = fixed(
        "tests.unused",
        "unused",
        "extern \"C\" __global__ void unused(float* y) {\n    int never_read;\n    y[0] = 1.0f;\n}\n",
    );
    let finalized = compile(&target, &unused).expect("a warning is no failure");
    let warning = finalized
        .diagnostics
        .iter()
        .find(|diagnostic| diagnostic.severity == Severity::Warning)
        .unwrap_or_else(|| panic!("the warning is kept: {:?}", finalized.diagnostics));
    assert!(warning.message.contains("never_read"), "{warning}");
    let location = warning.location.as_ref().expect("located");
    assert_eq!((location.line, location.column), (2, Some(9)), "{warning}");
}

// L6
#[test]
fn l6_bad_kernels_fail_alone_and_the_batch_goes_on() {
    let Some(target) = compile_only("L6 bad input") else {
        return;
    };
    let mut loader = loader(target);
    let variant = loader.target().variant();
    let good = support::distinct(0);
    let bad: Vec<CudaKernel> = vec![
        support::broken(0),
        fixed("tests.misnamed", "sxapy", support::SAXPY),
        CudaKernel::builder(KernelId::named("tests.ancient"), "saxpy")
            .options(CudaOptions::default().architecture(Architecture::new(1, 0)))
            .source(support::SAXPY),
        CudaKernel::builder(KernelId::named("tests.refusing-generator"), "saxpy").generator(
            |_architecture| {
                Err(kiln_engine::CompileFailure::message(
                    "no source for this shape",
                ))
            },
        ),
        CudaKernel::builder(KernelId::named("tests.flag"), "saxpy")
            .options(CudaOptions::default().flag("--no-such-option"))
            .source(support::SAXPY),
    ];
    loader.enqueue(Box::new(good.clone()), variant);
    for kernel in &bad {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();
    assert_eq!(loader.records()[0].count(KernelOutcome::Compiled), 1);
    assert_eq!(loader.records()[0].count(KernelOutcome::Failed), bad.len());
    assert!(loader.is_loaded(&id_on(loader.target(), &good)));
    for kernel in &bad {
        let error = loader
            .load(kernel, &id_on(loader.target(), kernel))
            .expect_err("a bad kernel fails");
        assert_eq!(error.kernel, kernel.id(), "its own error: {error}");
        assert!(matches!(error.failure, Failure::Compile(_)), "{error}");
        eprintln!("{error}");
    }
}

// L9
#[test]
fn l9_a_kernel_built_for_a_newer_architecture_is_refused_by_a_compile_only_target() {
    let Some(target) = compile_only("L9 compile-only refusal") else {
        return;
    };
    let newer = CudaKernel::builder(KernelId::named("tests.newer"), "saxpy")
        .options(CudaOptions::default().architecture(Architecture::new(10, 0)))
        .source(support::SAXPY);
    let mut loader = loader(target);
    let error = loader
        .load(&newer, &id_on(loader.target(), &newer))
        .expect_err("an sm_90 device runs neither sm_100 code nor its PTX");
    assert_eq!(error.stage, Stage::Load);
    assert!(matches!(error.failure, Failure::Refused(_)), "{error}");
    assert_eq!(loader.statistics().refused, 1);
}

// B1
#[test]
fn b1_a_truncated_cubin_is_never_described_as_loadable_and_the_ptx_stands_in() {
    let Some(mut target) = compile_only("B1 truncated cubin") else {
        return;
    };
    let saxpy = fixed("tests.saxpy", "saxpy", support::SAXPY);
    let mut artifact = compile(&target, &saxpy).expect("saxpy compiles").artifact;
    let id = id_on(&target, &saxpy);
    artifact.cubin.truncate(artifact.cubin.len() / 2);
    target
        .load(&id, &artifact)
        .expect("the PTX stands in for the truncated cubin");
    artifact.ptx.clear();
    let refusal = target
        .load(&id, &artifact)
        .expect_err("nothing is left to load");
    assert!(refusal.message.contains("truncated"), "{refusal}");
}

// P1
#[test]
fn p1_the_key_covers_compiler_architecture_options_source_headers_and_entry() {
    let Some(target) = compile_only("P1 key components") else {
        return;
    };
    let base = || {
        CudaKernel::builder(KernelId::named("tests.keyed"), "keyed<float>")
            .header("common.cuh", "#define OFFSET 1\n")
            .options(CudaOptions::default().define("N", "4"))
    };
    let source = "#include \"common.cuh\"\ntemplate <typename T> __global__ void keyed(T* y) { y[0] = N + OFFSET; }\n";
    let key = |kernel: CudaKernel| compile(&target, &kernel).expect("compiles").artifact.key;
    let reference = key(base().source(source));
    assert_eq!(
        reference,
        key(base().source(source)),
        "the same inputs, the same key"
    );
    // The NVRTC opened (13, or 12 in the second run of `cargo xtask test`).
    let major = target.compiler().version().major;
    assert!(
        reference
            .components
            .compiler
            .starts_with(&format!("nvrtc {major}.")),
        "{reference}"
    );
    assert!(
        reference.components.compiler.contains(" blake3:"),
        "the compiler names its library by digest: {reference}"
    );
    let changed = [
        (
            key(base()
                .options(CudaOptions::default().define("N", "5"))
                .source(source)),
            "options",
        ),
        (key(base().source(format!("{source}\n"))), "source"),
        (
            key(
                CudaKernel::builder(KernelId::named("tests.keyed"), "keyed<float>")
                    .header("common.cuh", "#define OFFSET 2\n")
                    .options(CudaOptions::default().define("N", "4"))
                    .source(source),
            ),
            "headers",
        ),
        (
            key(
                CudaKernel::builder(KernelId::named("tests.keyed"), "keyed<double>")
                    .header("common.cuh", "#define OFFSET 1\n")
                    .options(CudaOptions::default().define("N", "4"))
                    .source(source),
            ),
            "entry point",
        ),
        (
            key(base()
                .options(
                    CudaOptions::default()
                        .define("N", "4")
                        .architecture(Architecture::new(8, 0)),
                )
                .source(source)),
            // The architecture is one of NVRTC's arguments: one fact, in
            // one place.
            "options",
        ),
    ];
    for (other, component) in changed {
        assert_ne!(other.digest(), reference.digest(), "{component}");
        assert_eq!(reference.first_difference(&other), Some(component));
    }
    let pinned = key(base()
        .options(
            CudaOptions::default()
                .define("N", "4")
                .architecture(Architecture::new(8, 0)),
        )
        .source(source));
    assert!(
        pinned.options.iter().any(|option| option == "-arch=sm_80"),
        "{pinned}"
    );
}

// B1
#[test]
fn b1_a_missing_nvrtc_is_an_error_value_naming_where_it_looked() {
    // The library is opened once per process, so the missing case runs in
    // a child process of this test binary, with a path that holds nothing.
    if std::env::var_os("KILN_CUDA_TEST_CHILD").is_some() {
        let error = CudaTarget::compile_only(Architecture::new(9, 0))
            .expect_err("no NVRTC at the configured path");
        assert!(
            matches!(
                error,
                Error::LibraryMissing {
                    library: CudaLibrary::Nvrtc,
                    ..
                }
            ),
            "{error}"
        );
        let message = error.to_string();
        assert!(message.contains("/nonexistent/kiln"), "{message}");
        assert!(
            message.contains("pip install nvidia-cuda-nvrtc"),
            "{message}"
        );
        assert!(!message.contains("xtask"), "no repository task: {message}");
        println!("child saw: {message}");
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "b1_a_missing_nvrtc_is_an_error_value_naming_where_it_looked",
            "--nocapture",
        ])
        .env("KILN_CUDA_TEST_CHILD", "1")
        .env("KILN_NVRTC_PATH", "/nonexistent/kiln/libnvrtc.so.13")
        .output()
        .expect("the test binary runs again");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child failed: {printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("child saw: NVRTC"), "{printed}");
}

/// Set in the child of the test below, which sees no GPU.
const WITHOUT_GPUS: &str = "KILN_CUDA_TEST_WITHOUT_GPUS";

// B1
#[test]
fn b1_a_machine_without_a_gpu_gets_an_error_value_for_the_device() {
    const TEST: &str = "b1_a_machine_without_a_gpu_gets_an_error_value_for_the_device";
    let is_child = kiln_test_support::child::is_child(WITHOUT_GPUS, "1");
    match kiln_cuda::CudaDevice::open(0) {
        Ok(device) => {
            assert!(
                !is_child,
                "CUDA_VISIBLE_DEVICES hides every GPU, and {device:?} opened"
            );
            // A machine with a GPU proves the rule in a child that sees
            // none, as a machine without one would.
            let output = kiln_test_support::child::rerun(TEST, WITHOUT_GPUS, "1")
                .env("CUDA_VISIBLE_DEVICES", "")
                .output()
                .expect("the test binary runs again");
            let report = kiln_test_support::child::describe(&output);
            assert!(output.status.success(), "the child failed: {report}");
            assert!(
                String::from_utf8_lossy(&output.stdout).contains("no GPU here: "),
                "the child got an error value: {report}"
            );
        }
        Err(Error::LibraryMissing { library, searched }) => {
            assert_eq!(library, CudaLibrary::Driver);
            assert!(!searched.is_empty());
            println!("no GPU here: the driver is missing");
        }
        Err(Error::NoDevice { detail }) => {
            assert!(!detail.is_empty());
            println!("no GPU here: {detail}");
        }
        Err(other) => panic!("no device is a missing driver or no device, not {other}"),
    }
}

// F2: a batch hands its kernels out costliest first, by source length.
#[test]
fn f2_a_kernel_s_cost_is_the_length_of_its_source_and_headers() {
    use kiln_engine::Kernel;
    let short = support::fixed("tests.cost.short", "saxpy", support::SAXPY);
    let long = support::fixed(
        "tests.cost.long",
        "saxpy",
        &format!("{}// {}\n", support::SAXPY, "padding ".repeat(64)),
    );
    assert_eq!(short.cost_hint(), support::SAXPY.len() as u64);
    assert!(long.cost_hint() > short.cost_hint());
}
