//! A kernel's defines reach real NVRTC as macros and nothing else: each is
//! one `-DNAME=VALUE` argument, its name an identifier, its value macro
//! text however it is spelt. A define that could not be that fails its own
//! kernel, naming the define, and the batch goes on.
//!
//! Each test skips with a printed reason when NVRTC is missing, and fails
//! instead when `KILN_REQUIRE_NVRTC=1`.

mod support;

use std::path::PathBuf;

use kiln_core::{ArtifactCompiler, CompilationTarget, KernelId};
use kiln_cuda::{CudaKernel, CudaOptions};
use support::{compile, compile_only, id_on, loader};

/// A kernel that compiles only when `PROBE` expands to exactly `expected`:
/// a value split into compiler options would leave `PROBE` shorter, and an
/// included file would fail the compile with what it holds.
fn probe(family: &'static str, options: CudaOptions, expected: &str) -> CudaKernel {
    let expected = expected.replace('\\', "\\\\").replace('"', "\\\"");
    CudaKernel::builder(KernelId::named(family), "probe")
        .options(options)
        .source(format!(
            "#define KILN_TEXT_OF(x) #x\n\
             #define KILN_TEXT(x) KILN_TEXT_OF(x)\n\
             __host__ __device__ constexpr bool same(const char* a, const char* b) {{\n\
             \x20   return *a == *b && (*a == '\\0' || same(a + 1, b + 1));\n\
             }}\n\
             static_assert(same(KILN_TEXT(PROBE), \"{expected}\"), \"PROBE is the macro text\");\n\
             extern \"C\" __global__ void probe(int* out) {{ out[threadIdx.x] = 1; }}\n"
        ))
}

/// A file whose inclusion fails any compile with `INCLUDED`.
struct Marker {
    path: PathBuf,
}

const INCLUDED: &str = "kiln define probe file was included";

impl Marker {
    fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!("kiln-cuda-{test}-{}.h", std::process::id()));
        std::fs::write(&path, format!("#error {INCLUDED}\n")).expect("a temporary file");
        Self { path }
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn a_define_value_with_spaces_and_an_include_reaches_nvrtc_as_macro_text() {
    let Some(target) = compile_only("defines: a value that looks like options") else {
        return;
    };
    let marker = Marker::new("value");
    let passwd_first_line = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_owned));
    for value in [
        "1 -include /etc/passwd".to_owned(),
        format!("1 -include {}", marker.path.display()),
        format!("1 --pre-include={}", marker.path.display()),
    ] {
        let kernel = probe(
            "tests.defines.value",
            CudaOptions::default().define("PROBE", value.as_str()),
            &value,
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
        match compile(&target, &kernel) {
            Ok(_) => {}
            Err(failure) => {
                assert!(
                    !failure.log.contains(INCLUDED) && !failure.to_string().contains(INCLUDED),
                    "{value:?} included a file: {failure}\n{}",
                    failure.log
                );
                if let Some(line) = &passwd_first_line {
                    assert!(
                        !failure.log.contains(line.as_str()),
                        "{value:?} included /etc/passwd: {}",
                        failure.log
                    );
                }
                panic!(
                    "{value:?} should compile as the macro's text: {failure}\n{}",
                    failure.log
                );
            }
        }
    }
}

#[test]
fn a_define_name_that_is_not_an_identifier_fails_its_kernel_naming_it() {
    let Some(target) = compile_only("defines: names that are not identifiers") else {
        return;
    };
    let mut loader = loader(target);
    let good = probe(
        "tests.defines.good",
        CudaOptions::default().define("PROBE", "2"),
        "2",
    );
    let bad_names = [
        "-include /etc/passwd",
        "X -DY",
        "A=B",
        "1X",
        "",
        "-O0",
        "X\nY",
    ];
    let mut bad = Vec::new();
    for (index, name) in bad_names.iter().enumerate() {
        let options = if index % 2 == 0 {
            CudaOptions::default().define(*name, "1")
        } else {
            CudaOptions::default().define_flag(*name)
        };
        bad.push((name, probe("tests.defines.bad_name", options, "1")));
    }
    let variant = loader.target().variant();
    loader.enqueue(Box::new(good.clone()), variant);
    for (_, kernel) in &bad {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    loader.compile_queued();

    let id = id_on(loader.target(), &good);
    loader
        .load(&good, &id)
        .unwrap_or_else(|error| panic!("the kernel beside the bad ones compiles: {error}"));
    for (name, kernel) in &bad {
        let id = id_on(loader.target(), kernel);
        let error = loader
            .load(kernel, &id)
            .expect_err("a define whose name is not an identifier fails its kernel");
        let message = error.to_string();
        assert!(
            message.contains(&format!("{name:?}")),
            "the error names the define {name:?}: {message}"
        );
        assert!(
            message.contains("not an identifier"),
            "the error says why: {message}"
        );
    }
}

#[test]
fn a_define_value_with_a_nul_or_a_line_break_fails_its_kernel_naming_it() {
    let Some(target) = compile_only("defines: values NVRTC cannot take") else {
        return;
    };
    for value in [
        "1\0 -include /etc/passwd",
        "1\n#include \"/etc/passwd\"",
        "1\r2",
    ] {
        let kernel = probe(
            "tests.defines.bad_value",
            CudaOptions::default().define("PROBE", value),
            "1",
        );
        let failure = compile(&target, &kernel)
            .err()
            .unwrap_or_else(|| panic!("{value:?} is refused"));
        let message = failure.to_string();
        assert!(
            message.contains("PROBE"),
            "the error names the define: {message}"
        );
    }
}

#[test]
fn an_identifier_define_with_an_ordinary_value_still_compiles() {
    let Some(target) = compile_only("defines: ordinary names and values") else {
        return;
    };
    let options = CudaOptions::default()
        .define("PROBE", "(2 * 3) + 1")
        .define("_under_score9", "x")
        .define_flag("WITH_FLAG");
    let kernel = probe("tests.defines.ordinary", options, "(2 * 3) + 1");
    compile(&target, &kernel).unwrap_or_else(|failure| panic!("{failure}\n{}", failure.log));
}
