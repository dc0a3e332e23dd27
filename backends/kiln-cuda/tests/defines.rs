//! A kernel's defines reach real NVRTC as macros and nothing else: each is
//! one `-DNAME=VALUE` argument, its name an identifier, its value macro
//! text however it is spelt. A define that could not be that fails its own
//! kernel, naming the define, and the batch goes on. What must hold is
//! written once for both C++ backends, in `kiln_test_support::defines`;
//! this file gives it NVRTC.
//!
//! Each test skips with a printed reason when NVRTC is missing, and fails
//! instead when `KILN_REQUIRE_NVRTC=1`.

mod support;

use kiln_cuda::{CudaKernel, CudaOptions};
use kiln_engine::{ArtifactCompiler, CompilationTarget, KernelId};
use kiln_test_support::defines::{self, Define, probe_source};
use support::{compile, compile_only, id_on, loader};

/// The probe kernel of [`defines`], with `defines` in its options.
fn probe(family: &'static str, defines: &[Define], expected: &str) -> CudaKernel {
    let options = defines
        .iter()
        .fold(CudaOptions::default(), |options, define| match *define {
            Define::Value(name, value) => options.define(name, value),
            Define::Flag(name) => options.define_name(name),
        });
    CudaKernel::builder(KernelId::named(family), "probe")
        .options(options)
        .source(probe_source(expected))
}

#[test]
fn a_define_value_with_spaces_and_an_include_reaches_nvrtc_as_macro_text() {
    let Some(target) = compile_only("defines: a value that looks like options") else {
        return;
    };
    defines::assert_values_like_options_compile_as_macro_text(
        "cuda-defines-value",
        "--pre-include",
        |value| {
            let kernel = probe(
                "tests.defines.value",
                &[Define::Value("PROBE", value)],
                value,
            );
            let id = id_on(&target, &kernel);
            let lowered = target
                .compiler()
                .lower(&kernel, &id)
                .expect("the kernel lowers");
            let defines: Vec<&String> = lowered
                .arguments()
                .iter()
                .filter(|argument| argument.starts_with("-D"))
                .collect();
            assert_eq!(
                defines,
                [&format!("-DPROBE={value}")],
                "one argument for the define"
            );
            compile(&target, &kernel)
        },
    );
}

#[test]
fn a_define_name_that_is_not_an_identifier_fails_its_kernel_naming_it() {
    let Some(target) = compile_only("defines: names that are not identifiers") else {
        return;
    };
    let loader = loader(target);
    let variant = loader.target().variant();
    defines::assert_names_that_are_not_identifiers_fail_their_kernels(loader, variant, probe);
}

#[test]
fn a_define_value_with_a_nul_or_a_line_break_fails_its_kernel_naming_it() {
    let Some(target) = compile_only("defines: values NVRTC cannot take") else {
        return;
    };
    defines::assert_values_with_a_nul_or_a_line_break_are_refused("PROBE", probe, |kernel| {
        compile(&target, kernel)
    });
}

#[test]
fn an_identifier_define_with_an_ordinary_value_still_compiles() {
    let Some(target) = compile_only("defines: ordinary names and values") else {
        return;
    };
    defines::assert_ordinary_defines_compile(probe, |kernel| compile(&target, kernel));
}
