//! SPIR-V kernels (B3, B6): GLSL compiled to SPIR-V when the tests were
//! built (kiln-spirv-kernels), read by naga's SPIR-V front end, keyed and
//! stored as WGSL kernels are, and launched on the Vulkan adapter with
//! their numbers checked against the CPU. The device features a kernel
//! needs are checked the same way for WGSL and SPIR-V. Tests that need the
//! device skip with a printed reason where there is none (a failure under
//! `KILN_REQUIRE_DEVICE=1`).

mod support;

use kiln_engine::{ArtifactCompiler, CompilationTarget, KernelId};
use kiln_test_support::Random;
use kiln_wgpu::{
    Language, ShaderCode, WgpuTarget, WgpuVariant, WgslKernel, spirv_compute_entries, wgpu,
};
use support::{assert_close, load, read, storage};

/// `kernel` lowered and finalized by a compile-only target's compiler.
fn finalize(kernel: &WgslKernel) -> Result<kiln_wgpu::WgpuArtifact, kiln_engine::CompileFailure> {
    let target = WgpuTarget::compile_only();
    let id = support::id_of(kernel);
    let lowered = target.compiler().lower(kernel, &id)?;
    target
        .compiler()
        .finalize(&id, lowered)
        .map(|finalized| finalized.artifact)
}

// B6: every GLCompute entry of a module is listed, and each is a kernel.
#[test]
fn every_glcompute_entry_of_a_module_is_a_kernel() {
    let Some(passes) = support::spirv("SPIR-V entries", "passes") else {
        return;
    };
    let entries = spirv_compute_entries(passes).expect("naga reads the linked module");
    assert_eq!(entries, ["forward", "backward"]);
    for entry in &entries {
        let artifact = finalize(&support::spirv_kernel(passes, "passes", entry, &[]))
            .unwrap_or_else(|failure| panic!("entry {entry} finalizes: {failure}"));
        assert_eq!(&artifact.entry, entry);
        assert_eq!(artifact.code.language(), Language::Spirv);
        assert_eq!(artifact.workgroup_size, [64, 1, 1]);
    }
    let nowhere = finalize(&support::spirv_kernel(passes, "passes", "sideways", &[]))
        .expect_err("no such entry");
    assert!(
        nowhere
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("forward") && hint.contains("backward")),
        "{nowhere:?}"
    );
}

// B6: specialization constants by number or by the name GLSL gave them;
// both become the number wgpu takes.
#[test]
fn specialization_constants_are_set_by_number_or_by_name() {
    let Some(bytes) = support::spirv("SPIR-V constants", "scale_bias") else {
        return;
    };
    let by_number = finalize(&support::spirv_kernel(
        bytes,
        "scale_bias",
        "main",
        &[("0", 3.0), ("1", -1.0)],
    ))
    .expect("constant ids 0 and 1 are declared");
    let by_name = finalize(&support::spirv_kernel(
        bytes,
        "scale_bias",
        "main",
        &[("FACTOR", 3.0), ("BIAS", -1.0)],
    ))
    .expect("FACTOR and BIAS are declared");
    assert_eq!(by_number.constants, by_name.constants);
    assert_eq!(by_number.constants.canonical(), "0=3.0 1=-1.0");
    let unknown = finalize(&support::spirv_kernel(
        bytes,
        "scale_bias",
        "main",
        &[("GAIN", 1.0)],
    ))
    .expect_err("GAIN is not declared");
    let hint = unknown.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("0 (FACTOR)") && hint.contains("1 (BIAS)"),
        "the hint lists the constants as they can be set: {hint}"
    );
}

// B6, L6: a module naga rejects fails alone, with naga's reason and the
// entry's name; the rest of the batch loads.
#[test]
fn a_module_naga_rejects_fails_alone_naming_its_entry() {
    let Some(bytes) = support::spirv("SPIR-V refusal", "saxpy") else {
        return;
    };
    let truncated = support::spirv_kernel(&bytes[..bytes.len() - 8], "truncated", "main", &[]);
    let good = support::spirv_kernel(bytes, "saxpy", "main", &[]);
    let mut loader = support::loader(WgpuTarget::compile_only());
    loader.enqueue(Box::new(truncated.clone()), WgpuVariant);
    loader.enqueue(Box::new(good.clone()), WgpuVariant);
    loader.compile_queued();
    let error = loader
        .load(&truncated, &support::id_of(&truncated))
        .expect_err("a module cut short does not parse");
    let message = error.to_string();
    assert!(
        message.contains("truncated.spv") && message.contains("`main`") && message.contains("naga"),
        "{message}"
    );
    loader
        .load(&good, &support::id_of(&good))
        .expect("the rest of the batch loads");
}

// P1, B3: the key covers the bytes and the specialization; a warm start
// takes the validated module from the store and compiles nothing.
#[test]
fn the_key_covers_the_bytes_and_constants_and_a_warm_start_compiles_nothing() {
    let Some(bytes) = support::spirv("SPIR-V keys", "scale_bias") else {
        return;
    };
    let target = WgpuTarget::compile_only();
    let text = |kernel: &WgslKernel| {
        let lowered = target
            .compiler()
            .lower(kernel, &support::id_of(kernel))
            .expect("lowers");
        lowered.text().to_owned()
    };
    let scale_bias = |module: &[u8], factor: f64| {
        support::spirv_kernel(module, "scale_bias", "main", &[("0", factor)])
    };
    let base = scale_bias(bytes, 2.0);
    let mut changed = bytes.to_vec();
    // The last word of the module, part of its last instruction.
    let last = changed.len() - 1;
    changed[last] ^= 1;
    assert_eq!(text(&base), text(&scale_bias(bytes, 2.0)));
    assert_ne!(text(&base), text(&scale_bias(&changed, 2.0)));
    assert_ne!(text(&base), text(&scale_bias(bytes, 2.5)));

    let folder = support::fresh_folder("spirv-store");
    let mut cold =
        support::loader(WgpuTarget::compile_only().with_store(support::store_at(&folder)));
    cold.load(&base, &support::id_of(&base))
        .expect("compiles cold");
    assert_eq!(cold.statistics().compiled, 1);
    drop(cold);
    let mut warm =
        support::loader(WgpuTarget::compile_only().with_store(support::store_at(&folder)));
    let loaded = warm
        .load(&base, &support::id_of(&base))
        .expect("loads warm");
    assert_eq!(warm.statistics().hits, 1);
    assert_eq!(warm.statistics().compiled, 0);
    assert_eq!(loaded.workgroup_size(), [64, 1, 1]);
}

// B6: compile-only validation answers as a device with the features it
// stands for would: none by default, those named otherwise.
#[test]
fn compile_only_refuses_a_kernel_needing_a_feature_it_does_not_stand_for() {
    let Some(bytes) = support::spirv("SPIR-V f64 compile-only", "square_f64") else {
        return;
    };
    let kernel = support::spirv_kernel(bytes, "square_f64", "main", &[]);
    let artifact = finalize(&kernel).expect("the module validates");
    assert_eq!(artifact.required_features, ["SHADER_F64"]);
    let mut modest = support::loader(WgpuTarget::compile_only());
    let refused = modest
        .load(&kernel, &support::id_of(&kernel))
        .expect_err("the default compile-only target has no f64");
    let message = refused.to_string();
    assert!(
        message.contains("SHADER_F64") && message.contains("compile_only_for"),
        "{message}"
    );
    let mut capable = support::loader(WgpuTarget::compile_only_for(wgpu::Features::SHADER_F64));
    capable
        .load(&kernel, &support::id_of(&kernel))
        .expect("a target standing for f64 takes it");
}

/// `len` values in `[-1, 1)` as the buffer of `kernel` on `device`.
// B4: a SPIR-V kernel with specialization constants, by number and by name.
#[test]
fn scale_bias_with_specialization_constants_matches_the_cpu() {
    let Some((device, bytes)) = support::device_and_spirv("SPIR-V scale_bias", "scale_bias") else {
        return;
    };
    let mut random = Random::fresh("SPIR-V scale_bias");
    let n = 5_003;
    for (constants, factor, bias) in [
        (vec![("0", 3.0), ("1", -1.0)], 3.0f32, -1.0f32),
        (vec![("FACTOR", 0.5), ("BIAS", 2.0)], 0.5, 2.0),
        (vec![], 2.0, 0.0),
    ] {
        let kernel = support::spirv_kernel(bytes, "scale_bias", "main", &constants);
        let pipeline = load(&device, &kernel);
        let input = random.signed(n);
        let data = storage(&device, &input);
        device
            .dispatch(&pipeline, &[(0, 0, &data)], [(n as u32).div_ceil(64), 1, 1])
            .expect("the dispatch runs");
        let expected: Vec<f32> = input.iter().map(|x| x * factor + bias).collect();
        assert_close(
            &format!("scale_bias {constants:?}"),
            &read(&device, &data, n),
            &expected,
            1e-6,
        );
    }
}

// B4
#[test]
fn saxpy_from_glsl_matches_the_cpu() {
    let Some((device, bytes)) = support::device_and_spirv("SPIR-V saxpy", "saxpy") else {
        return;
    };
    let mut random = Random::fresh("SPIR-V saxpy");
    let pipeline = load(&device, &support::spirv_kernel(bytes, "saxpy", "main", &[]));
    assert_eq!(pipeline.workgroup_size(), [128, 1, 1]);
    support::check_saxpy("saxpy.spv", &device, &pipeline, &mut random, 10_007, 128);
}

// B4
#[test]
fn reduce_sum_from_glsl_adds_up_to_the_cpu_sum() {
    let Some((device, bytes)) = support::device_and_spirv("SPIR-V reduce_sum", "reduce_sum") else {
        return;
    };
    let mut random = Random::fresh("SPIR-V reduce_sum");
    let pipeline = load(
        &device,
        &support::spirv_kernel(bytes, "reduce_sum", "main", &[]),
    );
    assert_eq!(pipeline.resources().shared_memory_bytes, Some(128 * 4));
    let n = 100_003;
    let input = random.signed(n);
    let groups = 48;
    let params = device
        .uniform_buffer("params", &(n as u32).to_le_bytes())
        .expect("a uniform");
    let input_buffer = storage(&device, &input);
    let partials = storage(&device, &vec![f32::NAN; groups]);
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &params), (0, 1, &input_buffer), (0, 2, &partials)],
            [groups as u32, 1, 1],
        )
        .expect("the dispatch runs");
    let total: f64 = read(&device, &partials, groups)
        .iter()
        .map(|partial| f64::from(*partial))
        .sum();
    let expected: f64 = input.iter().map(|value| f64::from(*value)).sum();
    assert!(
        (total - expected).abs() <= 1e-3 * expected.abs().max(1.0),
        "reduce_sum.spv: {total}, expected {expected}"
    );
}

// B4, B6: two entries of one module, each loaded by name.
#[test]
fn both_entries_of_one_module_run() {
    let Some((device, bytes)) = support::device_and_spirv("SPIR-V two entries", "passes") else {
        return;
    };
    let forward = load(
        &device,
        &support::spirv_kernel(bytes, "passes", "forward", &[]),
    );
    let backward = load(
        &device,
        &support::spirv_kernel(bytes, "passes", "backward", &[]),
    );
    let input: Vec<f32> = (0..1000).map(|index| index as f32 - 500.0).collect();
    let data = storage(&device, &input);
    let groups = [1000u32.div_ceil(64), 1, 1];
    device
        .dispatch(&forward, &[(0, 0, &data)], groups)
        .expect("forward runs");
    let doubled: Vec<f32> = input.iter().map(|x| x * 2.0).collect();
    assert_eq!(read(&device, &data, input.len()), doubled);
    device
        .dispatch(&backward, &[(0, 0, &data)], groups)
        .expect("backward runs");
    device
        .dispatch(&backward, &[(0, 0, &data)], groups)
        .expect("backward runs");
    let halved: Vec<f32> = input.iter().map(|x| x * 0.5).collect();
    assert_eq!(read(&device, &data, input.len()), halved);
}

/// The WGSL twin of square_f64.comp.
const SQUARE_F64_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> data: array<f64>;\n\
    @compute @workgroup_size(64)\n\
    fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
    \x20   if id.x < arrayLength(&data) { data[id.x] = data[id.x] * data[id.x]; }\n\
    }\n";

// B6: the device kiln opens has every shader feature of the adapter, and
// an f64 kernel (WGSL or SPIR-V) runs on it; a program's own device without
// the feature refuses the kernel naming the feature and how to get it.
#[test]
fn an_f64_kernel_runs_where_the_adapter_has_f64_and_is_refused_naming_it_elsewhere() {
    let Some((device, bytes)) = support::device_and_spirv("f64 kernels", "square_f64") else {
        return;
    };
    let adapter = device.adapter_features().expect("kiln opened the device");
    assert_eq!(
        device.features() & kiln_wgpu::SHADER_FEATURES,
        adapter & kiln_wgpu::SHADER_FEATURES,
        "the device has every shader feature of its adapter"
    );
    let kernels = [
        support::spirv_kernel(bytes, "square_f64", "main", &[]),
        WgslKernel::builder(KernelId::named("tests.square_f64"), "main").source(SQUARE_F64_WGSL),
    ];
    for kernel in &kernels {
        let mut loader = support::loader(WgpuTarget::on_device(device.clone()));
        let loaded = loader.load(kernel, &support::id_of(kernel));
        if !adapter.contains(wgpu::Features::SHADER_F64) {
            eprintln!(
                "{}: the adapter has no SHADER_F64; its refusal is checked",
                kernel.label()
            );
            let message = loaded.expect_err("the adapter has no f64").to_string();
            assert!(
                message.contains("SHADER_F64") && message.contains("does not have"),
                "{message}"
            );
            continue;
        }
        let pipeline = loaded.unwrap_or_else(|error| panic!("{} loads: {error}", kernel.label()));
        let input: Vec<f64> = (0..300)
            .map(|index| f64::from(index) * 1.25 - 100.0)
            .collect();
        let bytes: Vec<u8> = input.iter().flat_map(|value| value.to_le_bytes()).collect();
        let data = device.storage_buffer("f64", &bytes).expect("a buffer");
        device
            .dispatch(&pipeline, &[(0, 0, &data)], [300u32.div_ceil(64), 1, 1])
            .expect("the dispatch runs");
        let got: Vec<f64> = device
            .read(&data)
            .expect("reads back")
            .chunks_exact(8)
            .map(|chunk| f64::from_le_bytes(chunk.try_into().expect("8 bytes")))
            .collect();
        let expected: Vec<f64> = input.iter().map(|value| value * value).collect();
        assert_eq!(
            got,
            expected,
            "{}: squares in double precision",
            kernel.label()
        );
    }

    let featureless = support::featureless_device().expect("the adapter opens a second device");
    for kernel in &kernels {
        let mut loader = support::loader(WgpuTarget::on_device(featureless.clone()));
        let message = loader
            .load(kernel, &support::id_of(kernel))
            .expect_err("a device without f64 refuses the kernel")
            .to_string();
        assert!(
            message.contains("SHADER_F64") && message.contains("required_features"),
            "{}: {message}",
            kernel.label()
        );
    }
}

// B3: the artifact of a SPIR-V kernel is the module naga validated.
#[test]
fn the_artifact_keeps_the_validated_module() {
    let Some(bytes) = support::spirv("SPIR-V artifact", "saxpy") else {
        return;
    };
    let artifact = finalize(&support::spirv_kernel(bytes, "saxpy", "main", &[]))
        .expect("the module validates");
    assert_eq!(artifact.code, ShaderCode::Spirv(bytes.to_vec()));
    assert!(artifact.required_features.is_empty());
    assert_eq!(artifact.bindings.len(), 3);
}
