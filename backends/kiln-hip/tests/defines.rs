//! A kernel's defines reach real hipRTC as macros and nothing else: each is
//! one `-DNAME=VALUE` argument, its name an identifier, its value macro
//! text however it is spelt. A define that could not be that fails its own
//! kernel, naming the define, and the batch goes on.
//!
//! Each test skips with a printed reason when hipRTC is missing, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use kiln_core::conformance::skip;
use kiln_core::{
    ArtifactCompiler, ArtifactId, CompileFailure, Finalized, Kernel, KernelLoader, LoaderConfig,
    WorkerMode,
};
use kiln_hip::{
    GfxArch, HipArtifact, HipCompileOnlyTarget, HipCompiler, HipKernel, HipOptions, HipVariant,
};

fn compiler(test: &str) -> Option<HipCompiler> {
    match HipCompiler::new() {
        Ok(compiler) => Some(compiler),
        Err(error) => {
            skip(test, &error.to_string());
            None
        }
    }
}

fn gfx90a() -> HipVariant {
    HipVariant::new(GfxArch::new("gfx90a").expect("a valid architecture name"))
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

/// A kernel that compiles only when `PROBE` expands to exactly `expected`:
/// a value split into compiler options would leave `PROBE` shorter, and an
/// included file would fail the compile with what it holds.
fn probe(family: &'static str, options: HipOptions, expected: &str) -> HipKernel {
    let expected = expected.replace('\\', "\\\\").replace('"', "\\\"");
    HipKernel::from_text(
        family,
        "probe",
        format!(
            "#define KILN_TEXT_OF(x) #x\n\
             #define KILN_TEXT(x) KILN_TEXT_OF(x)\n\
             __host__ __device__ constexpr bool same(const char* a, const char* b) {{\n\
             \x20   return *a == *b && (*a == '\\0' || same(a + 1, b + 1));\n\
             }}\n\
             static_assert(same(KILN_TEXT(PROBE), \"{expected}\"), \"PROBE is the macro text\");\n\
             extern \"C\" __global__ void probe(int* out) {{ out[threadIdx.x] = 1; }}\n"
        ),
    )
    .with_options(options)
}

/// A file whose inclusion fails any compile with `INCLUDED`.
struct Marker {
    path: PathBuf,
}

const INCLUDED: &str = "kiln define probe file was included";

impl Marker {
    fn new(test: &str) -> Self {
        let path = std::env::temp_dir().join(format!("kiln-hip-{test}-{}.h", std::process::id()));
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
fn a_define_value_with_spaces_and_an_include_reaches_hiprtc_as_macro_text() {
    let Some(compiler) = compiler("defines: a value that looks like options") else {
        return;
    };
    let marker = Marker::new("value");
    let passwd_first_line = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_owned));
    for value in [
        "1 -include /etc/passwd".to_owned(),
        format!("1 -include {}", marker.path.display()),
        format!("1 --include={}", marker.path.display()),
    ] {
        let options = HipOptions::new().define("PROBE", value.as_str());
        let flags = options
            .compile_flags(&gfx90a().arch)
            .expect("the value is macro text");
        let defines: Vec<&String> = flags.iter().filter(|flag| flag.starts_with("-D")).collect();
        assert_eq!(
            defines,
            [&format!("-DPROBE={value}")],
            "one flag for the define"
        );
        let kernel = probe("tests.defines.value", options, &value);
        if let Err(failure) = compile(&compiler, &kernel) {
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

#[test]
fn a_define_name_that_is_not_an_identifier_fails_its_kernel_naming_it() {
    let Some(compiler) = compiler("defines: names that are not identifiers") else {
        return;
    };
    let mut loader = KernelLoader::with_config(
        HipCompileOnlyTarget::new(compiler),
        LoaderConfig {
            parallelism: NonZeroUsize::new(2).expect("2 is not zero"),
            ..LoaderConfig::default()
        },
    )
    .with_worker_mode(WorkerMode::Threads);
    let good = probe(
        "tests.defines.good",
        HipOptions::new().define("PROBE", "2"),
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
            HipOptions::new().define(*name, "1")
        } else {
            HipOptions::new().define_name(*name)
        };
        bad.push((name, probe("tests.defines.bad_name", options, "1")));
    }
    loader.enqueue(Box::new(good.clone()), gfx90a());
    for (_, kernel) in &bad {
        loader.enqueue(Box::new(kernel.clone()), gfx90a());
    }
    loader.compile_queued();

    loader
        .load(&good, &id(&good))
        .unwrap_or_else(|error| panic!("the kernel beside the bad ones compiles: {error}"));
    for (name, kernel) in &bad {
        let error = loader
            .load(kernel, &id(kernel))
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
    let Some(compiler) = compiler("defines: values hipRTC cannot take") else {
        return;
    };
    for value in [
        "1\0 -include /etc/passwd",
        "1\n#include \"/etc/passwd\"",
        "1\r2",
    ] {
        let kernel = probe(
            "tests.defines.bad_value",
            HipOptions::new().define("PROBE", value),
            "1",
        );
        let failure = compile(&compiler, &kernel)
            .err()
            .unwrap_or_else(|| panic!("{value:?} is refused"));
        let message = failure.to_string();
        assert!(
            message.contains("\"PROBE\""),
            "the error names the define: {message}"
        );
    }
}

#[test]
fn an_identifier_define_with_an_ordinary_value_still_compiles() {
    let Some(compiler) = compiler("defines: ordinary names and values") else {
        return;
    };
    let options = HipOptions::new()
        .define("PROBE", "(2 * 3) + 1")
        .define("_under_score9", "x")
        .define_name("WITH_FLAG");
    let kernel = probe("tests.defines.ordinary", options, "(2 * 3) + 1");
    compile(&compiler, &kernel).unwrap_or_else(|failure| panic!("{failure}\n{}", failure.log));
}
