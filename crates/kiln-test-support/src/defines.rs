//! The define tests of the backends that compile C++ (CUDA through NVRTC,
//! HIP through hipRTC), written once: a kernel's defines reach the compiler
//! as macros and nothing else. Each is one `-DNAME=VALUE` argument, its name
//! an identifier, its value macro text however it is spelt; a define that
//! could not be that fails its own kernel, naming the define.
//!
//! The backend's tests build the probe kernel from [`Define`]s with
//! [`probe_source`] and compile it; the values and names to try, and what
//! must hold of the outcome, live here, so that both compilers answer the
//! same questions. The backends are passed in as closures and a loader:
//! this crate names none of them.

use kiln_engine::{
    ArtifactId, CompilationTarget, CompileFailure, Kernel, KernelLoader, KernelOf, VariantOf,
};

use crate::Scratch;

/// One define of a probe kernel, as a backend's options take it.
#[derive(Clone, Copy, Debug)]
pub enum Define<'a> {
    /// A name with a value: `-DNAME=VALUE`.
    Value(&'a str, &'a str),
    /// A name alone: `-DNAME`.
    Flag(&'a str),
}

/// What any compile fails with when it includes the marker file.
const INCLUDED: &str = "kiln define probe file was included";

/// The source of a kernel that compiles only when `PROBE` expands to
/// exactly `expected`: a value split into compiler options would leave
/// `PROBE` shorter, and an included file would fail the compile with what
/// it holds.
pub fn probe_source(expected: &str) -> String {
    let expected = expected.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "#define KILN_TEXT_OF(x) #x\n\
         #define KILN_TEXT(x) KILN_TEXT_OF(x)\n\
         __host__ __device__ constexpr bool same(const char* a, const char* b) {{\n\
         \x20   return *a == *b && (*a == '\\0' || same(a + 1, b + 1));\n\
         }}\n\
         static_assert(same(KILN_TEXT(PROBE), \"{expected}\"), \"PROBE is the macro text\");\n\
         extern \"C\" __global__ void probe(int* out) {{ out[threadIdx.x] = 1; }}\n"
    )
}

/// Checks that define values which look like options including a file
/// (`/etc/passwd`, or a marker file whose inclusion fails any compile, with
/// `-include` and with `long_include`, the compiler's own long spelling)
/// compile as the macro's text and include nothing.
///
/// `compile_probe(value)` builds the probe kernel with `PROBE` defined as
/// `value` and expecting `value`, checks the arguments the compiler is
/// given, and compiles it. `test` names the scratch folder of the marker.
pub fn assert_values_like_options_compile_as_macro_text<A>(
    test: &str,
    long_include: &str,
    mut compile_probe: impl FnMut(&str) -> Result<A, CompileFailure>,
) {
    let scratch = Scratch::new(test);
    let marker = scratch.join("included.h");
    std::fs::write(&marker, format!("#error {INCLUDED}\n")).expect("a temporary file");
    let passwd_first_line = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_owned));
    for value in [
        "1 -include /etc/passwd".to_owned(),
        format!("1 -include {}", marker.display()),
        format!("1 {long_include}={}", marker.display()),
    ] {
        if let Err(failure) = compile_probe(&value) {
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

/// Checks that a define whose name is not an identifier fails its own
/// kernel with an error that names it and says why, and that a good kernel
/// of the same batch still compiles. Every other bad name is given as a
/// flag, the rest with a value.
///
/// `probe(family, defines, expected)` builds a probe kernel for `loader`,
/// which compiles for `variant`.
pub fn assert_names_that_are_not_identifiers_fail_their_kernels<T>(
    mut loader: KernelLoader<T>,
    variant: VariantOf<T>,
    probe: impl Fn(&'static str, &[Define], &str) -> KernelOf<T>,
) where
    T: CompilationTarget,
    KernelOf<T>: Clone + Sized,
{
    let id = |kernel: &KernelOf<T>| ArtifactId::new(kernel.id(), variant.clone());
    let good = probe("tests.defines.good", &[Define::Value("PROBE", "2")], "2");
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
        let define = if index % 2 == 0 {
            Define::Value(name, "1")
        } else {
            Define::Flag(name)
        };
        bad.push((name, probe("tests.defines.bad_name", &[define], "1")));
    }
    loader.enqueue(Box::new(good.clone()), variant.clone());
    for (_, kernel) in &bad {
        loader.enqueue(Box::new(kernel.clone()), variant.clone());
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

/// Checks that a define value holding a NUL or a line break, which the
/// compiler could not take as one argument, fails its kernel with an error
/// that holds `named` (how this backend names the define `PROBE`).
///
/// `probe(family, defines, expected)` builds a probe kernel and
/// `compile(kernel)` compiles it.
pub fn assert_values_with_a_nul_or_a_line_break_are_refused<K, A>(
    named: &str,
    probe: impl Fn(&'static str, &[Define], &str) -> K,
    compile: impl Fn(&K) -> Result<A, CompileFailure>,
) {
    for value in [
        "1\0 -include /etc/passwd",
        "1\n#include \"/etc/passwd\"",
        "1\r2",
    ] {
        let kernel = probe(
            "tests.defines.bad_value",
            &[Define::Value("PROBE", value)],
            "1",
        );
        let failure = compile(&kernel)
            .err()
            .unwrap_or_else(|| panic!("{value:?} is refused"));
        let message = failure.to_string();
        assert!(
            message.contains(named),
            "the error names the define: {message}"
        );
    }
}

/// Checks that identifiers with ordinary values, and a flag, still compile.
///
/// `probe(family, defines, expected)` builds a probe kernel and
/// `compile(kernel)` compiles it.
pub fn assert_ordinary_defines_compile<K, A>(
    probe: impl Fn(&'static str, &[Define], &str) -> K,
    compile: impl Fn(&K) -> Result<A, CompileFailure>,
) {
    let defines = [
        Define::Value("PROBE", "(2 * 3) + 1"),
        Define::Value("_under_score9", "x"),
        Define::Flag("WITH_FLAG"),
    ];
    let kernel = probe("tests.defines.ordinary", &defines, "(2 * 3) + 1");
    compile(&kernel).unwrap_or_else(|failure| panic!("{failure}\n{}", failure.log));
}

/// Checks that a backend's options refuse each define name that is not a C
/// identifier (empty, a digit first, a space, an option, `=`, `-`, a line
/// break, a letter past ASCII), with an error that names it as given and
/// says it is not an identifier.
///
/// `refuse(name)` checks options holding the define `TILE=16` and then
/// `name` alone, and gives the error; `refused(error)` reads the refused
/// name and its problem back from it (`None` for another error).
pub fn assert_options_refuse_names_that_are_not_identifiers<E: std::fmt::Display>(
    refuse: impl Fn(&str) -> Option<E>,
    refused: impl Fn(&E) -> Option<(&str, &kiln_engine::DefineProblem)>,
) {
    for name in ["", "1A", "A B", "-O3", "A=B", "A-B", "X\nY", "é"] {
        let error = refuse(name).unwrap_or_else(|| panic!("{name:?} is not an identifier"));
        let (refused_name, problem) =
            refused(&error).unwrap_or_else(|| panic!("a define error: {error}"));
        assert_eq!(refused_name, name);
        assert!(
            matches!(problem, kiln_engine::DefineProblem::NotAnIdentifier { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(&format!("{name:?}")), "{error}");
    }
}
