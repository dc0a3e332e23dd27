//! SPIR-V the driver reads (B7): a module naga's front end cannot read
//! (8-bit storage, a shared array sized by a specialization constant, as
//! ggml's Vulkan kernels have) is still a kernel, specialized in its bytes,
//! its layout read from the module, handed to the Vulkan driver as it is,
//! and dispatched with its numbers checked on the CPU.

mod support;

use kiln_engine::{ArtifactCompiler, CompilationTarget};
use kiln_wgpu::{ShaderCode, WgpuTarget, WgslKernel};

/// `kernel` lowered and finalized by a compile-only target's compiler.
fn finalize(
    kernel: &WgslKernel,
) -> Result<kiln_engine::Finalized<kiln_wgpu::WgpuArtifact>, kiln_engine::CompileFailure> {
    let target = WgpuTarget::compile_only().without_store();
    let id = support::id_of(kernel);
    let lowered = target.compiler().lower(kernel, &id)?;
    target.compiler().finalize(&id, lowered)
}

// B7: naga cannot read the module; it compiles for the driver, its
// constants written into its bytes (another value, other bytes), its
// bindings and workgroup size read from it, and the compile says so.
#[test]
fn b7_a_module_naga_cannot_read_is_specialized_and_reflected() {
    let Some(bytes) = support::spirv("SPIR-V pass-through", "spec_shared_u8") else {
        return;
    };
    let kernel = |block: f64| {
        support::spirv_kernel(
            bytes,
            "spec_shared_u8",
            "main",
            &[("BLOCK", block), ("1", 3.0)],
        )
    };
    let finalized = finalize(&kernel(32.0)).expect("the driver's module");
    let artifact = &finalized.artifact;
    assert!(artifact.passthrough);
    assert_eq!(artifact.workgroup_size, [64, 1, 1]);
    assert_eq!(artifact.constants.canonical(), "0=32.0 1=3.0");
    let kinds: Vec<String> = artifact.bindings.iter().map(ToString::to_string).collect();
    assert_eq!(
        kinds,
        [
            "@group(0) @binding(0) ReadOnlyStorage",
            "@group(0) @binding(1) Storage"
        ]
    );
    assert!(
        finalized
            .diagnostics
            .iter()
            .any(|note| note.message.contains("handed to the driver")),
        "{:?}",
        finalized.diagnostics
    );
    let other = finalize(&kernel(16.0)).expect("another specialization");
    assert_ne!(other.artifact.code, artifact.code);
    let ShaderCode::Spirv(specialized) = &artifact.code else {
        panic!("a SPIR-V artifact");
    };
    assert_ne!(
        specialized.as_slice(),
        bytes,
        "the constants are in the bytes"
    );
    let unknown = finalize(&support::spirv_kernel(
        bytes,
        "spec_shared_u8",
        "main",
        &[("WIDTH", 2.0)],
    ))
    .expect_err("no such constant");
    assert!(unknown.to_string().contains("WIDTH"), "{unknown}");
}

// B7: dispatched on the Vulkan adapter (lavapipe here), each workgroup's
// sum of BLOCK bytes times SCALE matches the CPU's.
#[test]
fn b7_a_passthrough_kernel_dispatches_and_matches_the_cpu() {
    let Some((device, bytes)) = support::device_and_spirv("SPIR-V pass-through", "spec_shared_u8")
    else {
        return;
    };
    if !device
        .features()
        .contains(kiln_wgpu::wgpu::Features::PASSTHROUGH_SHADERS)
    {
        kiln_engine::conformance::skip(
            "SPIR-V pass-through",
            "the adapter has no PASSTHROUGH_SHADERS",
        );
        return;
    }
    let (block, scale, groups) = (32usize, 3u32, 7usize);
    let kernel = support::spirv_kernel(
        bytes,
        "spec_shared_u8",
        "main",
        &[("BLOCK", block as f64), ("SCALE", f64::from(scale))],
    );
    let pipeline = support::load(&device, &kernel);
    let input: Vec<u8> = (0..block * groups)
        .map(|index| u8::try_from((index * 37 + 11) % 251).unwrap_or(0))
        .collect();
    let bytes_buffer = device
        .storage_buffer("bytes", &input)
        .expect("a storage buffer");
    let sums = support::storage(&device, &vec![0.0f32; groups]);
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &bytes_buffer), (0, 1, &sums)],
            [u32::try_from(groups).unwrap_or(1), 1, 1],
        )
        .expect("the dispatch runs");
    let got: Vec<u32> = support::read(&device, &sums, groups)
        .iter()
        .map(|value| value.to_bits())
        .collect();
    let expected: Vec<u32> = input
        .chunks(block)
        .map(|chunk| chunk.iter().map(|byte| u32::from(*byte) * scale).sum())
        .collect();
    assert_eq!(got, expected);
}
