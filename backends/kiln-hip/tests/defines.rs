//! A kernel's defines reach real hipRTC as macros and nothing else: each is
//! one `-DNAME=VALUE` argument, its name an identifier, its value macro
//! text however it is spelt. A define that could not be that fails its own
//! kernel, naming the define, and the batch goes on. What must hold is
//! written once for both C++ backends, in `kiln_test_support::defines`;
//! this file gives it hipRTC.
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use kiln_engine::{
    ArtifactCompiler, ArtifactId, CompileFailure, Finalized, Kernel, KernelId, WorkerMode,
};
use kiln_hip::{Architecture, HipArtifact, HipCompiler, HipKernel, HipOptions, HipVariant};
use kiln_test_support::defines::{self, Define, probe_source};
use support::{compile_only, compiler};

fn gfx90a() -> HipVariant {
    HipVariant::new(Architecture::new("gfx90a").expect("a valid architecture name"))
}

fn id(kernel: &HipKernel) -> ArtifactId<HipVariant> {
    ArtifactId::new(kernel.id(), gfx90a())
}

fn compile(
    compiler: &HipCompiler,
    kernel: &HipKernel,
) -> Result<Finalized<HipArtifact>, CompileFailure> {
    let lowered = compiler.lower(kernel, &id(kernel))?;
    compiler.finalize(&id(kernel), lowered)
}

/// The options of `defines`.
fn options(defines: &[Define]) -> HipOptions {
    defines
        .iter()
        .fold(HipOptions::new(), |options, define| match *define {
            Define::Value(name, value) => options.define(name, value),
            Define::Flag(name) => options.define_name(name),
        })
}

/// The probe kernel of [`defines`], with `defines` in its options.
fn probe(family: &'static str, defines: &[Define], expected: &str) -> HipKernel {
    HipKernel::builder(KernelId::named(family), "probe")
        .options(options(defines))
        .source(probe_source(expected))
}

#[test]
fn a_define_value_with_spaces_and_an_include_reaches_hiprtc_as_macro_text() {
    let Some(compiler) = compiler("defines: a value that looks like options") else {
        return;
    };
    defines::assert_values_like_options_compile_as_macro_text(
        "hip-defines-value",
        "--include",
        |value| {
            let defines = [Define::Value("PROBE", value)];
            let flags = options(&defines)
                .compile_flags(&gfx90a().architecture)
                .expect("the value is macro text");
            let define_flags: Vec<&String> =
                flags.iter().filter(|flag| flag.starts_with("-D")).collect();
            assert_eq!(
                define_flags,
                [&format!("-DPROBE={value}")],
                "one flag for the define"
            );
            compile(&compiler, &probe("tests.defines.value", &defines, value))
        },
    );
}

#[test]
fn a_define_name_that_is_not_an_identifier_fails_its_kernel_naming_it() {
    let Some(compiler) = compiler("defines: names that are not identifiers") else {
        return;
    };
    let loader = kiln_test_support::loader(compile_only(&compiler, "gfx90a"), 2)
        .with_worker_mode(WorkerMode::Threads);
    defines::assert_names_that_are_not_identifiers_fail_their_kernels(loader, gfx90a(), probe);
}

#[test]
fn a_define_value_with_a_nul_or_a_line_break_fails_its_kernel_naming_it() {
    let Some(compiler) = compiler("defines: values hipRTC cannot take") else {
        return;
    };
    defines::assert_values_with_a_nul_or_a_line_break_are_refused("\"PROBE\"", probe, |kernel| {
        compile(&compiler, kernel)
    });
}

#[test]
fn an_identifier_define_with_an_ordinary_value_still_compiles() {
    let Some(compiler) = compiler("defines: ordinary names and values") else {
        return;
    };
    defines::assert_ordinary_defines_compile(probe, |kernel| compile(&compiler, kernel));
}
