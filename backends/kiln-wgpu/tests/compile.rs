//! Real compiles with no device (B3): naga parses and validates WGSL,
//! applies the kernel's `override` constants and checks its layout, on any
//! machine, adapter or not. A compile-only target's pipelines describe what
//! naga found; failures carry their place and a hint.

mod support;

use kiln_engine::{ArtifactCompiler, CompilationTarget, Kernel, KernelId, Severity};
use kiln_wgpu::{
    BindingLayout, BufferBinding, BufferKind, ShaderBinding, WgpuTarget, WgpuVariant, WgslKernel,
};

// B3
#[test]
fn valid_wgsl_compiles_to_an_artifact_with_its_entry_workgroup_size_and_bindings() {
    let target = WgpuTarget::compile_only();
    let kernel = WgslKernel::builder(KernelId::named("tests.saxpy"), "main")
        .label("saxpy.wgsl")
        .source(support::example("saxpy.wgsl"));
    let id = support::id_of(&kernel);
    let compiler = target.compiler();
    let lowered = compiler.lower(&kernel, &id).expect("saxpy lowers");
    let finalized = compiler.finalize(&id, lowered).expect("naga takes saxpy");
    assert!(
        finalized.diagnostics.is_empty(),
        "{:?}",
        finalized.diagnostics
    );
    let artifact = finalized.artifact;
    assert_eq!(artifact.entry, "main");
    assert_eq!(artifact.label, "saxpy.wgsl");
    assert_eq!(
        artifact.workgroup_size,
        [64, 1, 1],
        "the override's default"
    );
    let binding = |binding, kind| ShaderBinding {
        group: 0,
        binding,
        kind,
    };
    assert_eq!(
        artifact.bindings,
        [
            binding(0, BufferKind::Uniform),
            binding(1, BufferKind::ReadOnlyStorage),
            binding(2, BufferKind::Storage),
        ]
    );
    assert_eq!(
        artifact.code,
        kiln_wgpu::ShaderCode::Wgsl(support::example("saxpy.wgsl"))
    );

    let mut loader = support::loader(target);
    let pipeline = loader
        .load(&kernel, &id)
        .expect("a compile-only target describes the kernel");
    assert!(!pipeline.is_on_device());
    assert!(pipeline.pipeline().is_none());
    // B5: a described kernel has no layouts to give out, and says why.
    assert!(pipeline.bind_group_layouts().is_empty());
    let layout = pipeline.bind_group_layout(0);
    assert!(
        matches!(layout, Err(kiln_wgpu::Error::CompileOnly { .. })),
        "{layout:?}"
    );
    assert_eq!(pipeline.entry(), "main");
    assert_eq!(pipeline.workgroup_size(), [64, 1, 1]);
    assert_eq!(pipeline.bindings(), artifact.bindings);
}

// B3
#[test]
fn an_override_constant_is_applied_to_the_workgroup_size() {
    let mut loader = support::loader(WgpuTarget::compile_only());
    let defaulted = support::example_kernel("relu.wgsl", &[]);
    let wide = support::example_kernel("relu.wgsl", &[("WORKGROUP", 256.0), ("LEAK", 0.01)]);
    assert_ne!(
        defaulted.id(),
        wide.id(),
        "the constants are part of the id"
    );
    for kernel in [&defaulted, &wide] {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();
    let defaulted = loader
        .load(&defaulted, &support::id_of(&defaulted))
        .expect("relu compiles with its defaults");
    let wide = loader
        .load(&wide, &support::id_of(&wide))
        .expect("relu compiles with its constants");
    assert_eq!(defaulted.workgroup_size(), [64, 1, 1]);
    assert_eq!(wide.workgroup_size(), [256, 1, 1], "WORKGROUP=256 applied");
    assert_eq!(wide.bindings(), defaulted.bindings());
}

// D1, D2
#[test]
fn invalid_wgsl_fails_with_its_first_error_at_line_and_column() {
    let mut loader = support::loader(WgpuTarget::compile_only());
    let kernel = support::broken(0);
    let error = loader
        .load(&kernel, &support::id_of(&kernel))
        .expect_err("WGSL without its semicolon fails");
    let failure = error.compile_failure().expect("a compile failure");
    let first = failure.first_error().expect("an error diagnostic");
    assert_eq!(first.severity, Severity::Error);
    let location = first.location.as_ref().expect("the error has a place");
    assert_eq!(location.line, 3, "{failure:?}");
    assert_eq!(location.column, Some(26), "{failure:?}");
    let message = error.to_string();
    assert!(
        message.contains("3:"),
        "the message leads with the place: {message}"
    );
}

// D2, L6
#[test]
fn a_missing_entry_point_and_an_unknown_constant_fail_alone_with_hints() {
    let mut loader = support::loader(WgpuTarget::compile_only());
    let source = support::example("relu.wgsl");
    let wrong_entry =
        WgslKernel::builder(KernelId::named("tests.wrong_entry"), "nowhere").source(source.clone());
    let wrong_constant = WgslKernel::builder(KernelId::named("tests.wrong_constant"), "main")
        .constant("NO_SUCH", 1.0)
        .source(source.clone());
    let out_of_range = WgslKernel::builder(KernelId::named("tests.out_of_range"), "main")
        .constant("WORKGROUP", -1.0)
        .source(source.clone());
    let good = WgslKernel::builder(KernelId::named("tests.good"), "main").source(source);
    for kernel in [&wrong_entry, &wrong_constant, &out_of_range, &good] {
        loader.enqueue(Box::new(kernel.clone()), WgpuVariant);
    }
    loader.compile_queued();
    let entry_error = loader
        .load(&wrong_entry, &support::id_of(&wrong_entry))
        .expect_err("no such entry point");
    let failure = entry_error.compile_failure().expect("a compile failure");
    assert!(entry_error.to_string().contains("nowhere"), "{entry_error}");
    assert!(
        failure
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("main")),
        "the hint names the compute functions: {failure:?}"
    );
    let constant_error = loader
        .load(&wrong_constant, &support::id_of(&wrong_constant))
        .expect_err("no such constant");
    let failure = constant_error.compile_failure().expect("a compile failure");
    assert!(
        constant_error.to_string().contains("NO_SUCH"),
        "{constant_error}"
    );
    assert!(
        failure
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("WORKGROUP")),
        "the hint names the declared constants: {failure:?}"
    );
    loader
        .load(&out_of_range, &support::id_of(&out_of_range))
        .expect_err("a negative workgroup size fails");
    loader
        .load(&good, &support::id_of(&good))
        .expect("the rest of the batch loads");
}

// D2
#[test]
fn an_explicit_layout_that_misses_a_binding_fails_in_finalize() {
    let mut loader = support::loader(WgpuTarget::compile_only());
    let kernel = WgslKernel::builder(KernelId::named("tests.layout"), "main")
        .layout(BindingLayout::one_group([BufferBinding::read_only(1)]))
        .source(support::example("gelu.wgsl"));
    let error = loader
        .load(&kernel, &support::id_of(&kernel))
        .expect_err("binding 1 is read_write in the source and binding 0 is missing");
    assert!(
        error
            .compile_failure()
            .is_some_and(|failure| failure.hint.is_some())
    );
}

/// Finalizes `source` with constant `name` set to `value`: the artifact's
/// constants, or the failure's message and hint.
fn finalize_with(source: &str, name: &str, value: f64) -> Result<Vec<(String, f64)>, String> {
    let target = WgpuTarget::compile_only();
    let kernel = WgslKernel::builder(
        KernelId::named("tests.typed_constant").parameter(&value.to_bits()),
        "main",
    )
    .constant(name, value)
    .source(source.to_owned());
    let id = support::id_of(&kernel);
    let compiler = target.compiler();
    let lowered = compiler.lower(&kernel, &id).map_err(|f| f.to_string())?;
    match compiler.finalize(&id, lowered) {
        Ok(finalized) => Ok(finalized
            .artifact
            .constants
            .iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect()),
        Err(failure) => Err(format!("{failure} ({:?})", failure.hint)),
    }
}

// B3: a value its constant's type cannot hold fails that kernel, naming the
// constant and the value, instead of being converted in silence (a NaN or a
// 2 for a `bool` is `true`).
#[test]
fn a_constant_value_its_type_cannot_hold_fails_naming_the_constant_and_the_value() {
    const SOURCE: &str = "override USE_MAX: bool = false;\n\
        override COUNT: u32 = 1u;\n\
        override OFFSET: i32 = 0;\n\
        override SCALE: f32 = 1.0;\n\
        @group(0) @binding(0) var<storage, read_write> out: array<f32>;\n\
        @compute @workgroup_size(1) fn main() {\n\
            var v = f32(COUNT) + f32(OFFSET) * SCALE;\n\
            if USE_MAX { v = max(v, 1.0); }\n\
            out[0] = v;\n\
        }\n";
    for (name, good) in [
        ("USE_MAX", 1.0),
        ("USE_MAX", 0.0),
        ("COUNT", 4_294_967_295.0),
        ("OFFSET", -2_147_483_648.0),
        ("SCALE", 0.5),
    ] {
        let constants = finalize_with(SOURCE, name, good)
            .unwrap_or_else(|error| panic!("{name} = {good} is a fine value: {error}"));
        assert_eq!(constants, [(name.to_owned(), good)]);
    }
    for (name, bad, type_name) in [
        ("USE_MAX", 2.0, "bool"),
        ("USE_MAX", f64::NAN, "bool"),
        ("COUNT", -1.0, "u32"),
        ("COUNT", 1.5, "u32"),
        ("OFFSET", 3e9, "i32"),
        ("SCALE", f64::INFINITY, "f32"),
        ("SCALE", 1e300, "f32"),
    ] {
        let error = finalize_with(SOURCE, name, bad)
            .expect_err("a value the constant's type cannot hold is refused");
        assert!(
            error.contains(name) && error.contains(type_name) && error.contains(&bad.to_string()),
            "{name} = {bad}: {error}"
        );
    }
}
